#include "strata/cuda/backend.h"

#include <cuda_runtime.h>

#include <array>
#include <mutex>
#include <optional>
#include <sstream>

#include "cuda_allocator.h"
#include "cuda_check.h"
#include "cuda_context.h"
#include "cuda_ops.h"
#include "cuda_stream.h"
#include "kernels/convert.h"
#include "optimizer_kernels.h"
#include "strata/device_backend.h"

#ifndef STRATA_CUDA_ARCHITECTURES
#define STRATA_CUDA_ARCHITECTURES "80,90"
#endif

namespace strata::cuda {
namespace {

constexpr int kMaxDevices = 64;

// Host staging copies run on a stream of their own per device, so each waits for its mark instead of for every
// kernel queued on the compute stream (Note [host staging] in core/include/strata/comm/staging_process_group.h).
CudaStream& stagingStream(int device) {
  static std::array<std::once_flag, kMaxDevices> once;
  static std::array<CudaStream*, kMaxDevices> streams{};
  STRATA_CHECK(device >= 0 && device < kMaxDevices, "invalid CUDA device index {}", device);
  const auto slot = static_cast<std::size_t>(device);
  std::call_once(once[slot], [&] { streams[slot] = new CudaStream(device); });  // leaked, like the default streams
  return *streams[slot];
}

// An event recorded on a device's compute stream.
class CudaStreamMark final : public DeviceBackend::StreamMark {
 public:
  explicit CudaStreamMark(int device) { ready_.record(defaultCudaStream(device).handle()); }
  const CudaEvent& ready() const { return ready_; }

 private:
  CudaEvent ready_;
};

// Copies and fills on the device's compute stream, so they are ordered with the kernels around them; staging
// copies on the staging stream.
class CudaDeviceBackend final : public DeviceBackend {
 public:
  void copy(void* dst, Device dstDevice, const void* src, Device srcDevice, std::size_t bytes) override {
    const Device device = dstDevice.type == DeviceType::CUDA ? dstDevice : srcDevice;
    makeCurrent(device.index);  // copies come from any thread (Gloo's staging worker)
    const cudaStream_t stream = defaultCudaStream(device.index).handle();
    const bool betweenGpus =
        srcDevice.type == DeviceType::CUDA && dstDevice.type == DeviceType::CUDA && srcDevice != dstDevice;
    if (betweenGpus) {
      // Between GPUs: the copy runs on the destination's stream, after the source's queued work.
      makeCurrent(srcDevice.index);  // an event is recorded on its own device's streams
      std::optional<CudaEvent> sourceReady;
      sourceReady.emplace();
      sourceReady->record(defaultCudaStream(srcDevice.index).handle());
      makeCurrent(device.index);
      sourceReady->wait(stream);
    }
    STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
    if (betweenGpus) {
      // And the source's later work after the copy: the source's allocator may hand its block to the next kernel
      // there (Note [CUDA block cache]) while the destination's stream still reads it.
      CudaEvent copied;
      copied.record(stream);
      makeCurrent(srcDevice.index);
      copied.wait(defaultCudaStream(srcDevice.index).handle());
      makeCurrent(device.index);
    }
    if (dstDevice.type == DeviceType::CPU) {
      STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
    }
  }

  void fillZero(void* dst, Device device, std::size_t bytes) override {
    makeCurrent(device.index);
    STRATA_CUDA_CHECK(cudaMemsetAsync(dst, 0, bytes, defaultCudaStream(device.index).handle()));
  }

  void convert(void* dst, DType dstType, const void* src, DType srcType, std::int64_t count, bool accumulate,
               Device device) override {
    makeCurrent(device.index);
    launchConvert(dst, dstType, src, srcType, count, accumulate, defaultCudaStream(device.index).handle());
  }

  std::shared_ptr<StreamMark> markComputeStream(Device device) override {
    makeCurrent(device.index);  // the event belongs to the device whose stream records it
    return std::make_shared<CudaStreamMark>(device.index);
  }

  void stagingCopy(const StreamMark* after, void* dst, Device dstDevice, const void* src, Device srcDevice,
                   std::size_t bytes) override {
    if (dstDevice.type == srcDevice.type) {
      copy(dst, dstDevice, src, srcDevice, bytes);  // not a staging copy
      return;
    }
    const Device device = dstDevice.type == DeviceType::CUDA ? dstDevice : srcDevice;
    makeCurrent(device.index);
    const cudaStream_t stream = stagingStream(device.index).handle();
    if (after != nullptr) {
      static_cast<const CudaStreamMark*>(after)->ready().wait(stream);
    }
    STRATA_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream));
    STRATA_CUDA_CHECK(cudaStreamSynchronize(stream));
  }
};

std::string explainNoDevice(cudaError_t status) {
  switch (status) {
    case cudaErrorNoDevice:
      return "no CUDA-capable GPU is visible (check CUDA_VISIBLE_DEVICES and nvidia-smi)";
    case cudaErrorInsufficientDriver:
      return "no NVIDIA driver is loaded, or it is too old for CUDA 13 (libcuda.so.1 missing or older than the "
             "toolkit Strata was built with)";
    default:
      return fmt::format("cudaGetDeviceCount failed: {} ({})", cudaGetErrorString(status), cudaGetErrorName(status));
  }
}

bool architectureCompiled(int major, int minor) {
  // Kernels are built as SASS for each listed architecture plus PTX for the newest, which the driver JIT-compiles
  // for newer GPUs; an older GPU than the oldest listed architecture cannot run them.
  std::stringstream list(STRATA_CUDA_ARCHITECTURES);
  std::string item;
  int oldest = 1000;
  while (std::getline(list, item, ',')) {
    try {
      oldest = std::min(oldest, std::stoi(item));
    } catch (const std::exception&) {
      // "native" and similar: accept any device
      return true;
    }
  }
  return major * 10 + minor >= oldest;
}

}  // namespace

DeviceProbe probeDevices() {
  int count = 0;
  const cudaError_t status = cudaGetDeviceCount(&count);
  if (status != cudaSuccess) {
    (void)cudaGetLastError();
    return DeviceProbe{0, explainNoDevice(status)};
  }
  if (count == 0) {
    return DeviceProbe{0, explainNoDevice(cudaErrorNoDevice)};
  }
  return DeviceProbe{count, {}};
}

void registerCudaKernels() {
  static std::once_flag once;
  std::call_once(once, [] {
    OpRegistry& registry = OpRegistry::instance();
    registerElementwiseKernels(registry);
    registerElementwiseGradKernels(registry);
    registerReductionKernels(registry);
    registerReductionGradKernels(registry);
    registerDataMovementKernels(registry);
    registerDataMovementGradKernels(registry);
    registerCudnnKernels(registry);
    registerBlasKernels(registry);
    registerHostFallbackKernels(registry);
  });
}

void initializeDevice(int index) {
  static std::mutex mutex;
  static std::array<bool, 64> ready{};
  std::lock_guard lock(mutex);
  STRATA_CHECK(index >= 0 && index < static_cast<int>(ready.size()), "invalid CUDA device index {}", index);
  if (ready[static_cast<std::size_t>(index)]) {
    return;
  }
  const DeviceProbe probe = probeDevices();
  if (probe.count == 0) {
    fail("cannot use CUDA: {}", probe.whyNone);
  }
  if (index >= probe.count) {
    fail("cannot use cuda:{}: this machine has {} visible CUDA device(s)", index, probe.count);
  }
  CudaContext& context = contextFor(index);
  const cudaDeviceProp& props = context.properties;
  if (!architectureCompiled(props.major, props.minor)) {
    fail(
        "cannot use cuda:{} ({}, sm_{}{}): Strata's CUDA kernels were built for architectures {} "
        "(configure with -DCMAKE_CUDA_ARCHITECTURES=... to add it)",
        index, props.name, props.major, props.minor, STRATA_CUDA_ARCHITECTURES);
  }
  // Leaked on purpose, like the CPU allocator: tensors in static objects may outlive static destructors.
  registerAllocator(Device::cuda(index), new CudaAllocator(index));
  registerDefaultStream(Device::cuda(index), new CudaStream(index));
  static CudaDeviceBackend* backend = new CudaDeviceBackend();
  registerDeviceBackend(DeviceType::CUDA, backend);
  registerCudaKernels();
  registerCudaOptimizerKernels();
  ready[static_cast<std::size_t>(index)] = true;
}

std::string describeDevice(int index) {
  const cudaDeviceProp& props = contextFor(index).properties;
  return fmt::format("{} (sm_{}{}, {:.1f} GiB)", props.name, props.major, props.minor,
                     static_cast<double>(props.totalGlobalMem) / (1U << 30U));
}

std::string pciBusId(int index) {
  char id[64] = {0};
  STRATA_CUDA_CHECK(cudaDeviceGetPCIBusId(id, sizeof(id), index));
  return id;
}

void setTf32(bool enabled) {
  setTf32Enabled(enabled);
}

}  // namespace strata::cuda
