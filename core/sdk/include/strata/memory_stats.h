#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <mutex>

#include "strata/memory_category.h"

namespace strata {

// A snapshot of one device's accounting, in bytes requested by tensors (not rounded by any cache).
struct MemorySnapshot {
  std::array<std::int64_t, kMemoryCategoryCount> current{};
  std::array<std::int64_t, kMemoryCategoryCount> peak{};
  std::int64_t totalCurrent = 0;
  std::int64_t totalPeak = 0;
  std::int64_t reserved = 0;  // held by a caching allocator, including cached free blocks
  // Each category's bytes at the moment of the total peak: what the peak is made of.
  std::array<std::int64_t, kMemoryCategoryCount> atTotalPeak{};
};

// Exact, lock-free counters of current and peak bytes per category and in total.
// Note [Peak accounting]: peaks are updated with a compare-exchange loop so concurrent allocations from the
// thread pool or a communication thread never lose a maximum. The categories at the total peak are copied under a
// mutex only when the total peak rises, which after the first steps of a run is rare; under concurrent allocations
// they may be off by the allocations in flight.
class MemoryStats {
 public:
  void onAllocate(MemoryCategory category, std::size_t bytes);
  void onFree(MemoryCategory category, std::size_t bytes);
  void setReserved(std::int64_t bytes);
  // Starts a new peak window: every peak becomes the current value.
  void resetPeaks();
  MemorySnapshot snapshot() const;

 private:
  static bool raisePeak(std::atomic<std::int64_t>& peak, std::int64_t value);
  void recordTotalPeak(std::int64_t total);

  std::array<std::atomic<std::int64_t>, kMemoryCategoryCount> current_{};
  std::array<std::atomic<std::int64_t>, kMemoryCategoryCount> peak_{};
  std::atomic<std::int64_t> totalCurrent_{0};
  std::atomic<std::int64_t> totalPeak_{0};
  std::atomic<std::int64_t> reserved_{0};
  mutable std::mutex atTotalPeakMutex_;
  std::array<std::int64_t, kMemoryCategoryCount> atTotalPeak_{};
  std::int64_t atTotalPeakTotal_ = 0;
};

}  // namespace strata
