#pragma once

// Helpers shared by the elementwise and reduction CPU ops (elementwise_*.cpp, reduction_*.cpp). Internal to the
// CPU backend.

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "broadcast.h"
#include "strata/op_registry.h"
#include "strata/tensor.h"

namespace strata::cpu::elementwise_detail {

template <typename... Ts>
struct TypeList {};

using FloatTypes = TypeList<float, double>;
using SignedTypes = TypeList<float, double, std::int32_t, std::int64_t, std::int8_t>;
using NumericTypes = TypeList<float, double, std::int32_t, std::int64_t, std::int8_t, std::uint8_t>;
using AllTypes = TypeList<float, double, std::int32_t, std::int64_t, std::int8_t, std::uint8_t, bool>;
using IndexTypes = TypeList<std::int32_t, std::int64_t>;

template <typename T, typename... Ts>
constexpr bool contains(TypeList<Ts...>) {
  return (std::is_same_v<T, Ts> || ...);
}

template <typename... Ts>
bool supports(TypeList<Ts...>, DType dtype) {
  return ((dtype == dtypeOf<Ts>()) || ...);
}

// Calls fn(T{}) for the C++ type T of dtype, which must be one of the list (throws Error otherwise). Only the
// listed types are instantiated, so fn may use arithmetic the others lack.
template <typename... Ts, typename Fn>
void dispatch(TypeList<Ts...>, DType dtype, const char* what, Fn&& fn) {
  const bool done = ((dtype == dtypeOf<Ts>() ? (fn(Ts{}), true) : false) || ...);
  if (!done) {
    fail("{}: dtype {} is not supported", what, dtypeName(dtype));
  }
}

using ComputeFn = std::function<void(KernelContext&)>;
// Builds a node's compute function at plan time; lets kernels capture attributes (KernelContext has none).
using ComputeFactory = std::function<ComputeFn(const KernelInit&)>;

// Registers a schema plus a CPU kernel built by `factory`.
void addOp(OpRegistry& registry, const std::string& type, ShapeFn infer, ComputeFactory factory, bool foldable = true);

// Throws a node-naming error when input i's dtype is not in the list.
template <typename... Ts>
void requireDType(const ShapeContext& ctx, std::size_t i, TypeList<Ts...> list) {
  const DType dtype = ctx.input(i).meta.dtype;
  if (!supports(list, dtype)) {
    ctx.error("input " + std::to_string(i) + " has unsupported dtype " + std::string(dtypeName(dtype)));
  }
}

// Broadcasts the shapes of all present inputs, reporting incompatibility as a node error.
Shape broadcastInputShapes(const ShapeContext& ctx);

// Output metas: `meta` repeated for every declared output.
std::vector<TensorMeta> repeatMeta(const ShapeContext& ctx, const TensorMeta& meta);

// Element i of a numeric tensor as double / int64 (any dtype but Float16/BFloat16 raw handled too).
double scalarAsDouble(const Tensor& tensor, std::int64_t index = 0);
std::int64_t scalarAsInt(const Tensor& tensor, std::int64_t index = 0);
std::vector<std::int64_t> tensorToInts(const Tensor& tensor);

// out[i] = f(in[i]) over n elements, parallel when large. `cost` is a rough per-element weight (1 = an add).
template <typename TIn, typename TOut, typename F>
void unaryLoop(const TIn* in, TOut* out, std::int64_t n, std::int64_t cost, F f) {
  parallelChunks(n, cost, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t i = begin; i < end; ++i) {
      out[i] = f(in[i]);
    }
  });
}

// out = f(a, b) with numpy broadcasting; out must already have the broadcast shape. out may alias a or b when that
// input has out's shape.
template <typename A, typename B, typename O, typename F>
void binaryLoop(const Tensor& a, const Tensor& b, Tensor& out, std::int64_t cost, F f) {
  const A* pa = static_cast<const A*>(a.rawData());
  const B* pb = static_cast<const B*>(b.rawData());
  O* po = static_cast<O*>(out.rawData());
  const std::int64_t n = out.numel();
  if (n == 0) {
    return;
  }
  const std::int64_t na = a.numel();
  const std::int64_t nb = b.numel();
  if (na == n && nb == n) {  // equal element counts imply equal shapes up to leading/inner 1s
    parallelChunks(n, cost, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        po[i] = f(pa[i], pb[i]);
      }
    });
    return;
  }
  if (nb == 1 && na == n) {
    const B vb = pb[0];
    parallelChunks(n, cost, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        po[i] = f(pa[i], vb);
      }
    });
    return;
  }
  if (na == 1 && nb == n) {
    const A va = pa[0];
    parallelChunks(n, cost, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t i = begin; i < end; ++i) {
        po[i] = f(va, pb[i]);
      }
    });
    return;
  }
  const Shape shapes[] = {a.shape(), b.shape()};
  const BroadcastLayout layout = makeBroadcastLayout(out.shape(), shapes);
  const std::int64_t sa = layout.innerStride(0);
  const std::int64_t sb = layout.innerStride(1);
  parallelChunks(layout.rowCount(), layout.rowLength() * cost, [&](std::int64_t begin, std::int64_t end) {
    forEachBroadcastRow(layout, begin, end, [&](std::int64_t o, const std::int64_t* offsets, std::int64_t len) {
      const A* ra = pa + offsets[0];
      const B* rb = pb + offsets[1];
      O* ro = po + o;
      if (sa != 0 && sb != 0) {
        for (std::int64_t i = 0; i < len; ++i) {
          ro[i] = f(ra[i], rb[i]);
        }
      } else if (sa != 0) {
        const B vb = rb[0];
        for (std::int64_t i = 0; i < len; ++i) {
          ro[i] = f(ra[i], vb);
        }
      } else if (sb != 0) {
        const A va = ra[0];
        for (std::int64_t i = 0; i < len; ++i) {
          ro[i] = f(va, rb[i]);
        }
      } else {
        const O value = f(ra[0], rb[0]);
        for (std::int64_t i = 0; i < len; ++i) {
          ro[i] = value;
        }
      }
    });
  });
}

// Two element functions, one picked per kernel from an attribute (Gelu's `approximate`): the loop is instantiated for
// each, so neither carries a per-element branch, and a scalar libm call in one (std::tanh) does not keep the other
// from vectorising (ConvNeXt-Tiny's 18 exact GELUs ran scalar that way: 3.4 ms of its 13 ms forward).
template <typename First, typename Second>
struct EitherFn {
  bool useSecond = false;
  First first;
  Second second;
};

// Calls run(f) with the element function to use: fn itself, or the one an EitherFn picked.
template <typename Fn, typename Run>
void withElementFn(const Fn& fn, Run&& run) {
  run(fn);
}

template <typename First, typename Second, typename Run>
void withElementFn(const EitherFn<First, Second>& fn, Run&& run) {
  if (fn.useSecond) {
    run(fn.second);
  } else {
    run(fn.first);
  }
}

// Registration of each family (each in its own elementwise_*.cpp).
void registerUnaryOps(OpRegistry& registry);
void registerBinaryOps(OpRegistry& registry);
void registerLogicalOps(OpRegistry& registry);
void registerMiscOps(OpRegistry& registry);

// erf for float32 as a branch-free rational function the compiler vectorises; std::erf is a scalar libm call
// (ConvNeXt-Tiny's GELUs took 5.5 ms of its 26 ms forward at 32x32, batch 16). The approximation is the one Eigen
// and XLA use for float: x * P(x^2) / Q(x^2) on x clamped to [-4, 4]. Measured against Python's math.erf over
// [-6, 6] and |x| in [1e-8, 5]: at most 4.2e-7 relative error (about 4 float32 ulps). Float64 keeps std::erf.
inline float erfFloat(float x) {
  x = std::clamp(x, -4.0f, 4.0f);
  const float x2 = x * x;
  float p = -2.72614225801306e-10f;
  p = p * x2 + 2.77068142495902e-08f;
  p = p * x2 - 2.10102402082508e-06f;
  p = p * x2 - 5.69250639462346e-05f;
  p = p * x2 - 7.34990630326855e-04f;
  p = p * x2 - 2.95459980854025e-03f;
  p = p * x2 - 1.60960333262415e-02f;
  float q = -1.45660718464996e-05f;
  q = q * x2 - 2.13374055278905e-04f;
  q = q * x2 - 1.68282697438203e-03f;
  q = q * x2 - 7.37332916720468e-03f;
  q = q * x2 - 1.42647390514189e-02f;
  return x * p / q;
}

// exp for float32 as branch-free code the compiler vectorises; std::exp is a scalar libm call per element
// (EfficientNetV2-S's 132 SiLU sigmoids took 27 of its 45 ms forward at 32x32, batch 16, one thread). Cephes' expf:
// x = n ln2 + r with |r| <= ln2 / 2 (Cody-Waite split of ln2), e^r by a degree-6 polynomial, 2^n in the exponent
// bits. At most 2 ulps from std::exp over [ln(FLT_MIN), 88.7]; below ln(FLT_MIN) it returns 0 where std::exp would
// return a subnormal, above 88.72 infinity, NaN stays NaN. Float64 keeps std::exp.
inline constexpr float kExpFloor = -87.336544f;   // ln(FLT_MIN): exp is subnormal below
inline constexpr float kExpCeiling = 88.722839f;  // ln(FLT_MAX): exp overflows above

inline float expFloat(float x) {
  // Selects only, no branches or early returns, so that loops over it vectorise; NaN takes the path of 0.
  const bool isNumber = x == x;
  const float clamped = isNumber ? std::min(std::max(x, kExpFloor), kExpCeiling) : 0.0f;
  const float n = std::floor(clamped * 1.44269504088896341f + 0.5f);
  const float r = clamped - n * 0.693359375f + n * 2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  // 2^n for n in [-126, 128] as 2^half * 2^(n - half): each factor's biased exponent alone.
  const auto whole = static_cast<std::int32_t>(n);
  const std::int32_t half = whole >> 1;
  const float e = p * std::bit_cast<float>((half + 127) << 23) * std::bit_cast<float>((whole - half + 127) << 23);
  const float saturated = x > kExpCeiling ? std::numeric_limits<float>::infinity() : (x < kExpFloor ? 0.0f : e);
  return isNumber ? saturated : x;
}

template <typename T>
T expOf(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return expFloat(x);
  } else {
    return std::exp(x);
  }
}

// e^x - 1 for float32 without the cancellation of expFloat(x) - 1 near 0 (ELU's family, as PyTorch's expm1): a
// degree-8 Taylor polynomial for |x| < 0.5 (truncation under 2e-8 relative), expFloat above; branch-free. At most
// 1e-7 relative error over [-20, 0] (the test's bound is 2x that); NaN stays NaN, -inf gives -1.
inline float expm1Float(float x) {
  const float large = expFloat(x) - 1.0f;
  float p = 1.0f / 40320.0f;
  p = p * x + 1.0f / 5040.0f;
  p = p * x + 1.0f / 720.0f;
  p = p * x + 1.0f / 120.0f;
  p = p * x + 1.0f / 24.0f;
  p = p * x + 1.0f / 6.0f;
  p = p * x + 0.5f;
  const float small = p * x * x + x;
  return std::fabs(x) < 0.5f ? small : large;
}

template <typename T>
T expm1Of(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return expm1Float(x);
  } else {
    return std::expm1(x);
  }
}

// sigmoid without overflow (exp of -|x| only), branch-free so float loops over it vectorise (expOf). Shared by the
// forward kernels (Sigmoid, Silu) and the gradient kernels that need it (SiluGrad, SoftplusGrad, MishGrad).
template <typename T>
T sigmoidOf(T x) {
  const T e = expOf(-std::abs(x));
  const T positive = T(1) / (T(1) + e);
  return x >= T(0) ? positive : e * positive;
}

// tanh for float32, branch-free (std::tanh is a scalar libm call: Mish and tanh-GELU ran scalar). Cephes' tanhf: an
// odd polynomial for |x| <= 0.625, 1 - 2 / (e^(2|x|) + 1) above (expFloat), the sign put back; NaN stays NaN.
inline float tanhFloat(float x) {
  const float z = std::fabs(x);
  const float s = x * x;
  float p = -5.70498872745e-3f;
  p = p * s + 2.06390887954e-2f;
  p = p * s - 5.37397155531e-2f;
  p = p * s + 1.33314422036e-1f;
  p = p * s - 3.33332819422e-1f;
  const float small = p * s * x + x;
  const float large = std::copysign(1.0f - 2.0f / (expFloat(z + z) + 1.0f), x);
  return z <= 0.625f ? small : large;
}

// log of a normal, positive, finite float32 times 2^-scale (the core of logFloat and log1pUnit). Cephes' logf:
// x = m 2^e with m in [sqrt(1/2), sqrt(2)), log(m) = f - f^2/2 + f^3 P(f) for f = m - 1, e ln2 added in two parts.
inline float logOfNormal(float x, float scale) {
  const auto bits = std::bit_cast<std::int32_t>(x);
  const float m = std::bit_cast<float>((bits & 0x007fffff) | 0x3f000000);  // in [0.5, 1)
  const bool low = m < 0.70710678118654752f;
  const float f = (low ? m + m : m) - 1.0f;
  const float e = static_cast<float>(((bits >> 23) & 0xff) - 126 - (low ? 1 : 0)) - scale;
  const float z = f * f;
  float p = 7.0376836292e-2f;
  p = p * f - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  float y = p * f * z;
  y += -2.12194440e-4f * e;
  y += -0.5f * z;
  return f + y + 0.693359375f * e;
}

// log for float32, branch-free (std::log is a scalar libm call): logOfNormal, subnormals scaled by 2^23 first;
// log(0) = -inf, log(negative) = NaN, log(inf) = inf, NaN stays NaN.
inline float logFloat(float x) {
  const bool subnormal = x < std::numeric_limits<float>::min();
  const float result = logOfNormal(subnormal ? x * 8388608.0f : x, subnormal ? 23.0f : 0.0f);  // 2^23
  const float inf = std::numeric_limits<float>::infinity();
  const float special = x == 0.0f ? -inf : (x == inf ? inf : std::numeric_limits<float>::quiet_NaN());
  return x > 0.0f && x < inf ? result : special;
}

// log(1 + u) for u in [0, 1] without losing small u (1 + u rounds): log(w) * u / (w - 1) with w = 1 + u (Goldberg's
// correction), u itself where w rounds to 1. No special values: GCC 12 stops vectorising loops where logFloat's
// checks follow expFloat's (softplus), so callers keep u in range.
inline float log1pUnit(float u) {
  const float w = 1.0f + u;
  const float d = w - 1.0f;
  return d == 0.0f ? u : logOfNormal(w, 0.0f) * (u / d);
}

template <typename T>
T tanhOf(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return tanhFloat(x);
  } else {
    return std::tanh(x);
  }
}

template <typename T>
T logOf(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return logFloat(x);
  } else {
    return std::log(x);
  }
}

// log(1 + e^x) without overflow: max(x, 0) + log1p(e^-|x|), branch-free for float32.
template <typename T>
T softplusOf(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return std::max(x, 0.0f) + log1pUnit(expFloat(-std::fabs(x)));  // NaN: max keeps it
  } else {
    return x > T(0) ? x + std::log1p(std::exp(-x)) : std::log1p(std::exp(x));
  }
}

// tanh(softplus(x)) for float32 in one exponential: with e = e^x, tanh(log(1 + e)) = n / (n + 2) for n = e (e + 2).
// x is capped at 20, where the ratio is 1 in float32 (e^x would overflow n). Mish as x * tanhSoftplusFloat(x) stays
// within 2.7e-7 relative error and vectorises, where x * tanhOf(softplusOf(x)) as one loop did not (GCC 12 and the
// selects of two approximations in a row: 100 ms on 16M floats, more than the three separate kernels' 83).
inline float tanhSoftplusFloat(float x) {
  const float e = expFloat(std::min(x, 20.0f));
  const float n = e * (e + 2.0f);
  return n / (n + 2.0f);
}

template <typename T>
T tanhSoftplusOf(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return tanhSoftplusFloat(x);
  } else {
    return std::tanh(softplusOf(x));
  }
}

template <typename T>
T erfOf(T x) {
  if constexpr (std::is_same_v<T, float>) {
    return erfFloat(x);
  } else {
    return std::erf(x);
  }
}

}  // namespace strata::cpu::elementwise_detail
