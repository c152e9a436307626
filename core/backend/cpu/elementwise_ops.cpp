// Unary elementwise ops (activations and math functions) plus the helpers shared by all elementwise families.

#include <cmath>
#include <limits>

#include "cpu_ops.h"
#include "elementwise_common.h"

namespace strata::cpu {

namespace elementwise_detail {

void addOp(OpRegistry& registry, const std::string& type, ShapeFn infer, ComputeFactory factory, bool foldable) {
  registry.addSchema(OpSchema{type, std::move(infer), foldable});
  registry.addKernel(type, DeviceType::CPU, [factory = std::move(factory)](const KernelInit& init) {
    return makeFunctionKernel(factory(init));
  });
}

Shape broadcastInputShapes(const ShapeContext& ctx) {
  std::vector<Shape> shapes;
  for (std::size_t i = 0; i < ctx.inputs.size(); ++i) {
    if (ctx.hasInput(i)) {
      shapes.push_back(ctx.inputs[i].meta.shape);
    }
  }
  try {
    return broadcastAllShapes(shapes);
  } catch (const Error& e) {
    ctx.error(e.what());
  }
}

std::vector<TensorMeta> repeatMeta(const ShapeContext& ctx, const TensorMeta& meta) {
  return std::vector<TensorMeta>(std::max<std::size_t>(ctx.outputCount, 1), meta);
}

double scalarAsDouble(const Tensor& tensor, std::int64_t index) {
  STRATA_CHECK(index < tensor.numel(), "element {} of a tensor of shape {}", index, shapeToString(tensor.shape()));
  double value = 0.0;
  visitDType(tensor.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, Half>) {
      value = halfToFloat(tensor.data<std::uint16_t>()[index]);
    } else if constexpr (std::is_same_v<T, BFloat16Bits>) {
      value = bfloat16ToFloat(tensor.data<std::uint16_t>()[index]);
    } else {
      value = static_cast<double>(tensor.data<T>()[index]);
    }
  });
  return value;
}

std::int64_t scalarAsInt(const Tensor& tensor, std::int64_t index) {
  if (tensor.dtype() == DType::Int64) {
    STRATA_CHECK(index < tensor.numel(), "element {} of a tensor of shape {}", index, shapeToString(tensor.shape()));
    return tensor.data<std::int64_t>()[index];
  }
  return static_cast<std::int64_t>(scalarAsDouble(tensor, index));
}

std::vector<std::int64_t> tensorToInts(const Tensor& tensor) {
  std::vector<std::int64_t> values(static_cast<std::size_t>(tensor.numel()));
  for (std::int64_t i = 0; i < tensor.numel(); ++i) {
    values[static_cast<std::size_t>(i)] = scalarAsInt(tensor, i);
  }
  return values;
}

namespace {

// Registers a same-dtype unary op. makeFn(attrs) returns a generic functor applied per element; `cost` weighs one
// element against an add when deciding to parallelise.
template <typename Types, typename MakeFn>
void addUnary(OpRegistry& registry, const std::string& type, Types types, std::int64_t cost, MakeFn makeFn) {
  addOp(
      registry, type,
      [types](const ShapeContext& ctx) {
        requireDType(ctx, 0, types);
        return repeatMeta(ctx, ctx.input(0).meta);
      },
      [type, types, cost, makeFn](const KernelInit& init) -> ComputeFn {
        auto fn = makeFn(init.attrs);
        return [type, types, cost, fn](KernelContext& ctx) {
          const Tensor& in = ctx.input(0);
          Tensor& out = ctx.output(0);
          dispatch(types, in.dtype(), type.c_str(), [&](auto tag) {
            using T = decltype(tag);
            withElementFn(fn, [&](const auto& f) {
              unaryLoop(in.data<T>(), out.data<T>(), in.numel(), cost, [&f](T x) { return static_cast<T>(f(x)); });
            });
          });
        };
      });
}

// Registers a float unary op with a bool result (IsNaN, IsInf).
template <typename MakeFn>
void addPredicate(OpRegistry& registry, const std::string& type, MakeFn makeFn) {
  addOp(
      registry, type,
      [](const ShapeContext& ctx) {
        requireDType(ctx, 0, FloatTypes{});
        return repeatMeta(ctx, TensorMeta{DType::Bool, ctx.input(0).meta.shape});
      },
      [type, makeFn](const KernelInit& init) -> ComputeFn {
        auto fn = makeFn(init.attrs);
        return [type, fn](KernelContext& ctx) {
          const Tensor& in = ctx.input(0);
          dispatch(FloatTypes{}, in.dtype(), type.c_str(), [&](auto tag) {
            using T = decltype(tag);
            unaryLoop(in.data<T>(), ctx.output(0).data<bool>(), in.numel(), 1, [&fn](T x) { return fn(x); });
          });
        };
      });
}

// A functor factory for ops without attributes.
template <typename F>
auto plain(F f) {
  return [f](const Attributes&) { return f; };
}

}  // namespace

void registerUnaryOps(OpRegistry& registry) {
  const auto relu = [](auto x) { return x > decltype(x)(0) ? x : decltype(x)(0); };
  addUnary(registry, "Relu", SignedTypes{}, 1, plain(relu));
  addUnary(registry, "LeakyRelu", FloatTypes{}, 1, [](const Attributes& attrs) {
    const double alpha = attrs.getFloat("alpha", 0.01f);
    return [alpha](auto x) {
      using T = decltype(x);
      return x < T(0) ? x * T(alpha) : x;
    };
  });
  addUnary(registry, "ThresholdedRelu", FloatTypes{}, 1, [](const Attributes& attrs) {
    const double alpha = attrs.getFloat("alpha", 1.0f);
    return [alpha](auto x) {
      using T = decltype(x);
      return x > T(alpha) ? x : T(0);
    };
  });
  addUnary(registry, "Sigmoid", FloatTypes{}, 8, plain([](auto x) { return sigmoidOf(x); }));
  // Note [SiLU fusion] (graphs/silu_fusion.h): Strata's own node for Mul(x, Sigmoid(x)), the same arithmetic.
  addUnary(registry, "Silu", FloatTypes{}, 9, plain([](auto x) { return x * sigmoidOf(x); }));
  addUnary(registry, "Tanh", FloatTypes{}, 8, plain([](auto x) { return tanhOf(x); }));
  addUnary(registry, "HardSigmoid", FloatTypes{}, 1, [](const Attributes& attrs) {
    const double alpha = attrs.getFloat("alpha", 0.2f);
    const double beta = attrs.getFloat("beta", 0.5f);
    return [alpha, beta](auto x) {
      using T = decltype(x);
      return std::max(T(0), std::min(T(1), T(alpha) * x + T(beta)));
    };
  });
  addUnary(registry, "HardSwish", FloatTypes{}, 1, plain([](auto x) {
             using T = decltype(x);
             return x * std::max(T(0), std::min(T(1), x * T(1.0 / 6.0) + T(0.5)));
           }));
  addUnary(registry, "Erf", FloatTypes{}, 8, plain([](auto x) { return erfOf(x); }));
  addUnary(registry, "Gelu", FloatTypes{}, 10, [](const Attributes& attrs) {
    const std::string approximate = attrs.getString("approximate", "none");
    STRATA_CHECK(approximate == "none" || approximate == "tanh", "Gelu: approximate must be none or tanh, got {}",
                 approximate);
    const auto exact = [](auto x) {
      using T = decltype(x);
      return T(0.5) * x * (T(1) + erfOf(x * T(0.7071067811865476)));
    };
    const auto withTanh = [](auto x) {
      using T = decltype(x);
      const T inner = T(0.7978845608028654) * (x + T(0.044715) * x * x * x);  // sqrt(2/pi)
      return T(0.5) * x * (T(1) + tanhOf(inner));
    };
    return EitherFn<decltype(exact), decltype(withTanh)>{approximate == "tanh", exact, withTanh};
  });
  addUnary(registry, "Sqrt", FloatTypes{}, 2, plain([](auto x) { return std::sqrt(x); }));
  addUnary(registry, "Reciprocal", FloatTypes{}, 2, plain([](auto x) { return decltype(x)(1) / x; }));
  addUnary(registry, "Neg", SignedTypes{}, 1, plain([](auto x) { return -x; }));
  addUnary(registry, "Exp", FloatTypes{}, 8, plain([](auto x) { return expOf(x); }));
  addUnary(registry, "Log", FloatTypes{}, 8, plain([](auto x) { return logOf(x); }));
  addUnary(registry, "Abs", NumericTypes{}, 1, plain([](auto x) {
             using T = decltype(x);
             if constexpr (std::is_unsigned_v<T>) {
               return x;
             } else if constexpr (std::is_floating_point_v<T>) {
               return std::fabs(x);
             } else {
               return x < T(0) ? T(-x) : x;
             }
           }));
  addUnary(registry, "Ceil", FloatTypes{}, 1, plain([](auto x) { return std::ceil(x); }));
  addUnary(registry, "Floor", FloatTypes{}, 1, plain([](auto x) { return std::floor(x); }));
  // Round halves to even, as ONNX requires: nearbyint under the default rounding mode.
  addUnary(registry, "Round", FloatTypes{}, 1, plain([](auto x) { return std::nearbyint(x); }));
  addUnary(registry, "Sign", NumericTypes{}, 1, plain([](auto x) {
             using T = decltype(x);
             return static_cast<T>((T(0) < x) - (x < T(0)));
           }));
  addUnary(registry, "Softplus", FloatTypes{}, 10, plain([](auto x) { return softplusOf(x); }));
  addUnary(registry, "Softsign", FloatTypes{}, 2, plain([](auto x) { return x / (decltype(x)(1) + std::fabs(x)); }));
  // Note [ELU loops]: the exponential is taken of min(x, 0), always, and the select comes after it: GCC 12 keeps
  // `x >= 0 ? x : f(expFloat(x))` scalar (Elu on 16M floats took 119 ms, PyTorch 53), but vectorises the select of
  // two computed values. expm1 keeps small negative inputs exact to float precision, as PyTorch's kernels do.
  addUnary(registry, "Selu", FloatTypes{}, 8, [](const Attributes& attrs) {
    const double alpha = attrs.getFloat("alpha", 1.67326319217681884765625f);
    const double gamma = attrs.getFloat("gamma", 1.05070102214813232421875f);
    return [alpha, gamma](auto x) {
      using T = decltype(x);
      const T negative = T(gamma * alpha) * expm1Of(std::min(x, T(0)));  // see Note [ELU loops]
      return x > T(0) ? T(gamma) * x : negative;
    };
  });
  addUnary(registry, "Elu", FloatTypes{}, 8, [](const Attributes& attrs) {
    const double alpha = attrs.getFloat("alpha", 1.0f);
    return [alpha](auto x) {
      using T = decltype(x);
      const T negative = T(alpha) * expm1Of(std::min(x, T(0)));  // see Note [ELU loops]
      return x >= T(0) ? x : negative;
    };
  });
  addUnary(registry, "Celu", FloatTypes{}, 8, [](const Attributes& attrs) {
    const double alpha = attrs.getFloat("alpha", 1.0f);
    return [alpha](auto x) {
      using T = decltype(x);
      // max(0, x) + min(0, alpha expm1(x / alpha)) as one select, which keeps NaN (std::max(0, NaN) is 0).
      const T negative = T(alpha) * expm1Of(std::min(x, T(0)) / T(alpha));  // see Note [ELU loops]
      return x > T(0) ? x : negative;
    };
  });
  addUnary(registry, "Mish", FloatTypes{}, 16, plain([](auto x) { return x * tanhSoftplusOf(x); }));
  addUnary(registry, "Shrink", FloatTypes{}, 1, [](const Attributes& attrs) {
    const double lambd = attrs.getFloat("lambd", 0.5f);
    const double bias = attrs.getFloat("bias", 0.0f);
    return [lambd, bias](auto x) {
      using T = decltype(x);
      return x < T(-lambd) ? x + T(bias) : (x > T(lambd) ? x - T(bias) : T(0));
    };
  });
  addUnary(registry, "Sin", FloatTypes{}, 8, plain([](auto x) { return std::sin(x); }));
  addUnary(registry, "Cos", FloatTypes{}, 8, plain([](auto x) { return std::cos(x); }));
  addUnary(registry, "Tan", FloatTypes{}, 8, plain([](auto x) { return std::tan(x); }));
  addUnary(registry, "Asin", FloatTypes{}, 8, plain([](auto x) { return std::asin(x); }));
  addUnary(registry, "Acos", FloatTypes{}, 8, plain([](auto x) { return std::acos(x); }));
  addUnary(registry, "Atan", FloatTypes{}, 8, plain([](auto x) { return std::atan(x); }));
  addUnary(registry, "Sinh", FloatTypes{}, 8, plain([](auto x) { return std::sinh(x); }));
  addUnary(registry, "Cosh", FloatTypes{}, 8, plain([](auto x) { return std::cosh(x); }));
  addUnary(registry, "Asinh", FloatTypes{}, 8, plain([](auto x) { return std::asinh(x); }));
  addUnary(registry, "Acosh", FloatTypes{}, 8, plain([](auto x) { return std::acosh(x); }));
  addUnary(registry, "Atanh", FloatTypes{}, 8, plain([](auto x) { return std::atanh(x); }));

  addPredicate(registry, "IsNaN", plain([](auto x) { return std::isnan(x); }));
  addPredicate(registry, "IsInf", [](const Attributes& attrs) {
    const bool negative = attrs.getInt("detect_negative", 1) != 0;
    const bool positive = attrs.getInt("detect_positive", 1) != 0;
    return [negative, positive](auto x) { return std::isinf(x) && (x > 0 ? positive : negative); };
  });
}

}  // namespace elementwise_detail

void registerElementwiseOps(OpRegistry& registry) {
  elementwise_detail::registerUnaryOps(registry);
  elementwise_detail::registerBinaryOps(registry);
  elementwise_detail::registerLogicalOps(registry);
  elementwise_detail::registerMiscOps(registry);
}

}  // namespace strata::cpu
