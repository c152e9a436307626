// CudaStream::record: the stream is captured into a CUDA graph while `work` enqueues on it (Note [Recorded runs]
// in core/src/executor_recording.cpp), with the allocator's recording pool (Note [Recording pool]) holding every
// block the graph touches.

#include <cuda_runtime.h>

#include "cuda_allocator.h"
#include "cuda_check.h"
#include "cuda_stream.h"
#include "strata/allocator.h"

namespace strata::cuda {
namespace {

std::string describe(cudaError_t status) {
  return fmt::format("{} ({})", cudaGetErrorString(status), cudaGetErrorName(status));
}

class CudaGraphWork final : public RecordedWork {
 public:
  CudaGraphWork(cudaGraph_t graph, cudaGraphExec_t exec, cudaStream_t stream, int device, CudaAllocator& allocator,
                int pool)
      : graph_(graph), exec_(exec), stream_(stream), device_(device), allocator_(allocator), pool_(pool) {}
  CudaGraphWork(const CudaGraphWork&) = delete;
  CudaGraphWork& operator=(const CudaGraphWork&) = delete;

  ~CudaGraphWork() override {
    // Not makeCurrent: it throws, and a destructor that throws terminates (at exit the runtime may be unloaded).
    (void)cudaSetDevice(device_);
    // Replays may still be queued; their blocks must not be reused by anything else before they finish.
    (void)cudaStreamSynchronize(stream_);
    (void)cudaGraphExecDestroy(exec_);
    (void)cudaGraphDestroy(graph_);
    allocator_.releaseRecordingPool(pool_);
  }

  void replay() override {
    makeCurrent(device_);
    STRATA_CUDA_CHECK(cudaGraphLaunch(exec_, stream_));
  }

 private:
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
  cudaStream_t stream_;
  int device_;
  CudaAllocator& allocator_;
  int pool_;
};

}  // namespace

std::unique_ptr<RecordedWork> CudaStream::record(const std::function<void()>& work, std::string* whyNot) {
  makeCurrent(deviceIndex_);
  auto* allocator = dynamic_cast<CudaAllocator*>(&allocatorFor(device()));
  STRATA_CHECK(allocator != nullptr, "cuda:{} has no CUDA allocator", deviceIndex_);
  // Blocks cached by the node-by-node runs go back to the driver, so the recording's own pool has room beside the
  // live tensors (this synchronises the device once).
  allocator->emptyCache();
  const int pool = allocator->beginRecordingPool();
  std::string failure;
  cudaGraph_t graph = nullptr;
  const cudaError_t began = cudaStreamBeginCapture(stream_, cudaStreamCaptureModeThreadLocal);
  if (began != cudaSuccess) {
    failure = "cudaStreamBeginCapture: " + describe(began);
  } else {
    try {
      work();
    } catch (const std::exception& e) {
      failure = e.what();
    }
    // Ends the capture even when `work` failed, so the stream is usable again.
    const cudaError_t ended = cudaStreamEndCapture(stream_, &graph);
    if (failure.empty() && ended != cudaSuccess) {
      failure = "cudaStreamEndCapture: " + describe(ended);
    }
  }
  allocator->endRecordingPool();
  cudaGraphExec_t exec = nullptr;
  if (failure.empty()) {
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    if (made != cudaSuccess) {
      failure = "cudaGraphInstantiate: " + describe(made);
    }
  }
  if (!failure.empty()) {
    (void)cudaGetLastError();  // capture errors are not sticky; clear the last-error slot
    if (graph != nullptr) {
      (void)cudaGraphDestroy(graph);
    }
    allocator->releaseRecordingPool(pool);
    *whyNot = failure;
    return nullptr;
  }
  return std::make_unique<CudaGraphWork>(graph, exec, stream_, deviceIndex_, *allocator, pool);
}

}  // namespace strata::cuda
