#pragma once

#include <cstddef>
#include <map>
#include <mutex>

#include "strata/allocator.h"

namespace strata {

// 64-byte aligned host memory with a cache of freed blocks keyed by exact size.
// Note [CPU block cache]: a static plan asks for the same sizes every step; reusing freed blocks avoids the page
// faults of fresh mmap'd memory for large activations. Accounting counts requested bytes, so the cache never
// changes the reported figures; reserved() includes the cached blocks.
class CpuAllocator final : public Allocator {
 public:
  ~CpuAllocator() override;
  void* allocate(std::size_t bytes, MemoryCategory category) override;
  void deallocate(void* ptr, std::size_t bytes, MemoryCategory category) override;
  Device device() const override { return Device::cpu(); }
  void emptyCache();

 private:
  std::mutex mutex_;
  std::multimap<std::size_t, void*> freeBlocks_;
  std::int64_t reservedBytes_ = 0;
};

}  // namespace strata
