// The tasks' metrics (Note [Metrics]): each against figures worked out by hand, sums that add across ranks.
#include "strata/train/metric.h"

#include <cmath>
#include <vector>

#include <gtest/gtest.h>

namespace strata {
// A named namespace: the unity build compiles test files together, and their helpers must not meet.
namespace metric_test {

Tensor floats(const Shape& shape, const std::vector<float>& values) {
  Tensor t = Tensor::empty(DType::Float32, shape);
  std::copy(values.begin(), values.end(), t.data<float>());
  return t;
}

Tensor ints(const Shape& shape, const std::vector<std::int64_t>& values) {
  Tensor t = Tensor::empty(DType::Int64, shape);
  std::copy(values.begin(), values.end(), t.data<std::int64_t>());
  return t;
}

TEST(MetricTest, AccuracyCountsTheFirstRowsOnly) {
  const auto metric = makeMetric(Task::Classification, 3);
  // Rows' argmax: 2, 0, 1 (the first of equal scores), 1; classes 2, 1, 1, 0; the last row is padding.
  metric->add(floats({4, 3}, {0, 1, 5, 3, 2, 1, 0, 4, 4, 9, 9, 9}), ints({4}, {2, 1, 1, 0}), 3);
  const std::vector<double> sums = metric->sums();
  ASSERT_EQ(sums, (std::vector<double>{2, 3}));
  EXPECT_DOUBLE_EQ(metric->figures(sums)[0].value, 2.0 / 3.0);
  EXPECT_EQ(metric->figures(sums)[0].name, "accuracy");
  EXPECT_TRUE(metric->higherIsBetter());
  metric->reset();
  EXPECT_EQ(metric->figures(metric->sums())[0].value, -1) << "no rows: not measured";
}

TEST(MetricTest, PerplexityIsTheExponentialOfTheMeanTokenLoss) {
  const auto metric = makeMetric(Task::LanguageModel, 3);
  // One row of two positions over a vocabulary of 3; the second target is padding (-100).
  const std::vector<float> scores{1, 2, 3, 0, 0, 0};
  metric->add(floats({1, 2, 3}, scores), ints({1, 2}, {0, -100}), 1);
  // A second rank's batch: one position whose highest score is its target, 1.
  const auto other = makeMetric(Task::LanguageModel, 3);
  other->add(floats({1, 1, 3}, {0, 2, 0}), ints({1, 1}, {1}), 1);
  std::vector<double> sums = metric->sums();
  const std::vector<double> theirs = other->sums();
  for (std::size_t i = 0; i < sums.size(); ++i) {
    sums[i] += theirs[i];
  }
  const double first = std::log(std::exp(1.0) + std::exp(2.0) + std::exp(3.0)) - 1.0;  // -log softmax[0]
  const double second = std::log(2.0 + std::exp(2.0)) - 2.0;
  const MetricFigures figures = metric->figures(sums);
  ASSERT_EQ(figures.size(), 3U);
  EXPECT_EQ(figures[0].name, "perplexity");
  EXPECT_NEAR(figures[1].value, (first + second) / 2, 1e-12);
  EXPECT_NEAR(figures[0].value, std::exp((first + second) / 2), 1e-12);
  EXPECT_EQ(figures[2].name, "token_accuracy");
  EXPECT_DOUBLE_EQ(figures[2].value, 0.5) << "argmax 2 misses target 0; argmax 1 hits target 1";
  EXPECT_FALSE(metric->higherIsBetter());
}

TEST(MetricTest, MeanIouOverClassesPresent) {
  const auto metric = makeMetric(Task::Segmentation, 3);
  // One image of 4 pixels, scores [1, 3, 2, 2] by class: predictions 0, 1, 0, 1 (class 2 never predicted).
  const std::vector<float> scores{5, 0, 5, 0,   // class 0
                                  0, 5, 0, 5,   // class 1
                                  1, 1, 1, 1};  // class 2
  metric->add(floats({1, 3, 2, 2}, scores), ints({1, 2, 2}, {0, 1, 1, 255}), 1);
  const MetricFigures figures = metric->figures(metric->sums());
  // Pixel 3 is ignored (255). Class 0: I 1, U 2 (pixel 2 predicted 0, is 1); class 1: I 1, U 2; class 2 absent.
  EXPECT_EQ(figures[0].name, "mean_iou");
  EXPECT_DOUBLE_EQ(figures[0].value, 0.5);
  EXPECT_EQ(figures[1].name, "pixel_accuracy");
  EXPECT_DOUBLE_EQ(figures[1].value, 2.0 / 3.0);
}

}  // namespace metric_test
}  // namespace strata
