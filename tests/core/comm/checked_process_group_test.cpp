// The argument checks every process group shares (CheckedProcessGroup), seen through Gloo's group, and Work's
// isCompleted() before and after wait().

#include "strata/comm/checked_process_group.h"

#include <future>
#include <string>

#include <gtest/gtest.h>

#include "core/comm/thread_ranks.h"
#include "strata/allocator.h"
#include "strata/error.h"
#include "support/scrambled_device.h"

namespace strata {
namespace {

using namespace std::chrono_literals;
using testing::filledTensor;
using testing::runGlooRanks;

// The message of the Error `call` throws, or a test failure when it throws none.
template <typename Call>
std::string errorOf(Call call) {
  try {
    call();
  } catch (const Error& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected an Error";
  return "";
}

#define EXPECT_MENTIONS(message, part) EXPECT_NE((message).find(part), std::string::npos) << (message)

Tensor floats(std::int64_t n) {
  return Tensor::zeros(DType::Float32, {n});
}

TEST(CheckedProcessGroupTest, ErrorsNameTheCollectiveTheRankAndTheProblem) {
  // Both ranks make the same bad calls: a rejected call queues nothing, so the ranks stay in step (barrier below).
  runGlooRanks(2, [&](GlooProcessGroup& pg) {
    const std::string where = "on rank " + std::to_string(pg.rank()) + " of 2";

    std::string e = errorOf([&] { pg.reduceScatter(floats(12), floats(5), ReduceOp::Sum); });
    EXPECT_MENTIONS(e, "gloo reduceScatter " + where);
    EXPECT_MENTIONS(e, "input float32[12] (cpu) must hold 2 equal parts the size of output float32[5] (cpu)");
    EXPECT_MENTIONS(e, "10 elements, but has 12");

    e = errorOf([&] { pg.allGather(floats(3), floats(5)); });
    EXPECT_MENTIONS(e, "gloo allGather " + where);
    EXPECT_MENTIONS(e, "output float32[5] (cpu) must hold 2 equal parts the size of input float32[3] (cpu)");

    e = errorOf([&] { pg.allReduce(Tensor::zeros(DType::Int64, {4}), ReduceOp::Sum); });
    EXPECT_MENTIONS(e, "gloo allReduce " + where);
    EXPECT_MENTIONS(
        e, "tensor int64[4] (cpu) has dtype int64; gloo collectives take float32, float64, float16 or bfloat16");

    e = errorOf([&] { pg.reduceScatter(floats(4), Tensor::zeros(DType::Float64, {2}), ReduceOp::Average); });
    EXPECT_MENTIONS(e, "input float32[4] (cpu) and output float64[2] (cpu) must have the same dtype");

    e = errorOf([&] { pg.allReduce(Tensor(), ReduceOp::Sum); });
    EXPECT_MENTIONS(e, "gloo allReduce " + where + ": tensor is undefined");

    e = errorOf([&] { pg.broadcast(floats(4), 2); });
    EXPECT_MENTIONS(e, "gloo broadcast " + where + ": root 2 is not a rank of this group of 2");

    // Overlap other than "the part is the whole's part rank()" (in place) is rejected.
    Tensor flat = floats(8);
    const std::int64_t wrongPart = pg.rank() == 0 ? 4 : 0;
    e = errorOf([&] { pg.allGather(flat.flatSlice(wrongPart, 4), flat); });
    EXPECT_MENTIONS(e, "gloo allGather " + where + ": input overlaps output");
    EXPECT_MENTIONS(e, "may only be its part " + std::to_string(pg.rank()));
    e = errorOf([&] { pg.reduceScatter(flat, flat.flatSlice(1, 4), ReduceOp::Sum); });
    EXPECT_MENTIONS(e, "gloo reduceScatter " + where + ": output overlaps input");

    pg.barrier()->wait(30s);
  });
}

TEST(CheckedProcessGroupTest, GlooRejectsDeviceTensorsAndPointsAtStaging) {
  // Host memory standing for a GPU's (the index is far above any real one): the check runs before anything reads it.
  const Device fakeDevice = Device::cuda(62);
  static auto* allocator = new testing::ScrambledDeviceAllocator(fakeDevice);  // leaked: tensors may outlive the test
  registerAllocator(fakeDevice, allocator);
  runGlooRanks(1, [&](GlooProcessGroup& pg) {
    const Tensor onDevice = Tensor::empty(DType::Float32, {4}, MemoryCategory::Other, fakeDevice);
    const std::string e = errorOf([&] { pg.allReduce(onDevice, ReduceOp::Sum); });
    EXPECT_MENTIONS(e, "gloo allReduce on rank 0 of 1: tensor float32[4] (cuda:62) lives on cuda:62");
    EXPECT_MENTIONS(e, "StagingProcessGroup");
  });
}

TEST(CheckedProcessGroupTest, RejectsAViewOfReleasedStorage) {
  runGlooRanks(1, [&](GlooProcessGroup& pg) {
    Tensor flat = floats(8);
    flat.storage()->release();
    const std::string e = errorOf([&] { pg.broadcast(flat.flatSlice(2, 2), 0); });
    EXPECT_MENTIONS(e, "gloo broadcast on rank 0 of 1: tensor float32[2] (cpu) is a view of released storage");
  });
}

TEST(CheckedProcessGroupTest, IsCompletedTurnsTrueOnlyOnceEveryRankHasJoined) {
  std::promise<void> rank0Checked;
  std::shared_future<void> rank0CheckedFuture = rank0Checked.get_future().share();
  runGlooRanks(2, [&](GlooProcessGroup& pg) {
    Tensor t = filledTensor(DType::Float32, 16, [&](std::int64_t) { return pg.rank() + 1.0; });
    if (pg.rank() == 1) {
      // Joins only after rank 0 has seen its work pending.
      ASSERT_EQ(rank0CheckedFuture.wait_for(30s), std::future_status::ready);
      pg.allReduce(t, ReduceOp::Sum)->wait(30s);
      return;
    }
    WorkHandle work = pg.allReduce(t, ReduceOp::Sum);
    std::this_thread::sleep_for(50ms);
    EXPECT_FALSE(work->isCompleted());
    rank0Checked.set_value();
    work->wait(30s);
    EXPECT_TRUE(work->isCompleted());
    EXPECT_EQ(t.data<float>()[0], 3.0F);
    work->wait(1s);  // waiting again returns at once
    EXPECT_TRUE(work->isCompleted());
  });
}

}  // namespace
}  // namespace strata
