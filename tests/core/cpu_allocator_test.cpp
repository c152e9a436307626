// CpuAllocator's coloured large blocks (Note [Coloured large blocks]): where they start, that they are usable whole,
// and that freeing them (through the block cache) returns every byte.
#include "cpu_allocator.h"

#include <gtest/gtest.h>

#include <cstring>
#include <set>

namespace strata {
namespace {

constexpr std::uintptr_t kLowBits = (std::uintptr_t{1} << 28) - 1;  // the bits AMD's L1 utag and index read

TEST(CpuAllocatorTest, BlocksAMultipleOf256MiBApartStartAtDifferentLinesAndPages) {
  const std::uintptr_t raw = 0x7f3a1f2fa040;  // where glibc's mmap'd blocks start: page offset 0x40
  std::set<std::uintptr_t> lowBits;
  std::set<std::uintptr_t> lines;
  for (std::uintptr_t k = 0; k < kColours; ++k) {
    const std::size_t offset = colourOffset(raw + (k << 28));
    const std::uintptr_t block = raw + (k << 28) + offset;
    EXPECT_EQ(block % 64, 0u) << "block " << k << " lost its 64-byte alignment";
    EXPECT_GE(offset, sizeof(void*)) << "no room for the raw pointer before block " << k;
    EXPECT_LE(offset, kColourPadding);
    lowBits.insert(block & kLowBits);
    lines.insert(block & 4095);
  }
  EXPECT_EQ(lowBits.size(), kColours) << "two blocks would evict each other's L1 lines";
  EXPECT_EQ(lines.size(), kColours) << "two blocks would start in the same L1 set";
}

TEST(CpuAllocatorTest, ColouredBlocksAreUsableWholeAndFreedThroughTheCache) {
  CpuAllocator allocator;
  const std::size_t small = 1000;
  const std::size_t large = kColourMinBytes + 100;
  void* a = allocator.allocate(small, MemoryCategory::Activations);
  void* b = allocator.allocate(large, MemoryCategory::Parameters);
  void* c = allocator.allocate(large, MemoryCategory::OptimizerState);
  ASSERT_NE(a, nullptr);
  ASSERT_NE(b, nullptr);
  ASSERT_NE(c, nullptr);
  for (void* p : {a, b, c}) {
    EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 64, 0u);
  }
  // Written end to end (AddressSanitizer checks the bounds in the sanitizer run).
  std::memset(a, 1, small);
  std::memset(b, 2, large);
  std::memset(c, 3, large);
  EXPECT_EQ(static_cast<unsigned char*>(b)[large - 1], 2);
  EXPECT_EQ(static_cast<unsigned char*>(c)[0], 3);

  allocator.deallocate(b, large, MemoryCategory::Parameters);
  void* again = allocator.allocate(large, MemoryCategory::Parameters);
  EXPECT_EQ(again, b) << "a freed coloured block is served again from the cache";
  for (void* p : {a, again, c}) {
    allocator.deallocate(p, p == a ? small : large,
                         p == c ? MemoryCategory::OptimizerState : MemoryCategory::Parameters);
  }
  EXPECT_GT(allocator.stats().snapshot().reserved, 0);
  allocator.emptyCache();  // frees each raw allocation; LeakSanitizer reports any it misses
  EXPECT_EQ(allocator.stats().snapshot().reserved, 0);
}

// Note [Best fit from the cache]: a request takes the smallest cached block that holds it, up to twice its size, and
// the block keeps its own size: a coloured block (Note [Coloured large blocks]) that served a smaller, uncoloured
// request is freed through its raw pointer (AddressSanitizer and LeakSanitizer check it in the sanitizer run).
TEST(CpuAllocatorTest, ACachedBlockUpToTwiceTheRequestServesItAndKeepsItsSize) {
  CpuAllocator allocator;
  const std::size_t large = kColourMinBytes + 4096;    // coloured
  const std::size_t smaller = kColourMinBytes - 4096;  // not coloured, within a factor of two
  void* block = allocator.allocate(large, MemoryCategory::Activations);
  allocator.deallocate(block, large, MemoryCategory::Activations);
  const std::int64_t reserved = allocator.stats().snapshot().reserved;

  void* reused = allocator.allocate(smaller, MemoryCategory::Gradients);
  EXPECT_EQ(reused, block) << "the cached larger block serves the smaller request";
  EXPECT_EQ(allocator.stats().snapshot().reserved, reserved) << "nothing new is reserved";
  EXPECT_EQ(allocator.stats().snapshot().totalCurrent, static_cast<std::int64_t>(smaller)) << "requested bytes count";
  std::memset(reused, 5, smaller);
  allocator.deallocate(reused, smaller, MemoryCategory::Gradients);

  void* whole = allocator.allocate(large, MemoryCategory::Activations);
  EXPECT_EQ(whole, block) << "released as the large block it is, it serves a large request again";
  void* tiny = allocator.allocate(large / 4, MemoryCategory::Activations);
  allocator.deallocate(whole, large, MemoryCategory::Activations);
  void* quarter = allocator.allocate(large / 4, MemoryCategory::Activations);
  EXPECT_NE(quarter, block) << "a block over twice the request stays for requests of its size";
  EXPECT_GT(allocator.stats().snapshot().reserved, reserved);
  allocator.deallocate(tiny, large / 4, MemoryCategory::Activations);
  allocator.deallocate(quarter, large / 4, MemoryCategory::Activations);
  allocator.emptyCache();
  EXPECT_EQ(allocator.stats().snapshot().reserved, 0);
}

}  // namespace
}  // namespace strata
