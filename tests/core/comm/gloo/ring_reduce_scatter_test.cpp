// The Gloo group's ring reduce-scatter (Note [ring reduce-scatter]) against all-reduce plus a slice, and its ring
// all-gather, for group sizes that are and are not powers of two and parts of odd lengths.

#include <string>
#include <tuple>

#include <gtest/gtest.h>

#include "core/comm/thread_ranks.h"
#include "strata/comm/gloo_process_group.h"

namespace strata {
namespace {

using namespace std::chrono_literals;
using testing::filledTensor;
using testing::runGlooRanks;
using testing::valueAt;

// Small integers and quarters: every sum is exact in float32, so the ring's order of additions and the all-reduce's
// give identical bits and the comparison can be exact.
double contribution(int rank, std::int64_t i) {
  return static_cast<double>((rank * 37 + i * 11) % 29) - 14.0 + 0.25 * rank;
}

using Case = std::tuple<int, DType, ReduceOp, std::int64_t>;  // ranks, dtype, op, part length

class GlooReduceScatterTest : public ::testing::TestWithParam<Case> {};

TEST_P(GlooReduceScatterTest, EqualsAllReduceThenTheRanksPart) {
  const auto [world, dtype, op, part] = GetParam();
  runGlooRanks(world, [&, dtype = dtype, op = op, part = part](GlooProcessGroup& pg) {
    const int r = pg.rank();
    const Tensor input = filledTensor(dtype, part * world, [&](std::int64_t i) { return contribution(r, i); });
    const Tensor reference = input.clone();
    Tensor output = Tensor::zeros(dtype, {part});
    WorkHandle scatter = pg.reduceScatter(input, output, op);
    WorkHandle reduce = pg.allReduce(reference, op);
    scatter->wait(30s);
    reduce->wait(30s);
    for (std::int64_t j = 0; j < part; ++j) {
      ASSERT_EQ(valueAt(output, j), valueAt(reference, r * part + j)) << "element " << j << " of rank " << r;
    }
    for (std::int64_t i = 0; i < part * world; ++i) {
      ASSERT_EQ(valueAt(input, i), contribution(r, i)) << "the input changed at " << i;
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Cases, GlooReduceScatterTest,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values(DType::Float32, DType::Float64),
                                            ::testing::Values(ReduceOp::Sum, ReduceOp::Average),
                                            ::testing::Values(1, 7, 1001)));

TEST(GlooReduceScatterInPlaceTest, OutputMayBeTheInputsOwnPart) {
  constexpr int kWorld = 3;
  constexpr std::int64_t kPart = 5;
  runGlooRanks(kWorld, [&](GlooProcessGroup& pg) {
    const int r = pg.rank();
    Tensor flat = filledTensor(DType::Float64, kPart * kWorld, [&](std::int64_t i) { return contribution(r, i); });
    Tensor reference = flat.clone();
    pg.reduceScatter(flat, flat.flatSlice(r * kPart, kPart), ReduceOp::Sum)->wait(30s);
    pg.allReduce(reference, ReduceOp::Sum)->wait(30s);
    for (std::int64_t j = r * kPart; j < (r + 1) * kPart; ++j) {
      EXPECT_EQ(valueAt(flat, j), valueAt(reference, j)) << j;
    }
  });
}

TEST(GlooReduceScatterInPlaceTest, AGroupOfOneCopiesTheInput) {
  runGlooRanks(1, [&](GlooProcessGroup& pg) {
    const Tensor input = filledTensor(DType::Float32, 3, [](std::int64_t i) { return 1.5 * static_cast<double>(i); });
    Tensor output = Tensor::zeros(DType::Float32, {3});
    pg.reduceScatter(input, output, ReduceOp::Average)->wait(10s);
    EXPECT_EQ(valueAt(output, 2), 3.0);
  });
}

class GlooAllGatherTest : public ::testing::TestWithParam<std::tuple<int, DType, std::int64_t>> {};

TEST_P(GlooAllGatherTest, EveryRankGetsEveryPartInRankOrder) {
  const auto [world, dtype, part] = GetParam();
  runGlooRanks(world, [&, dtype = dtype, part = part](GlooProcessGroup& pg) {
    const int r = pg.rank();
    const Tensor input = filledTensor(dtype, part, [&](std::int64_t i) { return contribution(r, i); });
    Tensor output = Tensor::zeros(dtype, {part * world});
    pg.allGather(input, output)->wait(30s);
    for (int p = 0; p < world; ++p) {
      for (std::int64_t i = 0; i < part; ++i) {
        ASSERT_EQ(valueAt(output, p * part + i), contribution(p, i)) << "part " << p << " element " << i;
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(Cases, GlooAllGatherTest,
                         ::testing::Combine(::testing::Values(2, 3, 4),
                                            ::testing::Values(DType::Float32, DType::Float64),
                                            ::testing::Values(1, 13)));

}  // namespace
}  // namespace strata
