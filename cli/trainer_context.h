#pragma once

#include <map>
#include <string>
#include <vector>

#include "strata/graphs/training_plan.h"
#include "strata/strategy.h"

namespace strata::cli {

// What `strata train` hands its strategy plugin (the SDK's StrategyContext), plus the per-rank figures the
// strategy reports for summary.json.
class TrainerContext final : public StrategyContext {
 public:
  TrainerContext(TrainingPlan& plan, Optimizer& optimizer, ProcessGroup* group, int rank, int worldSize,
                 std::map<std::string, std::string> options, int gradAccumulation)
      : plan_(plan),
        optimizer_(optimizer),
        group_(group),
        rank_(rank),
        worldSize_(worldSize),
        options_(std::move(options)),
        gradAccumulation_(gradAccumulation) {}

  int rank() const override { return rank_; }
  int worldSize() const override { return worldSize_; }
  ParameterStore& parameters() override { return plan_.parameters(); }
  std::vector<Tensor> buffers() override {
    std::vector<Tensor> result;
    for (const auto& [name, tensor] : plan_.buffers()) {
      result.push_back(tensor);
    }
    return result;
  }
  Executor& executor() override { return plan_.executor(); }
  Optimizer& optimizer() override { return optimizer_; }
  ProcessGroup* processGroup() override { return group_; }
  const std::map<std::string, std::string>& options() const override { return options_; }
  int gradAccumulation() const override { return gradAccumulation_; }
  void addFigure(const std::string& key, double value) override { figures_[key] += value; }
  const std::map<std::string, double>& figures() const { return figures_; }

 private:
  TrainingPlan& plan_;
  Optimizer& optimizer_;
  ProcessGroup* group_;
  int rank_;
  int worldSize_;
  std::map<std::string, std::string> options_;
  int gradAccumulation_;
  std::map<std::string, double> figures_;
};

// Gradient accumulation over K micro-batches: the plan overwrites the gradient buffers each backward, so the sum
// of earlier micro-batches is kept aside and folded into each gradient as it becomes final on the last one, before
// any strategy hook sees it (this hook is registered first). The result is the mean over the K micro-batches.
class GradientAccumulator {
 public:
  GradientAccumulator(TrainingPlan& plan, int microBatches);
  ~GradientAccumulator();
  GradientAccumulator(const GradientAccumulator&) = delete;
  GradientAccumulator& operator=(const GradientAccumulator&) = delete;

  void beginMicroBatch(int micro) { micro_ = micro; }
  // After the backward of a micro-batch that is not the last.
  void accumulate();

 private:
  void onGradientReady(int parameter);

  TrainingPlan& plan_;
  int microBatches_;
  int micro_ = 0;
  std::vector<Tensor> sums_;  // per flat group, category Gradients
  int hook_ = -1;
};

}  // namespace strata::cli
