#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <functional>
#include <mutex>
#include <optional>
#include <thread>

#include "strata/device.h"

namespace strata::cli {

// What a GPU monitor says now: utilisation (percent) and the device's used memory; nullopt: no sample.
struct GpuReading {
  double utilization = 0.0;
  std::int64_t memoryUsedBytes = 0;
};

// Note [Resource sampling]: the study's memory and utilisation figures are curves over time, so every rank of
// `strata train` samples itself from a thread of its own every `period` (0.5 s by default, `--sample-every`) and
// appends one JSON line to RUN_DIR/timeseries/rank-<r>.jsonl: seconds since the start, the step, the allocator's
// current bytes by category (Strata's own accounting: what the plan holds, not what the heap keeps), the
// process's resident memory, its CPU use over the interval (100 = one core busy), the part of it its
// communication threads used (Note [Thread names]: what moving collectives' bytes costs beside the compute) and,
// on a GPU, NVML's utilisation. A sample costs a few reads of /proc and counters, so it stays on by default. Between
// two samples a short-lived peak is missed: summary.json's peaks are exact, the curve is for its shape.
class ResourceSampler {
 public:
  struct Options {
    std::filesystem::path file;
    int rank = 0;
    Device device = Device::cpu();
    std::chrono::milliseconds period{500};
    std::function<std::optional<GpuReading>()> gpu;  // none: gpu_utilization is null
  };

  explicit ResourceSampler(Options options);
  // Writes a last sample and stops.
  ~ResourceSampler();
  ResourceSampler(const ResourceSampler&) = delete;
  ResourceSampler& operator=(const ResourceSampler&) = delete;

  // The step the rank is on, written into the following samples.
  void setStep(std::int64_t step) { step_.store(step, std::memory_order_relaxed); }

 private:
  void sample();
  // Percent of a core the communication threads (Note [Thread names]) used since the last sample, at most the
  // process's own `processUtilization` (Note [Communication within the process]).
  double communicationUtilization(double communicationCpuS, double wallS, double processUtilization) const;

  Options options_;
  std::ofstream out_;
  std::atomic<std::int64_t> step_{0};
  std::chrono::steady_clock::time_point start_;
  std::chrono::steady_clock::time_point lastWall_;
  double lastCpuS_ = 0.0;
  double lastCommunicationCpuS_ = 0.0;
  std::mutex mutex_;
  std::condition_variable stop_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace strata::cli
