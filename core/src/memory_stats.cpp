#include "strata/memory_stats.h"

namespace strata {

std::string_view memoryCategoryName(MemoryCategory category) {
  switch (category) {
    case MemoryCategory::Parameters:
      return "parameters";
    case MemoryCategory::Gradients:
      return "gradients";
    case MemoryCategory::OptimizerState:
      return "optimizer_state";
    case MemoryCategory::Activations:
      return "activations";
    case MemoryCategory::Communication:
      return "communication";
    case MemoryCategory::Workspace:
      return "workspace";
    case MemoryCategory::Other:
      return "other";
  }
  return "other";
}

bool MemoryStats::raisePeak(std::atomic<std::int64_t>& peak, std::int64_t value) {
  std::int64_t seen = peak.load(std::memory_order_relaxed);
  while (value > seen) {
    if (peak.compare_exchange_weak(seen, value, std::memory_order_relaxed)) {
      return true;
    }
  }
  return false;
}

void MemoryStats::recordTotalPeak(std::int64_t total) {
  const std::lock_guard lock(atTotalPeakMutex_);
  if (total < atTotalPeakTotal_) {
    return;  // a higher peak was recorded by another thread meanwhile
  }
  atTotalPeakTotal_ = total;
  for (std::size_t i = 0; i < kMemoryCategoryCount; ++i) {
    atTotalPeak_[i] = current_[i].load(std::memory_order_relaxed);
  }
}

void MemoryStats::onAllocate(MemoryCategory category, std::size_t bytes) {
  const auto i = static_cast<std::size_t>(category);
  const auto n = static_cast<std::int64_t>(bytes);
  raisePeak(peak_[i], current_[i].fetch_add(n, std::memory_order_relaxed) + n);
  const std::int64_t total = totalCurrent_.fetch_add(n, std::memory_order_relaxed) + n;
  if (raisePeak(totalPeak_, total)) {
    recordTotalPeak(total);
  }
}

void MemoryStats::onFree(MemoryCategory category, std::size_t bytes) {
  const auto n = static_cast<std::int64_t>(bytes);
  current_[static_cast<std::size_t>(category)].fetch_sub(n, std::memory_order_relaxed);
  totalCurrent_.fetch_sub(n, std::memory_order_relaxed);
}

void MemoryStats::setReserved(std::int64_t bytes) {
  reserved_.store(bytes, std::memory_order_relaxed);
}

void MemoryStats::resetPeaks() {
  for (std::size_t i = 0; i < kMemoryCategoryCount; ++i) {
    peak_[i].store(current_[i].load());
  }
  totalPeak_.store(totalCurrent_.load());
  const std::lock_guard lock(atTotalPeakMutex_);
  atTotalPeakTotal_ = totalPeak_.load();
  for (std::size_t i = 0; i < kMemoryCategoryCount; ++i) {
    atTotalPeak_[i] = current_[i].load();
  }
}

MemorySnapshot MemoryStats::snapshot() const {
  MemorySnapshot s;
  for (std::size_t i = 0; i < kMemoryCategoryCount; ++i) {
    s.current[i] = current_[i].load(std::memory_order_relaxed);
    s.peak[i] = peak_[i].load(std::memory_order_relaxed);
  }
  s.totalCurrent = totalCurrent_.load(std::memory_order_relaxed);
  s.totalPeak = totalPeak_.load(std::memory_order_relaxed);
  s.reserved = reserved_.load(std::memory_order_relaxed);
  const std::lock_guard lock(atTotalPeakMutex_);
  s.atTotalPeak = atTotalPeak_;
  return s;
}

}  // namespace strata
