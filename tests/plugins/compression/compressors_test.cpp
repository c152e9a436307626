// The built-in gradient compressors on ranks as threads (Gloo over loopback), each against a reference written
// plainly here: what the average must be, what the residual must keep.
#include <algorithm>
#include <cmath>
#include <map>
#include <mutex>
#include <numeric>
#include <random>
#include <vector>

#include <fmt/format.h>
#include <gtest/gtest.h>

#include "../../core/comm/thread_ranks.h"
#include "compressor_spec.h"
#include "strata/allocator.h"

// Helpers in a namespace of their own: the unity build puts this file beside other tests with their own helpers.
namespace strata::compression_test {
namespace {

using namespace std::chrono_literals;
using Values = std::vector<double>;

struct Layout {
  std::vector<GradientSegment> segments;
  std::int64_t elements() const { return segments.back().offset + segments.back().numel(); }
};

// A 6 x 5 matrix, a vector of 7 and a 4 x 3 matrix.
Layout mixedLayout() {
  return {{{0, 6, 5, true}, {30, 7, 1, false}, {37, 4, 3, true}}};
}

// What every rank saw: the result of each step and, after the last, the compressor's state and traffic.
struct RankResult {
  std::vector<Values> outputs;
  std::map<std::string, Values> state;
  CompressionTraffic traffic;
};

double at(const Tensor& t, std::int64_t i) {
  switch (t.dtype()) {
    case DType::Float32:
      return t.data<float>()[i];
    case DType::Float64:
      return t.data<double>()[i];
    default:
      return static_cast<double>(t.data<std::int64_t>()[i]);
  }
}

// inputs[step][rank]: each rank's gradient at each step.
std::vector<RankResult> runCompressor(const std::string& spec, const Layout& layout,
                                      const std::vector<std::vector<Values>>& inputs, DType dtype = DType::Float32) {
  const int world = static_cast<int>(inputs.front().size());
  std::vector<RankResult> results(static_cast<std::size_t>(world));
  testing::runGlooRanks(world, [&](ProcessGroup& group) {
    const int rank = group.rank();
    std::unique_ptr<GradientCompressor> compressor = compression::makeCompressor(spec);
    GradientBucket bucket;
    bucket.index = 0;
    bucket.gradient = Tensor::zeros(dtype, {layout.elements()});
    bucket.segments = layout.segments;
    compressor->prepare({bucket});
    RankResult& mine = results[static_cast<std::size_t>(rank)];
    for (const std::vector<Values>& step : inputs) {
      const Values& input = step[static_cast<std::size_t>(rank)];
      bucket.gradient = testing::filledTensor(dtype, layout.elements(),
                                              [&](std::int64_t i) { return input[static_cast<std::size_t>(i)]; });
      const CompressionTraffic traffic = compressor->allReduce(bucket, group, 30s);
      mine.traffic.sentBytes += traffic.sentBytes;
      mine.traffic.uncompressedBytes += traffic.uncompressedBytes;
      Values out(static_cast<std::size_t>(layout.elements()));
      for (std::int64_t i = 0; i < layout.elements(); ++i) {
        out[static_cast<std::size_t>(i)] = at(bucket.gradient, i);
      }
      mine.outputs.push_back(out);
    }
    for (const auto& [name, tensor] : compressor->state()) {
      Values values(static_cast<std::size_t>(tensor.numel()));
      for (std::int64_t i = 0; i < tensor.numel(); ++i) {
        values[static_cast<std::size_t>(i)] = at(tensor, i);
      }
      mine.state[name] = values;
    }
  });
  return results;
}

// steps x ranks gradients of n elements, distinct magnitudes (no ties in top-k), seeded.
std::vector<std::vector<Values>> randomInputs(int steps, int ranks, std::int64_t n, unsigned seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<std::vector<Values>> inputs(static_cast<std::size_t>(steps));
  for (auto& step : inputs) {
    for (int r = 0; r < ranks; ++r) {
      Values v(static_cast<std::size_t>(n));
      for (double& x : v) {
        x = static_cast<double>(static_cast<float>(normal(generator)));
      }
      step.push_back(v);
    }
  }
  return inputs;
}

Values average(const std::vector<Values>& ranks) {
  Values mean(ranks.front().size(), 0.0);
  for (const Values& v : ranks) {
    for (std::size_t i = 0; i < v.size(); ++i) {
      mean[i] += v[i] / static_cast<double>(ranks.size());
    }
  }
  return mean;
}

void expectNear(const Values& actual, const Values& expected, double tolerance, const std::string& what) {
  ASSERT_EQ(actual.size(), expected.size()) << what;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    ASSERT_NEAR(actual[i], expected[i], tolerance * std::max(1.0, std::abs(expected[i]))) << what << " element " << i;
  }
}

std::string errorOf(const std::string& spec) {
  try {
    compression::makeCompressor(spec);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

TEST(CompressorSpecTest, BadSpecificationsAreRefusedNamingTheOption) {
  EXPECT_NE(errorOf("powersgd:rank=0").find("rank=0 is outside [1,"), std::string::npos) << errorOf("powersgd:rank=0");
  EXPECT_NE(errorOf("topk:ratio=0").find("ratio=0 is outside (0, 1]"), std::string::npos) << errorOf("topk:ratio=0");
  EXPECT_NE(errorOf("topk:ratio=1.5").find("ratio=1.5 is outside (0, 1]"), std::string::npos);
  EXPECT_NE(errorOf("randomk:ratio=abc").find("ratio=abc is not a number"), std::string::npos);
  EXPECT_NE(errorOf("topk:ratio").find("option 'ratio' is not KEY=VALUE"), std::string::npos);
  EXPECT_NE(errorOf("topk:bogus=1").find("unknown option bogus"), std::string::npos) << errorOf("topk:bogus=1");
  EXPECT_NE(errorOf("zip").find("unknown compressor 'zip'"), std::string::npos);
  EXPECT_NE(errorOf("fp16:ratio=0.5").find("unknown option ratio (known: none)"), std::string::npos);
  EXPECT_NE(errorOf("powersgd:rank=2,rank=3").find("given twice"), std::string::npos);
  for (const char* good : {"fp16", "bf16", "topk:ratio=0.01,momentum=0.9,clip=5,warmup_steps=4", "randomk:ratio=1",
                           "sign", "powersgd:rank=4,start_iter=10,min_rate=0,warm_start=0,error_feedback=false"}) {
    EXPECT_EQ(errorOf(good), "") << good;
  }
}

TEST(CompressorsTest, HalfPrecisionAveragesIn16Bits) {
  const Layout layout = mixedLayout();
  const auto inputs = randomInputs(1, 3, layout.elements(), 1);
  const Values expected = average(inputs[0]);
  for (const auto& [spec, tolerance] : {std::pair{"fp16", 2e-3}, std::pair{"bf16", 2e-2}}) {
    const auto results = runCompressor(spec, layout, inputs);
    for (const RankResult& r : results) {
      expectNear(r.outputs[0], expected, tolerance, spec);
      EXPECT_EQ(r.traffic.sentBytes, layout.elements() * 2) << spec;
      EXPECT_EQ(r.traffic.uncompressedBytes, layout.elements() * 4) << spec;
      EXPECT_TRUE(r.state.empty());
    }
  }
}

// Plain top-k with error feedback, one rank's view: residual += g; send the k largest |residual|; clear them.
struct TopKReference {
  Values residual;
  std::vector<std::size_t> send(const Values& g, std::size_t k) {
    if (residual.empty()) {
      residual.assign(g.size(), 0.0);
    }
    for (std::size_t i = 0; i < g.size(); ++i) {
      residual[i] = static_cast<float>(residual[i] + g[i]);
    }
    std::vector<std::size_t> order(g.size());
    std::iota(order.begin(), order.end(), 0);
    std::sort(order.begin(), order.end(),
              [&](std::size_t a, std::size_t b) { return std::abs(residual[a]) > std::abs(residual[b]); });
    order.resize(k);
    return order;
  }
};

TEST(CompressorsTest, TopKSendsTheLargestAndKeepsTheRestAsResidual) {
  const Layout layout = mixedLayout();  // 49 elements
  const auto inputs = randomInputs(3, 2, layout.elements(), 2);
  const auto results = runCompressor("topk:ratio=0.1", layout, inputs);  // k = ceil(4.9) = 5
  std::vector<TopKReference> reference(2);
  for (std::size_t step = 0; step < inputs.size(); ++step) {
    Values expected(static_cast<std::size_t>(layout.elements()), 0.0);
    for (std::size_t r = 0; r < 2; ++r) {
      for (const std::size_t i : reference[r].send(inputs[step][r], 5)) {
        expected[i] += reference[r].residual[i] / 2;
        reference[r].residual[i] = 0;
      }
    }
    for (const RankResult& r : results) {
      expectNear(r.outputs[step], expected, 1e-6, "step " + std::to_string(step));
      EXPECT_EQ(std::count_if(r.outputs[step].begin(), r.outputs[step].end(), [](double x) { return x != 0; }),
                std::count_if(expected.begin(), expected.end(), [](double x) { return x != 0; }));
    }
  }
  for (std::size_t r = 0; r < 2; ++r) {
    expectNear(results[r].state.at("residual/0"), reference[r].residual, 1e-6, "residual of rank " + std::to_string(r));
    EXPECT_EQ(results[r].state.at("steps/0"), Values{3});
    // k values and k indices per step, 4 bytes each, against 49 floats.
    EXPECT_EQ(results[r].traffic.sentBytes, 3 * 2 * 5 * 4);
    EXPECT_EQ(results[r].traffic.uncompressedBytes, 3 * 49 * 4);
  }
}

TEST(CompressorsTest, TopKAtRatioOneAndRandomKAtRatioOneArePlainAverages) {
  const Layout layout = mixedLayout();
  const auto inputs = randomInputs(2, 3, layout.elements(), 3);
  for (const char* spec : {"topk:ratio=1", "randomk:ratio=1"}) {
    for (const DType dtype : {DType::Float32, DType::Float64}) {
      const auto results = runCompressor(spec, layout, inputs, dtype);
      for (std::size_t step = 0; step < inputs.size(); ++step) {
        expectNear(results[0].outputs[step], average(inputs[step]), 1e-6, spec);
      }
      for (const double x : results[1].state.at("residual/0")) {
        ASSERT_EQ(x, 0.0) << spec << ": everything was sent";
      }
    }
  }
}

TEST(CompressorsTest, RandomKChoosesTheSameElementsOnEveryRankAndKeepsTheRest) {
  const Layout layout = mixedLayout();
  const auto inputs = randomInputs(2, 2, layout.elements(), 4);
  const auto results = runCompressor("randomk:ratio=0.25,seed=7", layout, inputs);  // k = ceil(12.25) = 13
  Values residual0(49, 0.0);
  Values residual1(49, 0.0);
  std::vector<std::vector<std::size_t>> chosenPerStep;
  for (std::size_t step = 0; step < 2; ++step) {
    std::vector<std::size_t> chosen;
    for (std::size_t i = 0; i < 49; ++i) {
      residual0[i] = static_cast<float>(residual0[i] + inputs[step][0][i]);
      residual1[i] = static_cast<float>(residual1[i] + inputs[step][1][i]);
      if (results[0].outputs[step][i] != 0) {
        chosen.push_back(i);
        EXPECT_NEAR(results[0].outputs[step][i], (residual0[i] + residual1[i]) / 2, 1e-6) << i;
        residual0[i] = residual1[i] = 0;
      }
    }
    EXPECT_EQ(chosen.size(), 13U) << "step " << step;
    EXPECT_EQ(results[0].outputs[step], results[1].outputs[step]) << "step " << step << ": the same choice everywhere";
    chosenPerStep.push_back(chosen);
  }
  EXPECT_NE(chosenPerStep[0], chosenPerStep[1]) << "each step draws anew";
  expectNear(results[0].state.at("residual/0"), residual0, 1e-6, "rank 0's residual");
  expectNear(results[1].state.at("residual/0"), residual1, 1e-6, "rank 1's residual");
  EXPECT_EQ(results[0].traffic.sentBytes, 2 * 13 * 4);
}

TEST(CompressorsTest, SignSendsOneBitAndOneScalePerParameterWithErrorFeedback) {
  const Layout layout = mixedLayout();
  const auto inputs = randomInputs(2, 2, layout.elements(), 5);
  const auto results = runCompressor("sign", layout, inputs);
  std::vector<Values> residual(2, Values(49, 0.0));
  for (std::size_t step = 0; step < 2; ++step) {
    Values expected(49, 0.0);
    for (std::size_t r = 0; r < 2; ++r) {
      for (const GradientSegment& segment : layout.segments) {
        double magnitude = 0;
        for (std::int64_t i = segment.offset; i < segment.offset + segment.numel(); ++i) {
          residual[r][i] = static_cast<float>(residual[r][i] + inputs[step][r][i]);
          magnitude += std::abs(residual[r][i]);
        }
        const double scale = static_cast<float>(magnitude / static_cast<double>(segment.numel()));
        for (std::int64_t i = segment.offset; i < segment.offset + segment.numel(); ++i) {
          const double sent = residual[r][i] < 0 ? -scale : scale;
          expected[i] += sent / 2;
          residual[r][i] -= sent;
        }
      }
    }
    for (const RankResult& r : results) {
      expectNear(r.outputs[step], expected, 1e-5, "step " + std::to_string(step));
    }
  }
  expectNear(results[0].state.at("residual/0"), residual[0], 1e-5, "rank 0's residual");
  // ceil(49 / 32) = 2 words and 3 scales per step.
  EXPECT_EQ(results[0].traffic.sentBytes, 2 * (2 + 3) * 4);
}

// Orthonormal columns by classical Gram-Schmidt in double: the test's own, to build matrices of known SVD.
std::vector<Values> orthonormalColumns(std::size_t rows, std::size_t cols, unsigned seed) {
  std::mt19937 generator(seed);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<Values> columns;
  while (columns.size() < cols) {
    Values v(rows);
    for (double& x : v) {
      x = normal(generator);
    }
    for (const Values& u : columns) {
      const double dot = std::inner_product(v.begin(), v.end(), u.begin(), 0.0);
      for (std::size_t i = 0; i < rows; ++i) {
        v[i] -= dot * u[i];
      }
    }
    const double norm = std::sqrt(std::inner_product(v.begin(), v.end(), v.begin(), 0.0));
    for (double& x : v) {
      x /= norm;
    }
    columns.push_back(v);
  }
  return columns;
}

// sum_i sigma_i u_i v_i^T, row-major rows x cols.
Values lowRankSum(const std::vector<Values>& u, const std::vector<Values>& v, const Values& sigma, std::size_t terms) {
  const std::size_t rows = u.front().size();
  const std::size_t cols = v.front().size();
  Values m(rows * cols, 0.0);
  for (std::size_t t = 0; t < terms; ++t) {
    for (std::size_t i = 0; i < rows; ++i) {
      for (std::size_t j = 0; j < cols; ++j) {
        m[i * cols + j] += sigma[t] * u[t][i] * v[t][j];
      }
    }
  }
  return m;
}

TEST(CompressorsTest, PowerSgdConvergesToTheAverageBestLowRankApproximation) {
  // M = U diag(6, 3, 1, 0.5) V^T (12 x 10), known SVD. The two ranks hold M + D and M - D: the average is M. Without
  // error feedback and with warm starts, PowerSGD is subspace iteration on the same matrix, so its result goes to
  // the best rank-r approximation of M: sigma_1 u_1 v_1^T for r = 1, the first two terms for r = 2.
  const std::vector<Values> u = orthonormalColumns(12, 4, 11);
  const std::vector<Values> v = orthonormalColumns(10, 4, 12);
  const Values sigma = {6, 3, 1, 0.5};
  const Values m = lowRankSum(u, v, sigma, 4);
  const auto noise = randomInputs(1, 1, 120, 13)[0][0];
  Values plus(120);
  Values minus(120);
  for (std::size_t i = 0; i < 120; ++i) {
    plus[i] = m[i] + 0.25 * noise[i];
    minus[i] = m[i] - 0.25 * noise[i];
  }
  const Layout layout{{{0, 12, 10, true}}};
  const std::vector<std::vector<Values>> inputs(30, std::vector<Values>{plus, minus});
  for (std::size_t r : {1U, 2U}) {
    const auto results =
        runCompressor(fmt::format("powersgd:rank={},error_feedback=0", r), layout, inputs, DType::Float64);
    expectNear(results[0].outputs.back(), lowRankSum(u, v, sigma, r), 1e-6, "rank " + std::to_string(r));
    EXPECT_EQ(results[0].outputs.back(), results[1].outputs.back());
    // Per step P (12 x r) and Q (10 x r), in doubles.
    EXPECT_EQ(results[0].traffic.sentBytes, static_cast<std::int64_t>(30 * (12 + 10) * r * 8));
  }
}

TEST(CompressorsTest, PowerSgdAtFullRankIsThePlainAverageAndSmallTensorsTravelUncompressed) {
  const Layout layout = mixedLayout();
  const auto inputs = randomInputs(3, 2, layout.elements(), 6);
  // Full rank, every matrix compressed (min_rate=0): exact up to rounding, error feedback included.
  const auto full = runCompressor("powersgd:rank=6,min_rate=0", layout, inputs);
  for (std::size_t step = 0; step < inputs.size(); ++step) {
    expectNear(full[0].outputs[step], average(inputs[step]), 1e-5, "full rank, step " + std::to_string(step));
  }
  // rank 1 at the default min_rate 2: the 6 x 5 matrix compresses ((6 + 5) * 1 * 2 < 30), the 4 x 3 does not
  // ((4 + 3) * 2 >= 12) and neither does the vector: 19 elements all-reduced plainly, exact.
  const auto low = runCompressor("powersgd:rank=1", layout, inputs);
  const Values mean = average(inputs[0]);
  for (std::size_t i = 30; i < 49; ++i) {
    EXPECT_NEAR(low[0].outputs[0][i], mean[i], 1e-6) << i;
  }
  EXPECT_EQ(low[0].traffic.sentBytes, 3 * (19 + 6 + 5) * 4);
  // Error feedback: the residual is what this rank's (gradient + residual) lost against the result.
  Values residual(49);
  Values previous(49, 0.0);
  for (std::size_t step = 0; step < 3; ++step) {
    for (std::size_t i = 0; i < 49; ++i) {
      residual[i] = inputs[step][0][i] + previous[i] - low[0].outputs[step][i];
    }
    previous = residual;
  }
  expectNear(low[0].state.at("residual/0"), residual, 1e-5, "rank 0's residual");
}

TEST(CompressorsTest, PowerSgdAtFullRankReproducesRankDeficientGradients) {
  // A linear layer's gradient has rank at most the batch and dead units give zero rows: here 8 x 200 matrices of
  // rank 2 with rows 3 and 5 zero. Full-rank PowerSGD must still give the plain average (Note [Dependent columns]).
  const Layout layout{{{0, 8, 200, true}, {1600, 8, 1, false}}};
  auto inputs = randomInputs(3, 2, layout.elements(), 8);
  for (auto& step : inputs) {
    for (Values& g : step) {
      for (std::size_t i = 0; i < 8; ++i) {
        for (std::size_t j = 0; j < 200; ++j) {
          const double a = g[j];
          const double b = g[200 + j];
          g[i * 200 + j] = i == 3 || i == 5 ? 0.0 : static_cast<float>(a * (i + 1) - b * (i % 3));
        }
      }
    }
  }
  const auto full = runCompressor("powersgd:rank=8,min_rate=0", layout, inputs);
  for (std::size_t step = 0; step < inputs.size(); ++step) {
    expectNear(full[0].outputs[step], average(inputs[step]), 1e-5, "full rank, step " + std::to_string(step));
  }
}

TEST(CompressorsTest, PowerSgdStartsWithPlainAllReduces) {
  const Layout layout = mixedLayout();
  const auto inputs = randomInputs(3, 2, layout.elements(), 7);
  const auto results = runCompressor("powersgd:rank=1,start_iter=2", layout, inputs);
  expectNear(results[0].outputs[0], average(inputs[0]), 1e-6, "step 0");
  expectNear(results[0].outputs[1], average(inputs[1]), 1e-6, "step 1");
  EXPECT_EQ(results[0].traffic.sentBytes, 2 * 49 * 4 + (19 + 6 + 5) * 4);
}

TEST(CompressorsTest, StateIsAccountedAsCompression) {
  const auto before = allocatorFor(Device::cpu()).stats().snapshot().current;
  const auto compression = static_cast<std::size_t>(MemoryCategory::Compression);
  std::unique_ptr<GradientCompressor> compressor = compression::makeCompressor("topk:ratio=0.5,momentum=0.9");
  GradientBucket bucket{3, Tensor::zeros(DType::Float32, {1000}), {{0, 1000, 1, false}}};
  compressor->prepare({bucket});
  const auto after = allocatorFor(Device::cpu()).stats().snapshot().current;
  // A residual and a velocity of 1000 floats, and the step count.
  EXPECT_EQ(after[compression] - before[compression], 2 * 4000 + 8);
  std::vector<std::string> names;
  for (const auto& [name, tensor] : compressor->state()) {
    names.push_back(name);
  }
  EXPECT_EQ(names, (std::vector<std::string>{"residual/3", "velocity/3", "steps/3"}));
}

}  // namespace
}  // namespace strata::compression_test
