// SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss (opset 13): scores/log-probabilities of shape
// [N, C, d1, ...] against int labels [N, d1, ...], optional class weights [C], reduction none/sum/mean and an
// optional ignore_index.

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "reduction_common.h"

namespace strata::cpu::reduction_detail {

namespace {

using elementwise_detail::IndexTypes;

using Reduction = LossReduction;

// Output metas shared by both losses: the loss (labels' shape for reduction none, else a scalar), then for
// SoftmaxCrossEntropyLoss the log-probabilities.
std::vector<TensorMeta> lossShapes(const ShapeContext& ctx) {
  requireDType(ctx, 0, FloatTypes{});
  requireDType(ctx, 1, IndexTypes{});
  const TensorMeta& scores = ctx.input(0).meta;
  const TensorMeta& labels = ctx.input(1).meta;
  if (scores.shape.size() < 2) {
    ctx.error("input must have shape [N, C] or [N, C, d1, ...], got " + shapeToString(scores.shape));
  }
  Shape expected{scores.shape[0]};
  expected.insert(expected.end(), scores.shape.begin() + 2, scores.shape.end());
  if (labels.shape != expected) {
    ctx.error(fmt::format("labels have shape {} but {} was expected for input shape {}", shapeToString(labels.shape),
                          shapeToString(expected), shapeToString(scores.shape)));
  }
  if (ctx.hasInput(2)) {
    const TensorMeta& weights = ctx.inputs[2].meta;
    if (weights.dtype != scores.dtype || weights.shape != Shape{scores.shape[1]}) {
      ctx.error(
          fmt::format("weights must be {}[{}], got {}", dtypeName(scores.dtype), scores.shape[1], weights.toString()));
    }
  }
  LossConfig config;
  try {
    config = readLossConfig(ctx.attrs);
  } catch (const Error& e) {
    ctx.error(e.what());
  }
  std::vector<TensorMeta> metas{TensorMeta{scores.dtype, config.reduction == Reduction::None ? labels.shape : Shape{}}};
  if (ctx.outputCount > 1) {
    metas.push_back(scores);
  }
  return metas;
}

// loss[n, d] = -logProb[n, label, d] * weight[label], 0 where label == ignore_index; then reduced. Mean divides by
// the summed weights of the counted elements (their count without weights), as the ONNX reference does.
// Note [Loss without log-probabilities]: SoftmaxCrossEntropyLoss without its log_prob output needs only the
// log-probability at each label, not the [N, C, ...] log-softmax: a language model's logits are [N T, V] (GPT-2 small
// at T = 1024: 196 MiB), and a scratch copy of that size was the largest transient of its training step. The shift
// (max + log of the sum of exponentials) is computed as softmaxAlongAxis computes it, so the loss is the same
// number. Labels out of range give 0 here; negativeLogLikelihood names them.
template <typename T, typename L>
std::vector<T> logProbOfLabels(const T* scores, const L* labels, const AxisSplit& s) {
  std::vector<T> picked(static_cast<std::size_t>(s.outer * s.inner), T(0));
  const auto labelAt = [&](std::int64_t position) -> std::int64_t {
    const auto label = static_cast<std::int64_t>(labels[position]);
    return label >= 0 && label < s.axis ? label : -1;
  };
  const auto finiteOrZero = [](T m) { return std::isfinite(m) ? m : T(0); };  // all -inf rows give NaN, as softmax
  if (s.inner == 1) {
    // Contiguous rows, as softmaxAlongAxis computes them: the sum in double, shift = max + log(sum).
    parallelChunks(s.outer, s.axis * 4, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t o = begin; o < end; ++o) {
        const T* x = scores + o * s.axis;
        T mx = -std::numeric_limits<T>::infinity();
        for (std::int64_t a = 0; a < s.axis; ++a) {
          mx = std::max(mx, x[a]);  // from -inf, as softmax does (a NaN score does not become the max)
        }
        mx = finiteOrZero(mx);
        double sum = 0.0;
        for (std::int64_t a = 0; a < s.axis; ++a) {
          sum += static_cast<double>(std::exp(x[a] - mx));
        }
        const std::int64_t label = labelAt(o);
        if (label >= 0) {
          picked[static_cast<std::size_t>(o)] = x[label] - (mx + static_cast<T>(std::log(sum)));
        }
      }
    });
    return picked;
  }
  // A strided class axis, as softmaxAlongAxis's [axis, inner] blocks: sums in T, x - max - log(sum).
  parallelChunks(s.outer, s.axis * s.inner * 4, [&](std::int64_t begin, std::int64_t end) {
    std::vector<T> mx(static_cast<std::size_t>(s.inner));
    std::vector<T> sum(static_cast<std::size_t>(s.inner));
    for (std::int64_t o = begin; o < end; ++o) {
      const T* x = scores + o * s.axis * s.inner;
      std::copy(x, x + s.inner, mx.begin());
      for (std::int64_t a = 1; a < s.axis; ++a) {
        for (std::int64_t i = 0; i < s.inner; ++i) {
          mx[static_cast<std::size_t>(i)] = std::max(mx[static_cast<std::size_t>(i)], x[a * s.inner + i]);
        }
      }
      std::transform(mx.begin(), mx.end(), mx.begin(), finiteOrZero);
      std::fill(sum.begin(), sum.end(), T(0));
      for (std::int64_t a = 0; a < s.axis; ++a) {
        for (std::int64_t i = 0; i < s.inner; ++i) {
          sum[static_cast<std::size_t>(i)] += std::exp(x[a * s.inner + i] - mx[static_cast<std::size_t>(i)]);
        }
      }
      for (std::int64_t i = 0; i < s.inner; ++i) {
        const std::int64_t label = labelAt(o * s.inner + i);
        if (label >= 0) {
          const auto k = static_cast<std::size_t>(i);
          picked[static_cast<std::size_t>(o * s.inner + i)] = x[label * s.inner + i] - mx[k] - std::log(sum[k]);
        }
      }
    }
  });
  return picked;
}

// `logProbAt(i, j, label)`: the log-probability of class `label` at position (i, j).
template <typename T, typename L, typename LogProbAt>
void negativeLogLikelihood(const LogProbAt& logProbAt, const L* labels, const T* weights, const Shape& shape,
                           const LossConfig& config, T* out) {
  const std::int64_t n = shape[0];
  const std::int64_t c = shape[1];
  const std::int64_t d = numElements(shape) / std::max<std::int64_t>(n * c, 1);
  double total = 0.0;
  double weightSum = 0.0;
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t j = 0; j < d; ++j) {
      const auto label = static_cast<std::int64_t>(labels[i * d + j]);
      double loss = 0.0;
      if (!(config.ignoreIndex && label == *config.ignoreIndex)) {
        STRATA_CHECK(label >= 0 && label < c, "label {} is out of range for {} classes", label, c);
        const double w = weights != nullptr ? static_cast<double>(weights[label]) : 1.0;
        loss = -static_cast<double>(logProbAt(i, j, label)) * w;
        weightSum += w;
      }
      if (config.reduction == Reduction::None) {
        out[i * d + j] = static_cast<T>(loss);
      }
      total += loss;
    }
  }
  if (config.reduction == Reduction::Sum) {
    out[0] = static_cast<T>(total);
  } else if (config.reduction == Reduction::Mean) {
    out[0] = static_cast<T>(total / weightSum);  // 0 / 0 = NaN when everything is ignored, like the reference
  }
}

template <typename T>
void runLoss(KernelContext& ctx, const LossConfig& config, bool softmaxFirst) {
  const Tensor& scores = ctx.input(0);
  const T* weights = ctx.hasInput(2) ? ctx.input(2).data<T>() : nullptr;
  const T* logProb = scores.data<T>();
  if (softmaxFirst && ctx.hasOutput(1)) {
    // LogSoftmax over the class axis, written straight into the log_prob output.
    if (scores.numel() > 0) {
      softmaxAlongAxis<T>(scores.data<T>(), ctx.output(1).data<T>(), splitAtAxis(scores.shape(), 1),
                          /*logSoftmax=*/true);
    }
    logProb = ctx.output(1).data<T>();
  }
  const std::int64_t c = scores.shape()[1];
  const std::int64_t d = scores.numel() / std::max<std::int64_t>(scores.shape()[0] * c, 1);
  dispatch(IndexTypes{}, ctx.input(1).dtype(), "loss labels", [&](auto tag) {
    using L = decltype(tag);
    const L* labels = ctx.input(1).data<L>();
    if (softmaxFirst && !ctx.hasOutput(1)) {  // Note [Loss without log-probabilities]
      const std::vector<T> picked =
          scores.numel() > 0 ? logProbOfLabels<T, L>(scores.data<T>(), labels, splitAtAxis(scores.shape(), 1))
                             : std::vector<T>();
      negativeLogLikelihood<T, L>(
          [&](std::int64_t i, std::int64_t j, std::int64_t) { return picked[static_cast<std::size_t>(i * d + j)]; },
          labels, weights, scores.shape(), config, ctx.output(0).data<T>());
      return;
    }
    negativeLogLikelihood<T, L>(
        [&](std::int64_t i, std::int64_t j, std::int64_t label) { return logProb[(i * c + label) * d + j]; }, labels,
        weights, scores.shape(), config, ctx.output(0).data<T>());
  });
}

void addLoss(OpRegistry& registry, const std::string& type, bool softmaxFirst) {
  addOp(registry, type, lossShapes, [type, softmaxFirst](const KernelInit& init) -> ComputeFn {
    const LossConfig config = readLossConfig(init.attrs);
    return [type, softmaxFirst, config](KernelContext& ctx) {
      dispatch(FloatTypes{}, ctx.input(0).dtype(), type.c_str(),
               [&](auto tag) { runLoss<decltype(tag)>(ctx, config, softmaxFirst); });
    };
  });
}

}  // namespace

void registerLossOps(OpRegistry& registry) {
  addLoss(registry, "SoftmaxCrossEntropyLoss", true);
  addLoss(registry, "NegativeLogLikelihoodLoss", false);
}

}  // namespace strata::cpu::reduction_detail
