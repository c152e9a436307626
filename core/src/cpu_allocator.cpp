#include "cpu_allocator.h"

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>

#include <sys/mman.h>

#include "strata/error.h"

namespace strata {
namespace {

constexpr std::size_t kAlignment = 64;

std::size_t roundUp(std::size_t bytes) {
  return (bytes + kAlignment - 1) / kAlignment * kAlignment;
}

bool coloured(std::size_t blockBytes) {
  return blockBytes >= kColourMinBytes;
}

// The bytes asked of the system for a block.
std::size_t rawBytes(std::size_t blockBytes) {
  return coloured(blockBytes) ? blockBytes + kColourPadding : blockBytes;
}

// Note [Huge pages for large blocks]: Debian's kernels back memory with 2 MiB pages only where asked
// (transparent_hugepage=madvise). A VGG16 float64 step faulted in 7.5 GB as 2M 4 KiB pages, 15 of its 33 s in the
// kernel; large blocks (glibc mmaps them) ask for huge pages over their 2 MiB-aligned interior, so first touches
// fault a 2 MiB page at a time and the TLB covers them. Failure (no THP in the kernel) only loses the speed-up.
void adviseHugePages(void* raw, std::size_t bytes) {
  constexpr std::uintptr_t kHugePage = std::uintptr_t{2} << 20;
  const auto begin = (reinterpret_cast<std::uintptr_t>(raw) + kHugePage - 1) & ~(kHugePage - 1);
  const auto end = (reinterpret_cast<std::uintptr_t>(raw) + bytes) & ~(kHugePage - 1);
  if (end > begin) {
    madvise(reinterpret_cast<void*>(begin), end - begin, MADV_HUGEPAGE);  // NOLINT(performance-no-int-to-ptr)
  }
}

void* allocateBlock(std::size_t blockBytes) {
  void* raw = std::aligned_alloc(kAlignment, rawBytes(blockBytes));
  if (raw == nullptr || !coloured(blockBytes)) {
    return raw;
  }
  adviseHugePages(raw, rawBytes(blockBytes));
  void* block = static_cast<char*>(raw) + colourOffset(reinterpret_cast<std::uintptr_t>(raw));
  std::memcpy(static_cast<char*>(block) - sizeof(void*), &raw, sizeof(void*));
  return block;
}

void freeBlock(void* block, std::size_t blockBytes) {
  if (!coloured(blockBytes)) {
    std::free(block);
    return;
  }
  void* raw = nullptr;
  std::memcpy(&raw, static_cast<char*>(block) - sizeof(void*), sizeof(void*));
  std::free(raw);
}

}  // namespace

std::size_t colourOffset(std::uintptr_t raw) {
  return kAlignment + ((raw >> 28) % kColours) * kColourStep;
}

CpuAllocator::~CpuAllocator() {
  emptyCache();
}

void* CpuAllocator::allocate(std::size_t bytes, MemoryCategory category) {
  const std::size_t blockBytes = roundUp(bytes == 0 ? 1 : bytes);
  void* ptr = nullptr;
  {
    std::lock_guard lock(mutex_);
    // Note [Best fit from the cache]: the smallest cached block that holds the request, up to twice its size.
    auto it = freeBlocks_.lower_bound(blockBytes);
    if (it != freeBlocks_.end() && it->first <= kMaxReuseFactor * blockBytes) {
      ptr = it->second;
      if (it->first != blockBytes) {
        largerBlocks_.emplace(ptr, it->first);
      }
      freeBlocks_.erase(it);
    }
  }
  if (ptr == nullptr) {
    ptr = allocateBlock(blockBytes);
    if (ptr == nullptr) {
      fail("out of host memory allocating {} bytes for {}", bytes, memoryCategoryName(category));
    }
    std::lock_guard lock(mutex_);
    reservedBytes_ += static_cast<std::int64_t>(rawBytes(blockBytes));
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
  std::size_t blockBytes = roundUp(bytes == 0 ? 1 : bytes);
  if (!largerBlocks_.empty()) {
    auto larger = largerBlocks_.find(ptr);
    if (larger != largerBlocks_.end()) {
      blockBytes = larger->second;  // the block's own size: its release and its next reuse depend on it
      largerBlocks_.erase(larger);
    }
  }
  freeBlocks_.emplace(blockBytes, ptr);
}

void CpuAllocator::emptyCache() {
  std::lock_guard lock(mutex_);
  for (auto& [size, ptr] : freeBlocks_) {
    freeBlock(ptr, size);
    reservedBytes_ -= static_cast<std::int64_t>(rawBytes(size));
  }
  freeBlocks_.clear();
  stats_.setReserved(reservedBytes_);
}

}  // namespace strata
