#include "strata/comm/gloo_process_group.h"

#include <future>
#include <memory>
#include <thread>
#include <vector>

#include <gtest/gtest.h>

#include "strata/comm/in_memory_store.h"
#include "strata/comm/rendezvous.h"
#include "strata/comm/tcp_store.h"
#include "strata/error.h"
#include "thread_ranks.h"

namespace strata {
namespace {

using namespace std::chrono_literals;

// Ranks as threads over one shared InMemoryStore (thread_ranks.h).
template <typename Body>
void runRanks(int world, Body body, ProcessGroupOptions options = {}) {
  testing::runGlooRanks(
      world, [&](GlooProcessGroup& pg) { body(pg); }, options);
}

using testing::filledTensor;

class GlooProcessGroupTest : public ::testing::TestWithParam<int> {};

TEST_P(GlooProcessGroupTest, AllReduceSumAndAverage) {
  const int world = GetParam();
  runRanks(world, [&](ProcessGroup& pg) {
    const int r = pg.rank();
    Tensor sum = filledTensor(DType::Float32, 1000, [&](std::int64_t i) { return r + 1 + static_cast<double>(i); });
    Tensor average = sum.clone();
    pg.allReduce(sum, ReduceOp::Sum)->wait(30s);
    WorkHandle work = pg.allReduce(average, ReduceOp::Average);
    work->wait(30s);
    EXPECT_TRUE(work->isCompleted());
    EXPECT_GE(work->waitedSeconds(), 0.0);
    const double rankSum = world * (world + 1) / 2.0;
    for (std::int64_t i = 0; i < 1000; ++i) {
      ASSERT_EQ(sum.data<float>()[i], static_cast<float>(rankSum + world * i)) << i;
      ASSERT_EQ(average.data<float>()[i], static_cast<float>(rankSum / world + i)) << i;
    }
  });
}

TEST_P(GlooProcessGroupTest, AllReduceFloat64) {
  const int world = GetParam();
  runRanks(world, [&](ProcessGroup& pg) {
    Tensor t = filledTensor(DType::Float64, 17, [&](std::int64_t i) { return pg.rank() + 0.25 + 1e6 * i; });
    pg.allReduce(t, ReduceOp::Sum)->wait(30s);
    for (std::int64_t i = 0; i < 17; ++i) {
      EXPECT_EQ(t.data<double>()[i], world * (world - 1) / 2.0 + 0.25 * world + 1e6 * world * i);
    }
  });
}

TEST_P(GlooProcessGroupTest, AllReduceOnAViewLeavesTheRestOfTheBufferAlone) {
  const int world = GetParam();
  runRanks(world, [&](ProcessGroup& pg) {
    Tensor flat = filledTensor(DType::Float32, 10, [&](std::int64_t i) { return 100.0 * pg.rank() + i; });
    Tensor view = flat.flatSlice(3, 4);
    pg.allReduce(view, ReduceOp::Sum)->wait(30s);
    for (std::int64_t i = 0; i < 10; ++i) {
      const double expected = (i >= 3 && i < 7) ? 100.0 * world * (world - 1) / 2.0 + world * i : 100.0 * pg.rank() + i;
      EXPECT_EQ(flat.data<float>()[i], static_cast<float>(expected)) << i;
    }
  });
}

// Note [Buffers released before completion]: once wait() returns, the group holds no reference to the collective's
// tensors, so the caller frees them where it drops them (and the memory accounting does not depend on timing).
TEST_P(GlooProcessGroupTest, ACompletedCollectiveHoldsNoReferenceToItsTensors) {
  const int world = GetParam();
  runRanks(world, [&](ProcessGroup& pg) {
    Tensor shard = filledTensor(DType::Float32, 4, [&](std::int64_t i) { return pg.rank() + i; });
    Tensor gathered = Tensor::zeros(DType::Float32, {4 * world});
    Tensor reduced = Tensor::zeros(DType::Float32, {4});
    Tensor summed = shard.clone();
    const std::vector<WorkHandle> works = {pg.allGather(shard, gathered),
                                           pg.reduceScatter(gathered, reduced, ReduceOp::Sum),
                                           pg.allReduce(summed, ReduceOp::Sum), pg.broadcast(summed, 0)};
    for (const WorkHandle& work : works) {
      work->wait(30s);
    }
    for (const Tensor* t : {&shard, &gathered, &reduced, &summed}) {
      EXPECT_EQ(t->storage().use_count(), 1) << "rank " << pg.rank();
    }
  });
}

TEST_P(GlooProcessGroupTest, ReduceScatter) {
  const int world = GetParam();
  runRanks(world, [&](ProcessGroup& pg) {
    constexpr std::int64_t kPart = 3;
    Tensor input = filledTensor(DType::Float32, kPart * world, [&](std::int64_t i) { return 100.0 * pg.rank() + i; });
    Tensor sum = Tensor::zeros(DType::Float32, {kPart});
    Tensor average = Tensor::zeros(DType::Float32, {kPart});
    WorkHandle first = pg.reduceScatter(input, sum, ReduceOp::Sum);
    WorkHandle second = pg.reduceScatter(input, average, ReduceOp::Average);
    second->wait(30s);
    first->wait(30s);
    for (std::int64_t j = 0; j < kPart; ++j) {
      const double expected = 100.0 * world * (world - 1) / 2.0 + world * static_cast<double>(pg.rank() * kPart + j);
      EXPECT_EQ(sum.data<float>()[j], static_cast<float>(expected));
      EXPECT_EQ(average.data<float>()[j], static_cast<float>(expected / world));
    }
    // The input is left as it was.
    EXPECT_EQ(input.data<float>()[1], static_cast<float>(100.0 * pg.rank() + 1));
  });
}

TEST_P(GlooProcessGroupTest, AllGatherIntoASeparateAndIntoTheSameBuffer) {
  const int world = GetParam();
  runRanks(world, [&](ProcessGroup& pg) {
    const int r = pg.rank();
    Tensor input = filledTensor(DType::Float64, 2, [&](std::int64_t i) { return r + 0.5 * i; });
    Tensor output = Tensor::zeros(DType::Float64, {2 * world});
    pg.allGather(input, output)->wait(30s);
    // In place: the shard is already the local part of the output (sharded strategies do this).
    Tensor flat = Tensor::zeros(DType::Float64, {2 * world});
    Tensor shard = flat.flatSlice(2 * r, 2);
    shard.copyFrom(input);
    pg.allGather(shard, flat)->wait(30s);
    for (int p = 0; p < world; ++p) {
      for (int i = 0; i < 2; ++i) {
        EXPECT_EQ(output.data<double>()[2 * p + i], p + 0.5 * i);
        EXPECT_EQ(flat.data<double>()[2 * p + i], p + 0.5 * i);
      }
    }
  });
}

// Note [16-bit reductions]: bf16 and fp16 travel and add in 16 bits; small integers (exact in both) sum exactly.
TEST_P(GlooProcessGroupTest, SixteenBitReduceScatterAllReduceAndAllGather) {
  const int world = GetParam();
  for (DType dtype : {DType::BFloat16, DType::Float16}) {
    const auto narrow = [&](float v) { return dtype == DType::BFloat16 ? floatToBFloat16(v) : floatToHalf(v); };
    const auto widen = [&](const Tensor& t, std::int64_t i) {
      const std::uint16_t bits = t.data<std::uint16_t>()[i];
      return dtype == DType::BFloat16 ? bfloat16ToFloat(bits) : halfToFloat(bits);
    };
    runRanks(world, [&](ProcessGroup& pg) {
      constexpr std::int64_t kPart = 5;
      const int r = pg.rank();
      Tensor input = Tensor::empty(dtype, {kPart * world});
      for (std::int64_t i = 0; i < input.numel(); ++i) {
        input.data<std::uint16_t>()[i] = narrow(static_cast<float>(10 * r + i));
      }
      Tensor average = Tensor::empty(dtype, {kPart});
      pg.reduceScatter(input, average, ReduceOp::Average)->wait(30s);
      Tensor all = input.clone();
      pg.allReduce(all, ReduceOp::Sum)->wait(30s);
      Tensor gathered = Tensor::empty(dtype, {kPart * world});
      pg.allGather(average, gathered)->wait(30s);
      const double rankSum = 10.0 * world * (world - 1) / 2.0;
      for (std::int64_t j = 0; j < kPart; ++j) {
        EXPECT_EQ(widen(average, j), static_cast<float>((rankSum + world * (r * kPart + j)) / world)) << j;
      }
      for (std::int64_t i = 0; i < all.numel(); ++i) {
        EXPECT_EQ(widen(all, i), static_cast<float>(rankSum + world * i)) << i;
        EXPECT_EQ(widen(gathered, i), static_cast<float>((rankSum + world * i) / world)) << i;
      }
    });
  }
}

TEST_P(GlooProcessGroupTest, BroadcastFromRootOneAndBarrier) {
  const int world = GetParam();
  runRanks(world, [&](ProcessGroup& pg) {
    Tensor t = filledTensor(DType::Float32, 5, [&](std::int64_t i) { return 10.0 * pg.rank() + i; });
    pg.broadcast(t, 1)->wait(30s);
    for (std::int64_t i = 0; i < 5; ++i) {
      EXPECT_EQ(t.data<float>()[i], static_cast<float>(10.0 + i));
    }
    pg.barrier()->wait(30s);
  });
}

INSTANTIATE_TEST_SUITE_P(Ranks, GlooProcessGroupTest, ::testing::Values(2, 4));

// The way the trainer runs it: every rank a TcpStore client of rank 0's server, one Gloo group bootstrapped over it.
TEST(GlooProcessGroupOverTcpStoreTest, AllReduceAndBarrier) {
  TcpStoreOptions serverOptions;
  serverOptions.port = 0;
  serverOptions.isServer = true;
  serverOptions.timeout = 10s;
  auto server = std::make_shared<TcpStore>(serverOptions);
  constexpr int kWorld = 3;
  std::vector<std::thread> threads;
  for (int r = 0; r < kWorld; ++r) {
    threads.emplace_back([&, r] {
      try {
        std::shared_ptr<Store> store = server;
        if (r != 0) {
          TcpStoreOptions options;
          options.port = server->port();
          options.rank = r;
          options.worldSize = kWorld;
          options.timeout = 10s;
          store = std::make_shared<TcpStore>(options);
        } else {
          rendezvous(*server, {0, kWorld, 10s, server->address()});
        }
        GlooProcessGroup pg(store, r, kWorld);
        Tensor t = filledTensor(DType::Float32, 64, [&](std::int64_t i) { return r + static_cast<double>(i); });
        pg.allReduce(t, ReduceOp::Sum)->wait(30s);
        pg.barrier()->wait(30s);
        EXPECT_EQ(t.data<float>()[5], static_cast<float>(3 + 3 * 5));
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  }
  for (std::thread& t : threads) {
    t.join();
  }
}

TEST(GlooProcessGroupWatchdogTest, RejectsOtherDtypesAndShapes) {
  runRanks(1, [&](ProcessGroup& pg) {
    EXPECT_THROW(pg.allReduce(Tensor::zeros(DType::Int64, {4}), ReduceOp::Sum), Error);
    EXPECT_THROW(
        pg.reduceScatter(Tensor::zeros(DType::Float32, {4}), Tensor::zeros(DType::Float32, {3}), ReduceOp::Sum), Error);
    EXPECT_THROW(pg.broadcast(Tensor::zeros(DType::Float32, {4}), 1), Error);
    Tensor t = Tensor::zeros(DType::Float32, {4});
    pg.allReduce(t, ReduceOp::Average)->wait(10s);  // a group of one is a no-op
  });
}

TEST(GlooProcessGroupWatchdogTest, ACollectiveOneRankSkipsFailsNamingTheRank) {
  ProcessGroupOptions options;
  options.timeout = 1s;
  std::promise<void> rank0Done;
  std::shared_future<void> rank0DoneFuture = rank0Done.get_future().share();
  runRanks(
      2,
      [&](ProcessGroup& pg) {
        if (pg.rank() == 1) {
          // Rank 1 skips the collective; it leaves (destroying its group) once rank 0 has seen the failure.
          EXPECT_EQ(rank0DoneFuture.wait_for(30s), std::future_status::ready);
          return;
        }
        labelStep(pg, 7);
        Tensor t = Tensor::zeros(DType::Float32, {1024 * 1024});
        const auto start = std::chrono::steady_clock::now();
        WorkHandle work = pg.allReduce(t, ReduceOp::Sum);
        try {
          work->wait(30s);
          ADD_FAILURE() << "the collective should fail";
        } catch (const Error& e) {
          const std::string message = e.what();
          EXPECT_NE(message.find("allReduce #1 (4.0 MB) at step 7"), std::string::npos) << message;
          EXPECT_NE(message.find("rank 1 of 2 did not join"), std::string::npos) << message;
        }
        EXPECT_LT(std::chrono::steady_clock::now() - start, 10s);
        EXPECT_TRUE(work->isCompleted());
        EXPECT_GT(work->waitedSeconds(), 0.5);
        // The group is unusable afterwards: later collectives fail at once with the first error.
        try {
          pg.barrier()->wait(5s);
          ADD_FAILURE() << "the barrier should fail";
        } catch (const Error& e) {
          EXPECT_NE(std::string(e.what()).find("earlier failure: allReduce #1"), std::string::npos) << e.what();
        }
        rank0Done.set_value();
      },
      options);
}

TEST(GlooProcessGroupWatchdogTest, AWaitTimeoutNamesTheLateRankAndTheWorkStaysUsable) {
  std::promise<void> rank0TimedOut;
  std::shared_future<void> rank0TimedOutFuture = rank0TimedOut.get_future().share();
  runRanks(2, [&](ProcessGroup& pg) {
    Tensor t = filledTensor(DType::Float32, 4, [&](std::int64_t) { return pg.rank() + 1.0; });
    if (pg.rank() == 1) {
      EXPECT_EQ(rank0TimedOutFuture.wait_for(30s), std::future_status::ready);
      pg.allReduce(t, ReduceOp::Sum)->wait(30s);
      return;
    }
    WorkHandle work = pg.allReduce(t, ReduceOp::Sum);
    try {
      work->wait(100ms);
      ADD_FAILURE() << "the wait should time out";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("allReduce #1"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find("rank 1 of 2 did not join"), std::string::npos) << e.what();
    }
    rank0TimedOut.set_value();
    work->wait(30s);
    EXPECT_EQ(t.data<float>()[0], 3.0f);
    EXPECT_GE(work->waitedSeconds(), 0.1);
  });
}

}  // namespace
}  // namespace strata
