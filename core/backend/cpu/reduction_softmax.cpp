// Softmax and LogSoftmax (opset 13: one axis) and LayerNormalization (opset 17).

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "reduction_common.h"

namespace strata::cpu::reduction_detail {

template <typename T>
void softmaxAlongAxis(const T* src, T* dst, const AxisSplit& s, bool logSoftmax) {
  const std::int64_t block = s.axis * s.inner;
  if (s.inner == 1) {
    // Softmax along contiguous rows.
    parallelChunks(s.outer, s.axis * 8, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t o = begin; o < end; ++o) {
        const T* x = src + o * s.axis;
        T* y = dst + o * s.axis;
        T mx = -std::numeric_limits<T>::infinity();
        for (std::int64_t a = 0; a < s.axis; ++a) {
          mx = std::max(mx, x[a]);
        }
        if (!std::isfinite(mx)) {
          mx = T(0);  // all -inf rows give NaN like the reference; +inf/NaN propagate
        }
        double sum = 0.0;
        for (std::int64_t a = 0; a < s.axis; ++a) {
          const T e = std::exp(x[a] - mx);
          sum += static_cast<double>(e);
          if (!logSoftmax) {
            y[a] = e;
          }
        }
        if (logSoftmax) {
          const T shift = mx + static_cast<T>(std::log(sum));
          for (std::int64_t a = 0; a < s.axis; ++a) {
            y[a] = x[a] - shift;
          }
        } else {
          const T scale = static_cast<T>(1.0 / sum);
          for (std::int64_t a = 0; a < s.axis; ++a) {
            y[a] *= scale;
          }
        }
      }
    });
    return;
  }
  // Strided axis: work on whole [axis, inner] blocks, vectorised across inner.
  parallelChunks(s.outer, block * 8, [&](std::int64_t begin, std::int64_t end) {
    std::vector<T> mx(static_cast<std::size_t>(s.inner));
    std::vector<T> sum(static_cast<std::size_t>(s.inner));
    for (std::int64_t o = begin; o < end; ++o) {
      const T* x = src + o * block;
      T* y = dst + o * block;
      std::copy(x, x + s.inner, mx.begin());
      for (std::int64_t a = 1; a < s.axis; ++a) {
        const T* row = x + a * s.inner;
        for (std::int64_t i = 0; i < s.inner; ++i) {
          mx[static_cast<std::size_t>(i)] = std::max(mx[static_cast<std::size_t>(i)], row[i]);
        }
      }
      for (T& m : mx) {
        m = std::isfinite(m) ? m : T(0);
      }
      std::fill(sum.begin(), sum.end(), T(0));
      for (std::int64_t a = 0; a < s.axis; ++a) {
        const T* row = x + a * s.inner;
        T* outRow = y + a * s.inner;
        for (std::int64_t i = 0; i < s.inner; ++i) {
          const T e = std::exp(row[i] - mx[static_cast<std::size_t>(i)]);
          sum[static_cast<std::size_t>(i)] += e;
          outRow[i] = e;
        }
      }
      for (std::int64_t a = 0; a < s.axis; ++a) {
        const T* row = x + a * s.inner;
        T* outRow = y + a * s.inner;
        for (std::int64_t i = 0; i < s.inner; ++i) {
          const auto k = static_cast<std::size_t>(i);
          outRow[i] = logSoftmax ? row[i] - mx[k] - std::log(sum[k]) : outRow[i] / sum[k];
        }
      }
    }
  });
}

template void softmaxAlongAxis<float>(const float*, float*, const AxisSplit&, bool);
template void softmaxAlongAxis<double>(const double*, double*, const AxisSplit&, bool);

namespace {

void addSoftmax(OpRegistry& registry, const std::string& type, bool logSoftmax) {
  addOp(
      registry, type,
      [](const ShapeContext& ctx) {
        requireDType(ctx, 0, FloatTypes{});
        const auto rank = static_cast<std::int64_t>(ctx.input(0).meta.shape.size());
        const std::int64_t axis = ctx.attrs.getInt("axis", -1);
        if (rank > 0 && (axis < -rank || axis >= rank)) {
          ctx.error(fmt::format("axis {} is out of range for rank {}", axis, rank));
        }
        return repeatMeta(ctx, ctx.input(0).meta);
      },
      [type, logSoftmax](const KernelInit& init) -> ComputeFn {
        const std::int64_t axisAttr = init.attrs.getInt("axis", -1);
        return [type, logSoftmax, axisAttr](KernelContext& ctx) {
          const Tensor& in = ctx.input(0);
          const std::int64_t axis = in.rank() == 0 ? 0 : normalizeAxis(axisAttr, in.rank());
          const AxisSplit split = splitAtAxis(in.shape(), axis);
          if (in.numel() == 0) {
            return;
          }
          dispatch(FloatTypes{}, in.dtype(), type.c_str(), [&](auto tag) {
            using T = decltype(tag);
            softmaxAlongAxis<T>(in.data<T>(), ctx.output(0).data<T>(), split, logSoftmax);
          });
        };
      });
}

// Scale or bias broadcast to the normalised shape, as a contiguous buffer of `norm` elements (a view of the input
// when it already has that many).
template <typename T>
const T* expandToNormShape(const Tensor& t, const Shape& normShape, Tensor& storage) {
  if (t.numel() == numElements(normShape)) {
    return t.data<T>();
  }
  storage = Tensor::empty(t.dtype(), normShape, MemoryCategory::Workspace);
  broadcastCopy(t, storage);
  return storage.data<T>();
}

template <typename T, typename S>
void layerNormTyped(KernelContext& ctx, std::int64_t axis, double epsilon) {
  const Tensor& x = ctx.input(0);
  const Shape normShape(x.shape().begin() + axis, x.shape().end());
  const std::int64_t norm = numElements(normShape);
  const std::int64_t rows = norm == 0 ? 0 : x.numel() / norm;
  Tensor scaleStorage;
  Tensor biasStorage;
  const T* scale = expandToNormShape<T>(ctx.input(1), normShape, scaleStorage);
  const T* bias = ctx.hasInput(2) ? expandToNormShape<T>(ctx.input(2), normShape, biasStorage) : nullptr;
  const T* src = x.data<T>();
  T* dst = ctx.output(0).data<T>();
  S* meanOut = ctx.hasOutput(1) ? ctx.output(1).data<S>() : nullptr;
  S* invStdOut = ctx.hasOutput(2) ? ctx.output(2).data<S>() : nullptr;
  parallelChunks(rows, norm * 4, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t r = begin; r < end; ++r) {
      const T* row = src + r * norm;
      T* outRow = dst + r * norm;
      // Two passes (mean, then centred squares) avoid the cancellation of E[x^2] - E[x]^2.
      double sum = 0.0;
      for (std::int64_t i = 0; i < norm; ++i) {
        sum += static_cast<double>(row[i]);
      }
      const double mean = sum / static_cast<double>(norm);
      double sq = 0.0;
      for (std::int64_t i = 0; i < norm; ++i) {
        const double d = static_cast<double>(row[i]) - mean;
        sq += d * d;
      }
      const double invStd = 1.0 / std::sqrt(sq / static_cast<double>(norm) + epsilon);
      const auto m = static_cast<T>(mean);
      const auto is = static_cast<T>(invStd);
      if (bias != nullptr) {
        for (std::int64_t i = 0; i < norm; ++i) {
          outRow[i] = (row[i] - m) * is * scale[i] + bias[i];
        }
      } else {
        for (std::int64_t i = 0; i < norm; ++i) {
          outRow[i] = (row[i] - m) * is * scale[i];
        }
      }
      if (meanOut != nullptr) {
        meanOut[r] = static_cast<S>(mean);
      }
      if (invStdOut != nullptr) {
        invStdOut[r] = static_cast<S>(invStd);
      }
    }
  });
}

void registerLayerNorm(OpRegistry& registry) {
  addOp(
      registry, "LayerNormalization",
      [](const ShapeContext& ctx) {
        requireDType(ctx, 0, FloatTypes{});
        const TensorMeta& x = ctx.input(0).meta;
        const auto rank = static_cast<std::int64_t>(x.shape.size());
        const std::int64_t axisAttr = ctx.attrs.getInt("axis", -1);
        if (axisAttr < -rank || axisAttr >= rank) {
          ctx.error(fmt::format("axis {} is out of range for rank {}", axisAttr, rank));
        }
        const std::int64_t axis = normalizeAxis(axisAttr, rank);
        const Shape normShape(x.shape.begin() + axis, x.shape.end());
        for (std::size_t i = 1; i < 3; ++i) {
          if (!ctx.hasInput(i)) {
            continue;
          }
          const TensorMeta& p = ctx.inputs[i].meta;
          if (p.dtype != x.dtype) {
            ctx.error(fmt::format("input {} has dtype {} but X has {}", i, dtypeName(p.dtype), dtypeName(x.dtype)));
          }
          try {
            if (broadcastShapes(p.shape, normShape) != normShape) {
              ctx.error(fmt::format("input {} of shape {} does not broadcast to the normalised shape {}", i,
                                    shapeToString(p.shape), shapeToString(normShape)));
            }
          } catch (const Error& e) {
            ctx.error(e.what());
          }
        }
        ctx.input(1);  // Scale is required
        const auto stash = dtypeFromOnnx(static_cast<int>(ctx.attrs.getInt("stash_type", 1)));
        if (!stash || (*stash != DType::Float32 && *stash != DType::Float64)) {
          ctx.error("stash_type must be float or double");
        }
        Shape statShape(x.shape.begin(), x.shape.begin() + axis);
        statShape.resize(x.shape.size(), 1);
        std::vector<TensorMeta> metas{x};
        for (std::size_t i = 1; i < ctx.outputCount && i < 3; ++i) {
          metas.push_back(TensorMeta{*stash, statShape});
        }
        return metas;
      },
      [](const KernelInit& init) -> ComputeFn {
        const std::int64_t axisAttr = init.attrs.getInt("axis", -1);
        const double epsilon = init.attrs.getFloat("epsilon", 1e-5f);
        return [axisAttr, epsilon](KernelContext& ctx) {
          const Tensor& x = ctx.input(0);
          const std::int64_t axis = normalizeAxis(axisAttr, x.rank());
          // Mean and InvStdDev have the stash dtype, whichever of float/double that is.
          DType stash = DType::Float32;
          if (ctx.hasOutput(1)) {
            stash = ctx.output(1).dtype();
          } else if (ctx.hasOutput(2)) {
            stash = ctx.output(2).dtype();
          }
          dispatch(FloatTypes{}, x.dtype(), "LayerNormalization", [&](auto tag) {
            using T = decltype(tag);
            if (stash == DType::Float64) {
              layerNormTyped<T, double>(ctx, axis, epsilon);
            } else {
              layerNormTyped<T, float>(ctx, axis, epsilon);
            }
          });
        };
      });
}

}  // namespace

void registerSoftmaxOps(OpRegistry& registry) {
  addSoftmax(registry, "Softmax", false);
  addSoftmax(registry, "LogSoftmax", true);
  registerLayerNorm(registry);
}

}  // namespace strata::cpu::reduction_detail
