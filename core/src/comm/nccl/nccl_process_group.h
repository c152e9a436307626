#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "cuda_stream.h"
#include "strata/comm/checked_process_group.h"
#include "strata/comm/step_label.h"
#include "strata/comm/store.h"
#include "strata/tensor.h"

namespace strata::cuda {

// The communicator and the group's failure, shared with the group's works (which may outlive the group).
struct NcclCommState {
  std::mutex mutex;                  // guards every NCCL call on comm, and the fields below
  ncclComm_t comm = nullptr;         // nullptr once destroyed or aborted
  std::optional<std::string> error;  // the first failure; the group is unusable after it
  // Records `message` as the group's failure (first, so that a work seeing its event complete after the abort knows
  // why), then aborts the communicator, which ends its kernels. The caller holds mutex.
  void abortLocked(const std::string& message);
};

class NcclWork;

// ProcessGroup over NCCL for tensors on one CUDA device (createNcclProcessGroup in strata/cuda/nccl_process_group.h).
//
// Bootstrap: every rank bumps its own counter "nccl/<group>/generation/rank/<r>" (ranks create groups in the same
// order, so the counters agree and a re-created group never reads a stale id), rank 0 publishes ncclGetUniqueId()
// under "nccl/<group>/<gen>/unique_id", every rank announces itself under ".../joined/<r>" and waits for all the
// others (bounded by options.timeout, naming the missing ranks) before the blocking ncclCommInitRank.
//
// Streams: collectives run on one high-priority communication stream per group. Each first waits for an event
// recorded on the device's compute stream, so gradients produced by kernels queued before the call are complete;
// an event recorded after the NCCL call completes the work. Work::wait() makes the compute stream wait for that
// event (so later kernels see the result) and then blocks the host until the event completes, like Gloo's works.
//
// Watchdog: a collective still running options.timeout after it was issued, or one NCCL reports an asynchronous
// error for, aborts the communicator (ncclCommAbort) when a wait() notices it; the error names the collective, the
// step and the ranks that did not join, from arrival records "nccl/<group>/<gen>/collective/rank/<r>" = seq that a
// background thread writes (so issuing a collective costs no store round trip). A wait() that runs out of its own,
// shorter timeout throws the same way but leaves the collective pending. After a failure every later collective
// fails at once with the first error.
//
// Note [in-flight tensors]: the group keeps every issued collective's tensors alive until its event completes, so
// the caching allocator never hands their memory to the compute stream while NCCL still uses it.
// Note [shutdown]: the destructor waits (at most options.timeout) for the collectives in flight, then destroys the
// communicator, or aborts it when they do not finish; works outliving the group then report completion or the abort.
// Limitation: ncclCommInitRank and a collective's first launch (NCCL connects lazily) block the host until the peers
// arrive; the store barrier before initialisation bounds the common case (a rank that never starts).
class NcclProcessGroup final : public CheckedProcessGroup, public StepLabelledGroup {
 public:
  NcclProcessGroup(Store& store, int rank, int size, int device, ProcessGroupOptions options,
                   const std::string& groupName);
  ~NcclProcessGroup() override;
  NcclProcessGroup(const NcclProcessGroup&) = delete;
  NcclProcessGroup& operator=(const NcclProcessGroup&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  int device() const { return device_; }

  void setStep(std::int64_t step) override { step_.store(step); }

 protected:
  std::string deviceProblem(Device device) const override;
  WorkHandle doAllReduce(Tensor tensor, ReduceOp op) override;
  WorkHandle doReduceScatter(Tensor input, Tensor output, ReduceOp op) override;
  WorkHandle doAllGather(Tensor input, Tensor output) override;
  WorkHandle doBroadcast(Tensor tensor, int root) override;
  WorkHandle doBarrier() override;

 private:
  using Call = std::function<void(ncclComm_t comm, cudaStream_t stream)>;

  // Orders `call` after the compute stream's queued work on the communication stream and returns its work.
  WorkHandle launch(const std::string& name, std::size_t bytes, std::vector<Tensor> tensors, const Call& call);
  void recorderLoop();
  void finish();

  Store& store_;
  const int rank_;
  const int size_;
  const int device_;
  const ProcessGroupOptions options_;
  std::string prefix_;  // "nccl/<group>/<generation>/"
  std::shared_ptr<NcclCommState> state_;
  cudaStream_t commStream_ = nullptr;
  cudaStream_t computeStream_ = nullptr;
  std::unique_ptr<CudaEvent> computeReady_;  // recorded on the compute stream before each collective
  Tensor barrierBuffer_;                     // one float that barrier() all-reduces

  std::atomic<std::int64_t> step_{0};
  std::int64_t nextSeq_ = 1;                        // guarded by state_->mutex
  std::deque<std::shared_ptr<NcclWork>> inFlight_;  // guarded by state_->mutex; Note [in-flight tensors]

  // Arrival records, written by recorder_.
  std::mutex recordMutex_;
  std::condition_variable recordWanted_;
  std::int64_t issuedSeq_ = 0;  // guarded by recordMutex_
  bool stopping_ = false;       // guarded by recordMutex_
  std::thread recorder_;
};

}  // namespace strata::cuda
