#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <map>
#include <optional>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "checkpoint.h"
#include "commands.h"
#include "device_selection.h"
#include "launcher.h"
#include "model_options.h"
#include "process_group_factory.h"
#include "run_outputs.h"
#include "strata/allocator.h"
#include "strata/comm/gloo_process_group.h"
#include "strata/comm/tcp_store.h"
#include "strata/graphs/specialize.h"
#include "strata/graphs/training_plan.h"
#include "strata/loaders/data_loader.h"
#include "strata/loaders/dataset.h"
#include "strata/loaders/onnx_exporter.h"
#include "strata/loaders/onnx_importer.h"
#include "strata/optim/lr_schedule.h"
#include "strata/optim/optimizer.h"
#include "strata/plugin_host.h"
#include "trainer_context.h"
#ifdef STRATA_HAS_CUDA
#include "strata/cuda/gpu_monitor.h"
#endif

namespace fs = std::filesystem;

namespace strata::cli {
namespace {

struct TrainOptions {
  ModelOptions model;
  DeviceOptions device{.device = "auto"};
  std::string data = "fashion-mnist";
  std::int64_t epochs = 1;
  std::int64_t stopAfterEpoch = 0;
  std::int64_t maxSteps = 0;
  std::int64_t batchSize = 64;
  std::string optimizer = "sgd";
  double lr = 0.05;
  double momentum = 0.9;
  bool nesterov = false;
  double weightDecay = 0.0;
  double clipGradNorm = 0.0;
  std::string schedule = "cosine";
  std::int64_t warmupSteps = 0;
  std::uint64_t seed = 0;
  std::string loss = "cross-entropy";
  std::string out;
  bool save = false;
  std::string resume;
  std::string exportPath;
  bool augment = false;
  std::int64_t logEvery = 20;
  std::int64_t syntheticSamples = 2048;
  std::string strategy = "single";
  std::vector<std::string> strategyOptions;
  std::vector<std::string> pluginDirs;
  int gradAccum = 1;
  std::string cudaGraph = "off";
  double timeoutS = 300;
  LaunchOptions launch;
};

// --cuda-graph: recording applies to CUDA plans; `on` elsewhere is an error rather than a silent no-op.
Recording recordingOf(const std::string& flag, Device device) {
  Recording mode = Recording::Off;
  try {
    mode = parseRecording(flag);
  } catch (const Error&) {
    fail("--cuda-graph {}: expected off, on or auto", flag);
  }
  if (device.type == DeviceType::CUDA) {
    return mode;
  }
  if (mode == Recording::On) {
    fail("--cuda-graph on: CUDA graphs need a GPU, but this run is on {} (--device cuda)", device.toString());
  }
  return Recording::Off;
}

double seconds(std::chrono::steady_clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

double scalar(const Tensor& deviceTensor) {
  const Tensor t = deviceTensor.to(Device::cpu());
  return t.dtype() == DType::Float64 ? *t.data<double>() : static_cast<double>(*t.data<float>());
}

// One line redrawn in place on a terminal; plain lines (every logEvery steps) otherwise.
class Progress {
 public:
  explicit Progress(std::int64_t logEvery) : tty_(isatty(STDOUT_FILENO) != 0), logEvery_(logEvery) {}

  void update(std::int64_t epoch, std::int64_t step, std::int64_t stepsInEpoch, double loss, double samplesPerS,
              double etaS) {
    const std::string line = fmt::format("epoch {} step {}/{}  loss {:.4f}  {:.0f} samples/s  ETA {:.0f}s", epoch, step,
                                         stepsInEpoch, loss, samplesPerS, etaS);
    if (tty_) {
      const int width = 30;
      const int filled = stepsInEpoch > 0 ? static_cast<int>(width * step / stepsInEpoch) : 0;
      fmt::print("\r[{}{}] {}\x1b[K", std::string(static_cast<std::size_t>(filled), '#'),
                 std::string(static_cast<std::size_t>(width - filled), '.'), line);
      std::fflush(stdout);
    } else if (step % logEvery_ == 0 || step == stepsInEpoch) {
      fmt::print("{}\n", line);
    }
  }
  void endLine() {
    if (tty_) {
      fmt::print("\n");
    }
  }

 private:
  bool tty_;
  std::int64_t logEvery_;
};

DatasetSpec datasetSpec(const TrainOptions& options, DatasetSplit split, const Shape& sample) {
  DatasetSpec spec;
  spec.kind = options.data;
  spec.split = split;
  spec.seed = options.seed;
  spec.augment = options.augment && split == DatasetSplit::Train;
  spec.sampleShape = sample;
  spec.numSamples = split == DatasetSplit::Train ? options.syntheticSamples : options.syntheticSamples / 4;
  return spec;
}

// Opens a split, resizing when the model wants another sample shape than the data set has.
std::shared_ptr<Dataset> openForModel(const TrainOptions& options, DatasetSplit split, const Shape& sample,
                                      std::int64_t classes) {
  DatasetSpec spec = datasetSpec(options, split, sample);
  std::shared_ptr<Dataset> dataset = openDataset(spec);
  if (dataset->sampleShape() != sample && sample.size() == 3) {
    spec.resizeTo = sample;
    dataset = openDataset(spec);
  }
  checkDatasetFitsModel(*dataset, sample, classes);
  return dataset;
}

// Class labels as one-hot rows of the model's output dtype: the targets of --loss mse on a classification set.
Tensor oneHot(const Tensor& labels, const TensorMeta& target) {
  if (target.shape.size() != 2 || target.shape[0] != labels.numel() || target.dtype != DType::Float32) {
    fail("--loss mse needs float32 outputs of shape [N, classes] to compare with one-hot labels, not {}",
         target.toString());
  }
  Tensor rows = Tensor::zeros(DType::Float32, target.shape);
  const std::int64_t classes = target.shape[1];
  for (std::int64_t r = 0; r < labels.numel(); ++r) {
    const std::int64_t label = labels.data<std::int64_t>()[r];
    if (label < 0 || label >= classes) {
      fail("label {} of row {} is outside the model's {} outputs", label, r, classes);
    }
    rows.data<float>()[r * classes + label] = 1.0f;
  }
  return rows;
}

// Zero rows appended up to `rows`, for a model whose batch dimension is fixed in the file.
Tensor padBatch(const Tensor& images, std::int64_t rows) {
  Shape shape = images.shape();
  shape[0] = rows;
  Tensor padded = Tensor::zeros(images.dtype(), shape);
  std::memcpy(padded.rawData(), images.rawData(), images.bytes());
  return padded;
}

// Test accuracy over the whole split. With a static batch dimension (staticBatch > 0) the last, smaller batch is
// padded and only its real rows count.
double evaluateAccuracy(TrainingPlan& plan, const std::shared_ptr<Dataset>& test, std::int64_t batchSize,
                        std::int64_t staticBatch) {
  DataLoader loader(test, DataLoaderOptions{.batchSize = batchSize, .shuffle = false, .dropLast = false});
  loader.startEpoch(0);
  std::int64_t correct = 0;
  std::int64_t total = 0;
  while (auto batch = loader.next()) {
    const std::int64_t rows = batch->images.dim(0);
    const Tensor images = staticBatch > 0 && rows < staticBatch ? padBatch(batch->images, staticBatch) : batch->images;
    const Tensor logits = plan.evaluate({images})[0].to(Device::cpu());
    const std::int64_t classes = logits.numel() / logits.dim(0);
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* row = logits.data<float>() + r * classes;
      const std::int64_t predicted = std::max_element(row, row + classes) - row;
      correct += predicted == batch->labels.data<std::int64_t>()[r] ? 1 : 0;
    }
    total += rows;
  }
  return total > 0 ? static_cast<double>(correct) / static_cast<double>(total) : 0.0;
}

nlohmann::json memoryBreakdown(const MemorySnapshot& memory) {
  nlohmann::json breakdown;
  for (std::size_t c = 0; c < kMemoryCategoryCount; ++c) {
    breakdown[std::string(memoryCategoryName(static_cast<MemoryCategory>(c)))] = memory.peak[c];
  }
  return breakdown;
}

std::map<std::string, std::string> parseStrategyOptions(const std::vector<std::string>& pairs) {
  std::map<std::string, std::string> result;
  for (const std::string& pair : pairs) {
    const auto eq = pair.find('=');
    if (eq == std::string::npos || eq == 0) {
      fail("--strategy-opt '{}' is not key=value", pair);
    }
    result[pair.substr(0, eq)] = pair.substr(eq + 1);
  }
  return result;
}

std::vector<fs::path> toPaths(const std::vector<std::string>& dirs) {
  return {dirs.begin(), dirs.end()};
}

// Every rank's figures, collected on rank 0 through the store (just this rank's without one).
nlohmann::json gatherRankFigures(Store* store, const RankEnvironment& env, const nlohmann::json& mine,
                                 std::chrono::milliseconds timeout) {
  if (store == nullptr) {
    return nlohmann::json::array({mine});
  }
  store->setString(fmt::format("summary/rank/{}", env.rank), mine.dump());
  if (env.rank != 0) {
    store->getString("summary/done", timeout);  // rank 0 serves the store: stay until it is done with it
    return {};
  }
  nlohmann::json all = nlohmann::json::array();
  for (int r = 0; r < env.worldSize; ++r) {
    all.push_back(nlohmann::json::parse(store->getString(fmt::format("summary/rank/{}", r), timeout)));
  }
  return all;
}

// Lets the other ranks exit once rank 0 has what it needs from the store.
void releaseRanks(Store* store, const RankEnvironment& env) {
  if (store != nullptr && env.rank == 0) {
    store->setString("summary/done", "1");
  }
}

// Flag spellings, checked before the launcher starts any rank (each would fail the same way after the rendezvous).
void checkTrainFlags(const TrainOptions& options) {
  checkDeviceFlags(options.device);
  recordingOf(options.cudaGraph, Device::cuda(0));
  parseStrategyOptions(options.strategyOptions);
  parseLossKind(options.loss);
}

void train(const TrainOptions& options) {
  checkTrainFlags(options);
  // --- launcher (cli/launcher.h): with --nproc/--nnodes this process starts the ranks and waits for them.
  if (launchIfNeeded(options.launch)) {
    return;
  }
  const RankEnvironment rankEnv = rankEnvironment();
  prepareRank(rankEnv);
  ModelOptions modelOptions = options.model;
  if (modelOptions.threads == 0) {
    modelOptions.threads = threadsFromEnvironment();  // the launcher's share of the cores, if any
  }
  applyThreads(modelOptions);
  // --- end launcher
  const std::string modelPath = options.model.modelPath.empty() ? defaultModelPath() : options.model.modelPath;
  const fs::path baseRunDir = !options.resume.empty() ? fs::path(options.resume)
                              : !options.out.empty()  ? fs::path(options.out)
                                                      : fs::path("runs") / "latest";
  // Rank 0 writes the run's outputs; the other ranks report their figures to it through the store.
  const fs::path runDir = baseRunDir;
  const bool lead = rankEnv.rank == 0;
  const std::map<std::string, std::string> strategyOptions = parseStrategyOptions(options.strategyOptions);
  const Device device = selectDevice(options.device, rankEnv.localRank);
  const Recording recording = recordingOf(options.cudaGraph, device);
  const std::unique_ptr<LoadedStrategy> strategy = PluginHost(toPaths(options.pluginDirs)).load(options.strategy);
  std::shared_ptr<Store> store;
  std::unique_ptr<ProcessGroup> group;
  const auto timeout = std::chrono::milliseconds(static_cast<std::int64_t>(options.timeoutS * 1000));
  if (rankEnv.worldSize > 1) {
    store = std::make_shared<TcpStore>(TcpStoreOptions{.host = rankEnv.masterAddr,
                                                       .port = static_cast<std::uint16_t>(rankEnv.masterPort),
                                                       .isServer = lead,
                                                       .worldSize = rankEnv.worldSize,
                                                       .rank = rankEnv.rank,
                                                       .timeout = timeout});
    group = createProcessGroup(store, rankEnv, device, timeout);
  }
  Graph graph = importOnnx(modelPath);
  const std::int64_t staticBatch = graph.inputs.empty() ? 0
                                   : graph.values[static_cast<std::size_t>(graph.inputs[0])].meta.shape.empty()
                                       ? 0
                                       : graph.values[static_cast<std::size_t>(graph.inputs[0])].meta.shape[0];
  if (graph.inputs.size() != 1) {
    fail("{}: strata train feeds one image input, but the model has {} inputs", modelPath, graph.inputs.size());
  }
  TrainingPlanOptions planOptions;
  planOptions.inputMetas = defaultInputMetas(graph, options.batchSize);
  planOptions.loss = parseLossKind(options.loss);
  planOptions.device = device;
  planOptions.mixedPrecision = mixedPrecisionOf(options.device);
  planOptions.recording = recording;
  planOptions.channelsLast = channelsLastOf(options.device, device);
  std::optional<LossScaler> lossScaler;
  if (const std::optional<LossScalerOptions> scaling = lossScalerOptionsOf(options.device)) {
    lossScaler.emplace(*scaling);
    planOptions.scaledLoss = true;
  }
  const int logits = graph.outputs.at(0);
  TrainingPlan plan(std::move(graph), planOptions);
  const Shape sample(planOptions.inputMetas[0].shape.begin() + 1, planOptions.inputMetas[0].shape.end());
  const std::int64_t classes =
      plan.labelMeta().dtype == DType::Int64
          ? plan.trainingGraph().graph.values[static_cast<std::size_t>(logits)].meta.shape.at(1)
          : 0;

  const auto trainSet = openForModel(options, DatasetSplit::Train, sample, classes);
  const auto testSet = openForModel(options, DatasetSplit::Test, sample, classes);
  DataLoader loader(trainSet, DataLoaderOptions{.batchSize = options.batchSize,
                                                .rank = rankEnv.rank,
                                                .worldSize = rankEnv.worldSize,
                                                .shuffle = true,
                                                .seed = options.seed,
                                                .dropLast = true});

  OptimizerOptions optimizerOptions;
  optimizerOptions.kind = parseOptimizerKind(options.optimizer);
  optimizerOptions.momentum = options.momentum;
  optimizerOptions.nesterov = options.nesterov;
  optimizerOptions.weightDecay = options.weightDecay;
  optimizerOptions.maxGradNorm = options.clipGradNorm;
  Optimizer optimizer(plan.parameters(), optimizerOptions);
  if (lossScaler) {
    optimizer.setLossScaler(&*lossScaler);
  }

  const int micro = std::max(1, options.gradAccum);
  const std::int64_t stepsPerEpoch = loader.batchesPerEpoch() / micro;
  if (stepsPerEpoch == 0) {
    fail("{} batches per rank and epoch are fewer than --grad-accum {}", loader.batchesPerEpoch(), micro);
  }
  const std::int64_t epochs =
      options.maxSteps > 0 ? (options.maxSteps + stepsPerEpoch - 1) / stepsPerEpoch : options.epochs;
  const std::int64_t totalSteps = options.maxSteps > 0 ? options.maxSteps : epochs * stepsPerEpoch;
  LrScheduleOptions schedule;
  schedule.kind = parseLrScheduleKind(options.schedule);
  schedule.baseLr = options.lr;
  schedule.warmupSteps = options.warmupSteps;
  schedule.totalSteps = totalSteps;
  schedule.stepSize = stepsPerEpoch * 30;

  std::int64_t startEpoch = 0;
  std::int64_t step = 0;
  if (!options.resume.empty()) {
    const CheckpointState state = loadCheckpoint(baseRunDir / "checkpoint", plan, optimizer);
    startEpoch = state.epochsDone;
    step = state.steps;
    fmt::print("resumed from {} after epoch {} (step {})\n", (runDir / "checkpoint").string(), startEpoch, step);
  }

  // Accumulation first: its gradient-ready hook must run before any the strategy installs.
  GradientAccumulator accumulator(plan, micro);
  TrainerContext context(plan, optimizer, group.get(), rankEnv.rank, rankEnv.worldSize, strategyOptions, micro);
  strategy->setup(context);
  // An error unwinds the stack past the plan and the context before the strategy, whose destructor may still
  // reach them: tear it down first (the normal path below does so explicitly).
  struct TeardownOnError {
    LoadedStrategy* strategy;
    bool done = false;
    ~TeardownOnError() {
      if (!done) {
        try {
          strategy->teardown();
        } catch (...) {  // already unwinding from the error that matters
        }
      }
    }
  } teardownOnError{strategy.get()};
  if (rankEnv.worldSize > 1) {
    fmt::print("rank {} of {}: strategy {} set up, {} batches of {} per epoch\n", rankEnv.rank, rankEnv.worldSize,
               options.strategy, loader.batchesPerEpoch(), options.batchSize);
  }
  std::optional<MetricsLog> metrics;
  if (lead) {
    metrics.emplace(runDir);
    fmt::print(
        "training {} on {} ({} train / {} test samples), {} parameters, strategy {} on {} rank(s), batch {} "
        "per rank x {} micro-batch(es), {} steps per epoch\n",
        modelPath, trainSet->description(), trainSet->size(), testSet->size(), plan.parameters().totalElements(),
        options.strategy, rankEnv.worldSize, options.batchSize, micro, stepsPerEpoch);
  }
  Allocator& allocator = allocatorFor(device);
  allocator.stats().resetPeaks();
#ifdef STRATA_HAS_CUDA
  std::optional<cuda::GpuMonitor> gpuMonitor;
  if (device.type == DeviceType::CUDA) {
    gpuMonitor.emplace(device.index, std::chrono::milliseconds(100));
  }
#endif
  Progress progress(options.logEvery);
  double trainSeconds = 0;
  double computeSeconds = 0;
  double lastLoss = NAN;
  double testAccuracy = NAN;
  std::int64_t samples = 0;
  const std::int64_t lastEpoch = options.stopAfterEpoch > 0 ? std::min(epochs, options.stopAfterEpoch) : epochs;
  for (std::int64_t epoch = startEpoch; epoch < lastEpoch && step < totalSteps; ++epoch) {
    loader.startEpoch(epoch);
    const auto epochStart = std::chrono::steady_clock::now();
    double lossSum = 0;
    std::int64_t lossCount = 0;
    std::int64_t stepInEpoch = 0;
    while (step < totalSteps && stepInEpoch < stepsPerEpoch) {
      const auto computeStart = std::chrono::steady_clock::now();
      double microLoss = 0;
      if (lossScaler) {
        plan.setLossScale(lossScaler->scale());  // the scale after the last step's overflow check
      }
      for (int m = 0; m < micro; ++m) {
        std::optional<Batch> batch = loader.next();
        if (!batch) {
          fail("the data loader ran out of batches in epoch {}", epoch);
        }
        const bool last = m == micro - 1;
        strategy->beforeForward(m, last);
        accumulator.beginMicroBatch(m);
        if (group) {
          group->setStep(step);
        }
        const bool oneHotTargets = plan.labelMeta().dtype != DType::Int64;
        const StepResult result =
            plan.step({batch->images}, oneHotTargets ? oneHot(batch->labels, plan.labelMeta()) : batch->labels);
        if (!last) {
          accumulator.accumulate();
        }
        strategy->afterBackward(m, last);
        microLoss += scalar(result.loss) / micro;
      }
      const double lr = learningRateAt(schedule, step);
      strategy->step(lr);
      if (device.type != DeviceType::CPU) {
        plan.executor().synchronize();  // the optimizer's kernels belong to this step's time
      }
      const double stepSeconds = seconds(std::chrono::steady_clock::now() - computeStart);
      computeSeconds += stepSeconds;
      lastLoss = microLoss;
      if (!std::isfinite(lastLoss)) {
        fail("the loss became {} at epoch {} step {} (learning rate {}); lower --lr or clip gradients", lastLoss, epoch,
             step, lr);
      }
      lossSum += lastLoss;
      ++lossCount;
      ++step;
      ++stepInEpoch;
      samples += options.batchSize * micro * rankEnv.worldSize;
      const double elapsed = seconds(std::chrono::steady_clock::now() - epochStart);
      const double rate =
          static_cast<double>(stepInEpoch * options.batchSize * micro * rankEnv.worldSize) / std::max(elapsed, 1e-9);
      const std::int64_t remaining = std::min(totalSteps - step, stepsPerEpoch - stepInEpoch);
      if (lead) {
        progress.update(
            epoch, stepInEpoch, std::min(stepsPerEpoch, totalSteps - (step - stepInEpoch)), lastLoss, rate,
            static_cast<double>(remaining * options.batchSize * micro * rankEnv.worldSize) / std::max(rate, 1e-9));
      }
      if (lead && step % options.logEvery == 0) {
        metrics->write({{"type", "step"},
                        {"epoch", epoch},
                        {"step", step},
                        {"loss", lastLoss},
                        {"lr", lr},
                        {"samples_per_s", rate},
                        {"step_time_ms", 1000.0 * stepSeconds}});
      }
    }
    const double epochSeconds = seconds(std::chrono::steady_clock::now() - epochStart);
    trainSeconds += epochSeconds;
    if (!lead) {
      continue;  // rank 0 evaluates, logs and saves: every rank holds the same parameters
    }
    progress.endLine();
    testAccuracy = evaluateAccuracy(plan, testSet, options.batchSize, staticBatch);
    const double meanLoss = lossCount > 0 ? lossSum / static_cast<double>(lossCount) : NAN;
    fmt::print("epoch {}: train loss {:.4f}, test accuracy {:.2f}%, {:.1f}s\n", epoch, meanLoss, 100.0 * testAccuracy,
               epochSeconds);
    metrics->write({{"type", "epoch"},
                    {"epoch", epoch},
                    {"step", step},
                    {"train_loss", meanLoss},
                    {"test_accuracy", testAccuracy},
                    {"epoch_time_s", epochSeconds}});
    if (options.save) {
      saveCheckpoint(baseRunDir / "checkpoint", plan, optimizer, CheckpointState{epoch + 1, step});
    }
  }

  strategy->teardown();
  teardownOnError.done = true;
  const MemorySnapshot memory = allocator.stats().snapshot();
  nlohmann::json gpuFigures = {{"gpu_utilization_mean", nullptr}};
#ifdef STRATA_HAS_CUDA
  if (gpuMonitor) {
    const cuda::GpuUsageSummary usage = gpuMonitor->stop();
    if (usage.available) {
      gpuFigures = {{"gpu_utilization_mean", usage.utilizationMean},
                    {"gpu_utilization_max", usage.utilizationMax},
                    // NVML's figure is the whole device's (every process on it, ranks sharing it included).
                    {"gpu_device_memory_used_max_bytes", usage.memoryUsedMaxBytes},
                    {"gpu_memory_total_bytes", usage.memoryTotalBytes},
                    {"gpu_samples", usage.samples}};
    } else {
      gpuFigures["gpu_monitor_unavailable"] = usage.unavailableReason;
    }
  }
#endif
  const auto figure = [&](const char* key) {
    auto it = context.figures().find(key);
    return it == context.figures().end() ? 0.0 : it->second;
  };
  nlohmann::json rankFigures = {{"rank", rankEnv.rank},
                                {"peak_memory_bytes", memory.totalPeak},
                                {"memory_breakdown", memoryBreakdown(memory)},
                                {"compute_s", computeSeconds},
                                {"communication_s", figure("communication_s")},
                                {"collective_s", figure("collective_s")},
                                {"reserved_memory_bytes", memory.reserved}};
  rankFigures.update(gpuFigures);
  const nlohmann::json ranks = gatherRankFigures(store.get(), rankEnv, rankFigures, timeout);
  if (!lead) {
    return;
  }
  nlohmann::json summary = {{"model", modelPath},
                            {"strategy", options.strategy},
                            {"world_size", rankEnv.worldSize},
                            {"device", describe(device)},
                            {"epochs", epochs},
                            {"steps", step},
                            {"global_batch_size", options.batchSize * micro * rankEnv.worldSize},
                            {"train_time_s", trainSeconds},
                            {"samples_per_s", trainSeconds > 0 ? static_cast<double>(samples) / trainSeconds : 0.0},
                            {"final_train_loss", lastLoss},
                            {"test_accuracy", testAccuracy},
                            {"params", plan.parameters().totalElements()},
                            {"precision", options.device.precision},
                            {"ranks", ranks}};
  const ChannelsLastReport& layout = plan.channelsLastReport();
  summary["channels_last"] = {{"mode", options.device.channelsLast},
                              {"enabled", planOptions.channelsLast},
                              {"layout_nodes", layout.layoutNodes},
                              {"elementwise_nodes", layout.elementwiseNodes},
                              {"transposes", layout.transposes}};
  if (device.type == DeviceType::CUDA) {
    const RecordingStatus& graphStatus = plan.executor().recording();
    summary["cuda_graph"] = {
        {"mode", recordingName(graphStatus.mode)}, {"replayed", graphStatus.replaying}, {"detail", graphStatus.detail}};
    if (graphStatus.eagerMs > 0) {
      summary["cuda_graph"]["eager_step_ms"] = graphStatus.eagerMs;
      summary["cuda_graph"]["replay_step_ms"] = graphStatus.replayMs;
    }
    if (graphStatus.mode != Recording::Off) {
      fmt::print("cuda graph ({}): {}\n", recordingName(graphStatus.mode), graphStatus.detail);
    }
  }
  if (lossScaler) {
    summary["loss_scale_final"] = lossScaler->scale();
    summary["skipped_steps"] = lossScaler->skippedSteps();  // overflowed fp16 gradients, not applied
  }
  writeJsonAtomically(runDir / "summary.json", summary);
  fmt::print("summary: {}\n", (runDir / "summary.json").string());
  if (!options.exportPath.empty()) {
    exportOnnxWithWeights(modelPath, plan.modelWithCurrentWeights(), options.exportPath);
    fmt::print("exported the trained model to {}\n", options.exportPath);
  }
  releaseRanks(store.get(), rankEnv);
}

}  // namespace

void addTrainCommand(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  CLI::App* c = app.add_subcommand("train", "train a model (default: the bundled CNN on Fashion-MNIST)");
  c->add_option("model", o->model.modelPath, "the .onnx file (default: the bundled CNN)");
  c->add_option("--data", o->data, "fashion-mnist | fashion-mnist:DIR | mnist:DIR | cifar10:DIR | synthetic");
  c->add_option("--epochs", o->epochs, "epochs to train")->check(CLI::PositiveNumber);
  c->add_option("--max-steps", o->maxSteps, "stop after this many steps (overrides --epochs)");
  c->add_option("--stop-after-epoch", o->stopAfterEpoch,
                "stop cleanly after this epoch, keeping the schedule of --epochs (resume later with --resume)");
  c->add_option("--batch-size", o->batchSize, "samples per step")->check(CLI::PositiveNumber);
  c->add_option("--optimizer", o->optimizer, "sgd | adam | adamw");
  c->add_option("--lr", o->lr, "learning rate");
  c->add_option("--momentum", o->momentum, "SGD momentum");
  c->add_flag("--nesterov", o->nesterov, "Nesterov momentum");
  c->add_option("--weight-decay", o->weightDecay, "weight decay (decoupled for adamw)");
  c->add_option("--clip-grad-norm", o->clipGradNorm, "clip gradients to this global L2 norm (0: off)");
  c->add_option("--lr-schedule", o->schedule, "cosine (default) | constant | step (x0.1 every 30 epochs)");
  c->add_option("--warmup-steps", o->warmupSteps, "linear learning-rate warm-up steps");
  c->add_option("--seed", o->seed, "seed of shuffling, augmentation and synthetic data");
  c->add_option("--loss", o->loss, "cross-entropy | mse, when the graph has no loss");
  c->add_option("--out", o->out, "run directory for metrics.jsonl, summary.json and checkpoints");
  c->add_flag("--save", o->save, "write a checkpoint to RUN_DIR/checkpoint after each epoch");
  c->add_option("--resume", o->resume, "continue the run in RUN_DIR from its checkpoint");
  c->add_option("--export", o->exportPath, "write the trained model as .onnx");
  c->add_flag("--augment", o->augment, "random crop and flip (CIFAR-10)");
  c->add_option("--log-every", o->logEvery, "log a metrics line every N steps")->check(CLI::PositiveNumber);
  c->add_option("--synthetic-samples", o->syntheticSamples, "training samples of --data synthetic");
  addDeviceOptions(*c, o->device);
  addLossScaleOption(*c, o->device);
  c->add_option("--threads", o->model.threads, "CPU threads (default: all cores, divided among local ranks)");
  addLaunchOptions(*c, o->launch);
  c->add_option("--strategy", o->strategy, "distribution strategy plugin (single, ddp, or a third-party one)");
  c->add_option("--strategy-opt", o->strategyOptions, "strategy option key=value (repeatable)");
  c->add_option("--plugin-dir", o->pluginDirs, "directory searched first for strategy plugins (repeatable)");
  c->add_option("--grad-accum", o->gradAccum, "micro-batches per optimizer step")->check(CLI::PositiveNumber);
  c->add_option("--cuda-graph", o->cudaGraph,
                "off (default) | on | auto: record the forward and backward pass as a CUDA graph after two warm-up "
                "steps and replay it (auto keeps it only if it is faster); needs a strategy without node hooks "
                "(single)");
  addChannelsLastOption(*c, o->device);
  c->add_option("--timeout", o->timeoutS, "seconds before a stuck collective or rendezvous ends the job");
  c->callback([o] { train(*o); });
}

}  // namespace strata::cli
