#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "strata/optim/optimizer.h"
#include "strata/optim/run_optimizers.h"
#include "strata/sdk/context.h"
#include "strata/train/plan_hooks.h"
#include "strata/train/trainable_program.h"

namespace strata {

// Where a rank stands in its job, as the trainer and its strategy see it.
struct RankPlace {
  int rank = 0;
  int worldSize = 1;
  int localRank = 0;
  int nodes = 1;
};

// Builds a process group over some of the job's ranks (Note [Subgroups] in strata/sdk/context.h).
using SubgroupFactory = std::function<std::unique_ptr<ProcessGroup>(const std::vector<int>& ranks)>;

// What the Trainer hands its strategy (the SDK's StrategyContext), plus the per-rank figures the strategy reports.
class TrainerContext final : public StrategyContext {
 public:
  TrainerContext(TrainableProgram& program, const OptimizerOptions& optimizer, LossScaler* lossScaler,
                 ProcessGroup* group, Store* store, RankPlace place, std::map<std::string, std::string> options,
                 int gradAccumulation, std::chrono::milliseconds timeout);

  int rank() const override { return place_.rank; }
  int worldSize() const override { return place_.worldSize; }
  int localRank() const override { return place_.localRank; }
  int nodes() const override { return place_.nodes; }
  ParameterGroups& parameters() override { return program_.parameters(); }
  std::vector<Tensor> buffers() override;
  Hooks& hooks() override { return hooks_; }
  OptimizerFactory& optimizers() override { return optimizers_; }
  ProcessGroup* processGroup() override { return group_; }
  Store* store() override { return store_; }
  const std::map<std::string, std::string>& options() const override { return options_; }
  int gradAccumulation() const override { return gradAccumulation_; }
  std::chrono::milliseconds timeout() const override { return timeout_; }
  // A strategy may add figures from its communication threads as well as the training thread.
  void addFigure(const std::string& key, double value) override {
    const std::lock_guard lock(figuresMutex_);
    figures_[key] += value;
  }
  ProcessGroup* subgroup(const std::vector<int>& ranks) override;
  void setSubgroupFactory(SubgroupFactory factory) { makeSubgroup_ = std::move(factory); }

  std::map<std::string, double> figures() const {
    const std::lock_guard lock(figuresMutex_);
    return figures_;
  }

 private:
  TrainableProgram& program_;
  PlanHooks hooks_;
  RunOptimizers optimizers_;
  ProcessGroup* group_;
  Store* store_;
  RankPlace place_;
  std::map<std::string, std::string> options_;
  int gradAccumulation_;
  std::chrono::milliseconds timeout_;
  mutable std::mutex figuresMutex_;
  std::map<std::string, double> figures_;
  SubgroupFactory makeSubgroup_;
  std::map<std::vector<int>, std::unique_ptr<ProcessGroup>> subgroups_;
};

}  // namespace strata
