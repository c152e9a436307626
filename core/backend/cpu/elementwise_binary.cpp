// Broadcasting binary arithmetic (Add, Sub, Mul, Div, Pow, Mod, PRelu), variadic Min/Max/Sum/Mean and the
// comparisons.

#include <cmath>
#include <limits>
#include <optional>
#include <type_traits>

#include "elementwise_common.h"

namespace strata::cpu::elementwise_detail {

namespace {

// Integer division that neither traps on a zero divisor (gives 0) nor on MIN / -1 (wraps).
template <typename T>
T intDiv(T x, T y) {
  if constexpr (std::is_signed_v<T>) {
    if (y == T(-1)) {
      return static_cast<T>(static_cast<std::make_unsigned_t<T>>(0) - static_cast<std::make_unsigned_t<T>>(x));
    }
  }
  return y == T(0) ? T(0) : static_cast<T>(x / y);
}

// Remainder with the sign of the divisor (Python %, ONNX Mod fmod=0) or of the dividend (C fmod, fmod=1).
template <typename T>
T modulo(T x, T y, bool cStyle) {
  if constexpr (std::is_floating_point_v<T>) {
    T r = std::fmod(x, y);
    if (!cStyle && r != T(0) && ((r < T(0)) != (y < T(0)))) {
      r += y;
    }
    return r;
  } else {
    if (y == T(0)) {
      return T(0);
    }
    if constexpr (std::is_signed_v<T>) {
      if (y == T(-1)) {
        return T(0);
      }
    }
    T r = static_cast<T>(x % y);
    if (!cStyle && r != T(0) && ((r < T(0)) != (y < T(0)))) {
      r = static_cast<T>(r + y);
    }
    return r;
  }
}

// Exact integer power by squaring; negative exponents truncate toward zero like 1 / base^-e.
template <typename T, typename E>
T intPow(T base, E exponent) {
  if (exponent < E(0)) {
    if (base == T(1)) {
      return T(1);
    }
    if constexpr (std::is_signed_v<T>) {
      if (base == T(-1)) {
        return (static_cast<std::int64_t>(exponent) % 2 == 0) ? T(1) : T(-1);
      }
    }
    return T(0);
  }
  // Unsigned arithmetic wraps like two's complement, giving the low bits of the exact power.
  std::uint64_t result = 1;
  auto b = static_cast<std::uint64_t>(static_cast<std::int64_t>(base));
  auto e = static_cast<std::uint64_t>(exponent);
  while (e != 0) {
    if ((e & 1U) != 0) {
      result *= b;
    }
    b *= b;
    e >>= 1U;
  }
  return static_cast<T>(result);
}

// Shape function for ops whose inputs share one dtype from `types` and broadcast; output dtype is `outDType`
// (or the input dtype when nullopt).
template <typename Types>
ShapeFn sameTypeBroadcastShape(Types types, std::optional<DType> outDType = std::nullopt) {
  return [types, outDType](const ShapeContext& ctx) {
    requireDType(ctx, 0, types);
    const DType dtype = ctx.input(0).meta.dtype;
    for (std::size_t i = 1; i < ctx.inputs.size(); ++i) {
      if (ctx.hasInput(i) && ctx.inputs[i].meta.dtype != dtype) {
        ctx.error(fmt::format("input {} has dtype {} but input 0 has {}", i, dtypeName(ctx.inputs[i].meta.dtype),
                              dtypeName(dtype)));
      }
    }
    return repeatMeta(ctx, TensorMeta{outDType.value_or(dtype), broadcastInputShapes(ctx)});
  };
}

// Registers a binary op whose output has the inputs' dtype. makeFn(attrs) returns a generic functor f(x, y).
template <typename Types, typename MakeFn>
void addBinary(OpRegistry& registry, const std::string& type, Types types, std::int64_t cost, MakeFn makeFn) {
  addOp(registry, type, sameTypeBroadcastShape(types),
        [type, types, cost, makeFn](const KernelInit& init) -> ComputeFn {
          auto fn = makeFn(init.attrs);
          return [type, types, cost, fn](KernelContext& ctx) {
            dispatch(types, ctx.input(0).dtype(), type.c_str(), [&](auto tag) {
              using T = decltype(tag);
              withElementFn(fn, [&](const auto& f) {
                binaryLoop<T, T, T>(ctx.input(0), ctx.input(1), ctx.output(0), cost,
                                    [&f](T x, T y) { return static_cast<T>(f(x, y)); });
              });
            });
          };
        });
}

// Registers a comparison with a bool output.
template <typename Types, typename F>
void addCompare(OpRegistry& registry, const std::string& type, Types types, F fn) {
  addOp(registry, type, sameTypeBroadcastShape(types, DType::Bool), [type, types, fn](const KernelInit&) -> ComputeFn {
    return [type, types, fn](KernelContext& ctx) {
      dispatch(types, ctx.input(0).dtype(), type.c_str(), [&](auto tag) {
        using T = decltype(tag);
        binaryLoop<T, T, bool>(ctx.input(0), ctx.input(1), ctx.output(0), 1, [&fn](T x, T y) { return fn(x, y); });
      });
    };
  });
}

// Registers a variadic op folding its inputs pairwise into the output: out = in0 op in1, then out = out op ink.
// Mean divides the sum by the input count afterwards.
template <typename Types, typename F>
void addVariadic(OpRegistry& registry, const std::string& type, Types types, F fn, bool mean = false) {
  addOp(registry, type, sameTypeBroadcastShape(types), [type, types, fn, mean](const KernelInit&) -> ComputeFn {
    return [type, types, fn, mean](KernelContext& ctx) {
      Tensor& out = ctx.output(0);
      std::vector<const Tensor*> inputs;
      for (std::size_t i = 0; i < ctx.inputs.size(); ++i) {
        if (ctx.hasInput(i)) {
          inputs.push_back(&ctx.input(i));
        }
      }
      STRATA_CHECK(!inputs.empty(), "{} needs at least one input", type);
      const std::size_t count = inputs.size();
      dispatch(types, out.dtype(), type.c_str(), [&](auto tag) {
        using T = decltype(tag);
        const auto op = [&fn](T x, T y) { return static_cast<T>(fn(x, y)); };
        if (count == 1) {
          broadcastCopy(*inputs[0], out);
        } else {
          binaryLoop<T, T, T>(*inputs[0], *inputs[1], out, 1, op);
          // out has the full shape, so reading and writing it in place is safe.
          for (std::size_t k = 2; k < count; ++k) {
            binaryLoop<T, T, T>(out, *inputs[k], out, 1, op);
          }
        }
        if constexpr (std::is_floating_point_v<T>) {
          if (mean && count > 1) {
            T* data = out.data<T>();
            const T divisor = static_cast<T>(count);
            unaryLoop(data, data, out.numel(), 1, [divisor](T x) { return x / divisor; });
          }
        }
      });
    };
  });
}

template <typename T>
T maxPropagatingNaN(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    return (x > y || x != x) ? x : y;
  } else {
    return x > y ? x : y;
  }
}

template <typename T>
T minPropagatingNaN(T x, T y) {
  if constexpr (std::is_floating_point_v<T>) {
    return (x < y || x != x) ? x : y;
  } else {
    return x < y ? x : y;
  }
}

template <typename F>
auto plain(F f) {
  return [f](const Attributes&) { return f; };
}

using PowBaseTypes = TypeList<float, double, std::int32_t, std::int64_t>;

void registerPow(OpRegistry& registry) {
  addOp(
      registry, "Pow",
      [](const ShapeContext& ctx) {
        requireDType(ctx, 0, PowBaseTypes{});
        requireDType(ctx, 1, NumericTypes{});
        return repeatMeta(ctx, TensorMeta{ctx.input(0).meta.dtype, broadcastInputShapes(ctx)});
      },
      [](const KernelInit&) -> ComputeFn {
        return [](KernelContext& ctx) {
          const Tensor& a = ctx.input(0);
          const Tensor& b = ctx.input(1);
          Tensor& out = ctx.output(0);
          dispatch(PowBaseTypes{}, a.dtype(), "Pow", [&](auto baseTag) {
            using T = decltype(baseTag);
            dispatch(NumericTypes{}, b.dtype(), "Pow", [&](auto expTag) {
              using E = decltype(expTag);
              if constexpr (std::is_floating_point_v<T>) {
                // x ** 2 (common in exported models) as a multiply, which vectorises.
                if (b.numel() == 1 && static_cast<double>(b.data<E>()[0]) == 2.0) {
                  binaryLoop<T, E, T>(a, b, out, 1, [](T x, E) { return x * x; });
                  return;
                }
                binaryLoop<T, E, T>(a, b, out, 8, [](T x, E y) { return std::pow(x, static_cast<T>(y)); });
              } else if constexpr (std::is_floating_point_v<E>) {
                binaryLoop<T, E, T>(a, b, out, 8, [](T x, E y) {
                  return static_cast<T>(std::pow(static_cast<double>(x), static_cast<double>(y)));
                });
              } else {
                binaryLoop<T, E, T>(a, b, out, 4, [](T x, E y) { return intPow(x, y); });
              }
            });
          });
        };
      });
}

}  // namespace

void registerBinaryOps(OpRegistry& registry) {
  // Note [Fused ReLU] (graphs/relu_fusion.h): with fused_relu, max(x + y, 0), as Relu computes it on the sum.
  addBinary(registry, "Add", NumericTypes{}, 1, [](const Attributes& attrs) {
    const auto add = [](auto x, auto y) { return x + y; };
    const auto addRelu = [](auto x, auto y) {
      const auto sum = static_cast<decltype(x)>(x + y);
      return sum > decltype(sum)(0) ? sum : decltype(sum)(0);
    };
    return EitherFn<decltype(add), decltype(addRelu)>{attrs.getInt("fused_relu", 0) != 0, add, addRelu};
  });
  addBinary(registry, "Sub", NumericTypes{}, 1, plain([](auto x, auto y) { return x - y; }));
  addBinary(registry, "Mul", NumericTypes{}, 1, plain([](auto x, auto y) { return x * y; }));
  addBinary(registry, "Div", NumericTypes{}, 2, plain([](auto x, auto y) {
              using T = decltype(x);
              if constexpr (std::is_floating_point_v<T>) {
                return x / y;
              } else {
                return intDiv(x, y);
              }
            }));
  addBinary(registry, "Mod", NumericTypes{}, 4, [](const Attributes& attrs) {
    const bool cStyle = attrs.getInt("fmod", 0) != 0;
    return [cStyle](auto x, auto y) { return modulo(x, y, cStyle); };
  });
  // PRelu: the slope broadcasts to X.
  addBinary(registry, "PRelu", SignedTypes{}, 1, plain([](auto x, auto slope) {
              using T = decltype(x);
              return x < T(0) ? T(x * slope) : x;
            }));
  registerPow(registry);

  addVariadic(registry, "Max", NumericTypes{}, [](auto x, auto y) { return maxPropagatingNaN(x, y); });
  addVariadic(registry, "Min", NumericTypes{}, [](auto x, auto y) { return minPropagatingNaN(x, y); });
  addVariadic(registry, "Sum", NumericTypes{}, [](auto x, auto y) { return x + y; });
  addVariadic(
      registry, "Mean", FloatTypes{}, [](auto x, auto y) { return x + y; }, /*mean=*/true);

  addCompare(registry, "Equal", AllTypes{}, [](auto x, auto y) { return x == y; });
  addCompare(registry, "Less", NumericTypes{}, [](auto x, auto y) { return x < y; });
  addCompare(registry, "Greater", NumericTypes{}, [](auto x, auto y) { return x > y; });
  addCompare(registry, "LessOrEqual", NumericTypes{}, [](auto x, auto y) { return x <= y; });
  addCompare(registry, "GreaterOrEqual", NumericTypes{}, [](auto x, auto y) { return x >= y; });
}

}  // namespace strata::cpu::elementwise_detail
