#pragma once
// In-process stand-ins for what `strata train` wires into a Trainer: a two-layer MLP, batches cut from fixed
// tensors, a recorder that keeps what it is told, and checkpoints in memory.

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include <thread>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include "strata/comm/gloo_process_group.h"
#include "strata/comm/in_memory_store.h"
#include "strata/comm/staging_process_group.h"
#include "strata/error.h"
#include "strata/graphs/training_plan.h"
#include "strata/loaders/onnx_importer.h"
#include "strata/plugin_host.h"
#include "strata/train/batch_source.h"
#include "strata/train/checkpoint_store.h"
#include "strata/train/run_recorder.h"
#include "strata/train/trainer.h"
#include "test_models.h"

namespace strata::testing {

inline constexpr std::int64_t kFeatures = 8;
inline constexpr std::int64_t kClasses = 4;

// x[N,8] -> Gemm(16) -> Relu -> Gemm(4) -> y[N,4]: no batch norm, so a batch split over ranks or micro-batches has
// exactly the gradient of the whole batch.
inline TrainingPlan mlpPlan(const TempDir& dir, std::int64_t batch, UnitPartition units = {},
                            Device device = Device::cpu()) {
  onnx::ModelProto model = emptyModel();
  setTensorType(model.mutable_graph()->add_input(), "x", onnx::TensorProto::FLOAT, {-1, kFeatures});
  addInitializer(model, "fc1.weight", {16, kFeatures}, randomValues(16 * kFeatures, 11, 0.5f));
  addInitializer(model, "fc1.bias", {16}, randomValues(16, 12, 0.1f));
  addInitializer(model, "fc2.weight", {kClasses, 16}, randomValues(kClasses * 16, 13, 0.5f));
  addInitializer(model, "fc2.bias", {kClasses}, randomValues(kClasses, 14, 0.1f));
  setInt(addNode(model, "Gemm", {"x", "fc1.weight", "fc1.bias"}, {"h"}, "fc1"), "transB", 1);
  addNode(model, "Relu", {"h"}, {"r"}, "relu");
  setInt(addNode(model, "Gemm", {"r", "fc2.weight", "fc2.bias"}, {"y"}, "fc2"), "transB", 1);
  setTensorType(model.mutable_graph()->add_output(), "y", onnx::TensorProto::FLOAT, {-1, kClasses});
  TrainingPlanOptions options;
  options.inputMetas = {TensorMeta{DType::Float32, {batch, kFeatures}}};
  options.seededLoss = true;
  options.units = units;
  options.device = device;
  static int counter = 0;
  return TrainingPlan(importOnnx(save(model, dir.path() / ("mlp" + std::to_string(counter++) + ".onnx"))), options);
}

// Rows of fixed tensors, in order: batch b of rank r of `world` holds rows [(b * world + r) * B, + B), so the ranks'
// batch b together are the rows one process with batch world x B takes as its batch b.
class RowBatches final : public BatchSource {
 public:
  RowBatches(Tensor x, Tensor labels, std::int64_t batchSize, int rank = 0, int world = 1)
      : x_(std::move(x)), labels_(std::move(labels)), batchSize_(batchSize), rank_(rank), world_(world) {}

  void startEpoch(std::int64_t /*epoch*/) override { next_ = 0; }
  std::optional<TrainBatch> next() override {
    if (next_ >= batchesPerEpoch()) {
      return std::nullopt;
    }
    const std::int64_t first = (next_++ * world_ + rank_) * batchSize_;
    TrainBatch batch;
    batch.input = x_.flatSlice(first * kFeatures, batchSize_ * kFeatures).reshape({batchSize_, kFeatures}).clone();
    batch.targets = labels_.flatSlice(first, batchSize_).clone();
    batch.classes = batch.targets;
    batch.countedRows = batchSize_;
    return batch;
  }
  std::int64_t batchesPerEpoch() const override { return x_.dim(0) / (batchSize_ * world_); }
  std::int64_t batchSize() const override { return batchSize_; }

 private:
  Tensor x_, labels_;
  std::int64_t batchSize_;
  int rank_, world_;
  std::int64_t next_ = 0;
};

// `rows` samples whose class is the argmax of a fixed linear map of x, so the MLP can learn them.
inline std::pair<Tensor, Tensor> separableRows(std::int64_t rows, unsigned seed) {
  Tensor x = randomTensor({rows, kFeatures}, seed);
  Tensor labels = Tensor::empty(DType::Int64, {rows});
  for (std::int64_t r = 0; r < rows; ++r) {
    std::int64_t best = 0;
    double top = -1e30;
    for (std::int64_t c = 0; c < kClasses; ++c) {
      double score = 0;
      for (std::int64_t f = 0; f < kFeatures; ++f) {
        score += x.data<float>()[r * kFeatures + f] * static_cast<double>(((c + 1) * (f + 3)) % 7 - 3);
      }
      if (score > top) {
        top = score;
        best = c;
      }
    }
    labels.data<std::int64_t>()[r] = best;
  }
  return {x, labels};
}

class KeptRecords final : public RunRecorder {
 public:
  void step(const StepRecord& record) override { steps.push_back(record); }
  void epoch(const EpochRecord& record) override { epochs.push_back(record); }
  void finish(const RunTotals& t, const RankFigures& mine) override {
    totals = t;
    figures = mine;
    finished = true;
  }
  std::vector<StepRecord> steps;
  std::vector<EpochRecord> epochs;
  RunTotals totals;
  RankFigures figures;
  bool finished = false;
};

// Checkpoints in memory, shared by thread ranks: entries written since beginWrite become visible at commit.
class MemoryCheckpoints final : public CheckpointStore {
 public:
  bool exists() const override { return !published_.tensors.empty() || !published_.text.empty(); }
  std::unique_ptr<StateWriter> beginWrite() override { return std::make_unique<Writer>(*this); }
  void commit() override {
    std::lock_guard lock(mutex_);
    published_ = std::exchange(pending_, {});
  }
  std::unique_ptr<StateReader> open() override {
    STRATA_CHECK(exists(), "memory checkpoints: nothing committed");
    return std::make_unique<Reader>(published_);
  }
  std::string describe() const override { return "memory checkpoints"; }

 private:
  struct Entries {
    std::map<std::string, Tensor> tensors;
    std::map<std::string, std::string> text;
  };
  class Writer final : public StateWriter {
   public:
    explicit Writer(MemoryCheckpoints& owner) : owner_(owner) {}
    void putTensor(const std::string& key, const Tensor& tensor) override {
      std::lock_guard lock(owner_.mutex_);
      owner_.pending_.tensors[key] = tensor.to(Device::cpu()).clone();
    }
    void putText(const std::string& key, std::string_view text) override {
      std::lock_guard lock(owner_.mutex_);
      owner_.pending_.text[key] = std::string(text);
    }

   private:
    MemoryCheckpoints& owner_;
  };
  class Reader final : public StateReader {
   public:
    explicit Reader(const Entries& entries) : entries_(entries) {}
    bool has(const std::string& key) const override {
      return entries_.tensors.contains(key) || entries_.text.contains(key);
    }
    void getTensor(const std::string& key, Tensor destination) override {
      const auto it = entries_.tensors.find(key);
      STRATA_CHECK(it != entries_.tensors.end(), "memory checkpoints: no tensor '{}'", key);
      STRATA_CHECK(it->second.meta() == destination.meta(), "memory checkpoints: '{}' is {}, not {}", key,
                   it->second.meta().toString(), destination.meta().toString());
      destination.copyFrom(it->second);
    }
    std::string getText(const std::string& key) override {
      const auto it = entries_.text.find(key);
      STRATA_CHECK(it != entries_.text.end(), "memory checkpoints: no entry '{}'", key);
      return it->second;
    }

   private:
    Entries entries_;
  };

  std::mutex mutex_;
  Entries pending_;
  Entries published_;
};

inline std::unique_ptr<LoadedStrategy> loadStrategy(const std::string& name) {
  return PluginHost::withDirectories({STRATA_BUILD_PLUGIN_DIR}).load(name);
}

// Every parameter of `plan`, in group order (the flat buffers must be materialised).
inline std::vector<float> parametersOf(TrainingPlan& plan) {
  std::vector<float> values;
  for (std::size_t g = 0; g < plan.parameters().groupCount(); ++g) {
    const Tensor flat = plan.parameters().flatParameters(g).to(Device::cpu());  // from a device too
    values.insert(values.end(), flat.data<float>(), flat.data<float>() + flat.numel());
  }
  return values;
}

// What one thread rank ended with: its full parameters (gathered through the strategy) and its records.
struct RankOutcome {
  std::vector<float> parameters;
  KeptRecords records;
};

// Trains `world` ranks as threads (Gloo's base_test.h style): each rank its own MLP plan on `device` with the units
// the strategy asks for, its RowBatches of `batch` rows, and a Gloo group over one shared InMemoryStore (staged
// through host memory off the CPU, as the CLI builds it; `jobStore`, when given, is that store, where roles
// started by the test publish their endpoints).
inline std::vector<RankOutcome> trainThreadRanks(const TempDir& dir, int world, const std::string& strategyName,
                                                 const std::map<std::string, std::string>& strategyOptions,
                                                 TrainerOptions options, const std::pair<Tensor, Tensor>& rows,
                                                 std::int64_t batch, CheckpointStore* checkpoints = nullptr,
                                                 int nodes = 1, Device device = Device::cpu(),
                                                 std::shared_ptr<InMemoryStore> jobStore = nullptr) {
  auto store = jobStore != nullptr ? std::move(jobStore) : std::make_shared<InMemoryStore>();
  std::vector<std::unique_ptr<LoadedStrategy>> strategies;
  std::vector<std::unique_ptr<TrainingPlan>> plans;
  for (int r = 0; r < world; ++r) {
    strategies.push_back(loadStrategy(strategyName));
    const StrategyRequirements requirements =
        strategies.back()->requirements(StrategyQuery{strategyOptions, world, nodes});
    plans.push_back(std::make_unique<TrainingPlan>(mlpPlan(dir, batch, requirements.units, device)));
    options.accumulation = requirements.accumulation;
  }
  options.strategyOptions = strategyOptions;
  std::vector<RankOutcome> outcomes(static_cast<std::size_t>(world));
  std::vector<std::thread> ranks;
  for (int r = 0; r < world; ++r) {
    ranks.emplace_back([&, r] {
      try {
        std::unique_ptr<ProcessGroup> group = std::make_unique<GlooProcessGroup>(
            store, r, world, ProcessGroupOptions{.timeout = std::chrono::seconds(60)});
        if (device.type != DeviceType::CPU) {
          group = std::make_unique<StagingProcessGroup>(std::move(group));
        }
        RowBatches batches(rows.first, rows.second, batch, r, world);
        RankOutcome& outcome = outcomes[static_cast<std::size_t>(r)];
        Trainer trainer(
            TrainerParts{.program = *plans[r],
                         .train = batches,
                         .strategy = *strategies[r],
                         .recorder = outcome.records,
                         .checkpoints = checkpoints,
                         .group = group.get(),
                         .store = store.get(),
                         .place = RankPlace{r, world, r % (world / nodes), nodes},
                         // Subgroups over the same store, as the CLI builds them (Note [Subgroups]).
                         .subgroups = [&, r](const std::vector<int>& members) -> std::unique_ptr<ProcessGroup> {
                           const auto at = std::find(members.begin(), members.end(), r);
                           GlooOptions gloo;
                           gloo.groupName = fmt::format("sub-{}", fmt::join(members, "-"));
                           std::unique_ptr<ProcessGroup> subgroup = std::make_unique<GlooProcessGroup>(
                               store, static_cast<int>(at - members.begin()), static_cast<int>(members.size()),
                               ProcessGroupOptions{.timeout = std::chrono::seconds(60)}, gloo);
                           if (device.type != DeviceType::CPU) {
                             subgroup = std::make_unique<StagingProcessGroup>(std::move(subgroup));
                           }
                           return subgroup;
                         }},
            options);
        trainer.run();
        trainer.withFullWeights([&] { outcome.parameters = parametersOf(*plans[r]); });
      } catch (const std::exception& e) {
        ADD_FAILURE() << "rank " << r << ": " << e.what();
      }
    });
  }
  for (std::thread& t : ranks) {
    t.join();
  }
  return outcomes;
}

}  // namespace strata::testing
