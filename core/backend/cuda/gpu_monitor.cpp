#include "strata/cuda/gpu_monitor.h"

#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>

#include <fmt/format.h>

namespace strata::cuda {
namespace {

// The few NVML declarations Strata needs (nvml.h is not part of every toolkit install; its ABI is stable).
using NvmlReturn = int;
using NvmlDevice = void*;
struct NvmlUtilization {
  unsigned int gpu;
  unsigned int memory;
};
struct NvmlMemory {
  unsigned long long total;  // NOLINT(google-runtime-int): NVML's own type
  unsigned long long free;   // NOLINT(google-runtime-int)
  unsigned long long used;   // NOLINT(google-runtime-int)
};
constexpr NvmlReturn kNvmlSuccess = 0;

struct Nvml {
  void* library = nullptr;
  NvmlReturn (*init)() = nullptr;
  NvmlReturn (*byPciBusId)(const char*, NvmlDevice*) = nullptr;
  NvmlReturn (*utilization)(NvmlDevice, NvmlUtilization*) = nullptr;
  NvmlReturn (*memory)(NvmlDevice, NvmlMemory*) = nullptr;
  const char* (*errorString)(NvmlReturn) = nullptr;
  std::string loadError;
};

template <typename Fn>
bool bind(void* library, const char* name, Fn& fn) {
  fn = reinterpret_cast<Fn>(dlsym(library, name));  // NOLINT(cppcoreguidelines-pro-type-reinterpret-cast)
  return fn != nullptr;
}

// Loaded once per process; nvmlInit is reference counted by NVML and never shut down here (the driver cleans up).
const Nvml& nvml() {
  static const Nvml loaded = [] {
    Nvml n;
    n.library = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
    if (n.library == nullptr) {
      const char* why = dlerror();
      n.loadError = fmt::format("NVML is not available (libnvidia-ml.so.1: {})", why != nullptr ? why : "not found");
      return n;
    }
    if (!bind(n.library, "nvmlInit_v2", n.init) || !bind(n.library, "nvmlDeviceGetHandleByPciBusId_v2", n.byPciBusId) ||
        !bind(n.library, "nvmlDeviceGetUtilizationRates", n.utilization) ||
        !bind(n.library, "nvmlDeviceGetMemoryInfo", n.memory) || !bind(n.library, "nvmlErrorString", n.errorString)) {
      n.loadError = "libnvidia-ml.so.1 lacks the NVML functions Strata samples (driver too old?)";
      n.init = nullptr;
      return n;
    }
    const NvmlReturn status = n.init();
    if (status != kNvmlSuccess) {
      n.loadError = fmt::format("nvmlInit failed: {}", n.errorString(status));
      n.init = nullptr;
    }
    return n;
  }();
  return loaded;
}

}  // namespace

GpuMonitor::GpuMonitor(int cudaDevice, std::chrono::milliseconds interval) {
  const Nvml& api = nvml();
  if (api.init == nullptr) {
    summary_.unavailableReason = api.loadError;
    return;
  }
  // NVML numbers devices differently from CUDA (CUDA_VISIBLE_DEVICES, PCI order): match by PCI bus id.
  char busId[64] = {0};
  if (cudaDeviceGetPCIBusId(busId, sizeof(busId), cudaDevice) != cudaSuccess) {
    (void)cudaGetLastError();
    summary_.unavailableReason = fmt::format("no PCI bus id for cuda:{}", cudaDevice);
    return;
  }
  NvmlDevice device = nullptr;
  const NvmlReturn status = api.byPciBusId(busId, &device);
  if (status != kNvmlSuccess) {
    summary_.unavailableReason = fmt::format("NVML does not know device {}: {}", busId, api.errorString(status));
    return;
  }
  device_ = device;
  summary_.available = true;
  thread_ = std::thread([this, interval] { sampleLoop(interval); });
}

GpuMonitor::~GpuMonitor() {
  stop();
}

void GpuMonitor::sampleLoop(std::chrono::milliseconds interval) {
  const Nvml& api = nvml();
  while (!stopping_.load(std::memory_order_acquire)) {
    NvmlUtilization utilization{};
    NvmlMemory memory{};
    if (api.utilization(device_, &utilization) == kNvmlSuccess && api.memory(device_, &memory) == kNvmlSuccess) {
      std::lock_guard lock(mutex_);
      ++summary_.samples;
      utilizationSum_ += utilization.gpu;
      summary_.utilizationMax = std::max(summary_.utilizationMax, static_cast<double>(utilization.gpu));
      summary_.memoryUsedMaxBytes = std::max(summary_.memoryUsedMaxBytes, static_cast<std::int64_t>(memory.used));
      summary_.memoryTotalBytes = static_cast<std::int64_t>(memory.total);
      latest_ = GpuSample{static_cast<double>(utilization.gpu), static_cast<std::int64_t>(memory.used)};
    }
    std::this_thread::sleep_for(interval);
  }
}

std::optional<GpuSample> GpuMonitor::latest() {
  std::lock_guard lock(mutex_);
  return latest_;
}

GpuUsageSummary GpuMonitor::stop() {
  stopping_.store(true, std::memory_order_release);
  if (thread_.joinable()) {
    thread_.join();
  }
  std::lock_guard lock(mutex_);
  GpuUsageSummary result = summary_;
  if (result.samples > 0) {
    result.utilizationMean = utilizationSum_ / result.samples;
  } else if (result.available) {
    result.available = false;
    result.unavailableReason = "the run ended before the first sample";
  }
  return result;
}

}  // namespace strata::cuda
