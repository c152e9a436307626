#include "strata/train/metric.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "strata/error.h"

namespace strata {
namespace {

// A metric's host view of the scores: float32 or float64 as they are (other types widened to float32), read
// element by element, so a language model's [N, T, V] scores are copied once and never widened whole.
class HostScores {
 public:
  explicit HostScores(const Tensor& scores) {
    Tensor host = scores.to(Device::cpu());
    if (host.dtype() != DType::Float32 && host.dtype() != DType::Float64) {
      Tensor widened = Tensor::empty(DType::Float32, host.shape());
      widened.convertFrom(host);
      host = widened;
    }
    host_ = host;
    float64_ = host_.dtype() == DType::Float64;
  }
  double operator[](std::int64_t i) const { return float64_ ? host_.data<double>()[i] : host_.data<float>()[i]; }

 private:
  Tensor host_;
  bool float64_ = false;
};

// The position of the highest of `count` scores from `first` (the first of equal ones), and that score.
std::pair<std::int64_t, double> argmax(const HostScores& s, std::int64_t first, std::int64_t count,
                                       std::int64_t stride = 1) {
  std::int64_t best = 0;
  double top = s[first];
  for (std::int64_t c = 1; c < count; ++c) {
    const double value = s[first + c * stride];
    if (value > top) {
      best = c;
      top = value;
    }
  }
  return {best, top};
}

// Classification: the share of rows whose highest score is their class.
class AccuracyMetric final : public Metric {
 public:
  void add(const Tensor& scores, const Tensor& targets, std::int64_t rows) override {
    if (scores.rank() != 2 || !targets.defined()) {
      return;
    }
    const HostScores s(scores);
    const std::int64_t width = scores.dim(1);
    const std::int64_t n = std::min(rows, scores.dim(0));
    for (std::int64_t r = 0; r < n; ++r) {
      correct_ += argmax(s, r * width, width).first == targets.data<std::int64_t>()[r] ? 1 : 0;
    }
    counted_ += static_cast<double>(n);
  }
  std::vector<double> sums() const override { return {correct_, counted_}; }
  void reset() override { correct_ = counted_ = 0; }
  MetricFigures figures(std::span<const double> sums) const override {
    return {{"accuracy", sums[1] > 0 ? sums[0] / sums[1] : -1.0}};
  }
  bool higherIsBetter() const override { return true; }

 private:
  double correct_ = 0;
  double counted_ = 0;
};

// Language modelling: per-token cross-entropy (nats), its exponential (perplexity) and next-token accuracy over
// every counted position ([N, T, V] scores, [N, T] targets; targets of -100 are padding and do not count).
class LanguageModelMetric final : public Metric {
 public:
  void add(const Tensor& scores, const Tensor& targets, std::int64_t rows) override {
    STRATA_CHECK(scores.rank() == 3 && targets.rank() == 2,
                 "language-model metric: expected [N, T, vocabulary] scores and [N, T] targets, got {} and {}",
                 shapeToString(scores.shape()), shapeToString(targets.shape()));
    const HostScores s(scores);
    const std::int64_t positions = scores.dim(1);
    const std::int64_t vocabulary = scores.dim(2);
    const std::int64_t n = std::min(rows, scores.dim(0));
    const std::int64_t* t = targets.data<std::int64_t>();
    for (std::int64_t p = 0; p < n * positions; ++p) {
      const std::int64_t target = t[p];
      if (target == -100) {
        continue;
      }
      STRATA_CHECK(target >= 0 && target < vocabulary,
                   "language-model metric: target id {} is outside the vocabulary of {}", target, vocabulary);
      const std::int64_t first = p * vocabulary;
      const auto [best, top] = argmax(s, first, vocabulary);
      double sum = 0;
      for (std::int64_t v = 0; v < vocabulary; ++v) {
        sum += std::exp(s[first + v] - top);
      }
      nats_ += top + std::log(sum) - s[first + target];
      correct_ += best == target ? 1 : 0;
      tokens_ += 1;
    }
  }
  std::vector<double> sums() const override { return {nats_, tokens_, correct_}; }
  void reset() override { nats_ = tokens_ = correct_ = 0; }
  MetricFigures figures(std::span<const double> sums) const override {
    if (sums[1] <= 0) {
      return {{"perplexity", -1.0}, {"loss", -1.0}, {"token_accuracy", -1.0}};
    }
    const double loss = sums[0] / sums[1];
    return {{"perplexity", std::exp(loss)}, {"loss", loss}, {"token_accuracy", sums[2] / sums[1]}};
  }
  bool higherIsBetter() const override { return false; }

 private:
  double nats_ = 0;
  double tokens_ = 0;
  double correct_ = 0;
};

// Segmentation: pixel accuracy and the mean over classes of intersection over union ([N, C, H, W] scores,
// [N, H, W] targets); classes that appear in neither prediction nor target are left out of the mean.
class SegmentationMetric final : public Metric {
 public:
  explicit SegmentationMetric(std::int64_t classes)
      : classes_(classes),
        intersection_(static_cast<std::size_t>(classes)),
        union_(static_cast<std::size_t>(classes)) {}
  void add(const Tensor& scores, const Tensor& targets, std::int64_t rows) override {
    STRATA_CHECK(scores.rank() >= 3 && scores.dim(1) == classes_ && targets.rank() == scores.rank() - 1,
                 "segmentation metric: expected [N, {}, H, W] scores and [N, H, W] targets, got {} and {}", classes_,
                 shapeToString(scores.shape()), shapeToString(targets.shape()));
    const HostScores s(scores);
    const std::int64_t pixels = targets.numel() / std::max<std::int64_t>(targets.dim(0), 1);
    const std::int64_t n = std::min(rows, scores.dim(0));
    const std::int64_t* t = targets.data<std::int64_t>();
    for (std::int64_t i = 0; i < n; ++i) {
      for (std::int64_t p = 0; p < pixels; ++p) {
        const std::int64_t target = t[i * pixels + p];
        if (target < 0 || target >= classes_) {
          continue;  // ignored pixels (e.g. 255 on object boundaries)
        }
        const std::int64_t best = argmax(s, i * classes_ * pixels + p, classes_, pixels).first;
        correct_ += best == target ? 1 : 0;
        counted_ += 1;
        if (best == target) {
          intersection_[static_cast<std::size_t>(target)] += 1;
          union_[static_cast<std::size_t>(target)] += 1;
        } else {
          union_[static_cast<std::size_t>(target)] += 1;
          union_[static_cast<std::size_t>(best)] += 1;
        }
      }
    }
  }
  std::vector<double> sums() const override {
    std::vector<double> all{correct_, counted_};
    all.insert(all.end(), intersection_.begin(), intersection_.end());
    all.insert(all.end(), union_.begin(), union_.end());
    return all;
  }
  void reset() override {
    correct_ = counted_ = 0;
    std::fill(intersection_.begin(), intersection_.end(), 0.0);
    std::fill(union_.begin(), union_.end(), 0.0);
  }
  MetricFigures figures(std::span<const double> sums) const override {
    double iou = 0;
    int present = 0;
    for (std::int64_t c = 0; c < classes_; ++c) {
      const double u = sums[static_cast<std::size_t>(2 + classes_ + c)];
      if (u > 0) {
        iou += sums[static_cast<std::size_t>(2 + c)] / u;
        ++present;
      }
    }
    return {{"mean_iou", present > 0 ? iou / present : -1.0},
            {"pixel_accuracy", sums[1] > 0 ? sums[0] / sums[1] : -1.0}};
  }
  bool higherIsBetter() const override { return true; }

 private:
  std::int64_t classes_;
  double correct_ = 0;
  double counted_ = 0;
  std::vector<double> intersection_;
  std::vector<double> union_;
};

}  // namespace

double figureOr(const MetricFigures& figures, std::string_view name, double otherwise) {
  for (const MetricFigure& f : figures) {
    if (f.name == name) {
      return f.value;
    }
  }
  return otherwise;
}

std::string_view taskName(Task task) {
  switch (task) {
    case Task::Classification:
      return "classification";
    case Task::LanguageModel:
      return "language-model";
    case Task::Segmentation:
      return "segmentation";
  }
  return "classification";
}

std::unique_ptr<Metric> makeMetric(Task task, std::int64_t classes) {
  switch (task) {
    case Task::Classification:
      return std::make_unique<AccuracyMetric>();
    case Task::LanguageModel:
      return std::make_unique<LanguageModelMetric>();
    case Task::Segmentation:
      STRATA_CHECK(classes > 0, "segmentation metric: the model's class count is unknown");
      return std::make_unique<SegmentationMetric>(classes);
  }
  fail("unknown task");
}

}  // namespace strata
