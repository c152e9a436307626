// releaseCachedHostMemory: the CPU allocator's cached free blocks go back to the system, live ones stay.
#include "strata/host_memory.h"

#include <gtest/gtest.h>

#include <numeric>

#include "strata/allocator.h"
#include "strata/tensor.h"

namespace strata {
namespace {

std::int64_t reservedOnCpu() {
  return allocatorFor(Device::cpu()).stats().snapshot().reserved;
}

TEST(HostMemoryTest, ReleasesCachedBlocksAndKeepsLiveOnes) {
  constexpr std::int64_t kElements = std::int64_t{8} << 20;  // 32 MiB of float32
  Tensor live = Tensor::empty(DType::Float32, {kElements});
  std::iota(live.data<float>(), live.data<float>() + kElements, 0.0F);
  { const Tensor freed = Tensor::empty(DType::Float32, {kElements + 16}); }  // now a cached block
  const std::int64_t cached = reservedOnCpu();

  releaseCachedHostMemory();
  const std::int64_t released = reservedOnCpu();
  EXPECT_LE(released, cached - kElements * 4) << "the freed 32 MiB block is still reserved";
  EXPECT_GE(released, kElements * 4) << "the live block was released too";
  EXPECT_EQ(live.data<float>()[kElements - 1], static_cast<float>(kElements - 1));

  // A fresh allocation of the released size works and is counted again.
  const Tensor again = Tensor::empty(DType::Float32, {kElements + 16});
  EXPECT_GE(reservedOnCpu(), released + kElements * 4);
}

}  // namespace
}  // namespace strata
