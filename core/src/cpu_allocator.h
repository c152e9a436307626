#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <mutex>
#include <unordered_map>

#include "strata/allocator.h"

namespace strata {

// 64-byte aligned host memory with a cache of freed blocks, reused by best fit.
// Note [CPU block cache]: a static plan asks for the same sizes every step; reusing freed blocks avoids the page
// faults of fresh mmap'd memory for large activations. Accounting counts requested bytes, so the cache never
// changes the reported figures; reserved() includes the cached blocks.
// Note [Coloured large blocks]: AMD's cores tag their L1 data cache lines with a hash of linear address bits 12-27
// (the utag), so two lines whose addresses agree in bits 0-27 cannot both be in L1 at once. glibc serves large
// blocks from mmap at page offset 0x40, and big mappings often lie a multiple of 64 MiB apart, so a parameter
// buffer and its momentum buffer were often 256 or 512 MiB apart: the optimizer's loop then missed L1 on
// every access, 13 ns an element against 0.6 (a 2-rank DDP step of EfficientNetV2-S at 390 ms instead of 140, in
// whichever processes drew such addresses). Blocks of kColourMinBytes or more are therefore returned at an offset
// of 64 + c * (4096 + 64) bytes into a slightly larger allocation, c taken from address bits 28-30: blocks whose
// raw addresses agree in bits 0-27 get different page and line offsets. The raw pointer is kept just before the
// returned one, for free().
// Note [Best fit from the cache]: a request takes the smallest cached block that holds it, up to kMaxReuseFactor
// times its size, not only one of its exact size. A static plan's sizes peak at different moments (GPT-2 small: the
// 147 MiB embedding gradient is made while 196 MiB logit-sized blocks sit free), so exact sizes alone reserved 229
// MiB more than the training peak. A larger block serving a request keeps its size in largerBlocks_, so it is
// released and reused as what it is.
inline constexpr std::size_t kMaxReuseFactor = 2;
inline constexpr std::size_t kColourMinBytes = std::size_t{4} << 20;  // the padding stays below 1% of a block
inline constexpr std::size_t kColours = 8;
inline constexpr std::size_t kColourStep = 4096 + 64;
inline constexpr std::size_t kColourPadding = 64 + (kColours - 1) * kColourStep;

// How far into an allocation at `raw` its coloured block starts (Note [Coloured large blocks]).
std::size_t colourOffset(std::uintptr_t raw);

class CpuAllocator final : public Allocator {
 public:
  ~CpuAllocator() override;
  void* allocate(std::size_t bytes, MemoryCategory category) override;
  void deallocate(void* ptr, std::size_t bytes, MemoryCategory category) override;
  Device device() const override { return Device::cpu(); }
  void emptyCache();

 private:
  std::mutex mutex_;
  std::multimap<std::size_t, void*> freeBlocks_;         // by the block's size
  std::unordered_map<void*, std::size_t> largerBlocks_;  // live blocks larger than their request: their size
  std::int64_t reservedBytes_ = 0;
};

}  // namespace strata
