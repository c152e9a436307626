#include "cuda_stream.h"

#include "cuda_check.h"

namespace strata::cuda {

CudaStream::CudaStream(int deviceIndex) : deviceIndex_(deviceIndex) {
  STRATA_CUDA_CHECK(cudaSetDevice(deviceIndex));
  STRATA_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
}

CudaStream::~CudaStream() {
  if (stream_ != nullptr) {
    cudaStreamDestroy(stream_);
  }
}

void CudaStream::synchronize() {
  STRATA_CUDA_CHECK(cudaStreamSynchronize(stream_));
}

CudaEvent::CudaEvent(bool timing) {
  STRATA_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing ? cudaEventDefault : cudaEventDisableTiming));
}

CudaEvent::~CudaEvent() {
  if (event_ != nullptr) {
    cudaEventDestroy(event_);
  }
}

void CudaEvent::record(cudaStream_t stream) {
  STRATA_CUDA_CHECK(cudaEventRecord(event_, stream));
}

void CudaEvent::wait(cudaStream_t stream) const {
  STRATA_CUDA_CHECK(cudaStreamWaitEvent(stream, event_, 0));
}

void CudaEvent::synchronize() const {
  STRATA_CUDA_CHECK(cudaEventSynchronize(event_));
}

bool CudaEvent::ready() const {
  const cudaError_t status = cudaEventQuery(event_);
  if (status == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  STRATA_CUDA_CHECK(status);
  return true;
}

float CudaEvent::elapsedSince(const CudaEvent& start) const {
  float ms = 0.0F;
  STRATA_CUDA_CHECK(cudaEventElapsedTime(&ms, start.event_, event_));
  return ms;
}

void makeCurrent(int device) {
  int current = -1;
  STRATA_CUDA_CHECK(cudaGetDevice(&current));
  if (current != device) {
    STRATA_CUDA_CHECK(cudaSetDevice(device));
  }
}

cudaStream_t streamOf(const KernelContext& ctx) {
  auto* stream = dynamic_cast<CudaStream*>(ctx.stream);
  STRATA_CHECK(stream != nullptr, "a CUDA kernel was run without a CUDA stream (the plan was built for {})",
               ctx.stream != nullptr ? ctx.stream->device().toString() : std::string("no device"));
  makeCurrent(stream->device().index);
  return stream->handle();
}

CudaStream& defaultCudaStream(int deviceIndex) {
  auto* stream = dynamic_cast<CudaStream*>(&defaultStream(Device::cuda(deviceIndex)));
  STRATA_CHECK(stream != nullptr, "device cuda:{} has no CUDA stream", deviceIndex);
  return *stream;
}

}  // namespace strata::cuda
