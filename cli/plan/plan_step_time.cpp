#include "plan/plan_step_time.h"

#include <algorithm>
#include <string>
#include <vector>

#include "strata/error.h"

namespace strata::cli {
namespace {

// Note [Step time and overlap]: collectives are added to the compute, not overlapped with it. DDP's bucket
// all-reduces and FSDP's prefetched all-gathers and reduce-scatters run on Gloo's worker thread while backward
// computes, but on the CPU that thread competes with the ranks' compute threads for the same cores (moving bytes over
// loopback TCP is CPU work itself), and most of a small model's gradients become final at the end of backward;
// measured on the 2-core build machine the sum is within the 20% target where ranks x threads fit the cores
// (docs/plan.md). Where they outnumber the cores, a rank that waits for a peer's message (a collective's latency)
// holds no core and the other ranks compute meanwhile, so the latency part counts at the cores' share,
// cores / (ranks per node x threads); the transfer part counts in full. Without that share FSDP's many small
// collectives on 4 ranks over 2 cores were over-predicted by 24-57% (Experiment 1, docs/study.md).

// One step's collectives, their latency and their transfer apart.
struct CollectiveTime {
  double latencyS = 0;
  double transferS = 0;
  void add(const CollectiveFit& fit, std::int64_t bytes, int times = 1) {
    latencyS += times * fit.latencyS;
    transferS += times * (fit.bytesPerS > 0 ? static_cast<double>(bytes) / fit.bytesPerS : 0.0);
  }
  double seconds(double latencyShare) const { return transferS + latencyShare * latencyS; }
};

double optionNumber(const MemoryQuery& query, const std::string& key, double fallback) {
  const auto it = query.options.find(key);
  return it == query.options.end() ? fallback : std::stod(it->second);
}

std::string optionText(const MemoryQuery& query, const std::string& key, const std::string& fallback) {
  const auto it = query.options.find(key);
  return it == query.options.end() ? fallback : it->second;
}

// DDP's buckets (plugins/ddp buildBuckets): runs of consecutive parameters of a group from its end, the first at
// most first_bucket_mb, the others bucket_mb.
std::vector<std::int64_t> ddpBucketBytes(const MemoryQuery& query, const ParameterGroups& groups) {
  const auto bucketBytes = static_cast<std::int64_t>(optionNumber(query, "bucket_mb", 25.0) * 1024 * 1024);
  const auto firstBucketBytes = static_cast<std::int64_t>(optionNumber(query, "first_bucket_mb", 1.0) * 1024 * 1024);
  std::vector<std::int64_t> buckets;
  for (std::size_t g = 0; g < groups.groupCount(); ++g) {
    std::vector<std::size_t> members = groups.groupMembers(g);
    std::sort(members.begin(), members.end(),
              [&](std::size_t a, std::size_t b) { return groups.info(a).offset > groups.info(b).offset; });
    const auto elementBytes = static_cast<std::int64_t>(dtypeSize(groups.flatGradients(g).dtype()));
    std::int64_t begin = 0;
    std::int64_t end = -1;
    for (std::size_t p : members) {
      const ParameterInfo& info = groups.info(p);
      const std::int64_t limit = buckets.empty() ? firstBucketBytes : bucketBytes;
      if (end >= 0 && (end - info.offset) * elementBytes > limit) {
        buckets.push_back((end - begin) * elementBytes);
        end = -1;
      }
      if (end < 0) {
        end = info.offset + info.meta.numel();
      }
      begin = info.offset;
    }
    if (end >= 0) {
      buckets.push_back((end - begin) * elementBytes);
    }
  }
  return buckets;
}

StepTimePrediction fsdpStep(const MemoryQuery& query, const ParameterGroups& groups, const ComputeCalibration& compute,
                            const CollectiveCalibration& c, double latencyShare) {
  const std::string shard = optionText(query, "shard", "full");
  const bool hybrid = shard == "hybrid";
  const int ranks = hybrid ? query.worldSize / std::max(1, query.nnodes) : query.worldSize;
  const bool sharded = shard != "none" && ranks > 1;
  StepTimePrediction p;
  p.computeS = query.gradAccum * compute.forwardBackwardS + compute.optimizerS / (sharded ? ranks : 1);
  if (query.worldSize <= 1) {
    return p;
  }
  CollectiveTime collectives;
  const bool reduceEveryMicroBatch = optionText(query, "accumulate", "local") == "sharded";
  const int reductions = reduceEveryMicroBatch ? query.gradAccum : 1;
  for (std::size_t g = 0; g < groups.groupCount(); ++g) {
    const Tensor& flat = groups.flatParameters(g);
    const std::int64_t shardElements = (flat.numel() + ranks - 1) / ranks;
    const auto bytes = static_cast<std::int64_t>(shardElements * ranks * dtypeSize(flat.dtype()));
    if (!sharded) {
      collectives.add(c.allReduce, bytes);
      continue;
    }
    // A unit is gathered for its forward of every micro-batch, and again for its backward under shard=full.
    const int gathers = query.gradAccum * (shard == "grad_op" ? 1 : 2);
    collectives.add(c.allGather, bytes, gathers);
    collectives.add(c.reduceScatter, bytes, reductions);
    if (hybrid) {
      collectives.add(c.allReduce, bytes / ranks);  // the shard, across nodes
    }
  }
  p.communicationS = collectives.seconds(latencyShare);
  return p;
}

StepTimePrediction psStep(const MemoryQuery& query, const ParameterGroups& groups, const ComputeCalibration& compute,
                          const CollectiveCalibration& c) {
  // Note [PS step time]: rough, outside the targets. Every worker pushes its gradients and pulls the parameters
  // (one message each way per server); a server handles the W workers' messages one after another and runs the
  // optimizer on its key range. The loopback link's bandwidth is taken from the ring all-reduce, which moves
  // 2 (N - 1) / N of the buffer per rank.
  const int servers = static_cast<int>(optionNumber(query, "servers", 1));
  const std::string mode = optionText(query, "mode", "sync");
  std::int64_t bytes = 0;
  for (std::size_t g = 0; g < groups.groupCount(); ++g) {
    bytes += groups.flatParameters(g).bytes();
  }
  const int n = std::max(2, c.ranks);
  const double link = c.allReduce.bytesPerS * 2.0 * (n - 1) / n;
  const double perWorker =
      2 * c.allReduce.latencyS + (link > 0 ? 2.0 * static_cast<double>(bytes) / link : 0) / servers;
  const double serverUpdate = compute.optimizerS / servers;
  StepTimePrediction p;
  p.computeS = query.gradAccum * compute.forwardBackwardS;
  if (mode == "sync") {
    p.communicationS = query.worldSize * perWorker + serverUpdate;
  } else {
    // async/ssp: a worker waits for its own exchange, unless the servers, busy with every worker's, are the limit.
    const double serverBound = query.worldSize * (perWorker + serverUpdate) - p.computeS;
    p.communicationS = std::max(perWorker + serverUpdate, serverBound);
  }
  return p;
}

}  // namespace

StepTimePrediction predictStepTime(const MemoryQuery& query, const ParameterGroups& groups,
                                   const ComputeCalibration& compute, const CollectiveCalibration& collectives,
                                   double latencyShare) {
  STRATA_CHECK(latencyShare > 0 && latencyShare <= 1, "plan: latency share {} is not in (0, 1]", latencyShare);
  if (query.strategy == "fsdp") {
    return fsdpStep(query, groups, compute, collectives, latencyShare);
  }
  if (query.strategy == "ps") {
    return psStep(query, groups, compute, collectives);
  }
  STRATA_CHECK(query.strategy == "ddp" || query.strategy == "single", "plan: no step-time model for strategy '{}'",
               query.strategy);
  StepTimePrediction p;
  p.computeS = query.gradAccum * compute.forwardBackwardS + compute.optimizerS;
  if (query.strategy == "ddp" && query.worldSize > 1) {
    CollectiveTime buckets;
    for (std::int64_t bucket : ddpBucketBytes(query, groups)) {
      buckets.add(collectives.allReduce, bucket);
    }
    p.communicationS = buckets.seconds(latencyShare);
  }
  return p;
}

double latencyShare(int cores, int ranksPerNode, int threadsPerRank) {
  const double demand = static_cast<double>(std::max(1, ranksPerNode)) * std::max(1, threadsPerRank);
  return std::min(1.0, std::max(1, cores) / demand);
}

}  // namespace strata::cli
