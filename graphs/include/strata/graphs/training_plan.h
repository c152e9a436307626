#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "strata/executor.h"
#include "strata/graphs/autodiff.h"
#include "strata/graphs/channels_last.h"
#include "strata/graphs/graph.h"
#include "strata/optim/parameter_store.h"

namespace strata {

enum class LossKind { CrossEntropy, Mse };

LossKind parseLossKind(const std::string& name);

struct TrainingPlanOptions {
  // The model's data inputs (static shapes, batch included). Empty: the graph's own shapes with batch defaultBatch.
  std::vector<TensorMeta> inputMetas;
  std::int64_t defaultBatch = 1;
  LossKind loss = LossKind::CrossEntropy;
  Device device = Device::cpu();
  // Float16 or BFloat16: mixed precision (graphs/autocast.h) over float32 master weights and gradients.
  std::optional<DType> mixedPrecision;
  // The loss gradient starts from setLossScale's value instead of 1 (loss scaling for float16).
  bool scaledLoss = false;
  // Whether the step is recorded once and replayed (CUDA graphs; Note [Recorded runs]). Evaluation never is.
  Recording recording = Recording::Off;
  // Whether convolutions, batch norm and pooling run on channels-last values (graphs/channels_last.h).
  bool channelsLast = false;
};

struct StepResult {
  Tensor loss;                  // scalar
  std::vector<Tensor> outputs;  // the model's outputs, in graph-output order
};

// A model made trainable: a loss appended when the graph has none, the backward graph built once, parameters and
// gradients in a ParameterStore's flat buffers (the plan reads parameter views and writes gradient views
// directly), batch-norm running statistics updated in place, and a static plan for the whole step.
class TrainingPlan {
 public:
  // Takes the model by value: its parameter and buffer tensors are replaced by views of the plan's own flat
  // buffers, so (once the caller drops its copy) every parameter byte is held, and counted, once.
  TrainingPlan(Graph model, const TrainingPlanOptions& options);

  // Forward and backward on one batch in training mode; gradients land in parameters().gradient(i).
  StepResult step(const std::vector<Tensor>& inputs, const Tensor& labels);
  // Forward in evaluation mode (batch norm on running statistics, dropout off) with the current parameters.
  // The eval plan is built on first use for the inputs' shapes (the last batch of an epoch may be smaller).
  std::vector<Tensor> evaluate(const std::vector<Tensor>& inputs);

  // Scales the loss gradient, so every gradient comes out multiplied by `scale` (needs options.scaledLoss).
  void setLossScale(double scale);

  ParameterStore& parameters() { return *store_; }
  const std::vector<std::string>& parameterNames() const { return names_; }
  Executor& executor() { return *executor_; }
  const TrainingGraph& trainingGraph() const { return training_; }
  // Buffers (batch-norm running statistics): name and the tensor updated in place.
  const std::vector<std::pair<std::string, Tensor>>& buffers() const { return buffers_; }
  const TensorMeta& labelMeta() const { return labelMeta_; }
  // What the channels-last rewrite changed (all zero without options.channelsLast).
  const ChannelsLastReport& channelsLastReport() const { return channelsLastReport_; }
  // The model graph with the trained parameters and buffers as initializers (for --export and checkpoints).
  Graph modelWithCurrentWeights() const;

 private:
  Graph model_;  // the imported model, unspecialised
  TrainingPlanOptions options_;
  TrainingGraph training_;
  TensorMeta labelMeta_;
  ChannelsLastReport channelsLastReport_;
  std::unique_ptr<ParameterStore> store_;
  std::vector<std::string> names_;
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::unique_ptr<Executor> executor_;
  Tensor lossScale_;  // the loss gradient's seed, fed to the step when the loss is scaled
  double lossScaleValue_ = 1.0;
  std::vector<std::pair<std::vector<TensorMeta>, std::unique_ptr<Executor>>> evalExecutors_;  // by input metas
};

}  // namespace strata
