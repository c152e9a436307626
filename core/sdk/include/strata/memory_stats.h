#pragma once

#include <array>
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

// Exact counters of current and peak bytes per category and in total, and the bytes a caching allocator reserves.
// Note [Consistent snapshots]: every counter changes and is read under one mutex, so a snapshot is one moment of
// the accounting: its categories add up to its total, its peaks bound its current values, the categories at the
// total peak add up to that peak, and reserved bytes (raised before a block is counted, lowered only for cached
// blocks) are never below the total. Readers on other threads (the resource sampler, the trainer, the parameter
// servers' figures) once read lock-free atomics one by one and could mix two moments; an uncontended lock costs
// about as much as the atomics it replaced, and allocations happen per tensor, not per element.
class MemoryStats {
 public:
  void onAllocate(MemoryCategory category, std::size_t bytes);
  void onFree(MemoryCategory category, std::size_t bytes);
  void setReserved(std::int64_t bytes);
  // Starts a new peak window: every peak becomes the current value.
  void resetPeaks();
  MemorySnapshot snapshot() const;
  // The snapshot that closes a peak window and the start of the next, at one moment: an allocation on another
  // thread between the two would otherwise raise a peak that neither window reports.
  MemorySnapshot snapshotAndResetPeaks();

 private:
  mutable std::mutex mutex_;
  MemorySnapshot counters_;
};

}  // namespace strata
