#include "strata/memory_stats.h"

#include <algorithm>

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
    case MemoryCategory::Compression:
      return "compression";
    case MemoryCategory::Other:
      return "other";
  }
  return "other";
}

void MemoryStats::onAllocate(MemoryCategory category, std::size_t bytes) {
  const auto i = static_cast<std::size_t>(category);
  const auto n = static_cast<std::int64_t>(bytes);
  const std::lock_guard lock(mutex_);
  MemorySnapshot& c = counters_;
  c.current[i] += n;
  c.peak[i] = std::max(c.peak[i], c.current[i]);
  c.totalCurrent += n;
  if (c.totalCurrent > c.totalPeak) {
    c.totalPeak = c.totalCurrent;
    c.atTotalPeak = c.current;
  }
}

void MemoryStats::onFree(MemoryCategory category, std::size_t bytes) {
  const auto n = static_cast<std::int64_t>(bytes);
  const std::lock_guard lock(mutex_);
  counters_.current[static_cast<std::size_t>(category)] -= n;
  counters_.totalCurrent -= n;
}

void MemoryStats::setReserved(std::int64_t bytes) {
  const std::lock_guard lock(mutex_);
  counters_.reserved = bytes;
}

void MemoryStats::resetPeaks() {
  snapshotAndResetPeaks();
}

MemorySnapshot MemoryStats::snapshotAndResetPeaks() {
  const std::lock_guard lock(mutex_);
  MemorySnapshot closed = counters_;
  MemorySnapshot& c = counters_;
  c.peak = c.current;
  c.totalPeak = c.totalCurrent;
  c.atTotalPeak = c.current;
  return closed;
}

MemorySnapshot MemoryStats::snapshot() const {
  const std::lock_guard lock(mutex_);
  return counters_;
}

}  // namespace strata
