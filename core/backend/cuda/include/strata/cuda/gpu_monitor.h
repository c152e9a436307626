#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace strata::cuda {

// What the monitor saw over a run (the study's Figure 6, GPU utilisation, and Figure 7, GPU memory).
struct GpuUsageSummary {
  bool available = false;
  std::string unavailableReason;  // why there are no samples (no NVML library, no such device, ...)
  int samples = 0;
  double utilizationMean = 0.0;  // percent of time a kernel was running, as nvidia-smi reports it
  double utilizationMax = 0.0;
  std::int64_t memoryUsedMaxBytes = 0;  // the whole device's used memory (every process), as nvidia-smi reports it
  std::int64_t memoryTotalBytes = 0;
};

// One NVML sample: the device's utilisation (percent) and used memory (every process's).
struct GpuSample {
  double utilization = 0.0;
  std::int64_t memoryUsedBytes = 0;
};

// Samples one GPU's utilisation and memory in a background thread through NVML, which is loaded with dlopen at
// run time: machines without the NVIDIA driver (and its libnvidia-ml.so.1) build and run Strata, and the summary
// then says why it has no figures.
class GpuMonitor {
 public:
  // Starts sampling the CUDA device `cudaDevice` every `interval`.
  GpuMonitor(int cudaDevice, std::chrono::milliseconds interval);
  ~GpuMonitor();
  GpuMonitor(const GpuMonitor&) = delete;
  GpuMonitor& operator=(const GpuMonitor&) = delete;

  // Stops sampling (idempotent) and summarises.
  GpuUsageSummary stop();
  // The last sample; nullopt before the first (or without NVML). For time series (RunFiles' resource sampler).
  std::optional<GpuSample> latest();

 private:
  void sampleLoop(std::chrono::milliseconds interval);

  std::atomic<bool> stopping_{false};
  std::mutex mutex_;
  GpuUsageSummary summary_;
  double utilizationSum_ = 0.0;
  std::optional<GpuSample> latest_;
  void* device_ = nullptr;  // nvmlDevice_t
  std::thread thread_;
};

}  // namespace strata::cuda
