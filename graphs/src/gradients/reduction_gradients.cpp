// Gradient rules of the reductions, softmaxes, LayerNormalization and the losses.
//
// Reduce* gradients are composed from forward ops: the output gradient is reshaped to the kept-dims shape (a free
// view) and broadcast back over the reduced axes, either by an Expand (Sum, Mean) or directly inside the one
// elementwise op that applies the derivative (SumSquare: Mul(X, 2 dY)). Softmax, LogSoftmax, LayerNormalization
// and the losses use the fused kernels of core/backend/cpu/grad_reduction_ops.cpp.

#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "strata/graphs/gradient_registry.h"

namespace strata::gradients {

namespace {

[[noreturn]] void ruleError(const GradientBuilder& b, const std::string& why) {
  fail("gradient of node '{}' ({}): {}", b.node().name, b.node().opType, why);
}

std::vector<int> noGrads(const GradientBuilder& b) {
  return std::vector<int>(b.node().inputs.size(), kNoValue);
}

// A copy: emitting grows the graph's values, so references into them dangle.
Shape inputShape(const GradientBuilder& b, std::size_t i) {
  return b.meta(b.input(i)).shape;
}

std::vector<std::int64_t> toInts(const GradientBuilder& b, const Tensor& t) {
  std::vector<std::int64_t> values(static_cast<std::size_t>(t.numel()));
  visitDType(t.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
      for (std::size_t i = 0; i < values.size(); ++i) {
        values[i] = static_cast<std::int64_t>(t.data<T>()[i]);
      }
    } else {
      ruleError(b, fmt::format("expected integer axes, got {}", dtypeName(t.dtype())));
    }
  });
  return values;
}

int reshapeTo(GradientBuilder& b, int value, const Shape& shape) {
  if (b.meta(value).shape == shape) {
    return value;
  }
  Attributes attrs;
  attrs.set("allowzero", std::int64_t{1});  // a 0 in the shape is a real empty dim
  return b.emit1("Reshape", {value, b.int64s(shape)}, std::move(attrs));
}

int expandTo(GradientBuilder& b, int value, const Shape& shape) {
  if (b.meta(value).shape == shape) {
    return value;
  }
  return b.emit1("Expand", {value, b.int64s(shape)});
}

// What a Reduce* node reduces: axes from input 1 (ReduceSum 13+, the others 18+) or the attribute.
struct ReduceAxes {
  std::vector<std::int64_t> axes;  // normalised, ascending
  Shape keptShape;                 // the input's shape with reduced dims set to 1
  std::int64_t count = 1;          // elements per reduced group
};

ReduceAxes reduceAxes(const GradientBuilder& b) {
  const Shape shape = inputShape(b, 0);
  const auto rank = static_cast<std::int64_t>(shape.size());
  std::vector<std::int64_t> axes = b.node().attrs.getInts("axes", {});
  if (b.input(1) != kNoValue) {
    const Tensor* value = b.constantOf(b.input(1));
    if (value == nullptr) {
      ruleError(b, "axes (input 1) is not a plan-time constant");
    }
    axes = toInts(b, *value);
  }
  std::vector<bool> reduced(shape.size(), false);
  if (axes.empty()) {
    // No axes: everything, or nothing with noop_with_empty_axes.
    reduced.assign(shape.size(), b.node().attrs.getInt("noop_with_empty_axes", 0) == 0);
  }
  for (const std::int64_t axis : axes) {
    if (axis < -rank || axis >= rank) {
      ruleError(b, fmt::format("axis {} is out of range for rank {}", axis, rank));
    }
    reduced[static_cast<std::size_t>(axis < 0 ? axis + rank : axis)] = true;
  }
  ReduceAxes result;
  result.keptShape = shape;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (reduced[d]) {
      result.axes.push_back(static_cast<std::int64_t>(d));
      result.keptShape[d] = 1;
      result.count *= shape[d];
    }
  }
  return result;
}

// Registers a Reduce* rule: grad(b, reduceAxes, dY reshaped to the kept shape) -> dX. Axes are non-differentiable.
template <typename Fn>
void addReduce(GradientRegistry& registry, const std::string& opType, Fn grad) {
  registry.add(opType,
               [grad](GradientBuilder& b) {
                 std::vector<int> grads = noGrads(b);
                 if (b.outputGrad(0) == kNoValue || !b.needsInputGrad(0)) {
                   return grads;
                 }
                 const ReduceAxes axes = reduceAxes(b);
                 const int dyKept = reshapeTo(b, b.outputGrad(0), axes.keptShape);
                 grads[0] = grad(b, axes, dyKept);
                 return grads;
               },
               {1});
}

void registerReduces(GradientRegistry& registry) {
  addReduce(registry, "ReduceSum",
            [](GradientBuilder& b, const ReduceAxes&, int dy) { return expandTo(b, dy, inputShape(b, 0)); });
  addReduce(registry, "ReduceMean", [](GradientBuilder& b, const ReduceAxes& axes, int dy) {
    // Scale the small kept-shape gradient before expanding it.
    if (axes.count > 1) {
      dy = b.emit1("Mul", {dy, b.scalarLike(1.0 / static_cast<double>(axes.count), dy)});
    }
    return expandTo(b, dy, inputShape(b, 0));
  });
  // sum(x^2): 2 x dY, broadcast inside the Mul.
  addReduce(registry, "ReduceSumSquare", [](GradientBuilder& b, const ReduceAxes&, int dy) {
    return b.emit1("Mul", {b.input(0), b.emit1("Mul", {dy, b.scalarLike(2.0, dy)})});
  });
  // sum(|x|): sign(x) dY.
  addReduce(registry, "ReduceL1", [](GradientBuilder& b, const ReduceAxes&, int dy) {
    return b.emit1("Mul", {b.emit1("Sign", {b.input(0)}), dy});
  });
  // sqrt(sum(x^2)): x dY / Y, with 0 for all-zero groups (where Y = 0; PyTorch's choice of subgradient).
  addReduce(registry, "ReduceL2", [](GradientBuilder& b, const ReduceAxes& axes, int dy) {
    const int y = reshapeTo(b, b.output(0), axes.keptShape);
    const int zero = b.scalarLike(0.0, dy);
    const int ratio = b.emit1("Div", {dy, y});
    const int safe = b.emit1("Where", {b.emit1("Equal", {y, zero}), zero, ratio});
    return b.emit1("Mul", {b.input(0), safe});
  });
  // log(sum(x)): dY / sum = dY / exp(Y).
  addReduce(registry, "ReduceLogSum", [](GradientBuilder& b, const ReduceAxes& axes, int dy) {
    const int y = reshapeTo(b, b.output(0), axes.keptShape);
    return expandTo(b, b.emit1("Div", {dy, b.emit1("Exp", {y})}), inputShape(b, 0));
  });
  // log(sum(exp(x))): dY exp(x - Y), the softmax over the reduced axes (x - Y <= 0, so exp cannot overflow).
  addReduce(registry, "ReduceLogSumExp", [](GradientBuilder& b, const ReduceAxes& axes, int dy) {
    const int y = reshapeTo(b, b.output(0), axes.keptShape);
    return b.emit1("Mul", {b.emit1("Exp", {b.emit1("Sub", {b.input(0), y})}), dy});
  });
  // Note [ReduceMax/ReduceMin ties]: the gradient goes to the positions equal to the extremum, split equally
  // between ties (as PyTorch's amax/amin do): dX = [x == Y] * dY / count(x == Y). Splitting keeps the gradient
  // symmetric in tied inputs, and with no ties (the usual case) it is the plain arg-max gradient.
  for (const char* op : {"ReduceMax", "ReduceMin"}) {
    addReduce(registry, op, [](GradientBuilder& b, const ReduceAxes& axes, int dy) {
      if (axes.axes.empty()) {
        return reshapeTo(b, dy, inputShape(b, 0));  // nothing reduced: an identity
      }
      const int y = reshapeTo(b, b.output(0), axes.keptShape);
      Attributes cast;
      cast.set("to", std::int64_t{dtypeToOnnx(b.meta(dy).dtype)});
      const int mask = b.emit1("Cast", {b.emit1("Equal", {b.input(0), y})}, std::move(cast));
      Attributes keep;
      keep.set("keepdims", std::int64_t{1});
      const int count = b.emit1("ReduceSum", {mask, b.int64s(axes.axes)}, std::move(keep));
      return b.emit1("Mul", {mask, b.emit1("Div", {dy, count})});
    });
  }
}

// Softmax / LogSoftmax: fused kernels reading the forward output.
void registerSoftmaxes(GradientRegistry& registry) {
  for (const auto& [op, gradOp] : {std::pair{"Softmax", "SoftmaxGrad"}, std::pair{"LogSoftmax", "LogSoftmaxGrad"}}) {
    const std::string grad = gradOp;
    registry.add(op, [grad](GradientBuilder& b) {
      std::vector<int> grads = noGrads(b);
      if (b.outputGrad(0) == kNoValue || !b.needsInputGrad(0)) {
        return grads;
      }
      Attributes attrs;
      attrs.set("axis", b.node().attrs.getInt("axis", -1));
      grads[0] = b.emit1(grad, {b.outputGrad(0), b.output(0)}, std::move(attrs));
      return grads;
    });
  }
}

// LayerNormalization(X, Scale, B?) -> Y, Mean?, InvStdDev?: one LayerNormalizationGrad node gives dX and the
// normalised-shape dScale, dB (summed to Scale's and B's shapes). The saved statistics are used when the forward
// exposes them; otherwise the kernel recomputes them. Gradients flowing into Mean / InvStdDev (rare: only when a
// model reads them) are passed to the kernel too.
void registerLayerNorm(GradientRegistry& registry) {
  registry.add("LayerNormalization", [](GradientBuilder& b) {
    std::vector<int> grads = noGrads(b);
    const int dy = b.outputGrad(0);
    const int dMean = b.outputGrad(1);
    const int dInvStd = b.outputGrad(2);
    if (dy == kNoValue && dMean == kNoValue && dInvStd == kNoValue) {
      return grads;
    }
    std::vector<int> inputs{dy, b.input(0), b.input(1), kNoValue, kNoValue, dMean, dInvStd};
    // float statistics of a double X would cost the gradient precision; the kernel then recomputes them.
    if (b.output(1) != kNoValue && b.output(2) != kNoValue &&
        (b.meta(b.output(1)).dtype == DType::Float64 || b.meta(b.input(0)).dtype == DType::Float32)) {
      inputs[3] = b.output(1);
      inputs[4] = b.output(2);
    }
    while (inputs.back() == kNoValue) {
      inputs.pop_back();
    }
    const bool wantBias = b.input(2) != kNoValue && b.needsInputGrad(2);
    const std::size_t outputs = wantBias ? 3 : (b.needsInputGrad(1) ? 2 : 1);
    Attributes attrs;
    attrs.set("axis", b.node().attrs.getInt("axis", -1));
    attrs.set("epsilon", b.node().attrs.getFloat("epsilon", 1e-5f));
    const std::vector<int> outs = b.emit("LayerNormalizationGrad", inputs, std::move(attrs), outputs);
    if (b.needsInputGrad(0)) {
      grads[0] = outs[0];
    }
    if (b.needsInputGrad(1)) {
      grads[1] = b.sumToShape(outs[1], inputShape(b, 1));
    }
    if (wantBias) {
      grads[2] = b.sumToShape(outs[2], inputShape(b, 2));
    }
    return grads;
  });
}

// The loss attributes the gradient kernels share with the forward.
Attributes lossAttrs(const GradientBuilder& b) {
  Attributes attrs;
  attrs.set("reduction", b.node().attrs.getString("reduction", "mean"));
  if (b.node().attrs.has("ignore_index")) {
    attrs.set("ignore_index", b.node().attrs.getInt("ignore_index"));
  }
  return attrs;
}

// SoftmaxCrossEntropyLoss(scores, labels, weights?) -> loss, log_prob?: dScores = coef * (softmax - onehot), plus
// LogSoftmaxGrad of log_prob's own gradient when log_prob is used downstream. Labels and weights are
// non-differentiable.
void registerLosses(GradientRegistry& registry) {
  registry.add("SoftmaxCrossEntropyLoss",
               [](GradientBuilder& b) {
                 std::vector<int> grads = noGrads(b);
                 if (!b.needsInputGrad(0)) {
                   return grads;
                 }
                 int grad = kNoValue;
                 if (b.outputGrad(0) != kNoValue) {
                   Attributes attrs = lossAttrs(b);
                   // Prefer the forward's log-probabilities; without them the kernel recomputes them from the scores.
                   int logProb = b.output(1);
                   if (logProb == kNoValue) {
                     logProb = b.input(0);
                     attrs.set("from_scores", std::int64_t{1});
                   }
                   std::vector<int> inputs{b.outputGrad(0), logProb, b.input(1)};
                   if (b.input(2) != kNoValue) {
                     inputs.push_back(b.input(2));
                   }
                   grad = b.emit1("SoftmaxCrossEntropyLossGrad", inputs, std::move(attrs));
                 }
                 if (b.outputGrad(1) != kNoValue) {
                   Attributes attrs;
                   attrs.set("axis", std::int64_t{1});
                   const int fromLogProb = b.emit1("LogSoftmaxGrad", {b.outputGrad(1), b.output(1)}, std::move(attrs));
                   grad = grad == kNoValue ? fromLogProb : b.emit1("Add", {grad, fromLogProb});
                 }
                 grads[0] = grad;
                 return grads;
               },
               {1, 2});
  // NegativeLogLikelihoodLoss(log_prob, labels, weights?) -> loss: dX[n, label, d] = -coef, 0 elsewhere. The
  // kernel needs only the class count, not X.
  registry.add("NegativeLogLikelihoodLoss",
               [](GradientBuilder& b) {
                 std::vector<int> grads = noGrads(b);
                 if (b.outputGrad(0) == kNoValue || !b.needsInputGrad(0)) {
                   return grads;
                 }
                 const Shape shape = inputShape(b, 0);
                 if (shape.size() < 2) {
                   ruleError(b, "input must have shape [N, C, ...], got " + shapeToString(shape));
                 }
                 Attributes attrs = lossAttrs(b);
                 attrs.set("classes", shape[1]);
                 std::vector<int> inputs{b.outputGrad(0), b.input(1)};
                 if (b.input(2) != kNoValue) {
                   inputs.push_back(b.input(2));
                 }
                 grads[0] = b.emit1("NegativeLogLikelihoodLossGrad", inputs, std::move(attrs));
                 return grads;
               },
               {1, 2});
}

}  // namespace

void registerReductionGradients(GradientRegistry& registry) {
  registerReduces(registry);
  registerSoftmaxes(registry);
  registerLayerNorm(registry);
  registerLosses(registry);
}

}  // namespace strata::gradients
