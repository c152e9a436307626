#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "strata/comm/async_work.h"
#include "strata/comm/checked_process_group.h"
#include "strata/comm/collective_arrivals.h"
#include "strata/comm/collective_queue.h"
#include "strata/comm/step_label.h"
#include "strata/comm/store.h"

namespace gloo {
class Context;
}

namespace strata {

// How a GlooProcessGroup reaches its peers.
struct GlooOptions {
  // The address this rank's TCP transport binds and advertises (loopback by default: ranks on one machine).
  std::string hostname = "127.0.0.1";
  // A network interface (e.g. "eth0"); when set it takes precedence over hostname.
  std::string iface;
  // Store keys of this group start with "gloo/<groupName>/": groups sharing one store need distinct names.
  std::string groupName = "default";
};

// Collectives over Gloo's TCP transport for float32/float64 tensors in host memory (device tensors, e.g. ranks
// sharing a GPU, go through a StagingProcessGroup around this group). The constructor bootstraps a
// gloo::rendezvous::Context through `store` (connectFullMesh, bounded by options.timeout); collectives run in FIFO
// order on one worker thread per group. reduceScatter is a ring (Note [ring reduce-scatter]), allGather Gloo's ring
// all-gather: each moves (size - 1) parts per rank.
//
// Watchdog: before running collective #seq the worker records "gloo/<group>/collective/rank/<r>" = seq in the store.
// A collective that does not finish within options.timeout fails (Gloo's own timeout), and its error names the
// collective, the step and the ranks whose record is behind seq, i.e. that never joined:
//   "allReduce #17 (4.0 MB) at step 3 failed after 30 s: rank 1 of 2 did not join (last joined #16); gloo: ..."
// After a failure the group is unusable: later collectives fail at once with the first error.
//
// Note [arrival records]: one overwritten key per rank keeps the store bounded over long runs (per-collective keys
// would grow without limit); it costs one store round trip per collective on the worker thread.
// Note [shutdown]: the destructor fails queued collectives and joins the worker; a collective already running holds
// the destructor for at most options.timeout. Work handles may outlive the group: every one of them is completed
// by then, so their wait() never calls back into the destroyed group.
class GlooProcessGroup final : public CheckedProcessGroup, public StepLabelledGroup {
 public:
  GlooProcessGroup(std::shared_ptr<Store> store, int rank, int size, ProcessGroupOptions options = {},
                   GlooOptions glooOptions = {});
  ~GlooProcessGroup() override;
  GlooProcessGroup(const GlooProcessGroup&) = delete;
  GlooProcessGroup& operator=(const GlooProcessGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void setStep(std::int64_t step) override { queue_.setStep(step); }

  // The prefix of this group's keys in the store ("gloo/<groupName>/"), where its heartbeats are counted.
  static std::string keyPrefix(const std::string& groupName) { return "gloo/" + groupName + "/"; }

 protected:
  std::string deviceProblem(Device device) const override;
  WorkHandle doAllReduce(Tensor tensor, ReduceOp op) override;
  WorkHandle doReduceScatter(Tensor input, Tensor output, ReduceOp op) override;
  WorkHandle doAllGather(Tensor input, Tensor output) override;
  WorkHandle doBroadcast(Tensor tensor, int root) override;
  WorkHandle doBarrier() override;

 private:
  WorkHandle enqueue(const std::string& name, std::size_t bytes, std::function<void(std::uint32_t tag)> run);
  // "rank 1 of 2 did not join (last joined #16)", from the arrival records; never throws.
  std::string describeMissing(std::int64_t seq) const;

  std::shared_ptr<Store> store_;
  const int rank_;
  const int size_;
  const ProcessGroupOptions options_;
  const std::string prefix_;
  std::shared_ptr<gloo::Context> context_;

  std::chrono::milliseconds heartbeatPeriod_;
  std::unique_ptr<Heartbeat> heartbeat_;  // Note [Heartbeats] in collective_arrivals.h
  CollectiveQueue queue_;                 // last: destroyed first, while what its collectives use is alive
};

}  // namespace strata
