#pragma once

#include <cuda_runtime.h>

#include "strata/op_registry.h"
#include "strata/stream.h"

namespace strata::cuda {

// A CUDA stream behind Strata's Stream interface. Each device has one default compute stream (created
// non-blocking, so it never serialises with the legacy stream of libraries that use it).
class CudaStream final : public Stream {
 public:
  explicit CudaStream(int deviceIndex);
  ~CudaStream() override;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;

  Device device() const override { return Device::cuda(deviceIndex_); }
  void synchronize() override;
  // A CUDA graph captured from this stream (cuda_graph_recording.cpp).
  std::unique_ptr<RecordedWork> record(const std::function<void()>& work, std::string* whyNot) override;
  cudaStream_t handle() const { return stream_; }

 private:
  int deviceIndex_;
  cudaStream_t stream_ = nullptr;
};

// An event recorded on a stream: other streams wait on it, the host waits for it, or two events time a span.
class CudaEvent {
 public:
  explicit CudaEvent(bool timing = false);
  ~CudaEvent();
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;

  void record(cudaStream_t stream);
  void wait(cudaStream_t stream) const;  // makes `stream` wait for this event (no host block)
  void synchronize() const;
  bool ready() const;
  // Milliseconds from `start` to this event (both recorded with timing on).
  float elapsedSince(const CudaEvent& start) const;
  cudaEvent_t handle() const { return event_; }

 private:
  cudaEvent_t event_ = nullptr;
};

// Makes `device` the calling thread's current CUDA device (kernel launches, events and library calls act on the
// current device; a worker thread starts on device 0). Nothing restores the previous device: setting device 0 back
// on a thread that never used it would create a CUDA context there (hundreds of MB on GPU 0 per process), and
// every path that launches work calls this first.
void makeCurrent(int device);

// The stream a kernel must enqueue on; also makes the kernel's device current on this thread.
cudaStream_t streamOf(const KernelContext& ctx);
// The default compute stream of a device (the backend must be initialised for it).
CudaStream& defaultCudaStream(int deviceIndex);

}  // namespace strata::cuda
