// CUDA backend checks that need a GPU; they run as gpu.CudaDeviceTest.* (STRATA_TEST_DEVICE=cuda, ctest -L gpu)
// and skip with the reason elsewhere.

#include <gtest/gtest.h>

#include <bit>
#include <cstring>
#include <thread>

#include "strata/allocator.h"
#include "strata/comm/in_memory_store.h"
#include "strata/cuda/backend.h"
#include "strata/cuda/gpu_monitor.h"
#include "strata/cuda/nccl_process_group.h"
#include "strata/stream.h"
#include "strata/tensor.h"
#include "support/test_device.h"

namespace strata::cuda {
namespace {

Device gpuOrSkip() {
  const testing::TestDevice& device = testing::testDevice();
  if (!device.skipReason.empty()) {
    return Device::cpu();
  }
  return device.device;
}

#define REQUIRE_GPU(device)                                                               \
  const Device device = gpuOrSkip();                                                      \
  if (device.type != DeviceType::CUDA) {                                                  \
    GTEST_SKIP() << (testing::testDevice().skipReason.empty()                             \
                         ? std::string("run with STRATA_TEST_DEVICE=cuda (ctest -L gpu)") \
                         : testing::testDevice().skipReason);                             \
  }

TEST(CudaDeviceTest, AllocatorAccountsExactBytesAndCachesBlocks) {
  REQUIRE_GPU(device);
  Allocator& allocator = allocatorFor(device);
  defaultStream(device).synchronize();
  const MemorySnapshot before = allocator.stats().snapshot();
  {
    Tensor a = Tensor::empty(DType::Float32, {1000}, MemoryCategory::Activations, device);
    Tensor g = Tensor::empty(DType::Float32, {10}, MemoryCategory::Gradients, device);
    const MemorySnapshot during = allocator.stats().snapshot();
    const auto activations = static_cast<std::size_t>(MemoryCategory::Activations);
    EXPECT_EQ(during.current[activations] - before.current[activations], 4000);
    EXPECT_EQ(during.totalCurrent - before.totalCurrent, 4040);
    EXPECT_GE(during.reserved, during.totalCurrent);
  }
  const MemorySnapshot after = allocator.stats().snapshot();
  EXPECT_EQ(after.totalCurrent, before.totalCurrent);
  const std::int64_t reserved = after.reserved;
  Tensor again = Tensor::empty(DType::Float32, {1000}, MemoryCategory::Activations, device);
  EXPECT_EQ(allocator.stats().snapshot().reserved, reserved) << "a freed block of the same size is reused";
}

TEST(CudaDeviceTest, CopiesRoundTripThroughTheDevice) {
  REQUIRE_GPU(device);
  Tensor host = Tensor::empty(DType::Float32, {4097});
  for (std::int64_t i = 0; i < host.numel(); ++i) {
    host.data<float>()[i] = static_cast<float>(i) * 0.5F;
  }
  const Tensor onDevice = host.to(device);
  EXPECT_EQ(onDevice.device(), device);
  Tensor copy = Tensor::empty(DType::Float32, {4097}, MemoryCategory::Other, device);
  copy.copyFrom(onDevice);  // device to device
  const Tensor back = copy.to(Device::cpu());
  for (std::int64_t i = 0; i < host.numel(); ++i) {
    ASSERT_EQ(back.data<float>()[i], host.data<float>()[i]) << i;
  }
  Tensor zeros = Tensor::zeros(DType::Float64, {33}, MemoryCategory::Other, device);
  const Tensor zerosBack = zeros.to(Device::cpu());
  for (std::int64_t i = 0; i < 33; ++i) {
    ASSERT_EQ(zerosBack.data<double>()[i], 0.0);
  }
}

// Tensor::convertFrom's CUDA kernel against the host's loop, bit for bit: every pair of floating dtypes, cast and
// add, on values across 50 binades with many exact ties (rounding to nearest even) and float16 subnormals.
TEST(CudaDeviceTest, ConvertsLikeTheHostToTheBit) {
  REQUIRE_GPU(device);
  constexpr std::int64_t kCount = 100003;  // not a multiple of a block
  Tensor seed = Tensor::empty(DType::Float32, {kCount});
  std::uint32_t state = 12345;
  for (std::int64_t i = 0; i < kCount; ++i) {
    state = state * 1664525u + 1013904223u;
    const std::uint32_t exponent = 127u - 30u + (state >> 8) % 50u;
    std::uint32_t mantissa = (state * 2654435761u) & 0x7fffffu;
    if (i % 3 == 0) {
      mantissa = (mantissa & ~0xffffu) | 0x8000u;  // halfway between two bfloat16 values
    }
    const std::uint32_t sign = (state >> 31) << 31;
    seed.data<float>()[i] = std::bit_cast<float>(sign | (exponent << 23) | mantissa);
  }
  const std::vector<DType> types = {DType::Float32, DType::Float64, DType::Float16, DType::BFloat16};
  for (DType from : types) {
    Tensor source = Tensor::empty(from, {kCount});
    source.convertFrom(seed);
    for (DType into : types) {
      for (bool accumulate : {false, true}) {
        Tensor expected = Tensor::empty(into, {kCount});
        expected.convertFrom(seed);
        const Tensor onDevice = expected.to(device);
        expected.convertFrom(source, accumulate);
        Tensor actual = onDevice.clone();
        actual.convertFrom(source.to(device), accumulate);
        const Tensor back = actual.to(Device::cpu());
        ASSERT_EQ(std::memcmp(back.rawData(), expected.rawData(), expected.bytes()), 0)
            << dtypeName(from) << (accumulate ? " added into " : " into ") << dtypeName(into);
      }
    }
  }
}

TEST(CudaDeviceTest, OutOfMemoryIsAnErrorWithFigures) {
  REQUIRE_GPU(device);
  try {
    Tensor huge = Tensor::empty(DType::Float32, {std::int64_t{1} << 40}, MemoryCategory::Activations, device);
    FAIL() << "a 4 TiB allocation succeeded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("out of GPU memory"), std::string::npos) << e.what();
  }
}

TEST(CudaDeviceTest, MonitorSamplesUtilisation) {
  REQUIRE_GPU(device);
  GpuMonitor monitor(device.index, std::chrono::milliseconds(5));
  std::this_thread::sleep_for(std::chrono::milliseconds(100));
  const GpuUsageSummary usage = monitor.stop();
  ASSERT_TRUE(usage.available) << usage.unavailableReason;
  EXPECT_GT(usage.samples, 0);
  EXPECT_GT(usage.memoryTotalBytes, 0);
}

TEST(CudaDeviceTest, NcclAllReduceOnOneRank) {
  REQUIRE_GPU(device);
  InMemoryStore store;
  auto group = createNcclProcessGroup(store, 0, 1, device.index, ProcessGroupOptions{});
  Tensor host = Tensor::empty(DType::Float32, {8});
  for (int i = 0; i < 8; ++i) {
    host.data<float>()[i] = static_cast<float>(i);
  }
  Tensor t = host.to(device);
  group->allReduce(t, ReduceOp::Sum)->wait(std::chrono::seconds(60));
  const Tensor back = t.to(Device::cpu());
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(back.data<float>()[i], static_cast<float>(i));
  }
}

}  // namespace
}  // namespace strata::cuda
