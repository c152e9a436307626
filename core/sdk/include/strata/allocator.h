#pragma once

#include <cstddef>

#include "strata/device.h"
#include "strata/memory_category.h"
#include "strata/memory_stats.h"

namespace strata {

// Every tensor's memory comes from an Allocator, which accounts each byte to a category.
class Allocator {
 public:
  virtual ~Allocator() = default;
  virtual void* allocate(std::size_t bytes, MemoryCategory category) = 0;
  virtual void deallocate(void* ptr, std::size_t bytes, MemoryCategory category) = 0;
  virtual Device device() const = 0;
  MemoryStats& stats() { return stats_; }
  const MemoryStats& stats() const { return stats_; }

 protected:
  MemoryStats stats_;
};

// The process-wide allocator of a device. The CPU one always exists; CUDA ones are registered by that backend.
Allocator& allocatorFor(Device device);
void registerAllocator(Device device, Allocator* allocator);

}  // namespace strata
