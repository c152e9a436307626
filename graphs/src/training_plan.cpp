#include "strata/graphs/training_plan.h"

#include <algorithm>
#include <iterator>

#include <spdlog/spdlog.h>

#include "strata/channels_last.h"
#include "strata/error.h"
#include "strata/graphs/attention_fusion.h"
#include "strata/graphs/autocast.h"
#include "strata/graphs/channels_last_weights.h"
#include "strata/graphs/gelu_fusion.h"
#include "strata/graphs/lower.h"
#include "strata/graphs/mish_fusion.h"
#include "strata/graphs/relu_fusion.h"
#include "strata/graphs/silu_fusion.h"
#include "strata/graphs/specialize.h"
#include "strata/graphs/transposed_weights.h"
#include "strata/graphs/unit_partition.h"

namespace strata {
namespace {

// Note [Fused ReLU] and Note [SiLU fusion]: the fused nodes' kernels are the CPU's, and mixed precision casts around
// the ops they replace, so both fusions are for CPU plans in full precision.
bool fusesForCpu(const TrainingPlanOptions& options) {
  return options.device.type == DeviceType::CPU && !options.mixedPrecision;
}

bool fusesRelu(const TrainingPlanOptions& options) {
  return options.fuseRelu && fusesForCpu(options);
}

// A copy on `device` that nothing else shares (a clone even when the tensor already lives there).
Tensor ownedCopy(const Tensor& t, Device device) {
  Tensor copy = Tensor::empty(t.meta(), MemoryCategory::Parameters, device);
  copy.copyFrom(t);
  return copy;
}

bool isLossOp(const std::string& type) {
  return type == "SoftmaxCrossEntropyLoss" || type == "NegativeLogLikelihoodLoss";
}

// The node computing the model's own loss (a graph that already ends in one), or -1.
int builtInLossNode(const Graph& graph) {
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    const Node& node = graph.nodes[n];
    if (isLossOp(node.opType) && !node.outputs.empty() &&
        std::find(graph.outputs.begin(), graph.outputs.end(), node.outputs[0]) != graph.outputs.end()) {
      return static_cast<int>(n);
    }
  }
  return -1;
}

int addLossNode(Graph& graph, const std::string& type, std::vector<int> inputs, Attributes attrs,
                const std::string& name = {}) {
  Value out;
  out.name = fmt::format("strata_loss/{}_{}", type, graph.nodes.size());
  out.producer = static_cast<int>(graph.nodes.size());
  const int id = graph.addValue(std::move(out));
  Node node;
  node.name = name.empty() ? fmt::format("strata_loss/{}", type) : "strata_loss/" + name;
  node.opType = type;
  node.inputs = std::move(inputs);
  node.outputs = {id};
  node.attrs = std::move(attrs);
  node.phase = NodePhase::Loss;
  graph.nodes.push_back(std::move(node));
  return id;
}

// A constant int64 vector value (a Reshape's target shape).
int addShapeConstant(Graph& graph, const std::string& name, const Shape& dims) {
  Value value;
  value.name = name;
  value.meta = TensorMeta{DType::Int64, {static_cast<std::int64_t>(dims.size())}};
  value.constant = Tensor::empty(DType::Int64, value.meta.shape);
  std::copy(dims.begin(), dims.end(), value.constant.data<std::int64_t>());
  return graph.addValue(std::move(value));
}

// Note [Class axis last]: a language model's scores are [N, T, V], the class axis last, where ONNX's
// SoftmaxCrossEntropyLoss wants it at 1. Reshaping the scores to [N T, V] and the labels to [N T] is free (views) and
// gives the mean over every token, which is what the model's per-token loss is; transposing to [N, V, T] would copy
// the largest tensor of the step. Labels equal to -100 are ignored (PyTorch's ignore_index), for padded targets.
int addClassLastLoss(Graph& graph, int logits, int labels, const TensorMeta& logitsMeta) {
  const std::int64_t classes = logitsMeta.shape.back();
  const std::int64_t rows = numElements(logitsMeta.shape) / std::max<std::int64_t>(classes, 1);
  const int rowsOfScores =
      addLossNode(graph, "Reshape", {logits, addShapeConstant(graph, "strata_loss/scores_shape", {rows, classes})}, {},
                  "scores_by_token");
  const int rowsOfLabels = addLossNode(
      graph, "Reshape", {labels, addShapeConstant(graph, "strata_loss/labels_shape", {rows})}, {}, "labels_by_token");
  Attributes attrs;
  attrs.set("reduction", std::string("mean"));
  attrs.set("ignore_index", std::int64_t{-100});
  return addLossNode(graph, "SoftmaxCrossEntropyLoss", {rowsOfScores, rowsOfLabels}, attrs);
}

}  // namespace

// Evaluation mode: batch norm on running statistics, dropout off.
Graph evaluationModeGraph(Graph graph) {
  for (Node& node : graph.nodes) {
    if (node.opType == "BatchNormalization") {
      node.attrs.set("training_mode", std::int64_t{0});
      node.outputs.resize(1);
    } else if (node.opType == "Dropout" && node.inputs.size() > 2) {
      node.inputs[2] = kNoValue;  // absent: the executor's (eval) mode decides
    }
  }
  return graph;
}

bool takesTokensForScoresClassLast(const Graph& model, const std::vector<TensorMeta>& inputs) {
  if (inputs.size() != 1 || isFloatingPoint(inputs[0].dtype) || inputs[0].shape.size() != 2 || model.outputs.empty())
    return false;
  const Graph specialised = specialize(model, SpecializeOptions{.inputMetas = inputs});
  const Shape& scores = specialised.values[static_cast<std::size_t>(specialised.outputs[0])].meta.shape;
  return scores.size() == 3 && scores[0] == inputs[0].shape[0] && scores[1] == inputs[0].shape[1];
}

LossKind parseLossKind(const std::string& name) {
  if (name == "cross-entropy")
    return LossKind::CrossEntropy;
  if (name == "mse")
    return LossKind::Mse;
  fail("unknown loss '{}' (choose cross-entropy or mse)", name);
}

TrainingPlan::TrainingPlan(Graph modelGraph, const TrainingPlanOptions& options)
    : model_(std::move(modelGraph)), options_(options) {
  const Graph& model = model_;
  const int lossNode = builtInLossNode(model);
  std::vector<TensorMeta> metas =
      options.inputMetas.empty() ? defaultInputMetas(model, options.defaultBatch) : options.inputMetas;
  const Graph specialised = specialize(model, SpecializeOptions{.inputMetas = metas, .training = true});

  Graph withLoss = specialised;
  int loss = kNoValue;
  if (lossNode >= 0) {
    loss = model.nodes[static_cast<std::size_t>(lossNode)].outputs[0];
    const int labels = model.nodes[static_cast<std::size_t>(lossNode)].inputs[1];
    labelMeta_ = specialised.values[static_cast<std::size_t>(labels)].meta;
  } else {
    if (model.outputs.empty()) {
      fail("{}: the model has no output to train", model.sourcePath);
    }
    const int logits = model.outputs[0];
    const TensorMeta logitsMeta = specialised.values[static_cast<std::size_t>(logits)].meta;
    const bool classLast = options.loss == LossKind::CrossEntropy && options.classAxisLast;
    if (options.loss == LossKind::CrossEntropy && logitsMeta.shape.size() < (classLast ? 3U : 2U)) {
      fail("{}: cross-entropy needs logits of shape {}, but output '{}' is {}", model.sourcePath,
           classLast ? "[N, T, vocabulary] (class axis last)" : "[N, C, ...]",
           specialised.values[static_cast<std::size_t>(logits)].name, logitsMeta.toString());
    }
    // The labels: the scores' shape without their class axis ([N], [N, H, W], or [N, T] with the class axis last).
    labelMeta_ = logitsMeta;
    if (options.loss == LossKind::CrossEntropy) {
      labelMeta_.dtype = DType::Int64;
      labelMeta_.shape.erase(classLast ? labelMeta_.shape.end() - 1 : labelMeta_.shape.begin() + 1);
    }
    Value labels;
    labels.name = "labels";
    labels.meta = labelMeta_;
    const int labelsId = withLoss.addValue(std::move(labels));
    withLoss.inputs.push_back(labelsId);
    metas.push_back(labelMeta_);
    if (classLast) {
      loss = addClassLastLoss(withLoss, logits, labelsId, logitsMeta);
    } else if (options.loss == LossKind::CrossEntropy) {
      Attributes attrs;
      attrs.set("reduction", std::string("mean"));
      if (options.ignoreIndex) {
        attrs.set("ignore_index", *options.ignoreIndex);
      }
      loss = addLossNode(withLoss, "SoftmaxCrossEntropyLoss", {logits, labelsId}, attrs);
    } else {
      const int diff = addLossNode(withLoss, "Sub", {logits, labelsId}, {});
      const int squared = addLossNode(withLoss, "Mul", {diff, diff}, {});
      Attributes attrs;
      attrs.set("keepdims", std::int64_t{0});
      loss = addLossNode(withLoss, "ReduceMean", {squared}, attrs);
    }
  }
  Graph full = specialize(withLoss, SpecializeOptions{.inputMetas = metas, .training = true});
  // Note [Transposed weights]: Linear layers read their weights, not a transposed copy of them.
  int folded = 0;
  full = foldTransposedWeights(full, &folded);
  // Note [Gelu fusion]: an exported GELU's five elementwise nodes run as one.
  int fusedGelus = 0;
  full = fuseGelu(full, &fusedGelus);
  // Note [Fused ReLU]: a batch norm or an Add and the Relu that alone reads it run as one node on the CPU.
  int fusedRelus = 0;
  if (fusesRelu(options))
    full = fuseRelu(full, &fusedRelus);
  // Note [SiLU fusion]: Mul(x, Sigmoid(x)) as one Silu node.
  int fusedSilus = 0;
  int fusedMishes = 0;  // Note [Mish fusion]
  if (fusesForCpu(options))
    full = fuseMish(fuseSilu(full, &fusedSilus), &fusedMishes);
  // Note [Fused attention]: exported attention as one node that keeps no [T, T] matrix (a CPU kernel for now).
  int fusedAttention = 0;
  if (fusesForCpu(options) && options.fuseAttention)
    full = fuseAttention(full, &fusedAttention);
  if (folded > 0 || fusedGelus > 0 || fusedRelus > 0 || fusedSilus > 0 || fusedMishes > 0 || fusedAttention > 0)
    full = specialize(full, SpecializeOptions{.inputMetas = metas, .training = true});
  if (options.mixedPrecision) {
    full =
        specialize(autocast(full, *options.mixedPrecision), SpecializeOptions{.inputMetas = metas, .training = true});
    const bool anyLow = std::any_of(full.values.begin(), full.values.end(), [&](const Value& value) {
      return value.producer != kNoValue && value.meta.dtype == *options.mixedPrecision;
    });
    if (!anyLow) {
      spdlog::warn(
          "{}: mixed precision ({}) changes nothing: no matrix product of this model takes float32 inputs "
          "(float64 and 16-bit models keep their own precision)",
          model.sourcePath, dtypeName(*options.mixedPrecision));
    }
  }
  std::vector<int> storedWeights;  // Note [Channels-last weights]: their ids in `full`
  if (options.channelsLast) {
    channelsLastWeights_ = channelsLastWeightCandidates(full);
    full = storeWeightsChannelsLast(full, channelsLastWeights_, &storedWeights);
    full =
        specialize(channelsLast(full, &channelsLastReport_), SpecializeOptions{.inputMetas = metas, .training = true});
  }
  training_ = buildTrainingGraph(full, AutodiffOptions{.loss = loss});
  if (seededLoss()) {  // the seed becomes the step's last input, so the scale can change between steps
    Value& seed = training_.graph.values[static_cast<std::size_t>(training_.lossGradSeed)];
    lossGradSeed_ = Tensor::empty(seed.meta, MemoryCategory::Other, options.device);
    lossGradSeed_.copyFrom(seed.constant);
    seed.constant = Tensor();
    training_.graph.inputs.push_back(training_.lossGradSeed);
  }

  // training_.parameters is in first-use order and the store keeps it: strategies rely on it (DDP's buckets are
  // runs of consecutive parameters, whose gradients backward finalises roughly in reverse), and units are
  // contiguous runs of it.
  std::vector<std::pair<std::string, Tensor>> initial;
  std::vector<UnitCandidate> candidates;
  for (int p : training_.parameters) {
    const Value& value = training_.graph.values[static_cast<std::size_t>(p)];
    initial.emplace_back(value.name, value.constant);
    candidates.push_back(UnitCandidate{value.name, value.meta.numel()});
    names_.push_back(value.name);
    const auto stored = std::find(storedWeights.begin(), storedWeights.end(), p);
    modelValues_.push_back(stored == storedWeights.end() ? p : channelsLastWeights_[stored - storedWeights.begin()]);
  }
  store_ = std::make_unique<ParameterStore>(initial, options.device, partitionUnits(candidates, options.units));

  LowerOptions lower;
  lower.device = options.device;
  lower.training = true;
  lower.gradientReadyAfterNode = training_.gradientReadyAfterNode;
  lower.parameters = training_.parameters;
  for (std::size_t i = 0; i < training_.parameters.size(); ++i) {
    const auto id = static_cast<std::size_t>(training_.parameters[i]);
    training_.graph.values[id].constant = store_->parameter(i);
    // A weight stored channels-last has no channels-first copy; modelWithCurrentWeights and evaluate make one.
    model_.values[static_cast<std::size_t>(modelValues_[i])].constant =
        storedChannelsLast(i) ? Tensor() : store_->parameter(i);
    lower.gradientBindings.emplace_back(training_.parameterGrads[i], store_->gradient(i));
  }
  for (const auto& [buffer, updated] : training_.bufferUpdates) {
    Value& value = training_.graph.values[static_cast<std::size_t>(buffer)];
    value.constant = ownedCopy(value.constant, options.device);  // owned by this plan, updated in place
    model_.values[static_cast<std::size_t>(buffer)].constant = value.constant;
    buffers_.emplace_back(value.name, value.constant);
    lower.bindings.emplace_back(updated, value.constant);
  }
  Graph stepGraph = training_.graph;
  stepGraph.outputs = {loss};
  for (int output : model.outputs) {
    if (output != loss) {
      stepGraph.outputs.push_back(output);
    }
  }
  executor_ = std::make_unique<Executor>(lowerToProgram(stepGraph, lower), options.device);
  executor_->setRecording(options.recording);
}

StepResult TrainingPlan::step(const std::vector<Tensor>& inputs, const Tensor& labels) {
  std::vector<Tensor> all = inputs;
  const bool appendedLabels = builtInLossNode(model_) < 0;
  if (appendedLabels) {
    all.push_back(labels);
  }
  for (Tensor& t : all) {
    t = t.to(options_.device, MemoryCategory::Activations);  // host batches go to the plan's device
  }
  if (seededLoss()) {
    all.push_back(lossGradSeed_);
  }
  std::vector<Tensor> results = executor_->run(all);
  StepResult result;
  result.loss = results[0];
  result.outputs.assign(results.begin() + 1, results.end());
  return result;
}

void TrainingPlan::setLossScale(double scale) {
  STRATA_CHECK(options_.scaledLoss, "setLossScale on a plan built without scaledLoss");
  writeLossGradSeed(scale, gradientScaleValue_);
}

void TrainingPlan::setGradientScale(double scale) {
  STRATA_CHECK(seededLoss() || scale == 1.0,
               "setGradientScale({}) on a plan built without seededLoss (the loss gradient's seed is a constant)",
               scale);
  writeLossGradSeed(lossScaleValue_, scale);
}

void TrainingPlan::writeLossGradSeed(double lossScale, double gradientScale) {
  if (lossScale == lossScaleValue_ && gradientScale == gradientScaleValue_) {
    return;
  }
  const double seed = lossScale * gradientScale;
  Tensor host = Tensor::empty(lossGradSeed_.meta());
  if (host.dtype() == DType::Float64) {  // autodiff accepts float32 and float64 losses only
    *host.data<double>() = seed;
  } else {
    *host.data<float>() = static_cast<float>(seed);
  }
  lossGradSeed_.copyFrom(host);
  lossScaleValue_ = lossScale;
  gradientScaleValue_ = gradientScale;
}

std::vector<Tensor> TrainingPlan::evaluate(const std::vector<Tensor>& inputs) {
  std::vector<TensorMeta> metas;
  for (const Tensor& t : inputs) {
    metas.push_back(t.meta());
  }
  auto cached = std::find_if(evalExecutors_.begin(), evalExecutors_.end(),
                             [&metas](const auto& entry) { return entry.first == metas; });
  if (cached == evalExecutors_.end()) {
    Graph eval = evaluationModeGraph(model_);
    const int lossNode = builtInLossNode(model_);
    if (lossNode >= 0) {  // evaluate the logits, not the loss
      eval.outputs = {model_.nodes[static_cast<std::size_t>(lossNode)].inputs[0]};
      eval.inputs.erase(std::remove(eval.inputs.begin(), eval.inputs.end(),
                                    model_.nodes[static_cast<std::size_t>(lossNode)].inputs[1]),
                        eval.inputs.end());
      eval.nodes.erase(eval.nodes.begin() + lossNode);
    }
    const SpecializeOptions evalOptions{.inputMetas = metas, .training = false};
    Graph fused = fuseGelu(foldTransposedWeights(specialize(eval, evalOptions)));
    if (fusesRelu(options_))
      fused = fuseRelu(fused);
    if (fusesForCpu(options_))
      fused = fuseMish(fuseSilu(fused));
    if (fusesForCpu(options_) && options_.fuseAttention)
      fused = fuseAttention(fused);
    std::vector<int> stored;
    if (options_.channelsLast) {  // the step's layout, reading the weights as they are stored
      fused = storeWeightsChannelsLast(fused, channelsLastWeights_, &stored);
      fused = channelsLast(specialize(fused, evalOptions));
    }
    Graph specialised = specialize(fused, evalOptions);
    for (std::size_t i = 0; i < training_.parameters.size(); ++i) {
      const auto k = std::find(channelsLastWeights_.begin(), channelsLastWeights_.end(), modelValues_[i]);
      const int id = k == channelsLastWeights_.end() ? modelValues_[i] : stored.at(k - channelsLastWeights_.begin());
      specialised.values[static_cast<std::size_t>(id)].constant = store_->parameter(i);
    }
    for (std::size_t b = 0; b < training_.bufferUpdates.size(); ++b) {
      specialised.values[static_cast<std::size_t>(training_.bufferUpdates[b].first)].constant = buffers_[b].second;
    }
    // One plan per input shape: an epoch's last, smaller batch must not rebuild the full-batch plan each epoch.
    LowerOptions lower;
    lower.device = options_.device;
    lower.parameters = training_.parameters;
    evalExecutors_.emplace_back(metas, std::make_unique<Executor>(lowerToProgram(specialised, lower), options_.device));
    cached = std::prev(evalExecutors_.end());
  }
  std::vector<Tensor> onDevice;
  onDevice.reserve(inputs.size());
  for (const Tensor& t : inputs) {
    onDevice.push_back(t.to(options_.device, MemoryCategory::Activations));
  }
  return cached->second->run(onDevice);
}

bool TrainingPlan::storedChannelsLast(std::size_t i) const {
  return modelValues_.at(i) != training_.parameters.at(i);
}

std::vector<std::string> TrainingPlan::channelsLastParameters() const {
  std::vector<std::string> names;
  for (std::size_t i = 0; i < names_.size(); ++i) {
    if (storedChannelsLast(i))
      names.push_back(names_[i]);
  }
  return names;
}

Tensor TrainingPlan::channelsFirstParameter(std::size_t i) const {
  const Tensor host = ownedCopy(store_->parameter(i), Device::cpu());
  return storedChannelsLast(i) ? toChannelsFirst(host, MemoryCategory::Parameters) : host;
}

Tensor TrainingPlan::channelsFirstGradient(std::size_t i) const {
  const Tensor host = store_->gradient(i).to(Device::cpu(), MemoryCategory::Gradients);
  return storedChannelsLast(i) ? toChannelsFirst(host, MemoryCategory::Gradients)
                               : host.clone(MemoryCategory::Gradients);
}

Graph TrainingPlan::modelWithCurrentWeights() const {
  Graph graph = model_;
  for (std::size_t i = 0; i < training_.parameters.size(); ++i) {
    graph.values[static_cast<std::size_t>(modelValues_[i])].constant = channelsFirstParameter(i);
  }
  for (std::size_t b = 0; b < training_.bufferUpdates.size(); ++b) {
    graph.values[static_cast<std::size_t>(training_.bufferUpdates[b].first)].constant =
        ownedCopy(buffers_[b].second, Device::cpu());
  }
  return graph;
}

}  // namespace strata
