// Gradient kernels of the elementwise family, emitted by graphs/src/gradients/elementwise_gradients.cpp.
//
// Unary gradients take (dY, Z) where Z is the forward input X or output Y (whichever gives the cheaper or more
// stable formula) and make dX in one pass. The broadcasting gradients (Div, Pow, Min/Max) produce the gradient at
// the broadcast output shape; the rule then sums it back to the input's shape.

#include <cmath>
#include <limits>
#include <numbers>
#include <string>
#include <vector>

#include "cpu_ops.h"
#include "elementwise_common.h"

namespace strata::cpu {

namespace {

using elementwise_detail::addOp;
using elementwise_detail::binaryLoop;
using elementwise_detail::ComputeFn;
using elementwise_detail::dispatch;
using elementwise_detail::EitherFn;
using elementwise_detail::erfOf;
using elementwise_detail::expOf;
using elementwise_detail::FloatTypes;
using elementwise_detail::NumericTypes;
using elementwise_detail::repeatMeta;
using elementwise_detail::requireDType;
using elementwise_detail::scalarAsDouble;
using elementwise_detail::sigmoidOf;
using elementwise_detail::tanhOf;
using elementwise_detail::tanhSoftplusOf;
using elementwise_detail::withElementFn;

// dY and every other listed input must share dY's float dtype; `sameShape` inputs must also have dY's shape.
void requireLikeGradient(const ShapeContext& ctx, std::initializer_list<std::size_t> sameShape,
                         std::initializer_list<std::size_t> sameDType = {}) {
  requireDType(ctx, 0, FloatTypes{});
  const TensorMeta& dy = ctx.input(0).meta;
  for (const std::size_t i : sameShape) {
    if (ctx.input(i).meta != dy) {
      ctx.error(fmt::format("input {} is {} but the gradient is {}", i, ctx.input(i).meta.toString(), dy.toString()));
    }
  }
  for (const std::size_t i : sameDType) {
    if (ctx.hasInput(i) && ctx.input(i).meta.dtype != dy.dtype) {
      ctx.error(fmt::format("input {} has dtype {} but the gradient has {}", i, dtypeName(ctx.input(i).meta.dtype),
                            dtypeName(dy.dtype)));
    }
  }
}

// out = f(a, b, c) with numpy broadcasting; out has the broadcast shape.
template <typename A, typename B, typename C, typename O, typename F>
void ternaryLoop(const Tensor& a, const Tensor& b, const Tensor& c, Tensor& out, std::int64_t cost, F f) {
  const A* pa = static_cast<const A*>(a.rawData());
  const B* pb = static_cast<const B*>(b.rawData());
  const C* pc = static_cast<const C*>(c.rawData());
  O* po = static_cast<O*>(out.rawData());
  const std::int64_t n = out.numel();
  if (n == 0) {
    return;
  }
  if (a.numel() == n && b.numel() == n && c.numel() == n) {
    parallelChunks(n, cost, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        po[i] = f(pa[i], pb[i], pc[i]);
      }
    });
    return;
  }
  const Shape shapes[] = {a.shape(), b.shape(), c.shape()};
  const BroadcastLayout layout = makeBroadcastLayout(out.shape(), shapes);
  const std::int64_t sa = layout.innerStride(0);
  const std::int64_t sb = layout.innerStride(1);
  const std::int64_t sc = layout.innerStride(2);
  parallelChunks(layout.rowCount(), layout.rowLength() * cost, [&](std::int64_t begin, std::int64_t end) {
    forEachBroadcastRow(layout, begin, end, [&](std::int64_t o, const std::int64_t* offsets, std::int64_t len) {
      const A* ra = pa + offsets[0];
      const B* rb = pb + offsets[1];
      const C* rc = pc + offsets[2];
      O* ro = po + o;
      for (std::int64_t i = 0; i < len; ++i) {
        ro[i] = f(ra[i * sa], rb[i * sb], rc[i * sc]);
      }
    });
  });
}

// Registers GradOp(dY, Z) -> dX, one pass. makeFn(attrs) returns a generic functor f(dy, z).
template <typename MakeFn>
void addUnaryGrad(OpRegistry& registry, const std::string& type, std::int64_t cost, MakeFn makeFn) {
  addOp(
      registry, type,
      [](const ShapeContext& ctx) {
        requireLikeGradient(ctx, {1});
        return repeatMeta(ctx, ctx.input(0).meta);
      },
      [type, cost, makeFn](const KernelInit& init) -> ComputeFn {
        auto fn = makeFn(init.attrs);
        return [type, cost, fn](KernelContext& ctx) {
          dispatch(FloatTypes{}, ctx.input(0).dtype(), type.c_str(), [&](auto tag) {
            using T = decltype(tag);
            withElementFn(fn, [&](const auto& f) {
              binaryLoop<T, T, T>(ctx.input(0), ctx.input(1), ctx.output(0), cost,
                                  [&f](T dy, T z) { return static_cast<T>(f(dy, z)); });
            });
          });
        };
      });
}

template <typename F>
auto plain(F f) {
  return [f](const Attributes&) { return f; };
}

void registerActivationGrads(OpRegistry& registry) {
  // Activations whose derivative is a function of the output Y.
  addUnaryGrad(registry, "ReluGrad", 1,
               plain([](auto dy, auto y) { return y > decltype(y)(0) ? dy : decltype(y)(0); }));
  addUnaryGrad(registry, "SigmoidGrad", 1, plain([](auto dy, auto y) { return dy * y * (decltype(y)(1) - y); }));
  addUnaryGrad(registry, "TanhGrad", 1, plain([](auto dy, auto y) { return dy * (decltype(y)(1) - y * y); }));
  addUnaryGrad(registry, "SqrtGrad", 2, plain([](auto dy, auto y) { return decltype(y)(0.5) * dy / y; }));
  addUnaryGrad(registry, "ReciprocalGrad", 1, plain([](auto dy, auto y) { return -dy * y * y; }));

  // Activations whose derivative is a function of the input X. Branches mirror the forward kernels' so kinks
  // fall on the same side.
  addUnaryGrad(registry, "LeakyReluGrad", 1, [](const Attributes& attrs) {
    const double alpha = attrs.getFloat("alpha", 0.01f);
    return [alpha](auto dy, auto x) {
      using T = decltype(x);
      return x < T(0) ? dy * T(alpha) : dy;
    };
  });
  addUnaryGrad(registry, "ThresholdedReluGrad", 1, [](const Attributes& attrs) {
    const double alpha = attrs.getFloat("alpha", 1.0f);
    return [alpha](auto dy, auto x) {
      using T = decltype(x);
      return x > T(alpha) ? dy : T(0);
    };
  });
  addUnaryGrad(registry, "HardSigmoidGrad", 1, [](const Attributes& attrs) {
    const double alpha = attrs.getFloat("alpha", 0.2f);
    const double beta = attrs.getFloat("beta", 0.5f);
    return [alpha, beta](auto dy, auto x) {
      using T = decltype(x);
      const T v = T(alpha) * x + T(beta);
      return (v > T(0) && v < T(1)) ? dy * T(alpha) : T(0);
    };
  });
  addUnaryGrad(registry, "HardSwishGrad", 1, plain([](auto dy, auto x) {
                 using T = decltype(x);
                 // y = x * clamp(x / 6 + 1/2, 0, 1): slope x / 3 + 1/2 inside (-3, 3).
                 if (x < T(-3)) {
                   return T(0);
                 }
                 if (x > T(3)) {
                   return dy;
                 }
                 return dy * (x * T(1.0 / 3.0) + T(0.5));
               }));
  addUnaryGrad(registry, "ErfGrad", 8, plain([](auto dy, auto x) {
                 using T = decltype(x);
                 return dy * T(std::numbers::inv_sqrtpi * 2.0) * expOf(-x * x);
               }));
  // d/dx x * s(x) = s + x * s * (1 - s), with s = sigmoid(x) (Note [SiLU fusion]).
  addUnaryGrad(registry, "SiluGrad", 10, plain([](auto dy, auto x) {
                 using T = decltype(x);
                 const T s = sigmoidOf(x);
                 return dy * (s + x * s * (T(1) - s));
               }));
  addUnaryGrad(registry, "GeluGrad", 12, [](const Attributes& attrs) {
    const std::string approximate = attrs.getString("approximate", "none");
    STRATA_CHECK(approximate == "none" || approximate == "tanh", "GeluGrad: approximate must be none or tanh, got {}",
                 approximate);
    const auto exact = [](auto dy, auto x) {
      using T = decltype(x);
      // d/dx x * Phi(x) = Phi(x) + x * phi(x).
      const T cdf = T(0.5) * (T(1) + erfOf(x * T(std::numbers::sqrt2 / 2)));
      const T pdf = expOf(T(-0.5) * x * x) * T(std::numbers::inv_sqrtpi / std::numbers::sqrt2);
      return dy * (cdf + x * pdf);
    };
    const auto withTanh = [](auto dy, auto x) {
      using T = decltype(x);
      constexpr T kScale = T(0.7978845608028654);  // sqrt(2/pi)
      constexpr T kCubic = T(0.044715);
      const T t = tanhOf(kScale * (x + kCubic * x * x * x));
      return dy * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * kScale * (T(1) + T(3) * kCubic * x * x));
    };
    return EitherFn<decltype(exact), decltype(withTanh)>{approximate == "tanh", exact, withTanh};
  });
  addUnaryGrad(registry, "AbsGrad", 1, plain([](auto dy, auto x) {
                 using T = decltype(x);
                 return x > T(0) ? dy : (x < T(0) ? -dy : T(0));
               }));
  addUnaryGrad(registry, "SoftplusGrad", 8, plain([](auto dy, auto x) { return dy * sigmoidOf(x); }));
  addUnaryGrad(registry, "SoftsignGrad", 2, plain([](auto dy, auto x) {
                 using T = decltype(x);
                 const T d = T(1) + std::fabs(x);
                 return dy / (d * d);
               }));
  addUnaryGrad(registry, "EluGrad", 8, [](const Attributes& attrs) {
    const double alpha = attrs.getFloat("alpha", 1.0f);
    return [alpha](auto dy, auto x) {
      using T = decltype(x);
      const T negative = dy * T(alpha) * expOf(std::min(x, T(0)));  // Note [ELU loops]
      return x >= T(0) ? dy : negative;
    };
  });
  addUnaryGrad(registry, "CeluGrad", 8, [](const Attributes& attrs) {
    const double alpha = attrs.getFloat("alpha", 1.0f);
    return [alpha](auto dy, auto x) {
      using T = decltype(x);
      const T negative = dy * expOf(std::min(x, T(0)) / T(alpha));  // Note [ELU loops]
      return x > T(0) ? dy : negative;
    };
  });
  addUnaryGrad(registry, "SeluGrad", 8, [](const Attributes& attrs) {
    const double alpha = attrs.getFloat("alpha", 1.67326319217681884765625f);
    const double gamma = attrs.getFloat("gamma", 1.05070102214813232421875f);
    return [alpha, gamma](auto dy, auto x) {
      using T = decltype(x);
      const T negative = dy * T(gamma * alpha) * expOf(std::min(x, T(0)));  // Note [ELU loops]
      return x > T(0) ? dy * T(gamma) : negative;
    };
  });
  addUnaryGrad(registry, "MishGrad", 20, plain([](auto dy, auto x) {
                 using T = decltype(x);
                 // d/dx x * tanh(sp(x)) = tanh(sp) + x * (1 - tanh(sp)^2) * sigmoid(x), as sp' = sigmoid.
                 const T t = tanhSoftplusOf(x);
                 return dy * (t + x * (T(1) - t * t) * sigmoidOf(x));
               }));
}

// ClipGrad(dY, X, min?, max?): dY where min <= X <= max. Bounds come from inputs (opset 11+) or attributes.
void registerClipGrad(OpRegistry& registry) {
  addOp(
      registry, "ClipGrad",
      [](const ShapeContext& ctx) {
        requireLikeGradient(ctx, {1}, {2, 3});
        return repeatMeta(ctx, ctx.input(0).meta);
      },
      [](const KernelInit& init) -> ComputeFn {
        const bool hasMinAttr = init.attrs.has("min");
        const bool hasMaxAttr = init.attrs.has("max");
        const double minAttr = hasMinAttr ? init.attrs.getFloat("min") : 0.0;
        const double maxAttr = hasMaxAttr ? init.attrs.getFloat("max") : 0.0;
        return [=](KernelContext& ctx) {
          dispatch(FloatTypes{}, ctx.input(0).dtype(), "ClipGrad", [&](auto tag) {
            using T = decltype(tag);
            T lo = -std::numeric_limits<T>::infinity();
            T hi = std::numeric_limits<T>::infinity();
            if (ctx.hasInput(2)) {
              lo = ctx.input(2).data<T>()[0];
            } else if (hasMinAttr) {
              lo = static_cast<T>(minAttr);
            }
            if (ctx.hasInput(3)) {
              hi = ctx.input(3).data<T>()[0];
            } else if (hasMaxAttr) {
              hi = static_cast<T>(maxAttr);
            }
            binaryLoop<T, T, T>(ctx.input(0), ctx.input(1), ctx.output(0), 1,
                                [lo, hi](T dy, T x) { return (x >= lo && x <= hi) ? dy : T(0); });
          });
        };
      });
}

// DropoutGrad(dY, mask, ratio?, training_mode?): dY * mask / (1 - ratio), mirroring the forward kernel's
// decisions (ratio attribute before opset 12; an explicit training_mode input, else the executor's flag).
void registerDropoutGrad(OpRegistry& registry) {
  addOp(
      registry, "DropoutGrad",
      [](const ShapeContext& ctx) {
        requireDType(ctx, 0, FloatTypes{});
        const TensorMeta& mask = ctx.input(1).meta;
        if (mask.dtype != DType::Bool || mask.shape != ctx.input(0).meta.shape) {
          ctx.error(fmt::format("mask must be bool{} like the gradient, got {}", shapeToString(ctx.input(0).meta.shape),
                                mask.toString()));
        }
        return repeatMeta(ctx, ctx.input(0).meta);
      },
      [](const KernelInit& init) -> ComputeFn {
        const double ratioAttr = init.attrs.getFloat("ratio", 0.5f);
        return [ratioAttr](KernelContext& ctx) {
          const double ratio = ctx.hasInput(2) ? scalarAsDouble(ctx.input(2)) : ratioAttr;
          const bool training = ctx.hasInput(3) ? scalarAsDouble(ctx.input(3)) != 0.0 : ctx.training;
          const Tensor& dy = ctx.input(0);
          const bool* mask = ctx.input(1).data<bool>();
          dispatch(FloatTypes{}, dy.dtype(), "DropoutGrad", [&](auto tag) {
            using T = decltype(tag);
            const T* g = dy.data<T>();
            T* out = ctx.output(0).data<T>();
            if (!training || ratio == 0.0) {  // the forward was an identity
              elementwise_detail::unaryLoop(g, out, dy.numel(), 1, [](T v) { return v; });
              return;
            }
            const T scale = ratio >= 1.0 ? T(0) : static_cast<T>(1.0 / (1.0 - ratio));
            parallelChunks(dy.numel(), 1, [&](std::int64_t begin, std::int64_t end) {
              for (std::int64_t i = begin; i < end; ++i) {
                out[i] = mask[i] ? g[i] * scale : T(0);
              }
            });
          });
        };
      });
}

// Shape of a gradient op whose output is the broadcast of all its inputs (dY already has that shape).
ShapeFn broadcastGradShape(std::initializer_list<std::size_t> sameDType) {
  std::vector<std::size_t> checked(sameDType);
  return [checked](const ShapeContext& ctx) {
    requireDType(ctx, 0, FloatTypes{});
    const TensorMeta& dy = ctx.input(0).meta;
    for (const std::size_t i : checked) {
      if (ctx.hasInput(i) && ctx.input(i).meta.dtype != dy.dtype) {
        ctx.error(fmt::format("input {} has dtype {} but the gradient has {}", i, dtypeName(ctx.input(i).meta.dtype),
                              dtypeName(dy.dtype)));
      }
    }
    const Shape shape = elementwise_detail::broadcastInputShapes(ctx);
    if (shape != dy.shape) {
      ctx.error(fmt::format("the inputs broadcast to {} but the gradient has shape {}", shapeToString(shape),
                            shapeToString(dy.shape)));
    }
    return repeatMeta(ctx, dy);
  };
}

void registerBinaryGrads(OpRegistry& registry) {
  // DivGradDivisor(dY, Y, B) = -dY * Y / B, the gradient of Y = A / B with respect to B (before summing to B's
  // shape): one pass instead of a Mul and a Div.
  addOp(registry, "DivGradDivisor", broadcastGradShape({1, 2}), [](const KernelInit&) -> ComputeFn {
    return [](KernelContext& ctx) {
      dispatch(FloatTypes{}, ctx.input(0).dtype(), "DivGradDivisor", [&](auto tag) {
        using T = decltype(tag);
        ternaryLoop<T, T, T, T>(ctx.input(0), ctx.input(1), ctx.input(2), ctx.output(0), 2,
                                [](T dy, T y, T b) { return -dy * y / b; });
      });
    };
  });
  // PowGradBase(dY, A, B) = dY * B * A^(B - 1); B may have any numeric dtype, as in Pow.
  addOp(registry, "PowGradBase", broadcastGradShape({1}), [](const KernelInit&) -> ComputeFn {
    return [](KernelContext& ctx) {
      const Tensor& b = ctx.input(2);
      dispatch(FloatTypes{}, ctx.input(0).dtype(), "PowGradBase", [&](auto tag) {
        using T = decltype(tag);
        dispatch(NumericTypes{}, b.dtype(), "PowGradBase exponent", [&](auto expTag) {
          using E = decltype(expTag);
          if (b.numel() == 1 && static_cast<double>(b.data<E>()[0]) == 2.0) {  // x ** 2: vectorisable
            ternaryLoop<T, T, E, T>(ctx.input(0), ctx.input(1), b, ctx.output(0), 1,
                                    [](T dy, T a, E) { return T(2) * a * dy; });
            return;
          }
          ternaryLoop<T, T, E, T>(ctx.input(0), ctx.input(1), b, ctx.output(0), 8, [](T dy, T a, E e) {
            const T exponent = static_cast<T>(e);
            return exponent == T(0) ? T(0) : dy * exponent * std::pow(a, exponent - T(1));
          });
        });
      });
    };
  });
  // PowGradExponent(dY, A, Y) = dY * Y * log(A); 0 where Y == 0 (A == 0 with a positive exponent, where the
  // limit of Y log A is 0).
  addOp(registry, "PowGradExponent", broadcastGradShape({1, 2}), [](const KernelInit&) -> ComputeFn {
    return [](KernelContext& ctx) {
      dispatch(FloatTypes{}, ctx.input(0).dtype(), "PowGradExponent", [&](auto tag) {
        using T = decltype(tag);
        ternaryLoop<T, T, T, T>(ctx.input(0), ctx.input(1), ctx.input(2), ctx.output(0), 8,
                                [](T dy, T a, T y) { return y == T(0) ? T(0) : dy * y * std::log(a); });
      });
    };
  });
}

// MinMaxGrad(dY, Y, X0, ..., Xn-1) with attribute `index` = i: dY / t where Xi (broadcast) equals Y and t inputs
// do, else 0.
// Note [Min/Max ties]: tied inputs share the gradient equally (as PyTorch's maximum/minimum do), so the inputs'
// gradients add up to dY, the rule is symmetric in its inputs, and for two tied inputs it equals the central
// finite difference. The same convention holds for ReduceMax/ReduceMin (reduction_gradients.cpp).
template <typename T>
void minMaxGrad(KernelContext& ctx, std::size_t index) {
  const std::size_t inputs = ctx.inputs.size();
  Tensor& out = ctx.output(0);
  const std::int64_t n = out.numel();
  if (n == 0) {
    return;
  }
  std::vector<Shape> shapes;
  std::vector<const T*> data;
  for (std::size_t k = 0; k < inputs; ++k) {
    shapes.push_back(ctx.input(k).shape());
    data.push_back(ctx.input(k).data<T>());
  }
  const std::size_t self = 2 + index;
  const BroadcastLayout layout = makeBroadcastLayout(out.shape(), shapes);
  std::vector<std::int64_t> inner(inputs);
  for (std::size_t k = 0; k < inputs; ++k) {
    inner[k] = layout.innerStride(k);
  }
  T* po = out.data<T>();
  parallelChunks(layout.rowCount(), layout.rowLength() * static_cast<std::int64_t>(inputs),
                 [&](std::int64_t begin, std::int64_t end) {
                   forEachBroadcastRow(
                       layout, begin, end, [&](std::int64_t o, const std::int64_t* offsets, std::int64_t len) {
                         for (std::int64_t i = 0; i < len; ++i) {
                           const auto at = [&](std::size_t k) { return data[k][offsets[k] + i * inner[k]]; };
                           const T y = at(1);
                           if (!(at(self) == y)) {
                             po[o + i] = T(0);
                             continue;
                           }
                           int ties = 0;
                           for (std::size_t k = 2; k < inputs; ++k) {
                             ties += at(k) == y ? 1 : 0;
                           }
                           po[o + i] = at(0) / static_cast<T>(ties);
                         }
                       });
                 });
}

void registerMinMaxGrad(OpRegistry& registry) {
  addOp(
      registry, "MinMaxGrad",
      [](const ShapeContext& ctx) {
        const auto index = ctx.attrs.getInt("index", 0);
        if (index < 0 || static_cast<std::size_t>(index) + 2 >= ctx.inputs.size()) {
          ctx.error(fmt::format("index {} is out of range for {} forward inputs", index, ctx.inputs.size() - 2));
        }
        for (std::size_t i = 1; i < ctx.inputs.size(); ++i) {
          if (ctx.input(i).meta.dtype != ctx.input(0).meta.dtype) {
            ctx.error(fmt::format("input {} has dtype {} but the gradient has {}", i,
                                  dtypeName(ctx.input(i).meta.dtype), dtypeName(ctx.input(0).meta.dtype)));
          }
        }
        return broadcastGradShape({})(ctx);
      },
      [](const KernelInit& init) -> ComputeFn {
        const auto index = static_cast<std::size_t>(init.attrs.getInt("index", 0));
        return [index](KernelContext& ctx) {
          dispatch(FloatTypes{}, ctx.input(0).dtype(), "MinMaxGrad",
                   [&](auto tag) { minMaxGrad<decltype(tag)>(ctx, index); });
        };
      });
}

}  // namespace

void registerElementwiseGradOps(OpRegistry& registry) {
  registerActivationGrads(registry);
  registerClipGrad(registry);
  registerDropoutGrad(registry);
  registerBinaryGrads(registry);
  registerMinMaxGrad(registry);
}

}  // namespace strata::cpu
