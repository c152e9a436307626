// SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss (opset 13): scores/log-probabilities of shape
// [N, C, d1, ...] against int labels [N, d1, ...], optional class weights [C], reduction none/sum/mean and an
// optional ignore_index.

#include <cmath>
#include <optional>
#include <string>

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
template <typename T, typename L>
void negativeLogLikelihood(const T* logProb, const L* labels, const T* weights, const Shape& shape,
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
        loss = -static_cast<double>(logProb[(i * c + label) * d + j]) * w;
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
  Tensor scratch;
  if (softmaxFirst) {
    Tensor* target = ctx.hasOutput(1) ? &ctx.output(1) : nullptr;
    if (target == nullptr) {
      scratch = Tensor::empty(scores.meta(), MemoryCategory::Workspace);
      target = &scratch;
    }
    // LogSoftmax over the class axis, written straight into the log_prob output (or scratch).
    if (scores.numel() > 0) {
      softmaxAlongAxis<T>(scores.data<T>(), target->data<T>(), splitAtAxis(scores.shape(), 1), /*logSoftmax=*/true);
    }
    logProb = target->data<T>();
  }
  dispatch(IndexTypes{}, ctx.input(1).dtype(), "loss labels", [&](auto tag) {
    using L = decltype(tag);
    negativeLogLikelihood<T, L>(logProb, ctx.input(1).data<L>(), weights, scores.shape(), config,
                                ctx.output(0).data<T>());
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
