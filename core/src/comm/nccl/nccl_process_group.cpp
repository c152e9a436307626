#include "nccl_process_group.h"

#include <chrono>
#include <cstring>
#include <filesystem>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include "cuda_check.h"
#include "strata/comm/collective_arrivals.h"
#include "strata/cuda/nccl_process_group.h"
#include "strata/error.h"

namespace strata::cuda {
namespace {

using Clock = std::chrono::steady_clock;

// How often a blocked wait() looks at the collective's event and NCCL's asynchronous error.
constexpr auto kPollInterval = std::chrono::microseconds(50);

double seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

double seconds(std::chrono::milliseconds d) {
  return static_cast<double>(d.count()) / 1000.0;
}

// NCCL's own explanation of the last failure (ncclGetLastError), or "" when it has none.
std::string lastNcclError(ncclComm_t comm) {
  const char* last = ncclGetLastError(comm);
  return last != nullptr ? std::string(last) : std::string();
}

[[noreturn]] void throwNcclError(ncclResult_t status, const char* call, ncclComm_t comm, const char* file, int line) {
  const std::string last = lastNcclError(comm);
  fail("NCCL call {} failed: {}{}{} [{}:{}]", call, ncclGetErrorString(status), last.empty() ? "" : ": ", last,
       std::filesystem::path(file).filename().string(), line);
}

}  // namespace
}  // namespace strata::cuda

// Every NCCL call goes through this; comm may be nullptr (before a communicator exists).
#define STRATA_NCCL_CHECK(call, comm)                                                         \
  do {                                                                                        \
    const ncclResult_t strata_nccl_status_ = (call);                                          \
    if (strata_nccl_status_ != ncclSuccess) {                                                 \
      ::strata::cuda::throwNcclError(strata_nccl_status_, #call, (comm), __FILE__, __LINE__); \
    }                                                                                         \
  } while (false)

namespace strata::cuda {
namespace {

// CheckedProcessGroup has checked the dtype against the rules given in the constructor.
ncclDataType_t ncclTypeOf(const Tensor& t) {
  switch (t.dtype()) {
    case DType::Float64:
      return ncclFloat64;
    case DType::Float16:
      return ncclFloat16;
    case DType::BFloat16:
      return ncclBfloat16;
    default:
      return ncclFloat32;
  }
}

ncclRedOp_t ncclOpOf(ReduceOp op) {
  return op == ReduceOp::Average ? ncclAvg : ncclSum;
}

// Whether an event has completed; never throws (an error counts as completed: wait() reports it).
bool eventDone(const CudaEvent& event) {
  const cudaError_t status = cudaEventQuery(event.handle());
  if (status == cudaSuccess) {
    return true;
  }
  (void)cudaGetLastError();
  return status != cudaErrorNotReady;
}

}  // namespace

void NcclCommState::abortLocked(const std::string& message) {
  if (!error) {
    error = message;
  }
  if (comm != nullptr) {
    // Not STRATA_NCCL_CHECK: this runs while reporting another failure, which must not be replaced.
    const ncclResult_t status = ncclCommAbort(comm);
    comm = nullptr;
    if (status != ncclSuccess) {
      spdlog::warn("ncclCommAbort failed: {}", ncclGetErrorString(status));
    }
  }
}

// One collective on the communication stream, between a start and an end event (both timed, for runSeconds()).
class NcclWork final : public Work {
 public:
  using DescribePending = std::function<std::string()>;

  NcclWork(std::shared_ptr<NcclCommState> state, std::string description, int device, cudaStream_t computeStream,
           std::vector<Tensor> tensors, std::chrono::milliseconds collectiveTimeout, DescribePending describePending)
      : state_(std::move(state)),
        description_(std::move(description)),
        device_(device),
        computeStream_(computeStream),
        tensors_(std::move(tensors)),
        collectiveTimeout_(collectiveTimeout),
        describePending_(std::move(describePending)),
        start_(true),
        end_(true) {}

  CudaEvent& startEvent() { return start_; }
  CudaEvent& endEvent() { return end_; }
  void markIssued() { issuedAt_ = Clock::now(); }
  const std::string& description() const { return description_; }
  bool finishedOnDevice() const { return eventDone(end_); }

  void wait(std::chrono::milliseconds timeout) override {
    const auto waitStart = Clock::now();
    {
      std::lock_guard lock(mutex_);
      if (done_) {
        if (error_) {
          throw Error(*error_);
        }
        return;
      }
    }
    std::optional<std::string> earlier;
    {
      std::lock_guard lock(state_->mutex);
      earlier = state_->error;
    }
    if (earlier) {
      // An aborted collective may never complete: the compute stream must not wait for it.
      markFailed(fmt::format("{} did not complete: the process group failed: {}", description_, *earlier));
    }
    STRATA_CUDA_CHECK(cudaSetDevice(device_));
    // Kernels queued after this call see the collective's result, whether or not the host blocks below.
    end_.wait(computeStream_);
    while (true) {
      const bool finished = end_.ready();
      std::optional<std::string> groupError;
      ncclResult_t asyncError = ncclSuccess;
      std::string asyncDetail;
      {
        std::lock_guard lock(state_->mutex);
        groupError = state_->error;
        if (!groupError && !finished && state_->comm != nullptr) {
          const ncclResult_t status = ncclCommGetAsyncError(state_->comm, &asyncError);
          if (status != ncclSuccess) {
            asyncError = status;
          }
          if (asyncError != ncclSuccess && asyncError != ncclInProgress) {
            asyncDetail = lastNcclError(state_->comm);
          }
        }
      }
      const auto now = Clock::now();
      if (groupError) {
        // Also when the event completed: an abort ends the collective's kernels without a result.
        addWaited(now - waitStart);
        markFailed(fmt::format("{} did not complete: the process group failed: {}", description_, *groupError));
      }
      if (finished) {
        addWaited(now - waitStart);
        markCompleted();
        return;
      }
      if (asyncError != ncclSuccess && asyncError != ncclInProgress) {
        abortAndFail(fmt::format("{} failed after {:.3g} s: {}; nccl: {}{}{}", description_, seconds(now - issuedAt_),
                                 describePending_(), ncclGetErrorString(asyncError), asyncDetail.empty() ? "" : ": ",
                                 asyncDetail),
                     waitStart);
      }
      if (now - issuedAt_ >= collectiveTimeout_) {
        abortAndFail(
            fmt::format("{} failed after {:.3g} s: {}; nccl: it did not complete within the process "
                        "group's timeout of {:g} s, so the communicator was aborted",
                        description_, seconds(now - issuedAt_), describePending_(), seconds(collectiveTimeout_)),
            waitStart);
      }
      if (now - waitStart >= timeout) {
        addWaited(now - waitStart);
        const std::string pending = describePending_();
        fail("{} did not complete within the wait timeout of {:g} s{}{}", description_, seconds(timeout),
             pending.empty() ? "" : ": ", pending);
      }
      std::this_thread::sleep_for(kPollInterval);
    }
  }

  bool isCompleted() const override {
    {
      std::lock_guard lock(mutex_);
      if (done_) {
        return true;
      }
    }
    return finishedOnDevice();
  }

  double waitedSeconds() const override {
    std::lock_guard lock(mutex_);
    return waitedSeconds_;
  }

  double runSeconds() const override {
    std::lock_guard lock(mutex_);
    if (!done_ && finishedOnDevice()) {
      float ms = 0.0F;
      if (cudaEventElapsedTime(&ms, start_.handle(), end_.handle()) == cudaSuccess) {
        return static_cast<double>(ms) / 1000.0;
      }
      (void)cudaGetLastError();
    }
    return runSeconds_;
  }

 private:
  void addWaited(Clock::duration d) {
    std::lock_guard lock(mutex_);
    waitedSeconds_ += seconds(d);
  }

  void markCompleted() {
    const double run = static_cast<double>(end_.elapsedSince(start_)) / 1000.0;
    std::lock_guard lock(mutex_);
    done_ = true;
    runSeconds_ = run;
  }

  [[noreturn]] void markFailed(const std::string& message) {
    {
      std::lock_guard lock(mutex_);
      done_ = true;
      error_ = message;
    }
    throw Error(message);
  }

  // Aborts the communicator with `message` as the group's failure, unless another failure came first.
  [[noreturn]] void abortAndFail(const std::string& message, Clock::time_point waitStart) {
    std::string first;
    {
      std::lock_guard lock(state_->mutex);
      state_->abortLocked(message);
      first = *state_->error;
    }
    addWaited(Clock::now() - waitStart);
    if (first == message) {
      spdlog::error("{}", message);
      markFailed(message);
    }
    markFailed(fmt::format("{} did not complete: the process group failed: {}", description_, first));
  }

  const std::shared_ptr<NcclCommState> state_;
  const std::string description_;
  const int device_;
  const cudaStream_t computeStream_;
  const std::vector<Tensor> tensors_;  // Note [in-flight tensors]
  const std::chrono::milliseconds collectiveTimeout_;
  const DescribePending describePending_;
  CudaEvent start_;
  CudaEvent end_;
  Clock::time_point issuedAt_ = Clock::now();

  mutable std::mutex mutex_;  // guards the fields below
  bool done_ = false;         // the host saw it complete or fail
  std::optional<std::string> error_;
  double waitedSeconds_ = 0.0;
  double runSeconds_ = 0.0;
};

NcclProcessGroup::NcclProcessGroup(Store& store, int rank, int size, int device, ProcessGroupOptions options,
                                   const std::string& groupName)
    : CheckedProcessGroup({"nccl", {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16}}),
      store_(store),
      rank_(rank),
      size_(size),
      device_(device),
      options_(options),
      state_(std::make_shared<NcclCommState>()) {
  STRATA_CHECK(size_ > 0 && rank_ >= 0 && rank_ < size_, "NcclProcessGroup: rank {} is not in a group of {}", rank_,
               size_);
  try {
    STRATA_CUDA_CHECK(cudaSetDevice(device_));
    computeStream_ = defaultCudaStream(device_).handle();
    const std::string base = fmt::format("nccl/{}/", groupName);
    const std::int64_t generation = store_.add(base + fmt::format("generation/rank/{}", rank_), 1);
    prefix_ = fmt::format("{}{}/", base, generation);
    const std::string idKey = prefix_ + "unique_id";
    if (rank_ == 0) {
      ncclUniqueId id;
      STRATA_NCCL_CHECK(ncclGetUniqueId(&id), nullptr);
      const auto* bytes = reinterpret_cast<const std::uint8_t*>(&id);
      store_.set(idKey, Store::Bytes(bytes, bytes + sizeof(id)));
    }
    // Every rank must be here before the blocking ncclCommInitRank: a missing rank is named after the timeout.
    store_.setString(prefix_ + fmt::format("joined/{}", rank_), "1");
    std::vector<std::string> keys{idKey};
    for (int r = 0; r < size_; ++r) {
      keys.push_back(prefix_ + fmt::format("joined/{}", r));
    }
    store_.wait(keys, options_.timeout);
    const Store::Bytes bytes = store_.get(idKey, options_.timeout);
    STRATA_CHECK(bytes.size() == sizeof(ncclUniqueId), "the NCCL unique id under store key '{}' has {} bytes, not {}",
                 idKey, bytes.size(), sizeof(ncclUniqueId));
    ncclUniqueId id;
    std::memcpy(&id, bytes.data(), sizeof(id));
    ncclComm_t comm = nullptr;
    STRATA_NCCL_CHECK(ncclCommInitRank(&comm, size_, id, rank_), nullptr);
    state_->comm = comm;
    int leastPriority = 0;
    int greatestPriority = 0;
    STRATA_CUDA_CHECK(cudaDeviceGetStreamPriorityRange(&leastPriority, &greatestPriority));
    STRATA_CUDA_CHECK(cudaStreamCreateWithPriority(&commStream_, cudaStreamNonBlocking, greatestPriority));
    computeReady_ = std::make_unique<CudaEvent>();
    barrierBuffer_ = Tensor::zeros(DType::Float32, {1}, MemoryCategory::Communication, Device::cuda(device_));
  } catch (const std::exception& e) {
    if (state_->comm != nullptr) {
      (void)ncclCommAbort(state_->comm);
      state_->comm = nullptr;
    }
    if (commStream_ != nullptr) {
      (void)cudaStreamDestroy(commStream_);
    }
    fail("nccl process group '{}' (rank {} of {}, cuda:{}) could not start: {}", groupName, rank_, size_, device_,
         e.what());
  }
  recorder_ = std::thread([this] { recorderLoop(); });
}

NcclProcessGroup::~NcclProcessGroup() {
  {
    std::lock_guard lock(recordMutex_);
    stopping_ = true;
  }
  recordWanted_.notify_all();
  recorder_.join();
  try {
    finish();
  } catch (const std::exception& e) {
    spdlog::error("nccl process group (rank {} of {}, cuda:{}) did not shut down cleanly: {}", rank_, size_, device_,
                  e.what());
  }
  if (commStream_ != nullptr) {
    (void)cudaStreamDestroy(commStream_);  // returns at once; the stream is released when its work is done
  }
}

void NcclProcessGroup::finish() {
  (void)cudaSetDevice(device_);
  std::lock_guard lock(state_->mutex);
  const std::shared_ptr<NcclWork> last = inFlight_.empty() ? nullptr : inFlight_.back();
  const auto deadline = Clock::now() + options_.timeout;
  while (state_->comm != nullptr && last != nullptr && !last->finishedOnDevice()) {
    ncclResult_t asyncError = ncclSuccess;
    if (ncclCommGetAsyncError(state_->comm, &asyncError) == ncclSuccess && asyncError != ncclSuccess &&
        asyncError != ncclInProgress) {
      state_->abortLocked(fmt::format("{} failed while the process group was being destroyed: nccl: {}: {}",
                                      last->description(), ncclGetErrorString(asyncError),
                                      lastNcclError(state_->comm)));
      break;
    }
    if (Clock::now() >= deadline) {
      state_->abortLocked(
          fmt::format("{} was still running {:g} s after the process group began shutting down, so "
                      "the communicator was aborted",
                      last->description(), seconds(options_.timeout)));
      spdlog::error("{}", *state_->error);
      break;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  if (state_->comm != nullptr) {
    // Every collective has completed: destroying (not aborting) leaves their works reporting success.
    const ncclResult_t status = ncclCommDestroy(state_->comm);
    state_->comm = nullptr;
    if (status != ncclSuccess) {
      spdlog::warn("ncclCommDestroy failed: {}", ncclGetErrorString(status));
    }
  }
  inFlight_.clear();
}

void NcclProcessGroup::recorderLoop() {
  std::int64_t written = 0;
  bool warned = false;
  std::unique_lock lock(recordMutex_);
  while (true) {
    recordWanted_.wait(lock, [&] { return stopping_ || issuedSeq_ != written; });
    if (issuedSeq_ == written) {
      return;  // stopping, and everything issued is recorded
    }
    // Only the latest: the records say how far each rank got, not every collective.
    const std::int64_t seq = issuedSeq_;
    lock.unlock();
    try {
      store_.setString(collectiveArrivalKey(prefix_, rank_), std::to_string(seq));
    } catch (const std::exception& e) {
      if (!warned) {
        spdlog::warn(
            "nccl process group: could not record collective #{} in the store (a timeout will not name "
            "the missing ranks): {}",
            seq, e.what());
        warned = true;
      }
    }
    written = seq;
    lock.lock();
  }
}

std::string NcclProcessGroup::deviceProblem(Device device) const {
  if (device == Device::cuda(device_)) {
    return "";
  }
  return fmt::format("this NCCL process group runs on cuda:{} (host tensors need the gloo backend)", device_);
}

WorkHandle NcclProcessGroup::launch(const std::string& name, std::size_t bytes, std::vector<Tensor> tensors,
                                    const Call& call) {
  std::shared_ptr<NcclWork> work;
  std::int64_t seq = 0;
  {
    std::lock_guard lock(state_->mutex);
    if (state_->error) {
      fail("{} was not run: the process group is unusable after an earlier failure: {}", name, *state_->error);
    }
    STRATA_CHECK(state_->comm != nullptr, "{}: the NCCL process group is shut down", name);
    while (!inFlight_.empty() && inFlight_.front()->finishedOnDevice()) {
      inFlight_.pop_front();  // collectives on one stream finish in order
    }
    seq = nextSeq_++;
    const std::int64_t step = step_.load();
    std::string description = describeCollective(name, seq, bytes, step);
    try {
      // Before the work's events are created: an event belongs to the device current at its creation.
      STRATA_CUDA_CHECK(cudaSetDevice(device_));
      work = std::make_shared<NcclWork>(
          state_, description, device_, computeStream_, std::move(tensors), options_.timeout,
          [&store = store_, prefix = prefix_, size = size_, seq, timeout = options_.timeout] {
            return describeMissingRanks(store, prefix, size, seq, timeout);
          });
      // The collective reads what kernels queued before this call write (gradients).
      computeReady_->record(computeStream_);
      computeReady_->wait(commStream_);
      work->startEvent().record(commStream_);
      work->markIssued();
      call(state_->comm, commStream_);
      work->endEvent().record(commStream_);
    } catch (const std::exception& e) {
      const std::string message = fmt::format("{} failed to start on cuda:{}: {}", description, device_, e.what());
      state_->abortLocked(message);
      spdlog::error("{}", message);
      throw Error(message);
    }
    inFlight_.push_back(work);
  }
  {
    std::lock_guard lock(recordMutex_);
    issuedSeq_ = seq;
  }
  recordWanted_.notify_one();
  return work;
}

WorkHandle NcclProcessGroup::doAllReduce(Tensor tensor, ReduceOp op) {
  return launch("allReduce", tensor.bytes(), {tensor}, [tensor, op](ncclComm_t comm, cudaStream_t stream) {
    if (tensor.numel() == 0) {
      return;
    }
    STRATA_NCCL_CHECK(ncclAllReduce(tensor.rawData(), tensor.rawData(), static_cast<std::size_t>(tensor.numel()),
                                    ncclTypeOf(tensor), ncclOpOf(op), comm, stream),
                      comm);
  });
}

WorkHandle NcclProcessGroup::doReduceScatter(Tensor input, Tensor output, ReduceOp op) {
  return launch(
      "reduceScatter", input.bytes(), {input, output}, [input, output, op](ncclComm_t comm, cudaStream_t stream) {
        if (output.numel() == 0) {
          return;
        }
        STRATA_NCCL_CHECK(ncclReduceScatter(input.rawData(), output.rawData(), static_cast<std::size_t>(output.numel()),
                                            ncclTypeOf(output), ncclOpOf(op), comm, stream),
                          comm);
      });
}

WorkHandle NcclProcessGroup::doAllGather(Tensor input, Tensor output) {
  // NCCL gathers in place when the input is the output's part rank() (Note [in-place allGather] in Gloo's group;
  // CheckedProcessGroup rejects any other overlap).
  return launch("allGather", output.bytes(), {input, output}, [input, output](ncclComm_t comm, cudaStream_t stream) {
    if (input.numel() == 0) {
      return;
    }
    STRATA_NCCL_CHECK(ncclAllGather(input.rawData(), output.rawData(), static_cast<std::size_t>(input.numel()),
                                    ncclTypeOf(input), comm, stream),
                      comm);
  });
}

WorkHandle NcclProcessGroup::doBroadcast(Tensor tensor, int root) {
  return launch(fmt::format("broadcast(root {})", root), tensor.bytes(), {tensor},
                [tensor, root](ncclComm_t comm, cudaStream_t stream) {
                  if (tensor.numel() == 0) {
                    return;
                  }
                  STRATA_NCCL_CHECK(
                      ncclBroadcast(tensor.rawData(), tensor.rawData(), static_cast<std::size_t>(tensor.numel()),
                                    ncclTypeOf(tensor), root, comm, stream),
                      comm);
                });
}

WorkHandle NcclProcessGroup::doBarrier() {
  // NCCL has no barrier: a one-element all-reduce completes only when every rank has joined.
  const Tensor buffer = barrierBuffer_;
  return launch("barrier", 0, {buffer}, [buffer](ncclComm_t comm, cudaStream_t stream) {
    STRATA_NCCL_CHECK(ncclAllReduce(buffer.rawData(), buffer.rawData(), 1, ncclFloat32, ncclSum, comm, stream), comm);
  });
}

std::unique_ptr<ProcessGroup> createNcclProcessGroup(Store& store, int rank, int size, int device,
                                                     const ProcessGroupOptions& options, const std::string& groupName) {
  return std::make_unique<NcclProcessGroup>(store, rank, size, device, options, groupName);
}

}  // namespace strata::cuda
