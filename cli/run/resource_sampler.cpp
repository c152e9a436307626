#include "run/resource_sampler.h"

#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>

#include <spdlog/spdlog.h>
#include <nlohmann/json.hpp>

#include "strata/allocator.h"
#include "strata/error.h"
#include "strata/memory_category.h"
#include "strata/thread_names.h"

namespace strata::cli {
namespace {

// User plus system CPU seconds of every thread of this process.
double processCpuSeconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  const auto seconds = [](const timeval& t) { return static_cast<double>(t.tv_sec) + t.tv_usec / 1e6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}

// Resident set size from /proc/self/statm (pages); 0 where it cannot be read.
std::int64_t residentBytes() {
  std::ifstream statm("/proc/self/statm");
  std::int64_t sizePages = 0;
  std::int64_t residentPages = 0;
  if (!(statm >> sizePages >> residentPages)) {
    return 0;
  }
  return residentPages * static_cast<std::int64_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

double ResourceSampler::communicationUtilization(double communicationCpuS, double wallS,
                                                 double processUtilization) const {
  // Note [Communication within the process]: the communication threads' seconds come from /proc in clock ticks
  // (10 ms) and the process's from getrusage in microseconds, read one after the other, so over a short interval
  // the threads' ticks can exceed the process's exact figure by a tick or two. Threads of the process never use
  // more than the process, so the figure is held within [0, the process's] by construction. A communication thread
  // that ended since the last sample takes its seconds with it, which is the reason for the lower bound.
  const double threads = wallS > 0 ? 100.0 * (communicationCpuS - lastCommunicationCpuS_) / wallS : 0.0;
  return std::clamp(threads, 0.0, std::max(0.0, processUtilization));
}

ResourceSampler::ResourceSampler(Options options) : options_(std::move(options)) {
  std::filesystem::create_directories(options_.file.parent_path());
  out_.open(options_.file, std::ios::app);
  if (!out_) {
    fail("{}: cannot open for writing (the resource time series of rank {})", options_.file.string(), options_.rank);
  }
  start_ = lastWall_ = std::chrono::steady_clock::now();
  lastCpuS_ = processCpuSeconds();
  lastCommunicationCpuS_ = cpuSecondsOfThreadsNamed(kCommunicationThread);
  thread_ = std::thread([this] {
    nameThisThread("strata-sampler");
    std::unique_lock lock(mutex_);
    while (!stop_.wait_for(lock, options_.period, [this] { return stopping_; })) {
      sample();
    }
  });
}

ResourceSampler::~ResourceSampler() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  stop_.notify_all();
  thread_.join();
  sample();
}

void ResourceSampler::sample() {
  try {
    const auto now = std::chrono::steady_clock::now();
    const double communicationCpuS = cpuSecondsOfThreadsNamed(kCommunicationThread);
    const double cpuS = processCpuSeconds();
    const double wallS = std::chrono::duration<double>(now - lastWall_).count();
    const double cpuUtilization = wallS > 0 ? 100.0 * (cpuS - lastCpuS_) / wallS : 0.0;
    // One moment of the accounting (Note [Consistent snapshots]): the categories add up to memory_bytes.
    const MemorySnapshot memory = allocatorFor(options_.device).stats().snapshot();
    nlohmann::json byCategory = nlohmann::json::object();
    for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
      byCategory[std::string(memoryCategoryName(static_cast<MemoryCategory>(c)))] = memory.current[c];
    }
    nlohmann::json line = {
        {"t_s", std::chrono::duration<double>(now - start_).count()},
        {"rank", options_.rank},
        {"step", step_.load(std::memory_order_relaxed)},
        {"memory_bytes", memory.totalCurrent},
        {"memory", byCategory},
        {"reserved_bytes", memory.reserved},
        {"rss_bytes", residentBytes()},
        {"cpu_utilization", cpuUtilization},
        {"communication_cpu_utilization", communicationUtilization(communicationCpuS, wallS, cpuUtilization)},
        {"gpu_utilization", nullptr}};
    if (options_.gpu) {
      if (const std::optional<GpuReading> gpu = options_.gpu()) {
        line["gpu_utilization"] = gpu->utilization;
        line["gpu_memory_used_bytes"] = gpu->memoryUsedBytes;
      }
    }
    out_ << line.dump() << '\n' << std::flush;
    lastWall_ = now;
    lastCpuS_ = cpuS;
    lastCommunicationCpuS_ = communicationCpuS;
  } catch (const std::exception& e) {  // a time series must never end a run
    spdlog::warn("rank {}: a resource sample was lost: {}", options_.rank, e.what());
  }
}

}  // namespace strata::cli
