// Gradient kernels of the reduction family, emitted by graphs/src/gradients/reduction_gradients.cpp: SoftmaxGrad,
// LogSoftmaxGrad, LayerNormalizationGrad and the loss gradients. (Reduce* gradients are composed from forward
// ops: Reshape, Expand, Mul, Equal, ...)

#include <algorithm>
#include <cmath>
#include <optional>
#include <string>
#include <vector>

#include "cpu_ops.h"
#include "reduction_common.h"

namespace strata::cpu {

namespace {

using elementwise_detail::IndexTypes;
using reduction_detail::addOp;
using reduction_detail::AxisSplit;
using reduction_detail::ComputeFn;
using reduction_detail::dispatch;
using reduction_detail::FloatTypes;
using reduction_detail::repeatMeta;
using reduction_detail::requireDType;
using reduction_detail::splitAtAxis;

std::int64_t checkedAxis(const ShapeContext& ctx, std::int64_t axis, std::int64_t rank) {
  if (axis < -rank || axis >= std::max<std::int64_t>(rank, 1)) {
    ctx.error(fmt::format("axis {} is out of range for rank {}", axis, rank));
  }
  return rank == 0 ? 0 : normalizeAxis(axis, rank);
}

// dX of Softmax (Y * (dY - sum(dY * Y))) or LogSoftmax (dY - exp(Y) * sum(dY)) along the middle axis of an
// [outer, axis, inner] view, given the forward output Y.
template <typename T>
void softmaxGradAlongAxis(const T* dy, const T* y, T* dx, const AxisSplit& s, bool logSoftmax) {
  const std::int64_t block = s.axis * s.inner;
  if (s.inner == 1) {
    parallelChunks(s.outer, s.axis * 4, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t o = begin; o < end; ++o) {
        const T* g = dy + o * s.axis;
        const T* p = y + o * s.axis;
        T* out = dx + o * s.axis;
        double sum = 0.0;
        if (logSoftmax) {
          for (std::int64_t a = 0; a < s.axis; ++a) {
            sum += static_cast<double>(g[a]);
          }
          const auto total = static_cast<T>(sum);
          for (std::int64_t a = 0; a < s.axis; ++a) {
            out[a] = g[a] - std::exp(p[a]) * total;
          }
        } else {
          for (std::int64_t a = 0; a < s.axis; ++a) {
            sum += static_cast<double>(g[a]) * static_cast<double>(p[a]);
          }
          const auto total = static_cast<T>(sum);
          for (std::int64_t a = 0; a < s.axis; ++a) {
            out[a] = p[a] * (g[a] - total);
          }
        }
      }
    });
    return;
  }
  // Strided axis: whole [axis, inner] blocks, vectorised across inner.
  parallelChunks(s.outer, block * 4, [&](std::int64_t begin, std::int64_t end) {
    std::vector<T> sum(static_cast<std::size_t>(s.inner));
    for (std::int64_t o = begin; o < end; ++o) {
      const T* g = dy + o * block;
      const T* p = y + o * block;
      T* out = dx + o * block;
      std::fill(sum.begin(), sum.end(), T(0));
      for (std::int64_t a = 0; a < s.axis; ++a) {
        const T* gRow = g + a * s.inner;
        const T* pRow = p + a * s.inner;
        for (std::int64_t i = 0; i < s.inner; ++i) {
          sum[static_cast<std::size_t>(i)] += logSoftmax ? gRow[i] : gRow[i] * pRow[i];
        }
      }
      for (std::int64_t a = 0; a < s.axis; ++a) {
        const T* gRow = g + a * s.inner;
        const T* pRow = p + a * s.inner;
        T* outRow = out + a * s.inner;
        for (std::int64_t i = 0; i < s.inner; ++i) {
          const T total = sum[static_cast<std::size_t>(i)];
          outRow[i] = logSoftmax ? gRow[i] - std::exp(pRow[i]) * total : pRow[i] * (gRow[i] - total);
        }
      }
    }
  });
}

// SoftmaxGrad / LogSoftmaxGrad (dY, Y) with the forward's axis attribute (opset 13 semantics, like the forward).
void addSoftmaxGrad(OpRegistry& registry, const std::string& type, bool logSoftmax) {
  addOp(
      registry, type,
      [](const ShapeContext& ctx) {
        requireDType(ctx, 0, FloatTypes{});
        if (ctx.input(1).meta != ctx.input(0).meta) {
          ctx.error(fmt::format("Y is {} but dY is {}", ctx.input(1).meta.toString(), ctx.input(0).meta.toString()));
        }
        checkedAxis(ctx, ctx.attrs.getInt("axis", -1), static_cast<std::int64_t>(ctx.input(0).meta.shape.size()));
        return repeatMeta(ctx, ctx.input(0).meta);
      },
      [type, logSoftmax](const KernelInit& init) -> ComputeFn {
        const std::int64_t axisAttr = init.attrs.getInt("axis", -1);
        return [type, logSoftmax, axisAttr](KernelContext& ctx) {
          const Tensor& dy = ctx.input(0);
          if (dy.numel() == 0) {
            return;
          }
          const std::int64_t axis = dy.rank() == 0 ? 0 : normalizeAxis(axisAttr, dy.rank());
          dispatch(FloatTypes{}, dy.dtype(), type.c_str(), [&](auto tag) {
            using T = decltype(tag);
            softmaxGradAlongAxis<T>(dy.data<T>(), ctx.input(1).data<T>(), ctx.output(0).data<T>(),
                                    splitAtAxis(dy.shape(), axis), logSoftmax);
          });
        };
      });
}

// Scale broadcast to the normalised shape as a contiguous buffer (a view of the input when it has that size).
template <typename T>
const T* expandToNormShape(const Tensor& t, const Shape& normShape, Tensor& storage) {
  if (t.numel() == numElements(normShape)) {
    return t.data<T>();
  }
  storage = Tensor::empty(t.dtype(), normShape, MemoryCategory::Workspace);
  broadcastCopy(t, storage);
  return storage.data<T>();
}

// A per-row statistic gradient (float or double) as doubles; empty when absent.
std::vector<double> loadRowValues(const KernelContext& ctx, std::size_t i) {
  if (!ctx.hasInput(i)) {
    return {};
  }
  const Tensor& t = ctx.input(i);
  std::vector<double> values(static_cast<std::size_t>(t.numel()));
  dispatch(FloatTypes{}, t.dtype(), "LayerNormalizationGrad statistic gradient", [&](auto tag) {
    using T = decltype(tag);
    std::copy(t.data<T>(), t.data<T>() + t.numel(), values.begin());
  });
  return values;
}

// LayerNormalizationGrad(dY?, X, Scale, Mean?, InvStdDev?, dMean?, dInvStdDev?) -> dX, dScale, dB (the last two
// of the normalised shape; the rule sums them to Scale's and B's shapes). Without the saved statistics it
// recomputes them with the forward's two-pass formula. dMean and dInvStdDev are the gradients flowing into the
// forward's statistic outputs, when those are used downstream; dY is absent when only they are.
// Per row, with xhat = (x - mean) * invStd, g = dY * scale and N the row length:
//   dX = invStd * (g - mean(g) - xhat * mean(g * xhat)) + dMean / N - dInvStd * invStd^2 * xhat / N.
// Note [LayerNorm grad partials]: dScale and dB sum over rows; each chunk of rows accumulates its own partial
// sums (in double) and the partials are added at the end, so no atomics are needed and the result does not depend
// on the thread count beyond rounding.
template <typename T, typename S>
void layerNormGradTyped(KernelContext& ctx, std::int64_t axis, double epsilon) {
  const Tensor& x = ctx.input(1);
  const Shape normShape(x.shape().begin() + axis, x.shape().end());
  const std::int64_t norm = numElements(normShape);
  const std::int64_t rows = norm == 0 ? 0 : x.numel() / norm;
  Tensor scaleStorage;
  const T* scale = expandToNormShape<T>(ctx.input(2), normShape, scaleStorage);
  const T* dy = ctx.hasInput(0) ? ctx.input(0).data<T>() : nullptr;
  const T* src = x.data<T>();
  const S* meanIn = ctx.hasInput(3) ? ctx.input(3).data<S>() : nullptr;
  const S* invStdIn = ctx.hasInput(4) ? ctx.input(4).data<S>() : nullptr;
  const std::vector<double> dMean = loadRowValues(ctx, 5);
  const std::vector<double> dInvStd = loadRowValues(ctx, 6);
  T* dx = ctx.hasOutput(0) ? ctx.output(0).data<T>() : nullptr;
  T* dScale = ctx.hasOutput(1) ? ctx.output(1).data<T>() : nullptr;
  T* dBias = ctx.hasOutput(2) ? ctx.output(2).data<T>() : nullptr;
  const bool wantParams = dScale != nullptr || dBias != nullptr;
  const auto n = static_cast<double>(norm);

  const std::int64_t threads = std::max(1, ThreadPool::instance().threads());
  const std::int64_t chunks = std::max<std::int64_t>(1, std::min(rows, threads * 2));
  const std::int64_t rowsPerChunk = rows == 0 ? 0 : (rows + chunks - 1) / chunks;
  // Per chunk: norm partial sums of dY * xhat, then norm of dY.
  std::vector<double> partial(wantParams ? static_cast<std::size_t>(chunks * 2 * norm) : 0, 0.0);

  parallelChunks(chunks, rowsPerChunk * norm * 8, [&](std::int64_t chunkBegin, std::int64_t chunkEnd) {
    std::vector<T> xhat(static_cast<std::size_t>(norm));
    std::vector<T> gs(static_cast<std::size_t>(norm), T(0));
    for (std::int64_t c = chunkBegin; c < chunkEnd; ++c) {
      double* pScale = wantParams ? partial.data() + c * 2 * norm : nullptr;
      double* pBias = wantParams ? pScale + norm : nullptr;
      const std::int64_t rowEnd = std::min(rows, (c + 1) * rowsPerChunk);
      for (std::int64_t r = c * rowsPerChunk; r < rowEnd; ++r) {
        const T* row = src + r * norm;
        double mean = 0.0;
        double invStd = 0.0;
        if (meanIn != nullptr && invStdIn != nullptr) {
          mean = static_cast<double>(meanIn[r]);
          invStd = static_cast<double>(invStdIn[r]);
        } else {
          double sum = 0.0;
          for (std::int64_t i = 0; i < norm; ++i) {
            sum += static_cast<double>(row[i]);
          }
          mean = sum / n;
          double sq = 0.0;
          for (std::int64_t i = 0; i < norm; ++i) {
            const double d = static_cast<double>(row[i]) - mean;
            sq += d * d;
          }
          invStd = 1.0 / std::sqrt(sq / n + epsilon);
        }
        const auto m = static_cast<T>(mean);
        const auto is = static_cast<T>(invStd);
        for (std::int64_t i = 0; i < norm; ++i) {
          xhat[static_cast<std::size_t>(i)] = (row[i] - m) * is;
        }
        // sum(g) and sum(g * xhat) over the row.
        double sumG = 0.0;
        double sumGX = 0.0;
        if (dy != nullptr) {
          const T* g = dy + r * norm;
          for (std::int64_t i = 0; i < norm; ++i) {
            const auto k = static_cast<std::size_t>(i);
            gs[k] = g[i] * scale[i];
            sumG += static_cast<double>(gs[k]);
            sumGX += static_cast<double>(gs[k] * xhat[k]);
          }
          if (wantParams) {
            for (std::int64_t i = 0; i < norm; ++i) {
              pScale[i] += static_cast<double>(g[i] * xhat[static_cast<std::size_t>(i)]);
              pBias[i] += static_cast<double>(g[i]);
            }
          }
        }
        if (dx != nullptr) {
          const auto meanG = static_cast<T>(sumG / n);
          const auto meanGX = static_cast<T>(sumGX / n);
          const auto shift = static_cast<T>(dMean.empty() ? 0.0 : dMean[static_cast<std::size_t>(r)] / n);
          const auto tilt =
              static_cast<T>(dInvStd.empty() ? 0.0 : -dInvStd[static_cast<std::size_t>(r)] * invStd * invStd / n);
          T* out = dx + r * norm;
          for (std::int64_t i = 0; i < norm; ++i) {
            const auto k = static_cast<std::size_t>(i);
            out[i] = is * (gs[k] - meanG - xhat[k] * meanGX) + shift + tilt * xhat[k];
          }
        }
      }
    }
  });
  if (!wantParams) {
    return;
  }
  for (std::int64_t i = 0; i < norm; ++i) {
    double s = 0.0;
    double b = 0.0;
    for (std::int64_t c = 0; c < chunks; ++c) {
      s += partial[static_cast<std::size_t>(c * 2 * norm + i)];
      b += partial[static_cast<std::size_t>(c * 2 * norm + norm + i)];
    }
    if (dScale != nullptr) {
      dScale[i] = static_cast<T>(s);
    }
    if (dBias != nullptr) {
      dBias[i] = static_cast<T>(b);
    }
  }
}

void registerLayerNormGrad(OpRegistry& registry) {
  addOp(
      registry, "LayerNormalizationGrad",
      [](const ShapeContext& ctx) {
        requireDType(ctx, 1, FloatTypes{});
        const TensorMeta& x = ctx.input(1).meta;
        if (ctx.hasInput(0) && ctx.input(0).meta != x) {
          ctx.error(fmt::format("X is {} but dY is {}", x.toString(), ctx.input(0).meta.toString()));
        }
        const auto rank = static_cast<std::int64_t>(x.shape.size());
        const std::int64_t axis = checkedAxis(ctx, ctx.attrs.getInt("axis", -1), rank);
        const Shape normShape(x.shape.begin() + axis, x.shape.end());
        const TensorMeta& scale = ctx.input(2).meta;
        bool scaleFits = scale.dtype == x.dtype && scale.shape.size() <= normShape.size();
        try {
          scaleFits = scaleFits && broadcastShapes(scale.shape, normShape) == normShape;
        } catch (const Error&) {
          scaleFits = false;
        }
        if (!scaleFits) {
          ctx.error(fmt::format("Scale {} does not broadcast to the normalised shape {}", scale.toString(),
                                shapeToString(normShape)));
        }
        Shape statShape(x.shape.begin(), x.shape.begin() + axis);
        statShape.resize(x.shape.size(), 1);
        if (ctx.hasInput(3) != ctx.hasInput(4)) {
          ctx.error("Mean and InvStdDev must be given together");
        }
        for (std::size_t i = 3; i < 5 && ctx.hasInput(i); ++i) {
          const TensorMeta& stat = ctx.input(i).meta;
          if (numElements(stat.shape) != numElements(statShape) ||
              (stat.dtype != DType::Float32 && stat.dtype != DType::Float64) || stat.dtype != ctx.input(3).meta.dtype) {
            ctx.error(fmt::format("statistic {} is {}, expected float or double of shape {}", i, stat.toString(),
                                  shapeToString(statShape)));
          }
        }
        for (std::size_t i = 5; i < 7; ++i) {
          if (ctx.hasInput(i) && (numElements(ctx.input(i).meta.shape) != numElements(statShape) ||
                                  !isFloatingPoint(ctx.input(i).meta.dtype))) {
            ctx.error(fmt::format("statistic gradient {} is {}, expected {} elements", i, ctx.input(i).meta.toString(),
                                  numElements(statShape)));
          }
        }
        std::vector<TensorMeta> metas{x};
        for (std::size_t i = 1; i < ctx.outputCount && i < 3; ++i) {
          metas.push_back(TensorMeta{x.dtype, normShape});
        }
        return metas;
      },
      [](const KernelInit& init) -> ComputeFn {
        const std::int64_t axisAttr = init.attrs.getInt("axis", -1);
        const double epsilon = init.attrs.getFloat("epsilon", 1e-5f);
        return [axisAttr, epsilon](KernelContext& ctx) {
          const Tensor& x = ctx.input(1);
          const std::int64_t axis = normalizeAxis(axisAttr, x.rank());
          const DType stash = ctx.hasInput(3) ? ctx.input(3).dtype() : DType::Float32;
          dispatch(FloatTypes{}, x.dtype(), "LayerNormalizationGrad", [&](auto tag) {
            using T = decltype(tag);
            if (stash == DType::Float64) {
              layerNormGradTyped<T, double>(ctx, axis, epsilon);
            } else {
              layerNormGradTyped<T, float>(ctx, axis, epsilon);
            }
          });
        };
      });
}

// ---- Loss gradients ----

using reduction_detail::LossConfig;
using reduction_detail::readLossConfig;
using Reduction = reduction_detail::LossReduction;

// Checks dLoss, labels and weights against the [N, C, d1, ...] input shape `scores` of the forward loss.
void checkLossGradInputs(const ShapeContext& ctx, const TensorMeta& dLoss, const TensorMeta& labels,
                         const Shape& scores, std::size_t weightsInput) {
  requireDType(ctx, 0, FloatTypes{});
  if (!elementwise_detail::supports(IndexTypes{}, labels.dtype)) {
    ctx.error(fmt::format("labels must be int32 or int64, got {}", dtypeName(labels.dtype)));
  }
  LossConfig config;
  try {
    config = readLossConfig(ctx.attrs);
  } catch (const Error& e) {
    ctx.error(e.what());
  }
  const Shape expectedLoss = config.reduction == Reduction::None ? labels.shape : Shape{};
  if (dLoss.shape != expectedLoss) {
    ctx.error(fmt::format("dLoss has shape {} but the loss has shape {}", shapeToString(dLoss.shape),
                          shapeToString(expectedLoss)));
  }
  if (ctx.hasInput(weightsInput)) {
    const TensorMeta& weights = ctx.input(weightsInput).meta;
    if (weights.dtype != dLoss.dtype || weights.shape != Shape{scores[1]}) {
      ctx.error(fmt::format("weights must be {}[{}], got {}", dtypeName(dLoss.dtype), scores[1], weights.toString()));
    }
  }
}

// dInput of NegativeLogLikelihoodLoss (logProb == nullptr) or SoftmaxCrossEntropyLoss (given the log-probabilities)
// for inputs of `shape` [N, C, d...]: with coef = w[label] * dLoss (per element for none, dLoss for sum,
// dLoss / sum of counted weights for mean) and 0 for ignored elements,
//   NLL: dX[n, label, d] = -coef,   SCE: dX[n, c, d] = coef * (softmax[n, c, d] - [c == label]).
template <typename T, typename L>
void lossGrad(const T* dLoss, const T* logProb, const L* labels, const T* weights, const Shape& shape,
              const LossConfig& config, T* out) {
  const std::int64_t n = shape[0];
  const std::int64_t c = shape[1];
  const std::int64_t d = numElements(shape) / std::max<std::int64_t>(n * c, 1);
  // Validate labels and total the counted weights on this thread (errors must not escape worker threads).
  double weightSum = 0.0;
  for (std::int64_t i = 0; i < n * d; ++i) {
    const auto label = static_cast<std::int64_t>(labels[i]);
    if (config.ignoreIndex && label == *config.ignoreIndex) {
      continue;
    }
    STRATA_CHECK(label >= 0 && label < c, "label {} is out of range for {} classes", label, c);
    weightSum += weights != nullptr ? static_cast<double>(weights[label]) : 1.0;
  }
  double scalarGrad = 0.0;
  if (config.reduction == Reduction::Sum) {
    scalarGrad = static_cast<double>(dLoss[0]);
  } else if (config.reduction == Reduction::Mean) {
    scalarGrad = static_cast<double>(dLoss[0]) / weightSum;
  }
  parallelChunks(n, c * d * (logProb != nullptr ? 8 : 1), [&](std::int64_t begin, std::int64_t end) {
    std::vector<T> coef(static_cast<std::size_t>(d));
    for (std::int64_t i = begin; i < end; ++i) {
      for (std::int64_t j = 0; j < d; ++j) {
        const auto label = static_cast<std::int64_t>(labels[i * d + j]);
        T value = T(0);
        if (!(config.ignoreIndex && label == *config.ignoreIndex)) {
          const double g = config.reduction == Reduction::None ? static_cast<double>(dLoss[i * d + j]) : scalarGrad;
          value = static_cast<T>(g * (weights != nullptr ? static_cast<double>(weights[label]) : 1.0));
        }
        coef[static_cast<std::size_t>(j)] = value;
      }
      T* block = out + i * c * d;
      if (logProb != nullptr) {
        const T* lp = logProb + i * c * d;
        for (std::int64_t k = 0; k < c; ++k) {
          for (std::int64_t j = 0; j < d; ++j) {
            block[k * d + j] = coef[static_cast<std::size_t>(j)] * std::exp(lp[k * d + j]);
          }
        }
      } else {
        std::fill(block, block + c * d, T(0));
      }
      for (std::int64_t j = 0; j < d; ++j) {
        const auto label = static_cast<std::int64_t>(labels[i * d + j]);
        if (!(config.ignoreIndex && label == *config.ignoreIndex)) {
          block[label * d + j] -= coef[static_cast<std::size_t>(j)];
        }
      }
    }
  });
}

// SoftmaxCrossEntropyLossGrad(dLoss, LogProb, labels, weights?) -> dScores, attributes reduction and
// ignore_index as in the forward. With from_scores = 1 input 1 is the raw scores and the kernel recomputes the
// log-probabilities (for forward nodes that do not expose their log_prob output).
void registerSoftmaxCrossEntropyLossGrad(OpRegistry& registry) {
  addOp(
      registry, "SoftmaxCrossEntropyLossGrad",
      [](const ShapeContext& ctx) {
        const TensorMeta& logProb = ctx.input(1).meta;
        if (logProb.shape.size() < 2 || logProb.dtype != ctx.input(0).meta.dtype) {
          ctx.error(fmt::format("input 1 must be [N, C, ...] of the gradient's dtype, got {}", logProb.toString()));
        }
        checkLossGradInputs(ctx, ctx.input(0).meta, ctx.input(2).meta, logProb.shape, 3);
        return repeatMeta(ctx, logProb);
      },
      [](const KernelInit& init) -> ComputeFn {
        const LossConfig config = readLossConfig(init.attrs);
        const bool fromScores = init.attrs.getInt("from_scores", 0) != 0;
        return [config, fromScores](KernelContext& ctx) {
          const Tensor& in = ctx.input(1);
          if (in.numel() == 0) {
            return;
          }
          dispatch(FloatTypes{}, in.dtype(), "SoftmaxCrossEntropyLossGrad", [&](auto tag) {
            using T = decltype(tag);
            const T* logProb = in.data<T>();
            if (fromScores) {
              // The log-probabilities go into the output, which lossGrad then rewrites in place (it reads each
              // element before writing it): no scratch of the scores' size (Note [Loss without log-probabilities]).
              reduction_detail::softmaxAlongAxis<T>(in.data<T>(), ctx.output(0).data<T>(), splitAtAxis(in.shape(), 1),
                                                    /*logSoftmax=*/true);
              logProb = ctx.output(0).data<T>();
            }
            const T* weights = ctx.hasInput(3) ? ctx.input(3).data<T>() : nullptr;
            dispatch(IndexTypes{}, ctx.input(2).dtype(), "loss labels", [&](auto labelTag) {
              using L = decltype(labelTag);
              lossGrad<T, L>(ctx.input(0).data<T>(), logProb, ctx.input(2).data<L>(), weights, in.shape(), config,
                             ctx.output(0).data<T>());
            });
          });
        };
      });
}

// NegativeLogLikelihoodLossGrad(dLoss, labels, weights?) -> dInput of shape [N, classes, d...]; the forward input
// itself is not needed, only its class count (attribute classes).
void registerNegativeLogLikelihoodLossGrad(OpRegistry& registry) {
  addOp(
      registry, "NegativeLogLikelihoodLossGrad",
      [](const ShapeContext& ctx) {
        const TensorMeta& labels = ctx.input(1).meta;
        const std::int64_t classes = ctx.attrs.getInt("classes", -1);
        if (classes < 1 || labels.shape.empty()) {
          ctx.error(fmt::format("needs labels of rank >= 1 and classes >= 1, got labels {} and classes {}",
                                labels.toString(), classes));
        }
        Shape shape = labels.shape;
        shape.insert(shape.begin() + 1, classes);
        checkLossGradInputs(ctx, ctx.input(0).meta, labels, shape, 2);
        return repeatMeta(ctx, TensorMeta{ctx.input(0).meta.dtype, shape});
      },
      [](const KernelInit& init) -> ComputeFn {
        const LossConfig config = readLossConfig(init.attrs);
        return [config](KernelContext& ctx) {
          Tensor& out = ctx.output(0);
          if (out.numel() == 0) {
            return;
          }
          dispatch(FloatTypes{}, out.dtype(), "NegativeLogLikelihoodLossGrad", [&](auto tag) {
            using T = decltype(tag);
            const T* weights = ctx.hasInput(2) ? ctx.input(2).data<T>() : nullptr;
            dispatch(IndexTypes{}, ctx.input(1).dtype(), "loss labels", [&](auto labelTag) {
              using L = decltype(labelTag);
              lossGrad<T, L>(ctx.input(0).data<T>(), nullptr, ctx.input(1).data<L>(), weights, out.shape(), config,
                             out.data<T>());
            });
          });
        };
      });
}

}  // namespace

void registerReductionGradOps(OpRegistry& registry) {
  addSoftmaxGrad(registry, "SoftmaxGrad", false);
  addSoftmaxGrad(registry, "LogSoftmaxGrad", true);
  registerLayerNormGrad(registry);
  registerSoftmaxCrossEntropyLossGrad(registry);
  registerNegativeLogLikelihoodLossGrad(registry);
}

}  // namespace strata::cpu
