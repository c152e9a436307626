#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <optional>
#include <stdexcept>
#include <tuple>
#include <utility>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "commands/commands.h"
#include "common/batch_sources.h"
#include "common/device_selection.h"
#include "common/model_options.h"
#include "common/strategy_options.h"
#include "launch/launcher.h"
#include "launch/process_group_factory.h"
#include "launch/role_command.h"
#include "run/checkpoint.h"
#include "run/op_profiler.h"
#include "run/run_files.h"
#include "strata/comm/tcp_store.h"
#include "strata/graphs/specialize.h"
#include "strata/graphs/training_plan.h"
#include "strata/host_memory.h"
#include "strata/loaders/dataset.h"
#include "strata/loaders/onnx_exporter.h"
#include "strata/loaders/onnx_importer.h"
#include "strata/loaders/segmentation_dataset.h"
#include "strata/loaders/text_corpus.h"
#include "strata/loaders/tokenizer.h"
#include "strata/optim/lr_schedule.h"
#include "strata/optim/optimizer.h"
#include "strata/plugin_host.h"
#include "strata/train/trainer.h"

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
  std::string lrScaling = "none";       // none | linear (Goyal et al.: lr x global batch / reference batch)
  std::int64_t lrReferenceBatch = 256;  // the global batch --lr was tuned for
  double lrTrust = 0.001;               // LARS's trust coefficient
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
  std::int64_t saveEvery = 0;
  std::string resume;
  std::string exportPath;
  bool augment = false;
  std::int64_t logEvery = 20;
  std::int64_t syntheticSamples = 2048;
  std::int64_t seqLen = 0;          // token data: the model's sequence length when its input leaves it open
  std::string tokenizer = "bytes";  // text data (Note [Tokenizers])
  int tokenBytes = 2;               // raw token files (Note [Token files])
  std::string strategy = "single";
  std::vector<std::string> strategyOptions;
  std::vector<std::string> pluginDirs;
  int gradAccum = 1;
  std::string cudaGraph = "off";
  double timeoutS = 300;
  std::string slowRank;  // R:F
  double sampleEveryS = 0.5;
  bool profile = false;
  int profileTop = 0;
  LaunchOptions launch;
};

// --slow-rank R:F -> {R, F}; throws Error saying what is wrong.
std::pair<int, double> parseSlowRank(const std::string& text, int worldSize) {
  const std::size_t colon = text.find(':');
  try {
    if (colon != std::string::npos) {
      std::size_t usedRank = 0;
      std::size_t usedFactor = 0;
      const int rank = std::stoi(text.substr(0, colon), &usedRank);
      const double factor = std::stod(text.substr(colon + 1), &usedFactor);
      if (usedRank == colon && usedFactor == text.size() - colon - 1 && rank >= 0 && factor >= 1) {
        if (rank >= worldSize) {
          fail("--slow-rank {}: rank {} is not one of the job's {} ranks", text, rank, worldSize);
        }
        return {rank, factor};
      }
    }
  } catch (const std::logic_error&) {
  }
  fail("--slow-rank {}: expected RANK:FACTOR with FACTOR >= 1, e.g. 2:2 (rank 2 computes twice as long)", text);
}

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

// Where a text corpus is tokenized to (Note [Text corpora]): beside the run.
fs::path dataCacheDir(const fs::path& runDir) {
  return runDir / "data";
}

DatasetSpec datasetSpec(const TrainOptions& options, DatasetSplit split, const Shape& sample, std::int64_t classes,
                        const fs::path& runDir) {
  DatasetSpec spec;
  spec.kind = options.data;
  spec.split = split;
  spec.seed = options.seed;
  spec.augment = options.augment && split == DatasetSplit::Train;
  spec.sampleShape = sample;
  spec.numSamples = split == DatasetSplit::Train ? options.syntheticSamples : options.syntheticSamples / 4;
  spec.seqLen = sample.empty() ? 0 : sample.back();
  spec.vocabulary = classes;
  if (taskOfDataset(options.data) == Task::Segmentation) {
    spec.numClasses = classes;
  }
  spec.rawTokenBytes = options.tokenBytes;
  spec.cacheDir = dataCacheDir(runDir).string();
  spec.tokenizer = options.tokenizer;
  return spec;
}

// The tokenizer of --data text (Note [Text corpora]: the corpus is tokenized once, so this finds the cached one);
// nullptr for other data.
std::shared_ptr<Tokenizer> tokenizerOfData(const TrainOptions& options, const fs::path& runDir) {
  const std::string& kind = options.data;
  if (kind != "text" && !kind.starts_with("text:")) {
    return nullptr;
  }
  return prepareTextCorpus(TextCorpusOptions{.source = kind == "text" ? std::string() : kind.substr(5),
                                             .cacheDir = dataCacheDir(runDir),
                                             .tokenizer = parseTokenizerSpec(options.tokenizer)})
      .tokenizer;
}

// Opens a split, resizing when the model wants another sample shape than the data set has.
std::shared_ptr<Dataset> openForModel(const TrainOptions& options, DatasetSplit split, const Shape& sample,
                                      std::int64_t classes, const fs::path& runDir) {
  DatasetSpec spec = datasetSpec(options, split, sample, classes, runDir);
  std::shared_ptr<Dataset> dataset = openDataset(spec);
  if (dataset->sampleShape() != sample && sample.size() == 3) {
    spec.resizeTo = sample;
    dataset = openDataset(spec);
  }
  checkDatasetFitsModel(*dataset, sample, classes);
  return dataset;
}

std::vector<fs::path> toPaths(const std::vector<std::string>& dirs) {
  return {dirs.begin(), dirs.end()};
}

// Flag spellings, checked before the launcher starts any rank (each would fail the same way after the rendezvous).
void checkTrainFlags(const TrainOptions& options) {
  checkDeviceFlags(options.device);
  if (!options.slowRank.empty()) {
    parseSlowRank(options.slowRank, options.launch.nproc * options.launch.nnodes);
  }
  recordingOf(options.cudaGraph, Device::cuda(0));
  parseStrategyOptions(options.strategyOptions);
  parseLossKind(options.loss);
  parseTokenizerSpec(options.tokenizer);
  if (options.tokenBytes != 2 && options.tokenBytes != 4) {
    fail("--token-bytes {}: a raw token file's ids are 2 (uint16, nanoGPT's layout) or 4 (uint32) bytes wide",
         options.tokenBytes);
  }
}

// The model made trainable for this run: the strategy's unit partition, mixed precision, layout.
struct BuiltPlan {
  std::unique_ptr<TrainingPlan> plan;
  TrainingPlanOptions options;
  std::int64_t staticBatch = 0;
  std::int64_t classes = 0;  // classes, or the vocabulary
  Shape sample;
  Task task = Task::Classification;
};

// The model's input for token data: [N, T] int64 ids, T fixed by the model or given by --seq-len.
std::vector<TensorMeta> tokenInputMetas(const Graph& graph, const TrainOptions& options, const std::string& modelPath) {
  TensorMeta meta = graph.values[static_cast<std::size_t>(graph.inputs[0])].meta;
  if (meta.shape.size() != 2 || (meta.dtype != DType::Int64 && meta.dtype != DType::Int32)) {
    fail(
        "{}: --data {} feeds token ids [N, T], but the model's input is {}; a language model takes int64 ids "
        "(models/make_gpt.py writes one)",
        modelPath, options.data, meta.toString());
  }
  if (meta.shape[1] < 0) {
    if (options.seqLen <= 0) {
      fail("{}: the model's sequence length is open ({}); give --seq-len T", modelPath, meta.toString());
    }
    meta.shape[1] = options.seqLen;
  } else if (options.seqLen > 0 && options.seqLen != meta.shape[1]) {
    fail("--seq-len {}: the model {} fixes its sequence length at {} (its input is {})", options.seqLen, modelPath,
         meta.shape[1], meta.toString());
  }
  meta.shape[0] = options.batchSize;
  return {meta};
}

BuiltPlan buildPlan(const TrainOptions& options, const std::string& modelPath, Device device,
                    const StrategyRequirements& requirements, bool scaledLoss) {
  Graph graph = importOnnx(modelPath);
  if (graph.inputs.size() != 1) {
    fail("{}: strata train feeds one input (images or token ids), but the model has {} inputs", modelPath,
         graph.inputs.size());
  }
  BuiltPlan built;
  const Shape& declared = graph.values[static_cast<std::size_t>(graph.inputs[0])].meta.shape;
  built.staticBatch = declared.empty() ? 0 : declared[0];
  built.task = taskOfDataset(options.data);
  built.options.inputMetas = built.task == Task::LanguageModel ? tokenInputMetas(graph, options, modelPath)
                                                               : defaultInputMetas(graph, options.batchSize);
  built.options.loss = parseLossKind(options.loss);
  built.options.classAxisLast = built.task == Task::LanguageModel;
  if (built.task == Task::Segmentation) {
    built.options.ignoreIndex = kIgnoredPixel;  // Note [Segmentation folders]
  }
  built.options.device = device;
  built.options.mixedPrecision = mixedPrecisionOf(options.device);
  built.options.recording = recordingOf(options.cudaGraph, device);
  built.options.channelsLast = channelsLastOf(options.device, device, hasFloat32Inputs(graph));
  built.options.scaledLoss = scaledLoss;
  built.options.seededLoss = options.gradAccum > 1;  // the loss gradient's seed is 1/K
  built.options.units = requirements.units;
  const int logits = graph.outputs.at(0);
  built.plan = std::make_unique<TrainingPlan>(std::move(graph), built.options);
  built.sample = Shape(built.options.inputMetas[0].shape.begin() + 1, built.options.inputMetas[0].shape.end());
  const Shape& scores = built.plan->trainingGraph().graph.values[static_cast<std::size_t>(logits)].meta.shape;
  built.classes = built.plan->labelMeta().dtype != DType::Int64 ? 0
                  : built.options.classAxisLast                 ? scores.back()
                                                                : scores.at(1);
  return built;
}

// --lr, scaled by --lr-scaling linear to the job's global batch (per rank x ranks x micro-batches).
double scaledLearningRate(const TrainOptions& options) {
  if (options.lrScaling == "none") {
    return options.lr;
  }
  if (options.lrScaling != "linear") {
    fail("--lr-scaling {}: expected none or linear", options.lrScaling);
  }
  if (options.lrReferenceBatch <= 0) {
    fail("--lr-reference-batch {}: must be positive", options.lrReferenceBatch);
  }
  const std::int64_t global =
      options.batchSize * options.launch.nproc * options.launch.nnodes * std::max(1, options.gradAccum);
  return options.lr * static_cast<double>(global) / static_cast<double>(options.lrReferenceBatch);
}

TrainerOptions trainerOptions(const TrainOptions& options, const StrategyRequirements& requirements,
                              const std::map<std::string, std::string>& strategyOptions) {
  TrainerOptions t;
  t.rejoin = rankRestarts() > 0;
  t.epochs = options.epochs;
  t.stopAfterEpoch = options.stopAfterEpoch;
  t.maxSteps = options.maxSteps;
  t.microBatches = std::max(1, options.gradAccum);
  t.logEvery = options.logEvery;
  t.schedule.kind = parseLrScheduleKind(options.schedule);
  t.schedule.baseLr = scaledLearningRate(options);
  t.schedule.warmupSteps = options.warmupSteps;
  t.optimizer.kind = parseOptimizerKind(options.optimizer);
  t.optimizer.momentum = options.momentum;
  t.optimizer.nesterov = options.nesterov;
  t.optimizer.weightDecay = options.weightDecay;
  t.optimizer.maxGradNorm = options.clipGradNorm;
  t.optimizer.trustCoefficient = options.lrTrust;
  t.accumulation = requirements.accumulation;
  t.sharedSteps = requirements.sharedSteps;
  t.strategyOptions = strategyOptions;
  t.saveEachEpoch = options.save || options.saveEvery > 0;
  t.saveEverySteps = options.saveEvery;
  t.resume = !options.resume.empty();
  t.timeout = std::chrono::milliseconds(static_cast<std::int64_t>(options.timeoutS * 1000));
  if (!options.slowRank.empty()) {
    std::tie(t.slowRank, t.slowFactor) = parseSlowRank(options.slowRank, options.launch.nproc * options.launch.nnodes);
  }
  return t;
}

// Summary fields written after training: what the plan's passes did, the CUDA graph, the fp16 loss scaler.
void addPlanFields(nlohmann::json& summary, const TrainOptions& options, const BuiltPlan& built, Device device,
                   const LossScaler* lossScaler) {
  TrainingPlan& plan = *built.plan;
  const ChannelsLastReport& layout = plan.channelsLastReport();
  summary["channels_last"] = {
      {"mode", options.device.channelsLast}, {"enabled", built.options.channelsLast},
      {"layout_nodes", layout.layoutNodes},  {"elementwise_nodes", layout.elementwiseNodes},
      {"transposes", layout.transposes},     {"stored_weights", plan.channelsLastParameters().size()}};
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
  if (lossScaler != nullptr) {
    summary["loss_scale_final"] = lossScaler->scale();
    summary["skipped_steps"] = lossScaler->skippedSteps();  // overflowed fp16 gradients, not applied
  }
}

// The job's requirements (the strategy's, for nproc x nnodes ranks) against the flags that need them.
void checkJobRequirements(const TrainOptions& options, const StrategyRequirements& launched) {
  if (options.saveEvery > 0 && launched.sharedSteps) {
    fail(
        "--save-every: this strategy's workers do not wait for each other (asynchronous), so no step is the job's "
        "to checkpoint inside an epoch; it saves at epoch ends (--save)");
  }
  if (options.launch.maxRestarts > 0 && !launched.rejoinsWorkers) {
    fail(
        "--max-restarts {}: strategy '{}'{} cannot take a restarted rank back into a running job; it works with "
        "--strategy ps (mode=sync), whose servers hold the parameters and wait for the restarted worker",
        options.launch.maxRestarts, options.strategy,
        options.strategyOptions.empty() ? "" : fmt::format(" ({})", fmt::join(options.strategyOptions, " ")));
  }
}

fs::path runDirOf(const TrainOptions& options) {
  return !options.resume.empty() ? fs::path(options.resume)
         : !options.out.empty()  ? fs::path(options.out)
                                 : fs::path("runs") / "latest";
}

// Note [Slurm roles]: under srun the first tasks run the strategy's roles (its parameter servers).
void runRoleTask(const TrainOptions& options, const RankEnvironment& rankEnv) {
  runRoleProcess(RoleOptions{.name = rankEnv.roleTask->name,
                             .index = rankEnv.roleTask->index,
                             .count = rankEnv.roleTask->count,
                             .workers = rankEnv.worldSize,
                             .nodes = options.launch.nnodes,
                             .strategy = options.strategy,
                             .strategyOptions = options.strategyOptions,
                             .pluginDirs = options.pluginDirs,
                             .timeoutS = options.timeoutS,
                             .masterAddr = rankEnv.masterAddr,
                             .masterPort = rankEnv.masterPort,
                             .hostAddress = {}});
}

// This rank's links to the others: rank 0's store and the process group.
struct RankLinks {
  std::shared_ptr<Store> store;
  std::unique_ptr<ProcessGroup> group;
  int restarts = 0;  // how often the launcher restarted this rank
};

RankLinks connectRank(const RankEnvironment& rankEnv, const StrategyRequirements& requirements, Device device,
                      std::chrono::milliseconds timeout) {
  RankLinks links;
  // Role processes find the workers (and each other) through rank 0's store, also in a one-rank job.
  const bool hasRoles = std::any_of(requirements.roles.begin(), requirements.roles.end(),
                                    [](const RoleRequest& role) { return role.count > 0; });
  if (rankEnv.worldSize > 1 || hasRoles) {
    links.store = std::make_shared<TcpStore>(TcpStoreOptions{.host = rankEnv.masterAddr,
                                                             .port = static_cast<std::uint16_t>(rankEnv.masterPort),
                                                             .isServer = rankEnv.rank == 0,
                                                             .worldSize = rankEnv.worldSize,
                                                             .rank = rankEnv.rank,
                                                             .timeout = timeout});
  }
  // Note [Rejoining workers]: a restarted rank cannot join the others' collectives (their groups were made without
  // it); the strategies that take one back use none.
  links.restarts = rankRestarts();
  if (rankEnv.worldSize > 1 && links.restarts == 0) {
    links.group = createProcessGroup(links.store, rankEnv, device, timeout);
  }
  return links;
}

// The data sets of the run, checked against the model's task and labels, and how their batches are shaped.
struct TrainData {
  std::shared_ptr<Dataset> train;
  std::shared_ptr<Dataset> test;
  BatchShaping shaping;      // the training batches'
  BatchShaping evalShaping;  // the test split's
};

TrainData openTrainData(const TrainOptions& options, const BuiltPlan& built, const std::string& modelPath,
                        const fs::path& runDir) {
  const TrainingPlan& plan = *built.plan;
  TrainData data;
  if (plan.labelMeta().dtype != DType::Int64) {
    data.shaping.oneHotTargets = plan.labelMeta();
  }
  const DType inputType = built.options.inputMetas.at(0).dtype;
  if (isFloatingPoint(inputType) && inputType != DType::Float32) {
    data.shaping.inputType = inputType;
  }
  data.evalShaping.staticBatch = built.staticBatch;
  data.evalShaping.inputType = data.shaping.inputType;
  data.train = openForModel(options, DatasetSplit::Train, built.sample, built.classes, runDir);
  data.test = openForModel(options, DatasetSplit::Test, built.sample, built.classes, runDir);
  if (data.train->task() != built.task) {
    fail("--data {}: a {} data set, where {} was expected", options.data, taskName(data.train->task()),
         taskName(built.task));
  }
  const Shape& labels = plan.labelMeta().shape;
  if (plan.labelMeta().dtype == DType::Int64 && Shape(labels.begin() + 1, labels.end()) != data.train->targetShape()) {
    fail(
        "{}: --data {} gives {} targets of shape {} per sample, but the model's loss takes labels of shape {} (its "
        "scores must be {} for this data)",
        modelPath, options.data, taskName(data.train->task()), shapeToString(data.train->targetShape()),
        shapeToString(Shape(labels.begin() + 1, labels.end())),
        data.train->task() == Task::Segmentation    ? "[N, classes, H, W]"
        : data.train->task() == Task::LanguageModel ? "[N, T, vocabulary]"
                                                    : "[N, classes]");
  }
  return data;
}

// What the run's files record besides the steps: the run's fields, and the summary's plan fields at the end.
RunFiles::Setup recordingSetup(const TrainOptions& options, const RankEnvironment& rankEnv, Store* store,
                               const TrainerOptions& trainer, Device device, const BuiltPlan& built,
                               const std::string& modelPath, const std::map<std::string, std::string>& strategyOptions,
                               const Tokenizer* tokenizer, const LossScaler* lossScaler, const fs::path& runDir) {
  RunFiles::Setup recording;
  recording.runDir = runDir;
  recording.rank = rankEnv.rank;
  recording.worldSize = rankEnv.worldSize;
  recording.store = store;
  recording.timeout = trainer.timeout;
  recording.logEvery = options.logEvery;
  recording.device = device;
  recording.samplePeriod = std::chrono::milliseconds(static_cast<std::int64_t>(options.sampleEveryS * 1000.0));
  recording.runFields = {{"model", modelPath},
                         {"strategy", options.strategy},
                         {"strategy_options", strategyOptions},  // e.g. mode=async, lr_staleness=on
                         {"device", describe(device)},
                         {"params", built.plan->parameters().totalElements()},
                         {"precision", options.device.precision},
                         {"task", taskName(built.task)}};
  if (built.task == Task::LanguageModel) {
    recording.runFields["seq_len"] = built.sample.back();
    recording.runFields["vocabulary"] = built.classes;
    recording.runFields["tokenizer"] = tokenizer ? tokenizer->description() : "none (token ids as given)";
  }
  recording.finalFields = [&options, &built, device, lossScaler](nlohmann::json& summary) {
    addPlanFields(summary, options, built, device, lossScaler);
    if (built.task == Task::LanguageModel) {
      summary["tokens_per_s"] = summary.value("samples_per_s", 0.0) * static_cast<double>(built.sample.back());
    }
  };
  return recording;
}

void train(const TrainOptions& options) {
  checkTrainFlags(options);
  const std::map<std::string, std::string> strategyOptions = parseStrategyOptions(options.strategyOptions);
  const std::unique_ptr<LoadedStrategy> strategy = PluginHost(toPaths(options.pluginDirs)).load(options.strategy);
  // --- launcher (cli/launch/launcher.h): with --nproc/--nnodes this process starts the ranks and waits for them.
  // The roles the strategy asks for, started beside the ranks by the launcher (on node rank 0). In the launcher
  // process the world size is still 1: the job's is nproc x nnodes.
  const StrategyRequirements launched = strategy->requirements(
      StrategyQuery{strategyOptions, options.launch.nproc * options.launch.nnodes, options.launch.nnodes});
  checkJobRequirements(options, launched);
  const RoleLaunch roles{.roles = launched.roles,
                         .strategy = options.strategy,
                         .strategyOptions = options.strategyOptions,
                         .pluginDirs = options.pluginDirs,
                         .timeoutS = options.timeoutS,
                         .ranksMayDepart = launched.toleratesWorkerLoss,
                         .ranksMayRejoin = launched.rejoinsWorkers};
  const fs::path runDir = runDirOf(options);
  // A text corpus is tokenized once, here, before any rank starts (their openDataset then finds it cached).
  if (options.launch.nproc * options.launch.nnodes > 1 && rankEnvironmentIsLauncher(options.launch)) {
    tokenizerOfData(options, runDir);
  }
  if (launchIfNeeded(options.launch, roles)) {
    return;
  }
  const RankEnvironment rankEnv = rankEnvironment(launched.roles);
  if (rankEnv.roleTask) {
    runRoleTask(options, rankEnv);
    return;
  }
  prepareRank(rankEnv);
  ModelOptions modelOptions = options.model;
  if (modelOptions.threads == 0) {
    modelOptions.threads = threadsFromEnvironment();  // the launcher's share of the cores, if any
  }
  applyThreads(modelOptions);
  // --- end launcher
  const StrategyRequirements requirements =
      strategy->requirements(StrategyQuery{strategyOptions, rankEnv.worldSize, options.launch.nnodes});
  const std::string modelPath =
      !options.model.modelPath.empty() ? options.model.modelPath : defaultModelPathForData(options.data);
  const bool lead = rankEnv.rank == 0;
  const Device device = selectDevice(options.device, rankEnv.localRank);
  const TrainerOptions trainer = trainerOptions(options, requirements, strategyOptions);
  if (lead && options.lrScaling == "linear") {
    fmt::print("learning rate {:g} scaled linearly to the global batch: {:g}\n", options.lr, trainer.schedule.baseLr);
  }
  RankLinks links = connectRank(rankEnv, requirements, device, trainer.timeout);
  std::optional<LossScaler> lossScaler;
  if (const std::optional<LossScalerOptions> scaling = lossScalerOptionsOf(options.device)) {
    lossScaler.emplace(*scaling);
  }
  const BuiltPlan built = buildPlan(options, modelPath, device, requirements, lossScaler.has_value());
  TrainingPlan& plan = *built.plan;
  releaseCachedHostMemory();  // the imported model's initializers, now in the plan's buffers

  const TrainData data = openTrainData(options, built, modelPath, runDir);
  // Note [Tokenizers]: the run keeps the tokenizer of its text, for generation from the trained model.
  const std::shared_ptr<Tokenizer> tokenizer = tokenizerOfData(options, runDir);
  if (tokenizer && lead) {
    saveTokenizer(*tokenizer, runDir);
  }
  LoaderBatchSource trainBatches(data.train,
                                 DataLoaderOptions{.batchSize = options.batchSize,
                                                   .rank = rankEnv.rank,
                                                   .worldSize = rankEnv.worldSize,
                                                   .shuffle = true,
                                                   .seed = options.seed,
                                                   .dropLast = true},
                                 data.shaping);
  // Every rank evaluates its share of the test split (Note [Sharding]: every sample counted once).
  LoaderBatchSource testBatches(data.test,
                                DataLoaderOptions{.batchSize = options.batchSize,
                                                  .rank = rankEnv.rank,
                                                  .worldSize = rankEnv.worldSize,
                                                  .shuffle = false,
                                                  .dropLast = false},
                                data.evalShaping);

  RunFiles::Setup recording =
      recordingSetup(options, rankEnv, links.store.get(), trainer, device, built, modelPath, strategyOptions,
                     tokenizer.get(), lossScaler ? &*lossScaler : nullptr, runDir);
  recording.roles = requirements.roles;
  recording.restarts = links.restarts;
  RunFiles runFiles(std::move(recording));
  TensorProtoCheckpoints checkpoints(runDir / "checkpoint", rankEnv.rank, rankEnv.worldSize);

  Trainer run(
      TrainerParts{.program = plan,
                   .train = trainBatches,
                   .test = &testBatches,
                   .strategy = *strategy,
                   .recorder = runFiles,
                   .checkpoints = &checkpoints,
                   .group = links.group.get(),
                   .store = links.store.get(),
                   .lossScaler = lossScaler ? &*lossScaler : nullptr,
                   .place = RankPlace{rankEnv.rank, rankEnv.worldSize, rankEnv.localRank, options.launch.nnodes},
                   .task = built.task,
                   .classes = built.classes,
                   .subgroups =
                       [&](const std::vector<int>& ranks) {
                         return createSubgroup(links.store, rankEnv, device, trainer.timeout, ranks);
                       },
                   .describeSilentRanks = describeSilentRanksOf(links.store, rankEnv, trainer.timeout)},
      trainer);
  if (trainer.resume) {
    const bool inside = run.stepsDone() > run.startEpoch() * run.stepsPerEpoch();
    fmt::print("resumed from {} {} epoch {} (step {})\n", checkpoints.describe(), inside ? "inside" : "after",
               inside ? run.startEpoch() : run.startEpoch(), run.stepsDone());
  }
  if (rankEnv.worldSize > 1) {
    fmt::print("rank {} of {}: strategy {} set up, {} batches of {} per epoch (local rank {} of {})\n", rankEnv.rank,
               rankEnv.worldSize, options.strategy, trainBatches.batchesPerEpoch(), options.batchSize,
               rankEnv.localRank, rankEnv.localWorldSize);
  }
  if (lead) {
    fmt::print(
        "training {} on {} ({} train / {} test samples), {} parameters, strategy {} on {} rank(s), batch {} "
        "per rank x {} micro-batch(es), {} steps per epoch\n",
        modelPath, data.train->description(), data.train->size(), data.test->size(), plan.parameters().totalElements(),
        options.strategy, rankEnv.worldSize, options.batchSize, trainer.microBatches, run.stepsPerEpoch());
  }
  allocatorFor(device).stats().resetPeaks();
  std::optional<OpProfiler> profiler;
  if (options.profile) {
    profiler.emplace(plan.executor(), /*warmupRuns=*/2);
  }
  run.run();
  if (profiler && lead) {
    profiler->print(options.profileTop);
  }
  profiler.reset();
  if (!options.exportPath.empty()) {
    run.withFullWeights([&] {
      if (lead) {
        exportOnnxWithWeights(modelPath, plan.modelWithCurrentWeights(), options.exportPath,
                              tokenizer ? tokenizerMetadata(*tokenizer) : std::map<std::string, std::string>{});
        fmt::print("exported the trained model to {}\n", options.exportPath);
      }
    });
  }
  runFiles.release();
}
}  // namespace

void addTrainCommand(CLI::App& app) {
  auto o = std::make_shared<TrainOptions>();
  CLI::App* c = app.add_subcommand("train", "train a model (default: the bundled CNN on Fashion-MNIST)");
  c->add_option("model", o->model.modelPath, "the .onnx file (default: the bundled CNN)");
  c->add_option("--data", o->data,
                "fashion-mnist | fashion-mnist:DIR | mnist:DIR | cifar10:DIR | synthetic | synthetic:segmentation "
                "(a class per pixel) | tokens:FILE | tokens:TRAIN,VAL | text (the built-in corpus) | text:FILE|DIR | "
                "images:DIR (a folder per class) | segmentation:DIR (images/ and masks/)");
  c->add_option("--epochs", o->epochs, "epochs to train")->check(CLI::PositiveNumber);
  c->add_option("--max-steps", o->maxSteps, "stop after this many steps (overrides --epochs)");
  c->add_option("--stop-after-epoch", o->stopAfterEpoch,
                "stop cleanly after this epoch, keeping the schedule of --epochs (resume later with --resume)");
  c->add_option("--batch-size", o->batchSize, "samples per step")->check(CLI::PositiveNumber);
  c->add_option("--optimizer", o->optimizer, "sgd | adam | adamw | lars | lamb (layer-wise trust ratios)");
  c->add_option("--lr", o->lr, "learning rate");
  c->add_option("--lr-scaling", o->lrScaling,
                "none | linear: --lr times the global batch over --lr-reference-batch (Goyal et al.)");
  c->add_option("--lr-reference-batch", o->lrReferenceBatch, "the global batch --lr was tuned for (default 256)");
  c->add_option("--lars-trust", o->lrTrust, "LARS's trust coefficient eta (default 0.001)");
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
  c->add_option("--save-every", o->saveEvery,
                "also write a checkpoint every N steps inside an epoch (implies --save; --resume continues at the "
                "exact batch)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--resume", o->resume, "continue the run in RUN_DIR from its checkpoint");
  c->add_option("--export", o->exportPath, "write the trained model as .onnx");
  c->add_flag("--augment", o->augment, "random crop and flip (CIFAR-10); random flip (images, segmentation)");
  c->add_option("--log-every", o->logEvery, "log a metrics line every N steps")->check(CLI::PositiveNumber);
  c->add_option("--sample-every", o->sampleEveryS,
                "seconds between samples of memory and utilisation in RUN_DIR/timeseries/rank-R.jsonl (0: off)")
      ->check(CLI::NonNegativeNumber);
  c->add_option("--synthetic-samples", o->syntheticSamples, "training samples of --data synthetic");
  c->add_option("--seq-len", o->seqLen,
                "token data: the sequence length T of each sample (default: the model's; needed when the model leaves "
                "it open)");
  c->add_option("--tokenizer", o->tokenizer,
                "text data: bytes (default: one id per byte, 256 ids) | sentencepiece:VOCAB[:bpe|unigram] (trained on "
                "the corpus, kept in the run directory)");
  c->add_option("--token-bytes", o->tokenBytes,
                "tokens:FILE without Strata's header: bytes per id, 2 (uint16, nanoGPT's train.bin) or 4");
  addDeviceOptions(*c, o->device);
  addLossScaleOption(*c, o->device);
  c->add_option("--threads", o->model.threads, "CPU threads (default: all cores, divided among local ranks)");
  addLaunchOptions(*c, o->launch);
  c->add_option("--strategy", o->strategy, "distribution strategy plugin (single, ddp, or a third-party one)");
  c->add_option("--strategy-opt", o->strategyOptions, "strategy option key=value (repeatable)");
  c->add_option("--slow-rank", o->slowRank,
                "R:F, a straggler: rank R's forward and backward take F times as long (e.g. 1:2)");
  c->add_option("--plugin-dir", o->pluginDirs, "directory searched first for strategy plugins (repeatable)");
  c->add_option("--grad-accum", o->gradAccum, "micro-batches per optimizer step")->check(CLI::PositiveNumber);
  c->add_option("--cuda-graph", o->cudaGraph,
                "off (default) | on | auto: record the forward and backward pass as a CUDA graph after two warm-up "
                "steps and replay it (auto keeps it only if it is faster); needs a strategy without node hooks "
                "(single)");
  addChannelsLastOption(*c, o->device);
  c->add_flag("--profile", o->profile,
              "print the training step's time per op type (forward and backward apart) and the kernel each node runs, "
              "after two warm-up runs (the lead rank)");
  c->add_option("--profile-top", o->profileTop, "with --profile: also list the N slowest nodes");
  c->add_option("--timeout", o->timeoutS, "seconds before a stuck collective or rendezvous ends the job");
  c->callback([o] { train(*o); });
}

}  // namespace strata::cli
