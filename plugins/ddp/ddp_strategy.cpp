// DDP: data-parallel training with bucketed, overlapped gradient all-reduce (PyTorch DDP's design).
//
// Note [Buckets are flat-buffer slices]: parameters sit in the ParameterStore's flat buffers in first-use order,
// and backward finalises gradients roughly in reverse. A bucket is a run of consecutive parameters of one flat
// buffer, taken from the end, so its gradients are one contiguous slice: the all-reduce runs on a view of the
// gradient buffer itself, with no copy in or out, and averages in place.
// Note [Bucket launch order]: a bucket's all-reduce starts from the gradient-ready hook as soon as its last
// gradient is final, overlapping the rest of backward. Every rank runs the same static plan, so buckets become
// ready in the same order everywhere, which collectives require.
// With compress=SPEC a gradient compressor reduces each bucket instead of the plain all-reduce (Note [Gradient
// compression] in strata/sdk/compression.h, Note [Compressed buckets in order] in compressed_reduction.h).
#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "compressed_reduction.h"
#include "compressor_spec.h"
#include "strata/error.h"
#include "strata/sdk/strategy.h"

namespace strata::plugins {
namespace {

struct Bucket {
  std::size_t group = 0;
  std::int64_t begin = 0;  // element range in the group's flat gradient buffer
  std::int64_t end = 0;
  int pending = 0;  // gradients of this bucket not final yet in the current backward
  int parameters = 0;
  std::size_t bytes = 0;
  bool launched = false;  // in the current step
  WorkHandle work;
};

class DdpStrategy final : public Strategy {
 public:
  ~DdpStrategy() override { teardown(); }

  // Checks the options (a compressor's among them) in the launcher, before any rank starts.
  StrategyRequirements requirements(const StrategyQuery& query) override {
    parseOptions(query.options);
    if (!compress_.empty()) {
      compression::makeCompressor(compress_);
    }
    return {};
  }

  void setup(StrategyContext& context) override {
    context_ = &context;
    timeout_ = context.timeout();
    parseOptions(context.options());
    group_ = context.processGroup();
    if (group_ == nullptr || group_->size() == 1) {
      return;  // one process: DDP is plain local training
    }
    broadcastState(context);
    buildBuckets(context.parameters());
    if (!compress_.empty()) {
      compression_ = std::make_unique<CompressedReduction>(compression::makeCompressor(compress_), *group_, timeout_);
      compression_->compressor().prepare(compressedBuckets(context.parameters()));
    }
    hook_ = context.hooks().gradientReady([this](int parameter) { onGradientReady(parameter); });
  }

  void beforeForward(const StepInfo& at) override { communicate_ = at.last(); }

  void afterBackward(const StepInfo& at) override {
    if (!at.last() || group_ == nullptr || group_->size() == 1) {
      return;
    }
    const auto start = std::chrono::steady_clock::now();
    double allReduceSeconds = 0;
    CompressionTraffic traffic;
    for (Bucket& bucket : buckets_) {
      if (!bucket.launched) {
        fail("DDP: bucket of {} parameters was never launched; the backward pass did not finalise all gradients",
             bucket.parameters);
      }
      bucket.launched = false;
      bucket.pending = bucket.parameters;
      if (bucket.work) {
        bucket.work->wait(timeout_);
        allReduceSeconds += bucket.work->runSeconds();
        bucket.work.reset();
        traffic.sentBytes += static_cast<std::int64_t>(bucket.bytes);
        traffic.uncompressedBytes += static_cast<std::int64_t>(bucket.bytes);
      }
    }
    if (compression_) {
      traffic = compression_->wait();  // the compressor's collectives are its own: only their total time counts
    }
    // The gradients' bytes this rank handed to collectives, and what a plain all-reduce would have handed them.
    context_->addFigure("gradient_bytes_sent", static_cast<double>(traffic.sentBytes));
    context_->addFigure("gradient_bytes_uncompressed", static_cast<double>(traffic.uncompressedBytes));
    context_->addFigure("communication_s",
                        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
    context_->addFigure("collective_s", allReduceSeconds);
  }

  void step(const StepInfo& /*at*/, double lr) override { context_->optimizers().full().step(lr); }

  void teardown() override {
    hook_.reset();
    compression_.reset();
  }

  // Replicated state as every strategy writes it, and each rank's compressor state (error feedback differs per rank).
  void saveState(StrategyContext& context, StateWriter& writer) override {
    Strategy::saveState(context, writer);
    if (compression_) {
      if (context.rank() == 0) {
        writer.putText("ddp/compress", compressionLayout(context));
      }
      for (const auto& [name, tensor] : compression_->compressor().state()) {
        writer.putTensor(compressionKey(context.rank(), name), tensor);
      }
    }
  }

  void loadState(StrategyContext& context, StateReader& reader) override {
    Strategy::loadState(context, reader);
    if (!compression_) {
      return;
    }
    const std::string saved = reader.has("ddp/compress") ? reader.getText("ddp/compress") : "";
    const std::vector<std::pair<std::string, Tensor>> state = compression_->compressor().state();
    const bool complete =
        saved == compressionLayout(context) && std::all_of(state.begin(), state.end(), [&](const auto& entry) {
          return reader.has(compressionKey(context.rank(), entry.first));
        });
    if (!complete) {
      // Another compressor, none, another world size or other buckets: there is nothing exact to continue from.
      if (context.rank() == 0) {
        fmt::print(stderr,
                   "ddp: the checkpoint holds no state of compressor '{}' for this job{}; its error feedback "
                   "and warm starts begin again\n",
                   compress_, saved.empty() ? "" : fmt::format(" (it was written by {})", saved));
      }
      return;
    }
    for (const auto& [name, tensor] : state) {
      reader.getTensor(compressionKey(context.rank(), name), tensor);
    }
  }

 private:
  void parseOptions(const std::map<std::string, std::string>& options) {
    for (const auto& [key, value] : options) {
      try {
        if (key == "bucket_mb") {
          bucketBytes_ = static_cast<std::int64_t>(std::stod(value) * 1024 * 1024);
        } else if (key == "first_bucket_mb") {
          firstBucketBytes_ = static_cast<std::int64_t>(std::stod(value) * 1024 * 1024);
        } else if (key == "timeout_s") {
          timeout_ = std::chrono::milliseconds(static_cast<std::int64_t>(std::stod(value) * 1000));
        } else if (key == "broadcast_buffers") {
          broadcastBuffers_ = value != "0" && value != "false";
        } else if (key == "compress") {
          compress_ = value == "none" ? "" : value;
        } else {
          fail(
              "ddp: unknown --strategy-opt '{}' (known: bucket_mb, first_bucket_mb, timeout_s, broadcast_buffers, "
              "compress)",
              key);
        }
      } catch (const std::invalid_argument&) {
        fail("ddp: --strategy-opt {}={} is not a number", key, value);
      }
    }
    if (bucketBytes_ <= 0 || firstBucketBytes_ <= 0) {
      fail("ddp: bucket sizes must be positive");
    }
  }

  // Every rank starts from rank 0's parameters and buffers.
  void broadcastState(StrategyContext& context) {
    std::vector<WorkHandle> works;
    for (std::size_t g = 0; g < context.parameters().groupCount(); ++g) {
      works.push_back(group_->broadcast(context.parameters().flatParameters(g), 0));
    }
    if (broadcastBuffers_) {
      for (const Tensor& buffer : context.buffers()) {
        works.push_back(group_->broadcast(buffer, 0));
      }
    }
    for (const WorkHandle& work : works) {
      work->wait(timeout_);
    }
    context.parameters().bumpVersion();
  }

  void buildBuckets(const ParameterGroups& store) {
    bucketOf_.assign(store.size(), -1);
    for (std::size_t g = 0; g < store.groupCount(); ++g) {
      std::vector<std::size_t> members;
      for (std::size_t p = 0; p < store.size(); ++p) {
        if (store.info(p).group == g) {
          members.push_back(p);
        }
      }
      std::sort(members.begin(), members.end(),
                [&](std::size_t a, std::size_t b) { return store.info(a).offset > store.info(b).offset; });
      const std::int64_t elementBytes = static_cast<std::int64_t>(dtypeSize(store.flatGradients(g).dtype()));
      Bucket current;
      for (std::size_t p : members) {
        const ParameterInfo& info = store.info(p);
        const std::int64_t limit = buckets_.empty() ? firstBucketBytes_ : bucketBytes_;
        if (current.parameters > 0 && (current.end - info.offset) * elementBytes > limit) {
          buckets_.push_back(current);
          current = Bucket{};
        }
        if (current.parameters == 0) {
          current.group = g;
          current.end = info.offset + info.meta.numel();
        }
        current.begin = info.offset;
        ++current.parameters;
        bucketOf_[p] = static_cast<int>(buckets_.size());
      }
      if (current.parameters > 0) {
        buckets_.push_back(current);
      }
    }
    for (Bucket& bucket : buckets_) {
      bucket.pending = bucket.parameters;
      bucket.bytes =
          static_cast<std::size_t>(bucket.end - bucket.begin) * dtypeSize(store.flatGradients(bucket.group).dtype());
    }
  }

  // The compressor's view of the buckets: each parameter's place and shape (Note [Gradient compression]).
  std::vector<GradientBucket>& compressedBuckets(const ParameterGroups& store) {
    compressed_.assign(buckets_.size(), GradientBucket{});
    for (std::size_t b = 0; b < buckets_.size(); ++b) {
      const Bucket& bucket = buckets_[b];
      GradientBucket& view = compressed_[b];
      view.index = static_cast<int>(b);
      view.gradient = store.flatGradients(bucket.group).flatSlice(bucket.begin, bucket.end - bucket.begin);
      for (const std::size_t p : store.groupMembers(bucket.group)) {
        const ParameterInfo& info = store.info(p);
        if (info.offset < bucket.begin || info.offset >= bucket.end) {
          continue;
        }
        const Shape& shape = info.meta.shape;
        GradientSegment segment;
        segment.offset = info.offset - bucket.begin;
        segment.matrix = shape.size() >= 2;
        segment.rows = segment.matrix ? shape[0] : info.meta.numel();
        segment.cols = segment.matrix ? info.meta.numel() / std::max<std::int64_t>(shape[0], 1) : 1;
        view.segments.push_back(segment);
      }
    }
    return compressed_;
  }

  // What the compressor state in a checkpoint belongs to: a resume continues it only onto the same.
  std::string compressionLayout(StrategyContext& context) const {
    std::string buckets;
    for (const Bucket& bucket : buckets_) {
      buckets += fmt::format("{}{}", buckets.empty() ? "" : ",", bucket.end - bucket.begin);
    }
    return fmt::format("compress={} on {} ranks, buckets of {} elements", compress_, context.worldSize(), buckets);
  }

  static std::string compressionKey(int rank, const std::string& name) {
    return fmt::format("rank{}/ddp_compression/{}", rank, name);
  }

  void onGradientReady(int parameter) {
    if (!communicate_) {
      return;  // gradient accumulation: only the last micro-batch communicates
    }
    Bucket& bucket = buckets_.at(static_cast<std::size_t>(bucketOf_.at(static_cast<std::size_t>(parameter))));
    if (--bucket.pending == 0) {
      const Tensor& flat = context_->parameters().flatGradients(bucket.group);
      Tensor gradient = flat.flatSlice(bucket.begin, bucket.end - bucket.begin);
      bucket.launched = true;
      if (compression_) {
        GradientBucket& view = compressed_.at(static_cast<std::size_t>(&bucket - buckets_.data()));
        view.gradient = gradient;
        compression_->start(view);
      } else {
        bucket.work = group_->allReduce(gradient, ReduceOp::Average);
      }
    }
  }

  StrategyContext* context_ = nullptr;
  ProcessGroup* group_ = nullptr;
  std::int64_t bucketBytes_ = 25LL * 1024 * 1024;
  std::int64_t firstBucketBytes_ = 1LL * 1024 * 1024;
  std::chrono::milliseconds timeout_{std::chrono::minutes(5)};
  bool broadcastBuffers_ = true;
  bool communicate_ = true;
  std::string compress_;  // the compressor's specification; empty: plain all-reduce
  std::vector<Bucket> buckets_;
  std::vector<GradientBucket> compressed_;  // the compressor's view of buckets_, index for index
  std::unique_ptr<CompressedReduction> compression_;
  std::vector<int> bucketOf_;
  HookHandle hook_;
};

}  // namespace
}  // namespace strata::plugins

STRATA_EXPORT_STRATEGY(strata::plugins::DdpStrategy, "ddp", "0.1.0",
                       "data parallel: bucketed all-reduce of gradients overlapped with backward, local optimizer")
