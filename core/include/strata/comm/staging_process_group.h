#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "strata/comm/async_work.h"
#include "strata/comm/checked_process_group.h"
#include "strata/comm/collective_queue.h"
#include "strata/comm/step_label.h"

namespace strata {

// Runs another group's collectives on host copies of device tensors, for groups that read host memory only (Gloo
// when ranks share a GPU): a device tensor is copied into a host buffer, the inner group's collective runs on it,
// and the result is copied back. Host tensors are handed over as they are. Every collective, staged or not, goes
// through one FIFO worker thread, so the inner group sees the callers' order on every rank.
//
// Note [host staging]: the request marks the device's compute stream on the caller's thread (the hook that found a
// bucket ready); the worker's copy to the host waits for the kernels queued before that mark only, so it overlaps
// the rest of the backward pass instead of queueing behind it. Copies back wait for the mark too: a tensor that was
// not copied in (broadcast's receivers, gathered and scattered outputs) may still be written or read by kernels
// queued before the request, and the result must land after them. Both copies run on the backend's staging stream
// and are complete on return, so kernels queued after the work's wait() returns see the result.
//
// Failures: the inner collective's error is the work's error, unchanged (it names the collective and the ranks that
// did not join); the inner group's watchdog bounds how long the worker waits. A wait() that times out names the
// inner collective's pending state. After a failure later collectives fail at once with the first error.
// Note [shutdown]: the destructor fails queued collectives, waits for the running one, then destroys the inner group.
class StagingProcessGroup final : public CheckedProcessGroup, public StepLabelledGroup {
 public:
  explicit StagingProcessGroup(std::unique_ptr<ProcessGroup> inner);
  ~StagingProcessGroup() override;
  StagingProcessGroup(const StagingProcessGroup&) = delete;
  StagingProcessGroup& operator=(const StagingProcessGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void setStep(std::int64_t step) override;

  ProcessGroup& inner() { return *inner_; }

 protected:
  std::string deviceProblem(Device device) const override;
  WorkHandle doAllReduce(Tensor tensor, ReduceOp op) override;
  WorkHandle doReduceScatter(Tensor input, Tensor output, ReduceOp op) override;
  WorkHandle doAllGather(Tensor input, Tensor output) override;
  WorkHandle doBroadcast(Tensor tensor, int root) override;
  WorkHandle doBarrier() override;

 private:
  struct Job;
  // `issue` stages the inputs and starts the inner collective (on the worker); `unstage` copies results back.
  WorkHandle enqueue(const std::string& name, std::size_t bytes, std::function<WorkHandle(ProcessGroup&)> issue,
                     std::function<void()> unstage);
  void execute(Job& job);

  const std::unique_ptr<ProcessGroup> inner_;
  const int rank_;
  const int size_;
  CollectiveQueue queue_;  // last: destroyed first, while the inner group is alive
};

}  // namespace strata
