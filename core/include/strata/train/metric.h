#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "strata/tensor.h"
#include "strata/train/task.h"

namespace strata {

struct MetricFigure {
  std::string name;  // "accuracy", "perplexity", "mean_iou", ...
  double value = 0;
};
using MetricFigures = std::vector<MetricFigure>;

// The value of the figure called `name`, or `otherwise`.
double figureOr(const MetricFigures& figures, std::string_view name, double otherwise);

// Note [Metrics]: what a run reports besides its loss is the task's (Note [Tasks]) and nothing in the training loop
// knows which: the trainer adds each evaluated batch's scores and targets, sums the metric's running sums over the
// ranks (so every rank's share of the test split counts once), and turns the sums into figures. A new task adds a
// Metric, not a branch in the loop.
class Metric {
 public:
  virtual ~Metric() = default;
  // Adds a batch: `scores` is the model's first output (on any device), `targets` the batch's class indices on the
  // host; only the first `rows` rows count (a padded last batch, or rows a rank's shard repeats).
  virtual void add(const Tensor& scores, const Tensor& targets, std::int64_t rows) = 0;
  // The running sums, which add across ranks; always the same length for a metric.
  virtual std::vector<double> sums() const = 0;
  virtual void reset() = 0;
  // The figures of sums added over the ranks, the headline first (what `strata compare` ranks by).
  virtual MetricFigures figures(std::span<const double> sums) const = 0;
  // Whether a higher headline is better (accuracy, mean IoU) or a lower one (perplexity).
  virtual bool higherIsBetter() const = 0;
};

// `classes`: the model's classes (or vocabulary); segmentation needs it for its per-class sums.
std::unique_ptr<Metric> makeMetric(Task task, std::int64_t classes);

}  // namespace strata
