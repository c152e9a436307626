// Gradient rules of the elementwise ops: activations, arithmetic (with broadcasting), Where, Cast, Clip, Dropout
// and the variadic Min/Max/Sum/Mean. Activations use the fused one-pass kernels of
// core/backend/cpu/grad_elementwise_ops.cpp (ReluGrad(dY, Y), GeluGrad(dY, X), ...); the rest compose forward ops.
// Broadcast inputs get their gradient summed back to their shape with sumToShape.

#include <cstdint>
#include <string>
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

// Which forward value a unary gradient kernel reads besides dY.
enum class Saved { Input, Output };

// Y = op(X) with dX = GradOp(dY, X or Y); the gradient op gets the forward node's attributes (alpha, ...).
void addUnary(GradientRegistry& registry, const std::string& opType, const std::string& gradOp, Saved saved) {
  registry.add(opType, [gradOp, saved](GradientBuilder& b) {
    std::vector<int> grads = noGrads(b);
    const int dy = b.outputGrad(0);
    if (dy == kNoValue || !b.needsInputGrad(0)) {
      return grads;
    }
    const int z = saved == Saved::Input ? b.input(0) : b.output(0);
    grads[0] = b.emit1(gradOp, {dy, z}, b.node().attrs);
    return grads;
  });
}

// Ops whose derivative is zero almost everywhere: no gradient flows.
void addZeroGradient(GradientRegistry& registry, const std::string& opType) {
  registry.add(opType, [](GradientBuilder& b) { return noGrads(b); });
}

void registerActivations(GradientRegistry& registry) {
  addUnary(registry, "Relu", "ReluGrad", Saved::Output);
  addUnary(registry, "Sigmoid", "SigmoidGrad", Saved::Output);
  addUnary(registry, "Tanh", "TanhGrad", Saved::Output);
  addUnary(registry, "Sqrt", "SqrtGrad", Saved::Output);
  addUnary(registry, "Reciprocal", "ReciprocalGrad", Saved::Output);
  addUnary(registry, "LeakyRelu", "LeakyReluGrad", Saved::Input);
  addUnary(registry, "ThresholdedRelu", "ThresholdedReluGrad", Saved::Input);
  addUnary(registry, "HardSigmoid", "HardSigmoidGrad", Saved::Input);
  addUnary(registry, "HardSwish", "HardSwishGrad", Saved::Input);
  addUnary(registry, "Erf", "ErfGrad", Saved::Input);
  addUnary(registry, "Gelu", "GeluGrad", Saved::Input);
  addUnary(registry, "Silu", "SiluGrad", Saved::Input);  // Note [SiLU fusion]
  addUnary(registry, "Abs", "AbsGrad", Saved::Input);
  addUnary(registry, "Softplus", "SoftplusGrad", Saved::Input);
  addUnary(registry, "Softsign", "SoftsignGrad", Saved::Input);
  addUnary(registry, "Elu", "EluGrad", Saved::Input);
  addUnary(registry, "Celu", "CeluGrad", Saved::Input);
  addUnary(registry, "Selu", "SeluGrad", Saved::Input);
  addUnary(registry, "Mish", "MishGrad", Saved::Input);

  // Exp: dX = dY * Y; Log: dX = dY / X; Neg: dX = -dY (each one pass of an existing op).
  registry.add("Exp", [](GradientBuilder& b) {
    std::vector<int> grads = noGrads(b);
    if (b.outputGrad(0) != kNoValue && b.needsInputGrad(0)) {
      grads[0] = b.emit1("Mul", {b.outputGrad(0), b.output(0)});
    }
    return grads;
  });
  registry.add("Log", [](GradientBuilder& b) {
    std::vector<int> grads = noGrads(b);
    if (b.outputGrad(0) != kNoValue && b.needsInputGrad(0)) {
      grads[0] = b.emit1("Div", {b.outputGrad(0), b.input(0)});
    }
    return grads;
  });
  registry.add("Neg", [](GradientBuilder& b) {
    std::vector<int> grads = noGrads(b);
    if (b.outputGrad(0) != kNoValue && b.needsInputGrad(0)) {
      grads[0] = b.emit1("Neg", {b.outputGrad(0)});
    }
    return grads;
  });
  registry.add("Identity", [](GradientBuilder& b) {
    std::vector<int> grads = noGrads(b);
    grads[0] = b.needsInputGrad(0) ? b.outputGrad(0) : kNoValue;
    return grads;
  });

  for (const char* op : {"Sign", "Ceil", "Floor", "Round"}) {
    addZeroGradient(registry, op);
  }
}

// Clip(X, min?, max?): dY where min <= X <= max (bounds are non-differentiable; before opset 11 they are the
// attributes, which ClipGrad reads too).
void registerClip(GradientRegistry& registry) {
  registry.add("Clip",
               [](GradientBuilder& b) {
                 std::vector<int> grads = noGrads(b);
                 if (b.outputGrad(0) == kNoValue || !b.needsInputGrad(0)) {
                   return grads;
                 }
                 std::vector<int> inputs{b.outputGrad(0), b.input(0), b.input(1), b.input(2)};
                 while (inputs.back() == kNoValue) {
                   inputs.pop_back();
                 }
                 grads[0] = b.emit1("ClipGrad", inputs, b.node().attrs);
                 return grads;
               },
               {1, 2});
}

// Dropout(X, ratio?, training_mode?) -> Y, mask: dX = dY * mask / (1 - ratio). The engine exposes the mask output
// of every Dropout before differentiating. A constant training_mode of false (or ratio 0) makes the op an
// identity; otherwise DropoutGrad gets the ratio and training_mode values and mirrors the forward kernel.
void registerDropout(GradientRegistry& registry) {
  registry.add("Dropout",
               [](GradientBuilder& b) {
                 std::vector<int> grads = noGrads(b);
                 const int dy = b.outputGrad(0);
                 if (dy == kNoValue || !b.needsInputGrad(0)) {
                   return grads;
                 }
                 const Tensor* ratio = b.input(1) == kNoValue ? nullptr : b.constantOf(b.input(1));
                 const Tensor* training = b.input(2) == kNoValue ? nullptr : b.constantOf(b.input(2));
                 const bool notTraining = training != nullptr && training->numel() == 1 &&
                                          training->dtype() == DType::Bool && !*training->data<bool>();
                 const bool noDrop = ratio != nullptr
                                         ? (ratio->numel() == 1 && isFloatingPoint(ratio->dtype()) &&
                                            ((ratio->dtype() == DType::Float32 && *ratio->data<float>() == 0.0f) ||
                                             (ratio->dtype() == DType::Float64 && *ratio->data<double>() == 0.0)))
                                         : b.node().attrs.getFloat("ratio", 0.5f) == 0.0f;
                 const bool identity = notTraining || noDrop;
                 if (identity) {
                   grads[0] = dy;
                   return grads;
                 }
                 if (b.output(1) == kNoValue) {
                   ruleError(b, "the mask output is not exposed (the autodiff engine should have added it)");
                 }
                 std::vector<int> inputs{dy, b.output(1), b.input(1), b.input(2)};
                 while (inputs.back() == kNoValue) {
                   inputs.pop_back();
                 }
                 grads[0] = b.emit1("DropoutGrad", inputs, b.node().attrs);
                 return grads;
               },
               {1, 2});
}

// Cast: the gradient is cast back to the input's dtype; no gradient crosses a cast from or to a non-float type.
// CastLike likewise for its first input; its second only lends its dtype (Note [Opsets above 17] spells Gelu-20's
// constants as CastLike(constant, x)).
void registerCast(GradientRegistry& registry) {
  const GradientRule castBack = [](GradientBuilder& b) {
    std::vector<int> grads = noGrads(b);
    const int dy = b.outputGrad(0);
    const DType from = b.meta(b.input(0)).dtype;
    if (dy == kNoValue || !b.needsInputGrad(0) || !isFloatingPoint(from) || !isFloatingPoint(b.meta(dy).dtype)) {
      return grads;
    }
    if (b.meta(dy).dtype == from) {
      grads[0] = dy;
      return grads;
    }
    Attributes attrs;
    attrs.set("to", std::int64_t{dtypeToOnnx(from)});
    grads[0] = b.emit1("Cast", {dy}, std::move(attrs));
    return grads;
  };
  registry.add("Cast", castBack);
  registry.add("CastLike", castBack, {1});
}

void registerArithmetic(GradientRegistry& registry) {
  registry.add("Add", [](GradientBuilder& b) {
    std::vector<int> grads = noGrads(b);
    int dy = b.outputGrad(0);
    if (dy != kNoValue && b.node().attrs.getInt("fused_relu", 0) != 0)
      dy = b.emit1("ReluGrad", {dy, b.output(0)});  // Note [Fused ReLU]: the Relu's rule first
    for (std::size_t i = 0; i < 2 && dy != kNoValue; ++i) {
      if (b.needsInputGrad(i)) {
        grads[i] = b.sumToShape(dy, inputShape(b, i));
      }
    }
    return grads;
  });
  registry.add("Sub", [](GradientBuilder& b) {
    std::vector<int> grads = noGrads(b);
    const int dy = b.outputGrad(0);
    if (dy == kNoValue) {
      return grads;
    }
    if (b.needsInputGrad(0)) {
      grads[0] = b.sumToShape(dy, inputShape(b, 0));
    }
    if (b.needsInputGrad(1)) {
      // Negate after reducing: the reduced tensor is never larger.
      grads[1] = b.emit1("Neg", {b.sumToShape(dy, inputShape(b, 1))});
    }
    return grads;
  });
  registry.add("Mul", [](GradientBuilder& b) {
    std::vector<int> grads = noGrads(b);
    const int dy = b.outputGrad(0);
    for (std::size_t i = 0; i < 2 && dy != kNoValue; ++i) {
      if (b.needsInputGrad(i)) {
        grads[i] = b.sumToShape(b.emit1("Mul", {dy, b.input(1 - i)}), inputShape(b, i));
      }
    }
    return grads;
  });
  // Y = A / B: dA = dY / B, dB = -dY * Y / B (one fused pass, DivGradDivisor).
  registry.add("Div", [](GradientBuilder& b) {
    std::vector<int> grads = noGrads(b);
    const int dy = b.outputGrad(0);
    if (dy == kNoValue) {
      return grads;
    }
    if (b.needsInputGrad(0)) {
      grads[0] = b.sumToShape(b.emit1("Div", {dy, b.input(1)}), inputShape(b, 0));
    }
    if (b.needsInputGrad(1)) {
      grads[1] = b.sumToShape(b.emit1("DivGradDivisor", {dy, b.output(0), b.input(1)}), inputShape(b, 1));
    }
    return grads;
  });
  // Y = A ^ B: dA = dY * B * A^(B-1), dB = dY * Y * log(A) (B may be an integer tensor, then it has no gradient).
  registry.add("Pow", [](GradientBuilder& b) {
    std::vector<int> grads = noGrads(b);
    const int dy = b.outputGrad(0);
    if (dy == kNoValue) {
      return grads;
    }
    if (b.needsInputGrad(0)) {
      grads[0] = b.sumToShape(b.emit1("PowGradBase", {dy, b.input(0), b.input(1)}), inputShape(b, 0));
    }
    const DType exponentType = b.meta(b.input(1)).dtype;
    if (b.needsInputGrad(1) && isFloatingPoint(exponentType)) {
      int grad = b.sumToShape(b.emit1("PowGradExponent", {dy, b.input(0), b.output(0)}), inputShape(b, 1));
      if (exponentType != b.meta(grad).dtype) {
        Attributes attrs;
        attrs.set("to", std::int64_t{dtypeToOnnx(exponentType)});
        grad = b.emit1("Cast", {grad}, std::move(attrs));
      }
      grads[1] = grad;
    }
    return grads;
  });
}

// Where(cond, X, Y): dX = dY where cond, dY = dY elsewhere (cond is non-differentiable).
void registerWhere(GradientRegistry& registry) {
  registry.add("Where",
               [](GradientBuilder& b) {
                 std::vector<int> grads = noGrads(b);
                 const int dy = b.outputGrad(0);
                 if (dy == kNoValue) {
                   return grads;
                 }
                 int zero = kNoValue;
                 for (std::size_t i = 1; i < 3; ++i) {
                   if (!b.needsInputGrad(i)) {
                     continue;
                   }
                   if (zero == kNoValue) {
                     zero = b.scalarLike(0.0, dy);
                   }
                   const std::vector<int> picked =
                       i == 1 ? std::vector<int>{b.input(0), dy, zero} : std::vector<int>{b.input(0), zero, dy};
                   grads[i] = b.sumToShape(b.emit1("Where", picked), inputShape(b, i));
                 }
                 return grads;
               },
               {0});
}

// Variadic ops. Sum: every input gets dY (summed to its shape); Mean: dY / n; Min/Max: dY where the input holds
// the extremum (tied inputs share it equally, see Note [Min/Max ties] in grad_elementwise_ops.cpp).
void registerVariadic(GradientRegistry& registry) {
  for (const char* op : {"Sum", "Mean"}) {
    const bool mean = std::string(op) == "Mean";
    registry.add(op, [mean](GradientBuilder& b) {
      std::vector<int> grads = noGrads(b);
      int dy = b.outputGrad(0);
      if (dy == kNoValue) {
        return grads;
      }
      const std::size_t count = b.node().inputs.size();
      if (mean && count > 1) {
        dy = b.emit1("Mul", {dy, b.scalarLike(1.0 / static_cast<double>(count), dy)});
      }
      for (std::size_t i = 0; i < count; ++i) {
        if (b.needsInputGrad(i)) {
          grads[i] = b.sumToShape(dy, inputShape(b, i));
        }
      }
      return grads;
    });
  }
  for (const char* op : {"Min", "Max"}) {
    registry.add(op, [](GradientBuilder& b) {
      std::vector<int> grads = noGrads(b);
      const int dy = b.outputGrad(0);
      if (dy == kNoValue) {
        return grads;
      }
      const std::size_t count = b.node().inputs.size();
      if (count == 1) {
        grads[0] = b.needsInputGrad(0) ? dy : kNoValue;
        return grads;
      }
      std::vector<int> inputs{dy, b.output(0)};
      inputs.insert(inputs.end(), b.node().inputs.begin(), b.node().inputs.end());
      for (std::size_t i = 0; i < count; ++i) {
        if (!b.needsInputGrad(i)) {
          continue;
        }
        Attributes attrs;
        attrs.set("index", static_cast<std::int64_t>(i));
        grads[i] = b.sumToShape(b.emit1("MinMaxGrad", inputs, std::move(attrs)), inputShape(b, i));
      }
      return grads;
    });
  }
}

}  // namespace

void registerElementwiseGradients(GradientRegistry& registry) {
  registerActivations(registry);
  registerClip(registry);
  registerDropout(registry);
  registerCast(registry);
  registerArithmetic(registry);
  registerWhere(registry);
  registerVariadic(registry);
}

}  // namespace strata::gradients
