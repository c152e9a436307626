// `strata plan`: before a run, each strategy's predicted per-rank memory (replayed from the static plan) and step
// time (calibrated on this machine), and which fit in --device-memory. docs/plan.md describes the model and its
// measured errors; `strata compare` reads the --json output.
#include <algorithm>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "commands/commands.h"
#include "common/device_selection.h"
#include "common/format.h"
#include "common/model_options.h"
#include "common/strategy_options.h"
#include "launch/launcher.h"
#include "plan/memory_prediction.h"
#include "plan/plan_calibration.h"
#include "plan/plan_step_time.h"
#include "strata/error.h"
#include "strata/graphs/specialize.h"
#include "strata/loaders/onnx_importer.h"

namespace strata::cli {
namespace {

struct PlanOptions {
  std::string modelPath;
  int worldSize = 0;
  int nnodes = 1;
  std::int64_t batchSize = 64;
  int threads = 0;  // 0: the launcher's share, cores / ranks per node
  std::string deviceMemory;
  std::string optimizer = "sgd";
  double momentum = 0.9;
  int gradAccum = 1;
  std::string channelsLast = "auto";
  int servers = 1;
  std::string strategy;  // empty: every strategy and level
  std::vector<std::string> strategyOptions;
  std::vector<std::string> pluginDirs;
  bool noCalibrate = false;
  int calibrationSteps = 5;
  int calibrationLoad =
      0;  // internal: run this many untimed steps and exit (Note [Calibrating beside the other ranks])
  std::string jsonPath;
};

// One predicted configuration: a strategy and its options, in the order given.
struct Configuration {
  std::string strategy;
  std::vector<std::pair<std::string, std::string>> options;

  std::string label() const {
    std::string text = strategy;
    for (const auto& [key, value] : options) {
      text += fmt::format(" {}={}", key, value);
    }
    return text;
  }
};

std::vector<std::pair<std::string, std::string>> orderedOptions(const std::vector<std::string>& pairs) {
  parseStrategyOptions(pairs);  // fails naming a pair that is not key=value
  std::vector<std::pair<std::string, std::string>> options;
  for (const std::string& pair : pairs) {
    const std::size_t eq = pair.find('=');
    options.emplace_back(pair.substr(0, eq), pair.substr(eq + 1));
  }
  return options;
}

std::vector<Configuration> configurations(const PlanOptions& options) {
  if (!options.strategy.empty()) {
    return {Configuration{options.strategy, orderedOptions(options.strategyOptions)}};
  }
  std::vector<std::pair<std::string, std::string>> servers;
  if (options.servers != 1) {
    servers.emplace_back("servers", std::to_string(options.servers));
  }
  std::vector<Configuration> all = {
      {"ddp", {}}, {"fsdp", {{"shard", "full"}}}, {"fsdp", {{"shard", "grad_op"}}}, {"fsdp", {{"shard", "none"}}}};
  if (options.nnodes > 1) {
    all.push_back({"fsdp", {{"shard", "hybrid"}}});
  }
  for (const char* mode : {"sync", "async"}) {
    Configuration ps{"ps", {{"mode", mode}}};
    ps.options.insert(ps.options.end(), servers.begin(), servers.end());
    all.push_back(ps);
  }
  return all;
}

MemoryQuery queryOf(const PlanOptions& options, const Configuration& configuration) {
  MemoryQuery query;
  query.strategy = configuration.strategy;
  query.options = std::map<std::string, std::string>(configuration.options.begin(), configuration.options.end());
  query.worldSize = options.worldSize;
  query.nnodes = options.nnodes;
  query.pluginDirs = options.pluginDirs;
  query.optimizer.kind = parseOptimizerKind(options.optimizer);
  query.optimizer.momentum = options.momentum;
  query.gradAccum = options.gradAccum;
  query.channelsLast = options.channelsLast;
  return query;
}

// Flags checked before the model is loaded; every configuration's options are checked by its plugin.
void checkPlanOptions(const PlanOptions& options) {
  if (options.worldSize < 1) {
    fail("plan --world-size {}: expected the number of ranks of the run, at least 1", options.worldSize);
  }
  if (options.nnodes < 1 || options.worldSize % options.nnodes != 0) {
    fail("plan --nnodes {}: expected a positive number of nodes that divides --world-size {}", options.nnodes,
         options.worldSize);
  }
  if (options.batchSize < 1 || options.gradAccum < 1 || options.threads < 0 || options.servers < 1 ||
      options.calibrationSteps < 1) {
    fail("plan: --batch-size, --grad-accum, --servers and --calibration-steps must be positive, --threads >= 0");
  }
  if (!options.deviceMemory.empty()) {
    parseByteSize(options.deviceMemory, "plan --device-memory");
  }
  parseOptimizerKind(options.optimizer);
  channelsLastOf(DeviceOptions{.channelsLast = options.channelsLast}, Device::cpu(), true);  // its spelling
  if (options.strategy.empty() && !options.strategyOptions.empty()) {
    fail(
        "plan: --strategy-opt describes one configuration; add --strategy NAME (without it every strategy is "
        "predicted with its defaults)");
  }
  if (!options.strategy.empty() && !hasMemoryPrediction(options.strategy)) {
    fail("plan --strategy {}: no prediction for this strategy (known: single, ddp, fsdp, ps)", options.strategy);
  }
  for (const Configuration& configuration : configurations(options)) {
    strategyRequirements(queryOf(options, configuration));
  }
}

// Note [Data batches in the plan]: the DataLoader keeps `prefetch` (2) batches ready while the trainer holds the
// current one, all in the allocator's `other` category; the plan counts three batches (measured: three, and a few
// bytes of the trainer's scalars).
constexpr int kBatchesAlive = 3;

std::int64_t dataBatchBytes(const std::vector<TensorMeta>& inputMetas, const TensorMeta& labelMeta) {
  std::int64_t bytes = static_cast<std::int64_t>(labelMeta.bytes());
  for (const TensorMeta& meta : inputMetas) {
    bytes += static_cast<std::int64_t>(meta.bytes());
  }
  return kBatchesAlive * bytes;
}

struct Predicted {
  Configuration configuration;
  std::array<std::int64_t, kMemoryCategoryCount> breakdown{};
  std::array<std::int64_t, kMemoryCategoryCount> atPeak{};  // what the predicted peak is made of
  std::int64_t peakBytes = 0;
  std::optional<StepTimePrediction> step;
};

void writeJson(const PlanOptions& options, const std::string& modelPath, int threads, double share,
               std::optional<std::int64_t> deviceMemory, const ComputeCalibration& compute,
               const std::optional<CollectiveCalibration>& collectives, const std::vector<Predicted>& rows) {
  using Json = nlohmann::ordered_json;
  Json calibration = Json::object();
  calibration["calibrated"] = collectives.has_value();
  calibration["compute_step_s"] = collectives ? Json(compute.forwardBackwardS * options.gradAccum) : Json(nullptr);
  calibration["forward_backward_s"] = collectives ? Json(compute.forwardBackwardS) : Json(nullptr);
  calibration["optimizer_step_s"] = collectives ? Json(compute.optimizerS) : Json(nullptr);
  calibration["compute_steps"] = compute.steps;
  calibration["workspace_bytes"] = compute.workspaceBytes;
  const auto fitJson = [&](const CollectiveFit* fit, const char* name) {
    calibration[fmt::format("{}_latency_s", name)] = fit != nullptr ? Json(fit->latencyS) : Json(nullptr);
    calibration[fmt::format("{}_bandwidth_bytes_per_s", name)] = fit != nullptr ? Json(fit->bytesPerS) : Json(nullptr);
  };
  fitJson(collectives ? &collectives->allReduce : nullptr, "allreduce");
  fitJson(collectives ? &collectives->allGather : nullptr, "allgather");
  fitJson(collectives ? &collectives->reduceScatter : nullptr, "reduce_scatter");
  calibration["collective_sizes_bytes"] =
      collectives ? Json::array({collectives->smallBytes, collectives->largeBytes}) : Json(nullptr);
  calibration["collective_medians_s"] = collectives ? Json(collectives->measuredS) : Json(nullptr);
  calibration["collective_ranks"] = collectives ? Json(collectives->ranks) : Json(nullptr);
  calibration["transport"] = collectives ? Json("gloo tcp loopback") : Json(nullptr);
  calibration["latency_share"] = share;
  Json configurations = Json::array();
  for (const Predicted& row : rows) {
    Json opts = Json::object();
    for (const auto& [key, value] : row.configuration.options) {
      opts[key] = value;
    }
    Json breakdown = Json::object();
    Json atPeak = Json::object();
    for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
      const std::string name(memoryCategoryName(static_cast<MemoryCategory>(c)));
      breakdown[name] = row.breakdown[c];
      atPeak[name] = row.atPeak[c];
    }
    Json entry = Json::object();
    entry["strategy"] = row.configuration.strategy;
    entry["options"] = opts;
    entry["label"] = row.configuration.label();
    entry["peak_memory_bytes"] = row.peakBytes;
    entry["memory_breakdown"] = breakdown;
    entry["memory_at_peak"] = atPeak;
    entry["step_time_s"] = row.step ? Json(row.step->totalS()) : Json(nullptr);
    entry["compute_time_s"] = row.step ? Json(row.step->computeS) : Json(nullptr);
    entry["communication_time_s"] = row.step ? Json(row.step->communicationS) : Json(nullptr);
    entry["fits"] = deviceMemory ? Json(row.peakBytes <= *deviceMemory) : Json(nullptr);
    configurations.push_back(entry);
  }
  Json out = Json::object();
  out["model"] = modelPath;
  out["world_size"] = options.worldSize;
  out["nnodes"] = options.nnodes;
  out["batch_size"] = options.batchSize;
  out["threads"] = threads;
  out["grad_accum"] = options.gradAccum;
  out["optimizer"] = options.optimizer;
  out["device_memory_bytes"] = deviceMemory ? Json(*deviceMemory) : Json(nullptr);
  out["calibration"] = calibration;
  out["configurations"] = configurations;
  std::ofstream file(options.jsonPath);
  file << out.dump(2) << "\n";
  if (!file) {
    fail("plan: cannot write {}", options.jsonPath);
  }
}

// The steps a concurrent calibration rank runs (Note [Calibrating beside the other ranks]).
void calibrationLoad(const PlanOptions& options, const std::string& modelPath) {
  Graph graph = importOnnx(modelPath);
  const std::vector<TensorMeta> inputMetas = defaultInputMetas(graph, options.batchSize);
  MemoryQuery query = queryOf(options, Configuration{"single", {}});
  const std::unique_ptr<TrainingPlan> trainingPlan = buildPredictionPlan(query, std::move(graph), inputMetas);
  calibrateCompute(*trainingPlan, inputMetas, query.optimizer, options.calibrationLoad);
}

// The arguments of a concurrent calibration rank: the same model, batch, threads and optimizer.
std::vector<std::string> calibrationLoadArgs(const PlanOptions& options, const std::string& modelPath, int threads) {
  return {"plan",
          modelPath,
          "--world-size",
          "1",
          "--batch-size",
          std::to_string(options.batchSize),
          "--threads",
          std::to_string(threads),
          "--optimizer",
          options.optimizer,
          "--momentum",
          fmt::format("{}", options.momentum),
          "--channels-last",
          options.channelsLast,
          "--calibration-load",
          std::to_string(3 * (options.calibrationSteps + 2) + 4)};
}

void plan(const PlanOptions& options) {
  if (options.calibrationLoad > 0) {
    ModelOptions threading;
    threading.threads = std::max(1, options.threads);
    applyThreads(threading);
    calibrationLoad(options, options.modelPath.empty() ? defaultModelPath() : options.modelPath);
    return;
  }
  checkPlanOptions(options);
  const std::optional<std::int64_t> deviceMemory =
      options.deviceMemory.empty() ? std::nullopt
                                   : std::optional(parseByteSize(options.deviceMemory, "plan --device-memory"));
  const int ranksPerNode = options.worldSize / options.nnodes;
  const int threads = options.threads > 0 ? options.threads : std::max(1, detail::availableCores() / ranksPerNode);
  // Note [Step time and overlap]: the share of the collectives' latency a step pays when ranks outnumber the cores.
  const double share = latencyShare(detail::availableCores(), ranksPerNode, threads);
  ModelOptions threading;
  threading.threads = threads;
  applyThreads(threading);
  const std::string modelPath = options.modelPath.empty() ? defaultModelPath() : options.modelPath;
  const Graph graph = importOnnx(modelPath);
  const std::vector<TensorMeta> inputMetas = defaultInputMetas(graph, options.batchSize);
  const std::vector<Configuration> all = configurations(options);

  // One training plan per unit partition (FSDP's units; none for the others): built, replayed, and for the first
  // one, run for the calibration.
  std::vector<Predicted> rows;
  ComputeCalibration compute;
  std::optional<CollectiveCalibration> collectives;
  std::int64_t dataBytes = 0;
  // [0]: the replicated strategies (calibrated on: one flat buffer, as DDP's optimizer sees it), [1]: FSDP's.
  std::vector<std::vector<std::size_t>> partitions(2);
  for (std::size_t i = 0; i < all.size(); ++i) {
    partitions[all[i].strategy == "fsdp" ? 1 : 0].push_back(i);
  }
  rows.resize(all.size());
  bool calibrated = false;
  for (const std::vector<std::size_t>& indices : partitions) {
    if (indices.empty()) {
      continue;
    }
    const std::unique_ptr<TrainingPlan> trainingPlan =
        buildPredictionPlan(queryOf(options, all[indices.front()]), graph, inputMetas);
    if (!calibrated) {
      // The workspace is measured on one (or, calibrating, a few) real steps; the rest is replayed.
      const std::int64_t largest = trainingPlan->parameters().totalElements() * 4;
      {
        std::optional<ConcurrentRanks> others;
        if (!options.noCalibrate && ranksPerNode > 1) {
          others.emplace(ranksPerNode - 1, calibrationLoadArgs(options, modelPath, threads));
        }
        compute = calibrateCompute(*trainingPlan, inputMetas, queryOf(options, all[indices.front()]).optimizer,
                                   options.noCalibrate ? 0 : options.calibrationSteps);
      }
      dataBytes = dataBatchBytes(inputMetas, trainingPlan->labelMeta());
      if (!options.noCalibrate) {
        collectives = calibrateCollectives(std::max(2, options.worldSize),
                                           std::clamp<std::int64_t>(largest, 1 << 20, 64 << 20), 5);
      }
      calibrated = true;
    }
    for (std::size_t i : indices) {
      const MemoryQuery query = queryOf(options, all[i]);
      const FsdpMemoryPrediction memory = predictStrategyMemory(query, *trainingPlan);
      Predicted& row = rows[i];
      row.configuration = all[i];
      row.breakdown = memory.peak;
      row.breakdown[static_cast<std::size_t>(MemoryCategory::Workspace)] = compute.workspaceBytes;
      row.breakdown[static_cast<std::size_t>(MemoryCategory::Other)] = dataBytes;
      row.atPeak = memory.atTotalPeak;
      row.atPeak[static_cast<std::size_t>(MemoryCategory::Workspace)] = compute.workspaceBytes;
      row.atPeak[static_cast<std::size_t>(MemoryCategory::Other)] = dataBytes;
      row.peakBytes = memory.totalPeak + compute.workspaceBytes + dataBytes;
      if (collectives) {
        row.step = predictStepTime(query, trainingPlan->parameters(), compute, *collectives, share);
      }
    }
  }

  fmt::print("plan: {} on {} rank(s) ({} node(s)), batch {} per rank x {} micro-batch(es), {} thread(s) per rank, {}\n",
             modelPath, options.worldSize, options.nnodes, options.batchSize, options.gradAccum, threads,
             options.optimizer);
  if (collectives) {
    fmt::print(
        "calibration: forward+backward {:.2f} ms, optimizer {:.2f} ms (median of {} steps); Gloo over TCP, {} ranks: "
        "all-reduce {:.0f} us + {}/s, all-gather {:.0f} us + {}/s, reduce-scatter {:.0f} us + {}/s\n",
        1e3 * compute.forwardBackwardS, 1e3 * compute.optimizerS, compute.steps, collectives->ranks,
        1e6 * collectives->allReduce.latencyS, humanBytes(static_cast<std::int64_t>(collectives->allReduce.bytesPerS)),
        1e6 * collectives->allGather.latencyS, humanBytes(static_cast<std::int64_t>(collectives->allGather.bytesPerS)),
        1e6 * collectives->reduceScatter.latencyS,
        humanBytes(static_cast<std::int64_t>(collectives->reduceScatter.bytesPerS)));
  } else {
    fmt::print("calibration: off (--no-calibrate): memory only\n");
  }
  fmt::print("  {:<22} {:>10} {:>10} {:>10} {:>11} {:>10} {:>10} {:>10} {:>10}  {}\n", "configuration", "params",
             "grads", "optimizer", "activations", "comm", "workspace", "peak", "step", deviceMemory ? "fits" : "");
  const auto at = [](const Predicted& row, MemoryCategory c) {
    return humanBytes(row.breakdown[static_cast<std::size_t>(c)]);
  };
  for (const Predicted& row : rows) {
    fmt::print("  {:<22} {:>10} {:>10} {:>10} {:>11} {:>10} {:>10} {:>10} {:>10}  {}\n", row.configuration.label(),
               at(row, MemoryCategory::Parameters), at(row, MemoryCategory::Gradients),
               at(row, MemoryCategory::OptimizerState), at(row, MemoryCategory::Activations),
               at(row, MemoryCategory::Communication), at(row, MemoryCategory::Workspace), humanBytes(row.peakBytes),
               row.step ? fmt::format("{:.1f} ms", 1e3 * row.step->totalS()) : "-",
               deviceMemory ? (row.peakBytes <= *deviceMemory ? "yes" : "no") : "");
  }
  fmt::print(
      "  per rank, training steps (evaluation not included); peak: every category at once, workspace measured on "
      "this machine, data batches ({}) included; step: one optimizer step, collectives not overlapped{}\n",
      humanBytes(dataBytes),
      share < 1 ? fmt::format(" (their latency at {:.0f}%: ranks x threads outnumber the cores)", 100 * share) : "");
  if (deviceMemory) {
    std::vector<std::string> fitting;
    for (const Predicted& row : rows) {
      if (row.peakBytes <= *deviceMemory) {
        fitting.push_back(row.configuration.label());
      }
    }
    fmt::print("fit in {}: {}\n", humanBytes(*deviceMemory),
               fitting.empty() ? std::string("none") : fmt::format("{}", fmt::join(fitting, ", ")));
  }
  if (!options.jsonPath.empty()) {
    writeJson(options, modelPath, threads, share, deviceMemory, compute, collectives, rows);
  }
}

}  // namespace

void addPlanCommand(CLI::App& app) {
  auto o = std::make_shared<PlanOptions>();
  CLI::App* c = app.add_subcommand(
      "plan",
      "predict each strategy's per-rank peak memory and step time for a run before it starts, and which fit in "
      "--device-memory");
  c->add_option("model", o->modelPath, "the .onnx file (default: the bundled CNN)");
  c->add_option("--world-size", o->worldSize, "ranks of the run (workers, for ps)")->required();
  c->add_option("--nnodes", o->nnodes, "nodes of the run");
  c->add_option("--batch-size", o->batchSize, "samples per rank and micro-batch, as in strata train");
  c->add_option("--threads", o->threads, "CPU threads per rank (default: the cores / ranks per node, as train)");
  c->add_option("--device-memory", o->deviceMemory, "memory per rank, e.g. 24GiB: say which configurations fit");
  c->add_option("--optimizer", o->optimizer, "sgd | adam | adamw");
  c->add_option("--momentum", o->momentum, "SGD momentum (0: no momentum buffer)");
  c->add_option("--grad-accum", o->gradAccum, "micro-batches per optimizer step");
  c->add_option("--channels-last", o->channelsLast, "auto | on | off: the layout of the run, as strata train's");
  c->add_option("--servers", o->servers, "parameter servers of the ps configurations");
  c->add_option("--strategy", o->strategy, "predict only this strategy (single, ddp, fsdp, ps) with --strategy-opt");
  c->add_option("--strategy-opt", o->strategyOptions, "strategy option key=value (repeatable)");
  c->add_option("--plugin-dir", o->pluginDirs, "directory searched first for strategy plugins (repeatable)");
  c->add_flag("--no-calibrate", o->noCalibrate, "memory only: no timed steps or collectives (step_time_s null)");
  c->add_option("--calibration-steps", o->calibrationSteps, "timed training steps of the calibration");
  c->add_option("--calibration-load", o->calibrationLoad)->group("");  // internal: a concurrent calibration rank
  c->add_option("--json", o->jsonPath, "also write the prediction as JSON to this file");
  c->callback([o] { plan(*o); });
}

}  // namespace strata::cli
