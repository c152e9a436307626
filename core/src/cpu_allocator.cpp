#include "cpu_allocator.h"

#include <cstdlib>
#include <new>

#include "strata/error.h"

namespace strata {
namespace {

constexpr std::size_t kAlignment = 64;

std::size_t roundUp(std::size_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

}  // namespace

CpuAllocator::~CpuAllocator() {
  emptyCache();
}

void* CpuAllocator::allocate(std::size_t bytes, MemoryCategory category) {
  const std::size_t blockBytes = roundUp(bytes == 0 ? 1 : bytes);
  void* ptr = nullptr;
  {
    std::lock_guard lock(mutex_);
    auto it = freeBlocks_.find(blockBytes);
    if (it != freeBlocks_.end()) {
      ptr = it->second;
      freeBlocks_.erase(it);
    }
  }
  if (ptr == nullptr) {
    ptr = std::aligned_alloc(kAlignment, blockBytes);
    if (ptr == nullptr) {
      fail("out of host memory allocating {} bytes for {}", bytes, memoryCategoryName(category));
    }
    std::lock_guard lock(mutex_);
    reservedBytes_ += static_cast<std::int64_t>(blockBytes);
    stats_.setReserved(reservedBytes_);
  }
  stats_.onAllocate(category, bytes);
  return ptr;
}

void CpuAllocator::deallocate(void* ptr, std::size_t bytes, MemoryCategory category) {
  if (ptr == nullptr) {
    return;
  }
  stats_.onFree(category, bytes);
  std::lock_guard lock(mutex_);
  freeBlocks_.emplace(roundUp(bytes == 0 ? 1 : bytes), ptr);
}

void CpuAllocator::emptyCache() {
  std::lock_guard lock(mutex_);
  for (auto& [size, ptr] : freeBlocks_) {
    std::free(ptr);
    reservedBytes_ -= static_cast<std::int64_t>(size);
  }
  freeBlocks_.clear();
  stats_.setReserved(reservedBytes_);
}

}  // namespace strata
