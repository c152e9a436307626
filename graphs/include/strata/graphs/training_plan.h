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
#include "strata/sdk/strategy.h"
#include "strata/train/trainable_program.h"

namespace strata {

enum class LossKind { CrossEntropy, Mse };

LossKind parseLossKind(const std::string& name);

struct TrainingPlanOptions {
  // The model's data inputs (static shapes, batch included). Empty: the graph's own shapes with batch defaultBatch.
  std::vector<TensorMeta> inputMetas;
  std::int64_t defaultBatch = 1;
  LossKind loss = LossKind::CrossEntropy;
  // Cross-entropy appended to a graph without a loss: the scores' class axis is 1 ([N, C, ...], classifiers and
  // segmentation nets) or, when set, the last ([N, T, V], language models; Note [Class axis last]).
  bool classAxisLast = false;
  // Labels equal to it add nothing to the appended cross-entropy (segmentation masks' 255 on object boundaries).
  // A language model's loss ignores -100 whatever this says (Note [Class axis last]).
  std::optional<std::int64_t> ignoreIndex;
  Device device = Device::cpu();
  // Float16 or BFloat16: mixed precision (graphs/autocast.h) over float32 master weights and gradients.
  std::optional<DType> mixedPrecision;
  // The loss gradient starts from setLossScale's value instead of 1 (loss scaling for float16).
  bool scaledLoss = false;
  // The loss gradient starts from setGradientScale's value instead of 1 (1/K over K accumulated micro-batches).
  // Implied by scaledLoss.
  bool seededLoss = false;
  // How the parameters are cut into units, each in flat buffers of its own (graphs/unit_partition.h).
  UnitPartition units;
  // Whether the step is recorded once and replayed (CUDA graphs; Note [Recorded runs]). Evaluation never is.
  Recording recording = Recording::Off;
  // Whether convolutions, batch norm and pooling run on channels-last values (graphs/channels_last.h).
  bool channelsLast = false;
  // Note [Fused ReLU]: batch norms and Adds and the Relu that alone reads them run as one node (CPU plans without
  // mixed precision; elsewhere this does nothing).
  bool fuseRelu = true;
  // Note [Fused attention]: attention chains run as one node on the CPU (off: as written, for comparison).
  bool fuseAttention = true;
};

// Note [Tasks] without data at hand (strata plan, inspect): a model that takes integer ids [N, T] and whose first
// output is [N, T, V] is a language model, whose cross-entropy has the class axis last.
bool takesTokensForScoresClassLast(const Graph& model, const std::vector<TensorMeta>& inputs);

// The graph in evaluation mode: batch norm on running statistics, dropout off (a training-mode export's Dropout
// loses its training_mode input, so the executor's mode decides).
Graph evaluationModeGraph(Graph graph);

// A model made trainable: a loss appended when the graph has none, the backward graph built once, parameters and
// gradients in a ParameterStore's flat buffers (the plan reads parameter views and writes gradient views
// directly), batch-norm running statistics updated in place, and a static plan for the whole step.
class TrainingPlan final : public TrainableProgram {
 public:
  // Takes the model by value: its parameter and buffer tensors are replaced by views of the plan's own flat
  // buffers, so (once the caller drops its copy) every parameter byte is held, and counted, once.
  TrainingPlan(Graph model, const TrainingPlanOptions& options);

  // Forward and backward on one batch in training mode; gradients land in parameters().gradient(i).
  StepResult step(const std::vector<Tensor>& inputs, const Tensor& labels) override;
  // Forward in evaluation mode (batch norm on running statistics, dropout off) with the current parameters.
  // The eval plan is built on first use for the inputs' shapes (the last batch of an epoch may be smaller).
  std::vector<Tensor> evaluate(const std::vector<Tensor>& inputs) override;

  // Scales the loss gradient, so every gradient comes out multiplied by `scale` (needs options.scaledLoss).
  void setLossScale(double scale) override;
  // Scales the loss gradient by `scale` on top of the loss scale: with 1/K, K micro-batches accumulated into the
  // gradient buffers sum to the mean gradient. Needs options.seededLoss or scaledLoss unless scale is 1.
  void setGradientScale(double scale) override;
  // Whether backward adds into the gradient buffers instead of overwriting them (Note [Accumulated gradients]).
  void setAccumulateGradients(bool on) { executor_->setAccumulateGradients(on); }

  ParameterStore& parameters() override { return *store_; }
  const std::vector<std::string>& parameterNames() const { return names_; }
  Executor& executor() override { return *executor_; }
  const TrainingGraph& trainingGraph() const { return training_; }
  // Buffers (batch-norm running statistics): name and the tensor updated in place.
  const std::vector<std::pair<std::string, Tensor>>& buffers() const override { return buffers_; }
  const TensorMeta& labelMeta() const { return labelMeta_; }
  // What the channels-last rewrite changed (all zero without options.channelsLast).
  const ChannelsLastReport& channelsLastReport() const { return channelsLastReport_; }
  // The model graph with the trained parameters and buffers as initializers (for --export and checkpoints), every
  // parameter in the model's own layout.
  Graph modelWithCurrentWeights() const;
  // Whether parameter i is stored channels-last ([K, spatial..., C / group]; Note [Channels-last weights]), and the
  // names of those that are.
  bool storedChannelsLast(std::size_t i) const;
  std::vector<std::string> channelsLastParameters() const override;
  // Host copies of parameter i and its gradient in the model's layout ([K, C / group, spatial...] for a weight
  // stored channels-last).
  Tensor channelsFirstParameter(std::size_t i) const;
  Tensor channelsFirstGradient(std::size_t i) const;

 private:
  bool seededLoss() const { return options_.scaledLoss || options_.seededLoss; }
  void writeLossGradSeed(double lossScale, double gradientScale);

  Graph model_;  // the imported model, unspecialised
  TrainingPlanOptions options_;
  TrainingGraph training_;
  TensorMeta labelMeta_;
  ChannelsLastReport channelsLastReport_;
  std::unique_ptr<ParameterStore> store_;
  std::vector<std::string> names_;
  // Per parameter, its value in model_: the parameter's own id, or for a weight stored channels-last the
  // channels-first weight it replaces (one of channelsLastWeights_).
  std::vector<int> modelValues_;
  std::vector<int> channelsLastWeights_;  // model_ ids of the weights stored channels-last
  std::vector<std::pair<std::string, Tensor>> buffers_;
  std::unique_ptr<Executor> executor_;
  // The loss gradient's seed (lossScaleValue_ * gradientScaleValue_), fed to the step when it is an input.
  Tensor lossGradSeed_;
  double lossScaleValue_ = 1.0;
  double gradientScaleValue_ = 1.0;
  std::vector<std::pair<std::vector<TensorMeta>, std::unique_ptr<Executor>>> evalExecutors_;  // by input metas
};

}  // namespace strata
