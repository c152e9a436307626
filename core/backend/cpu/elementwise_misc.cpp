// Cast, CastLike, Identity, Clip and Dropout.

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "elementwise_common.h"

namespace strata::cpu::elementwise_detail {

namespace {

// Reads one element of storage type S as an arithmetic value (16-bit floats widen to float).
template <typename S>
auto loadValue(S value) {
  if constexpr (std::is_same_v<S, Half>) {
    return halfToFloat(value.bits);
  } else if constexpr (std::is_same_v<S, BFloat16Bits>) {
    return bfloat16ToFloat(value.bits);
  } else {
    return value;
  }
}

// Converts an arithmetic value to storage type D. Float to integer truncates toward zero; out-of-range values go
// through int64 and wrap (what numpy does on x86) instead of being undefined behaviour.
template <typename D, typename V>
D storeValue(V value) {
  if constexpr (std::is_same_v<D, Half>) {
    return Half{floatToHalf(static_cast<float>(value))};
  } else if constexpr (std::is_same_v<D, BFloat16Bits>) {
    return BFloat16Bits{floatToBFloat16(static_cast<float>(value))};
  } else if constexpr (std::is_same_v<D, bool>) {
    return value != V(0);
  } else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<V>) {
    constexpr auto kLimit = static_cast<V>(9.2233720368547758e18);  // 2^63
    if (!(value > -kLimit && value < kLimit)) {
      return static_cast<D>(std::numeric_limits<std::int64_t>::min());
    }
    if constexpr (sizeof(D) < sizeof(std::int64_t)) {
      return static_cast<D>(static_cast<std::int64_t>(value));
    } else {
      return static_cast<D>(value);
    }
  } else {
    return static_cast<D>(value);
  }
}

void castTensor(const Tensor& in, Tensor& out) {
  if (in.dtype() == out.dtype()) {
    std::memcpy(out.rawData(), in.rawData(), in.bytes());
    return;
  }
  visitDType(in.dtype(), [&](auto srcTag) {
    using S = decltype(srcTag);
    visitDType(out.dtype(), [&](auto dstTag) {
      using D = decltype(dstTag);
      unaryLoop(static_cast<const S*>(in.rawData()), static_cast<D*>(out.rawData()), in.numel(), 2,
                [](S x) { return storeValue<D>(loadValue(x)); });
    });
  });
}

void copyTensor(const Tensor& in, Tensor& out) {
  const auto* src = static_cast<const char*>(in.rawData());
  auto* dst = static_cast<char*>(out.rawData());
  if (src == dst) {
    return;
  }
  const auto bytes = static_cast<std::int64_t>(in.bytes());
  constexpr std::int64_t kBlock = 4096;
  parallelChunks((bytes + kBlock - 1) / kBlock, kBlock / 4, [&](std::int64_t begin, std::int64_t end) {
    const std::int64_t first = begin * kBlock;
    const std::int64_t last = std::min(end * kBlock, bytes);
    std::memcpy(dst + first, src + first, static_cast<std::size_t>(last - first));
  });
}

void registerCasts(OpRegistry& registry) {
  addOp(
      registry, "Cast",
      [](const ShapeContext& ctx) {
        const auto onnxType = static_cast<int>(ctx.attrs.getInt("to"));
        const std::optional<DType> to = dtypeFromOnnx(onnxType);
        if (!to) {
          ctx.error(fmt::format("casting to {} (ONNX type {}) is not supported", onnxTypeName(onnxType), onnxType));
        }
        return repeatMeta(ctx, TensorMeta{*to, ctx.input(0).meta.shape});
      },
      [](const KernelInit&) -> ComputeFn {
        return [](KernelContext& ctx) { castTensor(ctx.input(0), ctx.output(0)); };
      });
  addOp(
      registry, "CastLike",
      [](const ShapeContext& ctx) {
        return repeatMeta(ctx, TensorMeta{ctx.input(1).meta.dtype, ctx.input(0).meta.shape});
      },
      [](const KernelInit&) -> ComputeFn {
        return [](KernelContext& ctx) { castTensor(ctx.input(0), ctx.output(0)); };
      });
  addOp(
      registry, "Identity", [](const ShapeContext& ctx) { return repeatMeta(ctx, ctx.input(0).meta); },
      [](const KernelInit&) -> ComputeFn {
        return [](KernelContext& ctx) { copyTensor(ctx.input(0), ctx.output(0)); };
      });
}

void registerClip(OpRegistry& registry) {
  addOp(
      registry, "Clip",
      [](const ShapeContext& ctx) {
        requireDType(ctx, 0, NumericTypes{});
        const DType dtype = ctx.input(0).meta.dtype;
        for (std::size_t i = 1; i < 3; ++i) {
          if (ctx.hasInput(i) && (ctx.inputs[i].meta.dtype != dtype || ctx.inputs[i].meta.numel() != 1)) {
            ctx.error(fmt::format("bound {} must be a scalar of the input's dtype {}, got {}", i, dtypeName(dtype),
                                  ctx.inputs[i].meta.toString()));
          }
        }
        return repeatMeta(ctx, ctx.input(0).meta);
      },
      [](const KernelInit& init) -> ComputeFn {
        // Before opset 11 the bounds were float attributes.
        const bool hasMinAttr = init.attrs.has("min");
        const bool hasMaxAttr = init.attrs.has("max");
        const double minAttr = hasMinAttr ? init.attrs.getFloat("min") : 0.0;
        const double maxAttr = hasMaxAttr ? init.attrs.getFloat("max") : 0.0;
        return [=](KernelContext& ctx) {
          const Tensor& in = ctx.input(0);
          dispatch(NumericTypes{}, in.dtype(), "Clip", [&](auto tag) {
            using T = decltype(tag);
            T lo = std::numeric_limits<T>::lowest();
            T hi = std::numeric_limits<T>::max();
            if (ctx.hasInput(1)) {
              lo = ctx.input(1).data<T>()[0];
            } else if (hasMinAttr) {
              lo = static_cast<T>(minAttr);
            }
            if (ctx.hasInput(2)) {
              hi = ctx.input(2).data<T>()[0];
            } else if (hasMaxAttr) {
              hi = static_cast<T>(maxAttr);
            }
            // std::max(x, lo) keeps a NaN x; min > max yields max everywhere, as the spec asks.
            unaryLoop(in.data<T>(), ctx.output(0).data<T>(), in.numel(), 1,
                      [lo, hi](T x) { return std::min(std::max(x, lo), hi); });
          });
        };
      });
}

// A counter-based generator: the same (seed, step, index) always gives the same number, on any thread split.
inline std::uint64_t mix64(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ULL;
  x = (x ^ (x >> 30U)) * 0xBF58476D1CE4E5B9ULL;
  x = (x ^ (x >> 27U)) * 0x94D049BB133111EBULL;
  return x ^ (x >> 31U);
}

void registerDropout(OpRegistry& registry) {
  addOp(
      registry, "Dropout",
      [](const ShapeContext& ctx) {
        requireDType(ctx, 0, FloatTypes{});
        std::vector<TensorMeta> metas{ctx.input(0).meta};
        if (ctx.outputCount > 1) {
          metas.push_back(TensorMeta{DType::Bool, ctx.input(0).meta.shape});
        }
        return metas;
      },
      [](const KernelInit& init) -> ComputeFn {
        const auto seed = static_cast<std::uint64_t>(init.attrs.getInt("seed", 0));
        const double ratioAttr = init.attrs.getFloat("ratio", 0.5f);  // an attribute before opset 12
        return [seed, ratioAttr](KernelContext& ctx) {
          const Tensor& in = ctx.input(0);
          const double ratio = ctx.hasInput(1) ? scalarAsDouble(ctx.input(1)) : ratioAttr;
          STRATA_CHECK(ratio >= 0.0 && ratio <= 1.0, "Dropout: ratio must be in [0, 1], got {}", ratio);
          // An explicit training_mode input decides; without it, whether the executor is training.
          const bool training = ctx.hasInput(2) ? scalarAsDouble(ctx.input(2)) != 0.0 : ctx.training;
          const std::int64_t n = in.numel();
          bool* mask = ctx.hasOutput(1) ? ctx.output(1).data<bool>() : nullptr;
          if (!training || ratio == 0.0) {
            copyTensor(in, ctx.output(0));
            if (mask != nullptr) {
              std::fill(mask, mask + n, true);
            }
            return;
          }
          const std::uint64_t stream = mix64(seed ^ mix64(ctx.step));
          // Keep when a 24-bit uniform in [0, 1) is >= ratio.
          const auto threshold = static_cast<std::uint64_t>(std::ceil(ratio * 16777216.0));
          dispatch(FloatTypes{}, in.dtype(), "Dropout", [&](auto tag) {
            using T = decltype(tag);
            const T* x = in.data<T>();
            T* y = ctx.output(0).data<T>();
            const T scale = ratio >= 1.0 ? T(0) : static_cast<T>(1.0 / (1.0 - ratio));
            parallelChunks(n, 8, [&](std::int64_t begin, std::int64_t end) {
              for (std::int64_t i = begin; i < end; ++i) {
                const bool keep = (mix64(stream + static_cast<std::uint64_t>(i)) >> 40U) >= threshold;
                y[i] = keep ? x[i] * scale : T(0);
                if (mask != nullptr) {
                  mask[i] = keep;
                }
              }
            });
          });
        };
      },
      /*foldable=*/false);
}

}  // namespace

void registerMiscOps(OpRegistry& registry) {
  registerCasts(registry);
  registerClip(registry);
  registerDropout(registry);
}

}  // namespace strata::cpu::elementwise_detail
