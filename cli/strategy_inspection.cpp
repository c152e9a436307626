#include "strategy_inspection.h"

#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "device_selection.h"
#include "format.h"
#include "strata/error.h"
#include "strata/graphs/fsdp_memory.h"
#include "strata/graphs/training_plan.h"
#include "strata/optim/optimizer.h"
#include "strata/plugin_host.h"
#include "strategy_options.h"

namespace strata::cli {
namespace {

std::vector<std::filesystem::path> toPaths(const std::vector<std::string>& dirs) {
  return {dirs.begin(), dirs.end()};
}

// The plugin's answer to the run's options: its unit partition, after it has checked every key and value.
StrategyRequirements requirementsOf(const StrategyInspection& options) {
  const std::unique_ptr<LoadedStrategy> strategy = PluginHost(toPaths(options.pluginDirs)).load(options.strategy);
  return strategy->requirements(
      StrategyQuery{parseStrategyOptions(options.strategyOptions), options.worldSize, options.nnodes});
}

nlohmann::json categoriesJson(const FsdpMemoryPrediction& p) {
  nlohmann::json peaks;
  for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
    const auto category = static_cast<MemoryCategory>(c);
    if (category != MemoryCategory::Workspace && category != MemoryCategory::Other) {
      peaks[std::string(memoryCategoryName(category))] = p.peak[c];
    }
  }
  return peaks;
}

}  // namespace

void addStrategyInspectionOptions(CLI::App& command, StrategyInspection& options) {
  command.add_option("--strategy", options.strategy, "predict the per-rank memory of this strategy (fsdp)");
  command.add_option("--world-size", options.worldSize, "ranks of the predicted run")->check(CLI::PositiveNumber);
  command.add_option("--nnodes", options.nnodes, "nodes of the predicted run")->check(CLI::PositiveNumber);
  command.add_option("--strategy-opt", options.strategyOptions, "strategy option key=value (repeatable)");
  command.add_option("--plugin-dir", options.pluginDirs, "directory searched first for strategy plugins");
  command.add_option("--optimizer", options.optimizer, "sgd | adam | adamw (its state is part of the prediction)");
  command.add_option("--momentum", options.momentum, "SGD momentum (0: no momentum buffer)");
  command.add_option("--grad-accum", options.gradAccum, "micro-batches per optimizer step")->check(CLI::PositiveNumber);
  command.add_option("--precision", options.precision, "fp32 | bf16 | fp16 (mixed precision of the run)");
  command.add_option("--prediction-json", options.jsonPath, "also write the prediction as JSON to this file");
}

void checkStrategyInspection(const StrategyInspection& options) {
  if (options.strategy.empty()) {
    if (options.worldSize > 0 || !options.strategyOptions.empty()) {
      fail("inspect: --world-size and --strategy-opt describe a strategy's run; add --strategy fsdp");
    }
    return;
  }
  if (options.strategy != "fsdp") {
    fail("inspect --strategy {}: memory is predicted for fsdp only (its schedule is known statically)",
         options.strategy);
  }
  if (options.worldSize <= 0) {
    fail("inspect --strategy {}: add --world-size N, the ranks of the run to predict", options.strategy);
  }
  if (options.precision != "fp32" && options.precision != "bf16" && options.precision != "fp16") {
    fail("inspect: --precision {} (expected fp32, bf16 or fp16)", options.precision);
  }
  parseOptimizerKind(options.optimizer);
  requirementsOf(options);
}

void printStrategyMemory(const StrategyInspection& options, Graph model, const std::vector<TensorMeta>& inputMetas) {
  if (options.strategy.empty()) {
    return;
  }
  const std::map<std::string, std::string> strategyOptions = parseStrategyOptions(options.strategyOptions);
  TrainingPlanOptions planOptions;
  planOptions.inputMetas = inputMetas;
  planOptions.units = requirementsOf(options).units;
  planOptions.mixedPrecision = mixedPrecisionOf(DeviceOptions{.precision = options.precision});
  planOptions.seededLoss = options.gradAccum > 1;
  TrainingPlan plan(std::move(model), planOptions);
  OptimizerOptions optimizer;
  optimizer.kind = parseOptimizerKind(options.optimizer);
  optimizer.momentum = options.momentum;
  FsdpMemoryOptions defaults;
  defaults.ranks = options.worldSize;
  defaults.microBatches = options.gradAccum;
  defaults.optimizerStates = optimizerStatesPerSlice(optimizer);
  const FsdpMemoryOptions chosen = fsdpMemoryOptions(strategyOptions, defaults);

  const Program& program = plan.executor().program();
  const ParameterGroups& groups = plan.parameters();
  fmt::print(
      "{} on {} rank(s), {} with {} state tensor(s) per parameter, {} micro-batch(es): predicted per-rank "
      "memory (training peaks)\n",
      options.strategy, options.worldSize, options.optimizer, defaults.optimizerStates, options.gradAccum);
  fmt::print("  {:<8} {:>11} {:>11} {:>11} {:>12} {:>12} {:>11} {:>11}\n", "shard", "parameters", "gradients",
             "optimizer", "model state", "activations", "comm", "peak");
  // Rows: the three levels over the whole job; with --nnodes > 1 also hybrid (full over the ranks of one node).
  struct Row {
    std::string name;
    FsdpLevel level;
    int ranks;
  };
  std::vector<Row> rows = {{"full", FsdpLevel::Full, options.worldSize},
                           {"grad_op", FsdpLevel::GradOp, options.worldSize},
                           {"none", FsdpLevel::None, options.worldSize}};
  if (options.nnodes > 1) {
    rows.push_back({"hybrid", FsdpLevel::Full, options.worldSize / options.nnodes});
  }
  const auto chosenShard = strategyOptions.count("shard") != 0 ? strategyOptions.at("shard") : "full";
  nlohmann::json levels;
  for (const Row& row : rows) {
    FsdpMemoryOptions levelOptions = chosen;
    levelOptions.level = row.level;
    levelOptions.ranks = row.ranks;
    const FsdpMemoryPrediction p = predictFsdpMemory(program, groups, levelOptions);
    fmt::print("  {:<8} {:>11} {:>11} {:>11} {:>12} {:>12} {:>11} {:>11}{}\n", row.name,
               humanBytes(p.peakOf(MemoryCategory::Parameters)), humanBytes(p.peakOf(MemoryCategory::Gradients)),
               humanBytes(p.peakOf(MemoryCategory::OptimizerState)), humanBytes(p.modelState()),
               humanBytes(p.peakOf(MemoryCategory::Activations)), humanBytes(p.peakOf(MemoryCategory::Communication)),
               humanBytes(p.totalPeak), row.name == chosenShard ? "  <- shard=" + row.name : "");
    if (row.name == "full") {
      fmt::print("  units: {}, largest {} elements, padding {} elements\n", p.units, p.largestUnitElements,
                 p.paddingElements);
    }
    levels[row.name] = {{"peak_bytes", categoriesJson(p)},
                        {"model_state_bytes", p.modelState()},
                        {"total_peak_bytes", p.totalPeak},
                        {"units", p.units},
                        {"largest_unit_elements", p.largestUnitElements},
                        {"padding_elements", p.paddingElements}};
  }
  fmt::print(
      "  model state: parameters + gradients + optimizer state, each at its peak; peak: every predicted category at "
      "once. Not predicted: workspace (kernel scratch, oneDNN's reordered weights), data batches\n");
  if (!options.jsonPath.empty()) {
    std::ofstream out(options.jsonPath);
    out << nlohmann::json{{"strategy", options.strategy},
                          {"world_size", options.worldSize},
                          {"chosen", chosenShard},
                          {"levels", levels}}
               .dump(2)
        << "\n";
    if (!out) {
      fail("inspect: cannot write {}", options.jsonPath);
    }
  }
}

}  // namespace strata::cli
