#include "strata/graphs/autodiff.h"

#include <algorithm>
#include <deque>
#include <map>
#include <set>

#include "strata/error.h"
#include "strata/graphs/gradient_registry.h"
#include "strata/op_registry.h"

namespace strata {
namespace {

bool isParameterCandidate(const Value& value) {
  return value.isInitializer && isFloatingPoint(value.meta.dtype);
}

bool isDifferentiableSlot(const GradientRuleInfo* rule, std::size_t slot) {
  return rule == nullptr || std::find(rule->nonDifferentiableInputs.begin(), rule->nonDifferentiableInputs.end(),
                                      slot) == rule->nonDifferentiableInputs.end();
}

// Emits backward nodes for one forward node, inferring shapes (and folding constant arithmetic) as it goes.
class NodeGradientBuilder final : public GradientBuilder {
 public:
  NodeGradientBuilder(Graph& graph, int nodeIndex, std::vector<int> outputGrads, std::vector<bool> needs)
      : graph_(graph),
        node_(graph.nodes[static_cast<std::size_t>(nodeIndex)]),
        nodeIndex_(nodeIndex),
        outputGrads_(std::move(outputGrads)),
        needs_(std::move(needs)) {}

  const Node& node() const override { return node_; }
  const TensorMeta& meta(int value) const override { return graph_.values.at(static_cast<std::size_t>(value)).meta; }
  const Tensor* constantOf(int value) const override {
    const Tensor& t = graph_.values.at(static_cast<std::size_t>(value)).constant;
    if (!t.defined()) {
      return nullptr;
    }
    constants_.push_back(t);  // stable address while values grow
    return &constants_.back();
  }
  int outputGrad(std::size_t i) const override { return i < outputGrads_.size() ? outputGrads_[i] : kNoValue; }
  bool needsInputGrad(std::size_t i) const override { return i < needs_.size() && needs_[i]; }

  std::vector<int> emit(const std::string& opType, const std::vector<int>& inputs, Attributes attrs,
                        std::size_t outputCount) override {
    const OpSchema* schema = OpRegistry::instance().schema(opType);
    if (schema == nullptr) {
      fail("gradient of node '{}' ({}): emits {}, which has no kernel", node_.name, node_.opType, opType);
    }
    Node grad;
    grad.name = fmt::format("{}/grad/{}_{}", node_.name, opType, graph_.nodes.size());
    grad.opType = opType;
    grad.inputs = inputs;
    grad.attrs = std::move(attrs);
    grad.phase = NodePhase::Backward;
    grad.gradientOf = nodeIndex_;

    std::vector<InputInfo> infos;
    bool allLiteral = true;
    for (int v : inputs) {
      if (v == kNoValue) {
        infos.emplace_back();
        continue;
      }
      const Value& value = graph_.values.at(static_cast<std::size_t>(v));
      infos.push_back(InputInfo{true, value.meta, value.constant.defined() ? &value.constant : nullptr});
      allLiteral = allLiteral && value.constant.defined() && !isParameterCandidate(value);
    }
    std::vector<TensorMeta> metas;
    try {
      metas = schema->inferShapes(ShapeContext{infos, grad.attrs, outputCount, grad.name, opType});
    } catch (const Error& e) {
      fail("gradient of node '{}' ({}): {}", node_.name, node_.opType, e.what());
    }
    std::vector<Tensor> folded;
    if (allLiteral && schema->foldable && !inputs.empty()) {
      std::vector<const Tensor*> constants;
      for (const InputInfo& info : infos) {
        constants.push_back(info.constant);
      }
      folded = runOpEagerly(opType, constants, grad.attrs, outputCount, false);
    }
    std::vector<int> outputs;
    for (std::size_t o = 0; o < outputCount; ++o) {
      Value value;
      value.name = fmt::format("{}:{}", grad.name, o);
      value.meta = metas.at(o);
      if (!folded.empty()) {
        value.constant = folded[o];
      } else {
        value.producer = static_cast<int>(graph_.nodes.size());
      }
      outputs.push_back(graph_.addValue(std::move(value)));
    }
    if (folded.empty()) {
      grad.outputs = outputs;
      graph_.nodes.push_back(std::move(grad));
    }
    return outputs;
  }

  int constant(Tensor value) override {
    Value v;
    v.name = fmt::format("{}/grad/const_{}", node_.name, graph_.values.size());
    v.meta = value.meta();
    v.constant = std::move(value);
    return graph_.addValue(std::move(v));
  }

 private:
  Graph& graph_;
  Node node_;  // a copy: emitting grows graph_.nodes
  int nodeIndex_;
  std::vector<int> outputGrads_;
  std::vector<bool> needs_;
  mutable std::deque<Tensor> constants_;
};

// Training-mode Dropout needs its mask for backward; expose it when the model does not.
void exposeDropoutMasks(Graph& graph) {
  for (Node& node : graph.nodes) {
    if (node.opType != "Dropout" || (node.outputs.size() >= 2 && node.outputs[1] != kNoValue)) {
      continue;
    }
    Value mask;
    mask.name = node.name + "/mask";
    mask.meta = TensorMeta{DType::Bool, graph.values[static_cast<std::size_t>(node.inputs[0])].meta.shape};
    mask.producer = static_cast<int>(&node - graph.nodes.data());
    const int id = graph.addValue(std::move(mask));
    node.outputs.resize(2, kNoValue);
    node.outputs[1] = id;
  }
}

class BackwardBuilder {
 public:
  BackwardBuilder(TrainingGraph& training, int loss) : tg_(training), g_(training.graph), loss_(loss) {}

  void build() {
    const GradientRegistry& registry = GradientRegistry::instance();
    forwardNodes_ = g_.nodes.size();
    rules_.resize(forwardNodes_);
    for (std::size_t n = 0; n < forwardNodes_; ++n) {
      rules_[n] = registry.find(g_.nodes[n].opType);
    }
    markRequiresGrad();
    markOnPath();
    collectParameters();

    Tensor one = Tensor::empty(g_.values[static_cast<std::size_t>(loss_)].meta);
    visitDType(one.dtype(), [&](auto tag) {
      using T = decltype(tag);
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        *one.data<T>() = T(1);
      } else {
        fail("the loss must be float32 or float64, not {}", dtypeName(one.dtype()));
      }
    });
    Value seed;
    seed.name = "loss/grad_seed";
    seed.meta = one.meta();
    seed.constant = one;
    tg_.lossGradSeed = g_.addValue(std::move(seed));
    contributions_[loss_].push_back(tg_.lossGradSeed);

    for (std::size_t n = forwardNodes_; n-- > 0;) {
      if (active(n)) {
        differentiate(n);
      }
    }
    for (std::size_t p = 0; p < tg_.parameters.size(); ++p) {
      if (tg_.parameterGrads[p] == kNoValue) {
        fail("internal: the gradient of parameter '{}' was never finalised",
             g_.values[static_cast<std::size_t>(tg_.parameters[p])].name);
      }
    }
  }

 private:
  bool requiresGrad(int v) const { return v != kNoValue && requiresGrad_[static_cast<std::size_t>(v)]; }
  bool onPath(int v) const { return v != kNoValue && onPath_[static_cast<std::size_t>(v)]; }

  bool wantsInput(std::size_t n, std::size_t slot) const {
    const int v = g_.nodes[n].inputs[slot];
    return requiresGrad(v) && onPath(v) && isDifferentiableSlot(rules_[n], slot);
  }

  bool active(std::size_t n) const {
    const Node& node = g_.nodes[n];
    const bool outputOnPath = std::any_of(node.outputs.begin(), node.outputs.end(), [&](int v) { return onPath(v); });
    if (!outputOnPath) {
      return false;
    }
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      if (wantsInput(n, i)) {
        return true;
      }
    }
    return false;
  }

  void markRequiresGrad() {
    requiresGrad_.assign(g_.values.size(), false);
    for (std::size_t v = 0; v < g_.values.size(); ++v) {
      requiresGrad_[v] = isParameterCandidate(g_.values[v]);
    }
    for (std::size_t n = 0; n < forwardNodes_; ++n) {
      const Node& node = g_.nodes[n];
      bool any = false;
      for (std::size_t i = 0; i < node.inputs.size(); ++i) {
        any = any || (requiresGrad(node.inputs[i]) && isDifferentiableSlot(rules_[n], i));
      }
      for (int v : node.outputs) {
        if (v != kNoValue && any && isFloatingPoint(g_.values[static_cast<std::size_t>(v)].meta.dtype)) {
          requiresGrad_[static_cast<std::size_t>(v)] = true;
        }
      }
    }
  }

  void markOnPath() {
    onPath_.assign(g_.values.size(), false);
    onPath_[static_cast<std::size_t>(loss_)] = true;
    for (std::size_t n = forwardNodes_; n-- > 0;) {
      const Node& node = g_.nodes[n];
      if (!std::any_of(node.outputs.begin(), node.outputs.end(), [&](int v) { return onPath(v); })) {
        continue;
      }
      for (std::size_t i = 0; i < node.inputs.size(); ++i) {
        const int v = node.inputs[i];
        if (requiresGrad(v) && isDifferentiableSlot(rules_[n], i)) {
          onPath_[static_cast<std::size_t>(v)] = true;
        }
      }
    }
  }

  void collectParameters() {
    for (std::size_t n = 0; n < forwardNodes_; ++n) {
      if (!active(n)) {
        continue;
      }
      std::set<int> seen;
      for (std::size_t i = 0; i < g_.nodes[n].inputs.size(); ++i) {
        const int v = g_.nodes[n].inputs[i];
        if (!wantsInput(n, i) || !isParameterCandidate(g_.values[static_cast<std::size_t>(v)]) ||
            !seen.insert(v).second) {
          continue;
        }
        if (pending_[v]++ == 0) {
          parameterIndex_[v] = static_cast<int>(tg_.parameters.size());
          tg_.parameters.push_back(v);
        }
      }
    }
    tg_.parameterGrads.assign(tg_.parameters.size(), kNoValue);
    tg_.gradientReadyAfterNode.assign(tg_.parameters.size(), -1);
  }

  // Sums the gradient contributions of a value (emitting Sum when there are several).
  int finalGradient(int value, NodeGradientBuilder& builder) {
    auto it = contributions_.find(value);
    if (it == contributions_.end() || it->second.empty()) {
      return kNoValue;
    }
    const std::vector<int>& parts = it->second;
    return parts.size() == 1 ? parts[0] : builder.emit1("Sum", parts);
  }

  void differentiate(std::size_t n) {
    const Node node = g_.nodes[n];  // a copy: the builder grows g_.nodes
    const GradientRuleInfo* rule = rules_[n];
    if (rule == nullptr) {
      fail(
          "{}: node '{}' ({}) lies on the path from the loss to a trainable parameter, but Strata has no gradient "
          "rule for {}",
          g_.sourcePath, node.name, node.opType, node.opType);
    }
    std::vector<bool> needs(node.inputs.size());
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      needs[i] = wantsInput(n, i);
    }
    // Output gradients are summed with the builder of this node so their Sum nodes are tagged with it.
    NodeGradientBuilder sumBuilder(g_, static_cast<int>(n), {}, {});
    std::vector<int> outputGrads;
    for (int v : node.outputs) {
      outputGrads.push_back(v == kNoValue ? kNoValue : finalGradient(v, sumBuilder));
    }
    NodeGradientBuilder builder(g_, static_cast<int>(n), outputGrads, needs);
    std::vector<int> grads;
    try {
      grads = rule->rule(builder);
    } catch (const Error& e) {
      fail("{}: gradient of node '{}' ({}): {}", g_.sourcePath, node.name, node.opType, e.what());
    }
    std::set<int> finishedParameters;
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      if (!needs[i]) {
        continue;
      }
      const int input = node.inputs[i];
      const int grad = i < grads.size() ? grads[i] : kNoValue;
      if (grad != kNoValue) {
        const TensorMeta& expected = g_.values[static_cast<std::size_t>(input)].meta;
        const TensorMeta& got = g_.values[static_cast<std::size_t>(grad)].meta;
        if (got != expected) {
          fail("gradient rule of {} (node '{}') returned {} for input {}, which is {}", node.opType, node.name,
               got.toString(), i, expected.toString());
        }
        contributions_[input].push_back(grad);
      }
      if (parameterIndex_.count(input) != 0) {
        finishedParameters.insert(input);
      }
    }
    for (int parameter : finishedParameters) {
      if (--pending_[parameter] == 0) {
        finalizeParameter(parameter, static_cast<int>(n));
      }
    }
  }

  // The parameter's gradient gets a node output of its own, so it can be bound to a flat gradient buffer view.
  void finalizeParameter(int parameter, int nodeIndex) {
    NodeGradientBuilder builder(g_, nodeIndex, {}, {});
    int grad = finalGradient(parameter, builder);
    if (grad == kNoValue) {  // every path to the loss carried a zero gradient
      Tensor zeros = Tensor::zeros(g_.values[static_cast<std::size_t>(parameter)].meta.dtype,
                                   g_.values[static_cast<std::size_t>(parameter)].meta.shape);
      grad = builder.emit1("Identity", {builder.constant(zeros)});
    }
    const Value& value = g_.values[static_cast<std::size_t>(grad)];
    const bool exclusive =
        value.producer >= static_cast<int>(forwardNodes_) && !value.constant.defined() && claimed_.insert(grad).second;
    if (!exclusive) {
      grad = builder.emit1("Identity", {grad});
      claimed_.insert(grad);
    }
    const int p = parameterIndex_.at(parameter);
    tg_.parameterGrads[static_cast<std::size_t>(p)] = grad;
    tg_.gradientReadyAfterNode[static_cast<std::size_t>(p)] = g_.values[static_cast<std::size_t>(grad)].producer;
  }

  TrainingGraph& tg_;
  Graph& g_;
  int loss_;
  std::size_t forwardNodes_ = 0;
  std::vector<const GradientRuleInfo*> rules_;
  std::vector<bool> requiresGrad_;
  std::vector<bool> onPath_;
  std::map<int, int> pending_;         // parameter -> active consumer nodes not yet differentiated
  std::map<int, int> parameterIndex_;  // parameter value -> index in tg_.parameters
  std::map<int, std::vector<int>> contributions_;
  std::set<int> claimed_;
};

}  // namespace

TrainingGraph buildTrainingGraph(const Graph& forward, const AutodiffOptions& options) {
  if (options.loss == kNoValue || options.loss >= static_cast<int>(forward.values.size())) {
    fail("{}: no loss value to differentiate", forward.sourcePath);
  }
  const TensorMeta& lossMeta = forward.values[static_cast<std::size_t>(options.loss)].meta;
  if (lossMeta.numel() != 1) {
    fail("{}: the loss '{}' must be a scalar but is {}", forward.sourcePath,
         forward.values[static_cast<std::size_t>(options.loss)].name, lossMeta.toString());
  }
  TrainingGraph training;
  training.graph = forward;
  training.loss = options.loss;
  exposeDropoutMasks(training.graph);
  for (const Node& node : training.graph.nodes) {
    if (node.opType == "BatchNormalization" && node.attrs.getInt("training_mode", 0) != 0) {
      for (std::size_t k = 1; k <= 2; ++k) {
        if (node.outputs.size() > k && node.outputs[k] != kNoValue && node.inputs.size() > k + 2) {
          training.bufferUpdates.emplace_back(node.inputs[k + 2], node.outputs[k]);
        }
      }
    }
  }
  BackwardBuilder(training, options.loss).build();
  return training;
}

}  // namespace strata
