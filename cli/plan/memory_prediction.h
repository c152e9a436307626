#pragma once

// Per-rank memory predicted before a run, shared by `strata inspect --strategy fsdp` and `strata plan`: the
// training plan built with the strategy's unit partition, and the replay of the strategy's schedule over it
// (strata/graphs/fsdp_memory.h, strata/graphs/strategy_memory.h).

#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "strata/graphs/fsdp_memory.h"
#include "strata/graphs/training_plan.h"
#include "strata/optim/optimizer.h"

namespace strata::cli {

// The run whose memory is predicted.
struct MemoryQuery {
  std::string strategy;                        // single, ddp, fsdp or ps
  std::map<std::string, std::string> options;  // its --strategy-opt pairs
  int worldSize = 1;
  int nnodes = 1;
  std::vector<std::string> pluginDirs;
  OptimizerOptions optimizer;
  int gradAccum = 1;
  std::string precision = "fp32";
  std::string channelsLast = "auto";  // --channels-last of the run (off | on | auto, as strata train reads it)
};

// The strategies whose memory is predicted.
bool hasMemoryPrediction(const std::string& strategy);

// The plugin's requirements for the query (it checks every option and fails naming a bad one).
StrategyRequirements strategyRequirements(const MemoryQuery& query);

// The model made trainable as `strata train` would for this query on the CPU: its unit partition, mixed precision,
// layout (Note [CPU channels-last training]), the loss gradient seeded with gradient accumulation.
std::unique_ptr<TrainingPlan> buildPredictionPlan(const MemoryQuery& query, Graph model,
                                                  const std::vector<TensorMeta>& inputMetas);

// The per-rank training peaks of the query's strategy and options over `plan` (built for a query with the same
// strategy: the unit partition matters).
FsdpMemoryPrediction predictStrategyMemory(const MemoryQuery& query, TrainingPlan& plan);

// {"parameters": bytes, ...}: the predicted categories (workspace and other are not part of the replay).
nlohmann::json predictedCategoriesJson(const FsdpMemoryPrediction& prediction);

}  // namespace strata::cli
