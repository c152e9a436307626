// Gloo collectives on device tensors through a StagingProcessGroup (Note [host staging] in staging_process_group.h),
// without a GPU: a fake CUDA device whose memory is host memory holding every byte XOR-ed with a mask. Gloo working
// on that memory directly would see scrambled values, so correct results show that every tensor was staged through
// the backend's copies.

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <future>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "strata/allocator.h"
#include "strata/comm/gloo_process_group.h"
#include "strata/comm/in_memory_store.h"
#include "strata/comm/staging_process_group.h"
#include "strata/device_backend.h"
#include "strata/error.h"
#include "support/scrambled_device.h"

namespace strata {
namespace {

using namespace std::chrono_literals;

// Far above any real GPU index, so a real CUDA backend in the same process keeps its devices.
const Device kFakeDevice = Device::cuda(61);
constexpr unsigned char kMask = 0x5A;

bool isFake(Device d) {
  return d == kFakeDevice;
}

// Serves the fake device and hands any other CUDA device to the backend that was registered before it.
class FakeDeviceBackend final : public DeviceBackend {
 public:
  void copy(void* dst, Device dstDevice, const void* src, Device srcDevice, std::size_t bytes) override {
    if (isFake(dstDevice) && isFake(srcDevice)) {
      std::memmove(dst, src, bytes);
    } else if (isFake(dstDevice) && srcDevice.type == DeviceType::CPU) {
      testing::scrambledCopy(dst, src, bytes, kMask);
      ++toDevice;
    } else if (isFake(srcDevice) && dstDevice.type == DeviceType::CPU) {
      testing::scrambledCopy(dst, src, bytes, kMask);
      ++toHost;
    } else {
      ASSERT_NE(previous, nullptr) << "copy between " << srcDevice.toString() << " and " << dstDevice.toString();
      previous->copy(dst, dstDevice, src, srcDevice, bytes);
    }
  }

  void fillZero(void* dst, Device device, std::size_t bytes) override {
    if (isFake(device)) {
      std::memset(dst, kMask, bytes);
    } else {
      ASSERT_NE(previous, nullptr) << "fill on " << device.toString();
      previous->fillZero(dst, device, bytes);
    }
  }

  // Marks remember the thread that took them: the one that requested the collective, not Gloo's worker.
  struct Mark final : StreamMark {
    std::thread::id takenOn = std::this_thread::get_id();
  };
  std::shared_ptr<StreamMark> markComputeStream(Device device) override {
    EXPECT_TRUE(isFake(device)) << device.toString();
    return std::make_shared<Mark>();
  }
  void stagingCopy(const StreamMark* after, void* dst, Device dstDevice, const void* src, Device srcDevice,
                   std::size_t bytes) override {
    const bool requesterMark =
        after != nullptr && static_cast<const Mark*>(after)->takenOn != std::this_thread::get_id();
    if (dstDevice.type == DeviceType::CPU) {
      ++stagedToHost;
      markedByRequester += requesterMark ? 1 : 0;
    } else {
      ++stagedToDevice;
      markedBackByRequester += requesterMark ? 1 : 0;
    }
    copy(dst, dstDevice, src, srcDevice, bytes);
  }

  DeviceBackend* previous = nullptr;
  std::atomic<int> toDevice{0};
  std::atomic<int> toHost{0};
  std::atomic<int> stagedToHost{0};
  std::atomic<int> markedByRequester{0};
  std::atomic<int> stagedToDevice{0};
  std::atomic<int> markedBackByRequester{0};
};

class GlooStagingTest : public ::testing::TestWithParam<int> {
 protected:
  void SetUp() override {
    // Leaked: tensors on the fake device may be freed after the test.
    static auto* allocator = new testing::ScrambledDeviceAllocator(kFakeDevice);
    registerAllocator(kFakeDevice, allocator);
    backend_.previous = deviceBackend(DeviceType::CUDA);
    registerDeviceBackend(DeviceType::CUDA, &backend_);
  }
  void TearDown() override { registerDeviceBackend(DeviceType::CUDA, backend_.previous); }

  // Runs body(pg) on GetParam() ranks as threads over one InMemoryStore.
  void runRanks(const std::function<void(ProcessGroup&)>& body) {
    const int world = GetParam();
    auto store = std::make_shared<InMemoryStore>();
    std::vector<std::thread> threads;
    for (int r = 0; r < world; ++r) {
      threads.emplace_back([&, r] {
        try {
          GlooOptions options;
          options.groupName = "staging";
          StagingProcessGroup pg(std::make_unique<GlooProcessGroup>(store, r, world, ProcessGroupOptions{}, options));
          body(pg);
        } catch (const std::exception& e) {
          ADD_FAILURE() << "rank " << r << ": " << e.what();
        }
      });
    }
    for (std::thread& t : threads) {
      t.join();
    }
  }

  FakeDeviceBackend backend_;
};

// A tensor on the fake device with the given values.
Tensor onDevice(DType dtype, std::int64_t n, const std::function<double(std::int64_t)>& value) {
  Tensor host = Tensor::empty(dtype, {n});
  for (std::int64_t i = 0; i < n; ++i) {
    if (dtype == DType::Float32) {
      host.data<float>()[i] = static_cast<float>(value(i));
    } else {
      host.data<double>()[i] = value(i);
    }
  }
  return host.to(kFakeDevice);
}

std::vector<double> valuesOf(const Tensor& t) {
  const Tensor host = t.to(Device::cpu());
  std::vector<double> values;
  for (std::int64_t i = 0; i < host.numel(); ++i) {
    values.push_back(host.dtype() == DType::Float32 ? static_cast<double>(host.data<float>()[i])
                                                    : host.data<double>()[i]);
  }
  return values;
}

TEST_P(GlooStagingTest, AllReduceStagesDeviceTensorsThroughTheHost) {
  const int world = GetParam();
  runRanks([&](ProcessGroup& pg) {
    const int r = pg.rank();
    Tensor sum = onDevice(DType::Float32, 100, [&](std::int64_t i) { return r + 1 + static_cast<double>(i); });
    Tensor average = onDevice(DType::Float64, 100, [&](std::int64_t i) { return r + 1 + static_cast<double>(i); });
    ASSERT_EQ(sum.device(), kFakeDevice);
    pg.allReduce(sum, ReduceOp::Sum)->wait(30s);
    pg.allReduce(average, ReduceOp::Average)->wait(30s);
    const double rankSum = world * (world + 1) / 2.0;
    const std::vector<double> sums = valuesOf(sum);
    const std::vector<double> averages = valuesOf(average);
    for (std::int64_t i = 0; i < 100; ++i) {
      ASSERT_EQ(sums[static_cast<std::size_t>(i)], rankSum + world * static_cast<double>(i)) << i;
      ASSERT_DOUBLE_EQ(averages[static_cast<std::size_t>(i)], rankSum / world + static_cast<double>(i)) << i;
    }
  });
  // Per rank: the initial uploads and the two results copied back; the two stagings and the two read-backs.
  EXPECT_GE(backend_.toDevice.load(), 4 * world);
  EXPECT_GE(backend_.toHost.load(), 4 * world);
  // Each staging copy waited on a mark taken when its all-reduce was requested.
  EXPECT_EQ(backend_.stagedToHost.load(), 2 * world);
  EXPECT_EQ(backend_.markedByRequester.load(), 2 * world);
}

TEST_P(GlooStagingTest, AllReduceOnADeviceViewLeavesTheRestOfTheBufferAlone) {
  const int world = GetParam();
  runRanks([&](ProcessGroup& pg) {
    Tensor flat = onDevice(DType::Float32, 10, [&](std::int64_t i) { return 100.0 * pg.rank() + i; });
    pg.allReduce(flat.flatSlice(3, 4), ReduceOp::Sum)->wait(30s);
    const std::vector<double> values = valuesOf(flat);
    for (std::int64_t i = 0; i < 10; ++i) {
      const double expected = (i >= 3 && i < 7) ? 100.0 * world * (world - 1) / 2.0 + world * i : 100.0 * pg.rank() + i;
      EXPECT_EQ(values[static_cast<std::size_t>(i)], expected) << i;
    }
  });
}

TEST_P(GlooStagingTest, ReduceScatterAllGatherAndBroadcastOnDeviceTensors) {
  const int world = GetParam();
  runRanks([&](ProcessGroup& pg) {
    const int r = pg.rank();
    constexpr std::int64_t kPart = 3;
    Tensor input = onDevice(DType::Float64, kPart * world, [&](std::int64_t i) { return 100.0 * r + i; });
    Tensor scattered = Tensor::zeros(DType::Float64, {kPart}, MemoryCategory::Other, kFakeDevice);
    pg.reduceScatter(input, scattered, ReduceOp::Average)->wait(30s);
    const std::vector<double> part = valuesOf(scattered);
    for (std::int64_t j = 0; j < kPart; ++j) {
      const double sum = 100.0 * world * (world - 1) / 2.0 + world * static_cast<double>(r * kPart + j);
      EXPECT_DOUBLE_EQ(part[static_cast<std::size_t>(j)], sum / world) << j;
    }
    EXPECT_EQ(valuesOf(input)[1], 100.0 * r + 1);  // the input is left as it was

    // In place, as sharded strategies gather: the shard is the local part of the device buffer.
    Tensor flat = Tensor::zeros(DType::Float32, {2 * world}, MemoryCategory::Other, kFakeDevice);
    Tensor shard = flat.flatSlice(2 * r, 2);
    shard.copyFrom(onDevice(DType::Float32, 2, [&](std::int64_t i) { return r + 0.5 * static_cast<double>(i); }));
    pg.allGather(shard, flat)->wait(30s);
    const std::vector<double> gathered = valuesOf(flat);
    for (int p = 0; p < world; ++p) {
      for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(gathered[static_cast<std::size_t>(2 * p + i)], p + 0.5 * i);
      }
    }

    Tensor t = onDevice(DType::Float32, 5, [&](std::int64_t i) { return 10.0 * r + static_cast<double>(i); });
    pg.broadcast(t, world - 1)->wait(30s);
    const std::vector<double> broadcast = valuesOf(t);
    for (std::int64_t i = 0; i < 5; ++i) {
      EXPECT_EQ(broadcast[static_cast<std::size_t>(i)], 10.0 * (world - 1) + static_cast<double>(i));
    }
    pg.barrier()->wait(30s);
  });
  // Every result copied back waited for the kernels queued before its request: broadcast's receivers and the
  // gathered and scattered outputs were not copied in, so nothing else ordered the copy after those kernels.
  EXPECT_EQ(backend_.stagedToDevice.load(), 3 * world - 1);
  EXPECT_EQ(backend_.markedBackByRequester.load(), backend_.stagedToDevice.load());
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooStagingTest, ::testing::Values(1, 2, 3));

TEST(GlooStagingWithoutBackendTest, RejectsTensorsOnADeviceWithoutABackend) {
  // An allocator but no backend for the device type: nothing can copy the tensor to the host.
  static auto* allocator = new testing::ScrambledDeviceAllocator(kFakeDevice);
  registerAllocator(kFakeDevice, allocator);
  DeviceBackend* previous = deviceBackend(DeviceType::CUDA);
  if (previous != nullptr) {
    GTEST_SKIP() << "a CUDA backend is registered in this process";
  }
  auto store = std::make_shared<InMemoryStore>();
  StagingProcessGroup pg(std::make_unique<GlooProcessGroup>(store, 0, 1));
  Tensor t = Tensor::empty(DType::Float32, {4}, MemoryCategory::Other, kFakeDevice);
  try {
    pg.allReduce(t, ReduceOp::Sum);
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("staged gloo allReduce on rank 0 of 1: tensor float32[4] (cuda:61) lives on "
                                         "cuda:61: its backend is not initialised"),
              std::string::npos)
        << e.what();
  }
}

// Host tensors pass through the wrapper unstaged, in order, with the inner group's errors: a timed-out wait still
// names the rank that has not joined, and the work completes once it has.
TEST(StagingProcessGroupTest, AWaitTimeoutNamesTheLateRankThroughTheWrapper) {
  auto store = std::make_shared<InMemoryStore>();
  std::promise<void> rank0TimedOut;
  std::shared_future<void> rank0TimedOutFuture = rank0TimedOut.get_future().share();
  std::vector<std::thread> threads;
  for (int r = 0; r < 2; ++r) {
    threads.emplace_back([&, r] {
      try {
        StagingProcessGroup pg(std::make_unique<GlooProcessGroup>(store, r, 2));
        Tensor t = Tensor::zeros(DType::Float32, {4});
        t.data<float>()[0] = static_cast<float>(r + 1);
        if (r == 1) {
          EXPECT_EQ(rank0TimedOutFuture.wait_for(30s), std::future_status::ready);
          pg.allReduce(t, ReduceOp::Sum)->wait(30s);
          return;
        }
        WorkHandle work = pg.allReduce(t, ReduceOp::Sum);
        try {
          work->wait(200ms);
          ADD_FAILURE() << "the wait should time out";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("allReduce #1"), std::string::npos) << e.what();
          EXPECT_NE(std::string(e.what()).find("rank 1 of 2 did not join"), std::string::npos) << e.what();
        }
        EXPECT_FALSE(work->isCompleted());
        rank0TimedOut.set_value();
        work->wait(30s);
        EXPECT_TRUE(work->isCompleted());
        EXPECT_EQ(t.data<float>()[0], 3.0F);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
}

}  // namespace
}  // namespace strata
