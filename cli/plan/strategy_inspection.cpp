#include "plan/strategy_inspection.h"

#include <fstream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "common/device_selection.h"
#include "common/format.h"
#include "common/strategy_options.h"
#include "plan/memory_prediction.h"
#include "strata/error.h"
#include "strata/optim/optimizer.h"

namespace strata::cli {
namespace {

MemoryQuery queryOf(const StrategyInspection& options) {
  MemoryQuery query;
  query.strategy = options.strategy;
  query.options = parseStrategyOptions(options.strategyOptions);
  query.worldSize = options.worldSize;
  query.nnodes = options.nnodes;
  query.pluginDirs = options.pluginDirs;
  query.optimizer.kind = parseOptimizerKind(options.optimizer);
  query.optimizer.momentum = options.momentum;
  query.gradAccum = options.gradAccum;
  query.precision = options.precision;
  query.channelsLast = options.channelsLast;
  return query;
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
  command.add_option("--channels-last", options.channelsLast, "auto | on | off: the layout of the run, as train's");
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
  channelsLastOf(DeviceOptions{.channelsLast = options.channelsLast}, Device::cpu(), true);  // its spelling
  strategyRequirements(queryOf(options));
}

void printStrategyMemory(const StrategyInspection& options, Graph model, const std::vector<TensorMeta>& inputMetas) {
  if (options.strategy.empty()) {
    return;
  }
  const MemoryQuery query = queryOf(options);
  const std::map<std::string, std::string>& strategyOptions = query.options;
  const std::unique_ptr<TrainingPlan> plan = buildPredictionPlan(query, std::move(model), inputMetas);
  fmt::print(
      "{} on {} rank(s), {} with {} state tensor(s) per parameter, {} micro-batch(es): predicted per-rank "
      "memory (training peaks)\n",
      options.strategy, options.worldSize, options.optimizer, optimizerStatesPerSlice(query.optimizer),
      options.gradAccum);
  fmt::print("  {:<8} {:>11} {:>11} {:>11} {:>12} {:>12} {:>11} {:>11}\n", "shard", "parameters", "gradients",
             "optimizer", "model state", "activations", "comm", "peak");
  // Rows: the three levels over the whole job; with --nnodes > 1 also hybrid (full over the ranks of one node).
  std::vector<std::string> rows = {"full", "grad_op", "none"};
  if (options.nnodes > 1) {
    rows.push_back("hybrid");
  }
  const auto chosenShard = strategyOptions.count("shard") != 0 ? strategyOptions.at("shard") : "full";
  nlohmann::json levels;
  for (const std::string& row : rows) {
    MemoryQuery level = query;
    level.options["shard"] = row;
    const FsdpMemoryPrediction p = predictStrategyMemory(level, *plan);
    fmt::print("  {:<8} {:>11} {:>11} {:>11} {:>12} {:>12} {:>11} {:>11}{}\n", row,
               humanBytes(p.peakOf(MemoryCategory::Parameters)), humanBytes(p.peakOf(MemoryCategory::Gradients)),
               humanBytes(p.peakOf(MemoryCategory::OptimizerState)), humanBytes(p.modelState()),
               humanBytes(p.peakOf(MemoryCategory::Activations)), humanBytes(p.peakOf(MemoryCategory::Communication)),
               humanBytes(p.totalPeak), row == chosenShard ? "  <- shard=" + row : "");
    if (row == "full") {
      fmt::print("  units: {}, largest {} elements, padding {} elements\n", p.units, p.largestUnitElements,
                 p.paddingElements);
    }
    levels[row] = {{"peak_bytes", predictedCategoriesJson(p)},
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
