#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

#include "strata/memory_category.h"

namespace strata {

// A snapshot of one device's accounting, in bytes requested by tensors (not rounded by any cache).
struct MemorySnapshot {
  std::array<std::int64_t, kMemoryCategoryCount> current{};
  std::array<std::int64_t, kMemoryCategoryCount> peak{};
  std::int64_t totalCurrent = 0;
  std::int64_t totalPeak = 0;
  std::int64_t reserved = 0;  // held by a caching allocator, including cached free blocks
};

// Exact, lock-free counters of current and peak bytes per category and in total.
// Note [Peak accounting]: peaks are updated with a compare-exchange loop so concurrent allocations from the
// thread pool or a communication thread never lose a maximum.
class MemoryStats {
 public:
  void onAllocate(MemoryCategory category, std::size_t bytes);
  void onFree(MemoryCategory category, std::size_t bytes);
  void setReserved(std::int64_t bytes);
  // Starts a new peak window: every peak becomes the current value.
  void resetPeaks();
  MemorySnapshot snapshot() const;

 private:
  static void raisePeak(std::atomic<std::int64_t>& peak, std::int64_t value);

  std::array<std::atomic<std::int64_t>, kMemoryCategoryCount> current_{};
  std::array<std::atomic<std::int64_t>, kMemoryCategoryCount> peak_{};
  std::atomic<std::int64_t> totalCurrent_{0};
  std::atomic<std::int64_t> totalPeak_{0};
  std::atomic<std::int64_t> reserved_{0};
};

}  // namespace strata
