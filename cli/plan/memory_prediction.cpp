#include "plan/memory_prediction.h"

#include "common/device_selection.h"
#include "strata/error.h"
#include "strata/graphs/strategy_memory.h"
#include "strata/plugin_host.h"

namespace strata::cli {

bool hasMemoryPrediction(const std::string& strategy) {
  return strategy == "single" || strategy == "ddp" || strategy == "fsdp" || strategy == "ps";
}

StrategyRequirements strategyRequirements(const MemoryQuery& query) {
  const std::vector<std::filesystem::path> dirs(query.pluginDirs.begin(), query.pluginDirs.end());
  const std::unique_ptr<LoadedStrategy> strategy = PluginHost(dirs).load(query.strategy);
  return strategy->requirements(StrategyQuery{query.options, query.worldSize, query.nnodes});
}

std::unique_ptr<TrainingPlan> buildPredictionPlan(const MemoryQuery& query, Graph model,
                                                  const std::vector<TensorMeta>& inputMetas) {
  TrainingPlanOptions planOptions;
  planOptions.inputMetas = inputMetas;
  planOptions.units = strategyRequirements(query).units;
  const DeviceOptions device{.precision = query.precision, .channelsLast = query.channelsLast};
  planOptions.mixedPrecision = mixedPrecisionOf(device);
  planOptions.channelsLast = channelsLastOf(device, Device::cpu(), hasFloat32Inputs(model));
  planOptions.seededLoss = query.gradAccum > 1;
  planOptions.classAxisLast = takesTokensForScoresClassLast(model, inputMetas);
  return std::make_unique<TrainingPlan>(std::move(model), planOptions);
}

FsdpMemoryPrediction predictStrategyMemory(const MemoryQuery& query, TrainingPlan& plan) {
  const Program& program = plan.executor().program();
  const ParameterGroups& groups = plan.parameters();
  const std::size_t states = optimizerStatesPerSlice(query.optimizer);
  if (query.strategy == "single" || query.strategy == "ddp" || query.strategy == "ps") {
    // single: one process, no hooks; the same allocations as DDP on one rank.
    const ReplicatedMemoryOptions options{.ranks = query.strategy == "single" ? 1 : query.worldSize,
                                          .microBatches = query.gradAccum,
                                          .optimizerStates = states};
    return query.strategy != "ps" ? predictDdpMemory(program, groups, options)
                                  : predictPsWorkerMemory(program, groups, options);
  }
  STRATA_CHECK(query.strategy == "fsdp", "memory prediction: no prediction for strategy '{}'", query.strategy);
  FsdpMemoryOptions defaults;
  defaults.ranks = query.worldSize;
  defaults.microBatches = query.gradAccum;
  defaults.optimizerStates = states;
  FsdpMemoryOptions options = fsdpMemoryOptions(query.options, defaults);
  const auto shard = query.options.find("shard");
  if (shard != query.options.end() && shard->second == "hybrid") {
    options.level = FsdpLevel::Full;  // full over the ranks of one node (Note [Subgroups])
    options.ranks = query.worldSize / std::max(1, query.nnodes);
  }
  // The total is the run's worst case (Note [Scratch until the wait] in graphs/src/fsdp_memory.cpp).
  return predictFsdpMemory(program, groups, options);
}

nlohmann::json predictedCategoriesJson(const FsdpMemoryPrediction& prediction) {
  nlohmann::json peaks = nlohmann::json::object();
  for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
    const auto category = static_cast<MemoryCategory>(c);
    if (category != MemoryCategory::Workspace && category != MemoryCategory::Other) {
      peaks[std::string(memoryCategoryName(category))] = prediction.peak[c];
    }
  }
  return peaks;
}

}  // namespace strata::cli
