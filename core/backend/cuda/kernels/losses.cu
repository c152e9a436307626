// SoftmaxCrossEntropyLoss and NegativeLogLikelihoodLoss (opset 13) and their gradients on CUDA, mirroring
// core/backend/cpu/reduction_losses.cpp and grad_reduction_ops.cpp: scores/log-probabilities [N, C, d1, ...],
// int labels [N, d1, ...], optional class weights [C], reduction none/sum/mean and an optional ignore_index.
// Scalar losses and the summed weights of the mean are deterministic reductions in double, as on the CPU.
// Note [CUDA loss labels]: the CPU throws on a label outside [0, C) that is not ignore_index; a kernel cannot, so
// such an element gets a NaN loss (and NaN gradients for its column) and does not count in the mean's weights.

#include <limits>
#include <string>

#include "../../cpu/reduction_plan.h"
#include "reduce_kernels.cuh"

namespace strata::cuda {

namespace reduce {

namespace {

using Reduction = cpu::reduction_detail::LossReduction;

struct LossConfig {
  Reduction reduction = Reduction::Mean;
  bool hasIgnoreIndex = false;
  std::int64_t ignoreIndex = 0;

  __host__ __device__ bool ignored(std::int64_t label) const { return hasIgnoreIndex && label == ignoreIndex; }
};

// The CPU's loss attributes, in a form the kernels can take by value.
LossConfig readLossConfig(const Attributes& attrs) {
  const cpu::reduction_detail::LossConfig parsed = cpu::reduction_detail::readLossConfig(attrs);
  LossConfig config;
  config.reduction = parsed.reduction;
  config.hasIgnoreIndex = parsed.ignoreIndex.has_value();
  config.ignoreIndex = parsed.ignoreIndex.value_or(0);
  return config;
}

// [N, C, d] of a loss input's shape, with the CPU's d (0 elements per sample when N * C == 0).
struct LossDims {
  std::int64_t n = 0;
  std::int64_t classes = 0;
  std::int64_t d = 0;
};

LossDims lossDims(const Shape& shape) {
  LossDims dims;
  dims.n = shape.at(0);
  dims.classes = shape.at(1);
  dims.d = numElements(shape) / std::max<std::int64_t>(dims.n * dims.classes, 1);
  return dims;
}

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

template <typename Fn>
void visitLabelType(DType dtype, Fn&& fn) {
  switch (dtype) {
    case DType::Int32:
      return fn(std::int32_t{});
    case DType::Int64:
      return fn(std::int64_t{});
    default:
      fail("loss labels must be int32 or int64, got {}", dtypeName(dtype));
  }
}

// ---- Forward ----

// loss[n, d] = -logProb[n, label, d] * weight[label], 0 where label == ignore_index.
template <typename T, typename L>
__host__ __device__ __forceinline__ double elementLoss(const T* logProb, const L* labels, const T* weights,
                                                       const LossConfig& config, LossDims dims, std::int64_t k,
                                                       double* weight) {
  const auto label = static_cast<std::int64_t>(labels[k]);
  *weight = 0.0;
  if (config.ignored(label)) {
    return 0.0;
  }
  if (label < 0 || label >= dims.classes) {
    return kNaN;  // Note [CUDA loss labels]
  }
  const std::int64_t i = k / dims.d;
  const std::int64_t j = k % dims.d;
  *weight = weights != nullptr ? cvt<double>(weights[label]) : 1.0;
  return -cvt<double>(logProb[(i * dims.classes + label) * dims.d + j]) * *weight;
}

template <typename T, typename L>
__global__ void lossNoneKernel(const T* logProb, const L* labels, const T* weights, LossConfig config, LossDims dims,
                               T* out) {
  STRATA_GRID_STRIDE_LOOP(k, dims.n * dims.d) {
    double weight = 0.0;
    out[k] = cvt<T>(elementLoss(logProb, labels, weights, config, dims, k, &weight));
  }
}

struct LossTotals {
  double total;
  double weightSum;
};

// The summed (or weight-averaged) loss: total / weightSum is 0 / 0 = NaN when everything is ignored, like the
// reference.
template <typename T, typename L>
struct LossTotalOp {
  using Acc = LossTotals;

  const T* logProb;
  const L* labels;
  const T* weights;
  LossConfig config;
  LossDims dims;
  T* out;

  __host__ __device__ Acc init() const { return Acc{0.0, 0.0}; }
  __host__ __device__ Acc map(std::int64_t, std::int64_t, std::int64_t k) const {
    Acc acc{0.0, 0.0};
    acc.total = elementLoss(logProb, labels, weights, config, dims, k, &acc.weightSum);
    return acc;
  }
  __host__ __device__ Acc combine(Acc a, Acc b) const { return Acc{a.total + b.total, a.weightSum + b.weightSum}; }
  __host__ __device__ void finish(Acc a, std::int64_t) const {
    out[0] = cvt<T>(config.reduction == Reduction::Sum ? a.total : a.total / a.weightSum);
  }
};

template <typename T>
void runLoss(KernelContext& ctx, const LossConfig& config, bool softmaxFirst) {
  const Tensor& scores = ctx.input(0);
  const cudaStream_t stream = streamOf(ctx);
  const LossDims dims = lossDims(scores.shape());
  const T* weights = ctx.hasInput(2) ? ctx.input(2).data<T>() : nullptr;
  const T* logProb = scores.data<T>();
  Tensor scratch;
  if (softmaxFirst) {
    Tensor* target = ctx.hasOutput(1) ? &ctx.output(1) : nullptr;
    if (target == nullptr) {
      scratch = Tensor::empty(scores.meta(), MemoryCategory::Workspace, scores.device());
      target = &scratch;
    }
    // LogSoftmax over the class axis, written straight into the log_prob output (or scratch).
    launchSoftmax(scores.dtype(), scores.rawData(), target->rawData(), dims.n, dims.classes,
                  numElements(scores.shape()) / std::max<std::int64_t>(dims.n * dims.classes, 1), true, stream);
    logProb = target->data<T>();
  }
  Tensor& out = ctx.output(0);
  visitLabelType(ctx.input(1).dtype(), [&](auto labelTag) {
    using L = decltype(labelTag);
    const L* labels = ctx.input(1).data<L>();
    if (config.reduction == Reduction::None) {
      if (dims.n * dims.d > 0) {
        lossNoneKernel<T, L><<<blocksFor(dims.n * dims.d), kThreadsPerBlock, 0, stream>>>(logProb, labels, weights,
                                                                                          config, dims, out.data<T>());
        STRATA_CUDA_CHECK_LAUNCH();
      }
      return;
    }
    launchReduce(LossTotalOp<T, L>{logProb, labels, weights, config, dims, out.data<T>()},
                 flatGeometry(dims.n * dims.d), out.device(), stream);
  });
}

void addLoss(OpRegistry& registry, const std::string& type, bool softmaxFirst) {
  addCudaKernelFactory(registry, type, [type, softmaxFirst](const KernelInit& init) {
    const LossConfig config = readLossConfig(init.attrs);
    return makeFunctionKernel([type, softmaxFirst, config](KernelContext& ctx) {
      visitDeviceFloat(ctx.input(0).dtype(), type.c_str(),
                       [&](auto tag) { runLoss<decltype(tag)>(ctx, config, softmaxFirst); });
    });
  });
}

// ---- Gradients ----

// dLoss / (summed weights of the counted elements), the coefficient of every element under reduction mean.
template <typename T, typename L>
struct MeanCoefficientOp {
  using Acc = double;

  const T* dLoss;
  const L* labels;
  const T* weights;
  LossConfig config;
  std::int64_t classes;
  double* coefficient;

  __host__ __device__ Acc init() const { return 0.0; }
  __host__ __device__ Acc map(std::int64_t, std::int64_t, std::int64_t k) const {
    const auto label = static_cast<std::int64_t>(labels[k]);
    if (config.ignored(label) || label < 0 || label >= classes) {
      return 0.0;
    }
    return weights != nullptr ? cvt<double>(weights[label]) : 1.0;
  }
  __host__ __device__ Acc combine(Acc a, Acc b) const { return a + b; }
  __host__ __device__ void finish(Acc weightSum, std::int64_t) const {
    *coefficient = cvt<double>(dLoss[0]) / weightSum;
  }
};

// With coef = w[label] * dLoss (per element for none, dLoss for sum, dLoss / summed weights for mean) rounded to
// T, and 0 for ignored elements:
//   NLL: dX[n, label, d] = -coef (0 elsewhere),   SCE: dX[n, c, d] = coef * (exp(logProb[n, c, d]) - [c == label]).
template <typename T, typename L, bool Softmax>
__global__ void lossGradKernel(const T* dLoss, const double* meanCoefficient, const T* logProb, const L* labels,
                               const T* weights, LossConfig config, LossDims dims, T* out) {
  using A = typename AccTypeOf<T>::type;
  STRATA_GRID_STRIDE_LOOP(e, dims.n * dims.classes * dims.d) {
    const std::int64_t j = e % dims.d;
    const std::int64_t k = (e / dims.d) % dims.classes;
    const std::int64_t i = e / (dims.d * dims.classes);
    const std::int64_t li = i * dims.d + j;
    const auto label = static_cast<std::int64_t>(labels[li]);
    const bool counted = !config.ignored(label);
    double coef = 0.0;
    if (counted) {
      if (label < 0 || label >= dims.classes) {
        coef = kNaN;  // Note [CUDA loss labels]
      } else {
        double g = 0.0;
        if (config.reduction == Reduction::None) {
          g = cvt<double>(dLoss[li]);
        } else if (config.reduction == Reduction::Sum) {
          g = cvt<double>(dLoss[0]);
        } else {
          g = *meanCoefficient;
        }
        coef = g * (weights != nullptr ? cvt<double>(weights[label]) : 1.0);
      }
    }
    const A c = cvt<A>(cvt<T>(coef));
    const bool hit = counted && k == label;
    if constexpr (Softmax) {
      A v = c * dExp(cvt<A>(logProb[e]));
      if (hit) {
        v -= c;
      }
      out[e] = cvt<T>(v);
    } else {
      out[e] = cvt<T>(hit ? -c : (coef != coef ? c : A(0)));
    }
  }
}

template <typename T, typename L, bool Softmax>
void lossGradAs(const Tensor& dLoss, const T* logProb, const Tensor& labelsTensor, const T* weights, const Shape& shape,
                const LossConfig& config, Tensor& out, cudaStream_t stream) {
  const LossDims dims = lossDims(shape);
  const L* labels = labelsTensor.data<L>();
  Tensor coefficient;
  const double* meanCoefficient = nullptr;
  if (config.reduction == Reduction::Mean) {
    coefficient = Tensor::empty(TensorMeta{DType::Float64, Shape{1}}, MemoryCategory::Workspace, out.device());
    launchReduce(
        MeanCoefficientOp<T, L>{dLoss.data<T>(), labels, weights, config, dims.classes, coefficient.data<double>()},
        flatGeometry(dims.n * dims.d), out.device(), stream);
    meanCoefficient = coefficient.data<double>();
  }
  const std::int64_t total = dims.n * dims.classes * dims.d;
  if (total == 0) {
    return;
  }
  lossGradKernel<T, L, Softmax><<<blocksFor(total), kThreadsPerBlock, 0, stream>>>(
      dLoss.data<T>(), meanCoefficient, logProb, labels, weights, config, dims, out.data<T>());
  STRATA_CUDA_CHECK_LAUNCH();
}

// SoftmaxCrossEntropyLossGrad(dLoss, LogProb, labels, weights?) -> dScores; with from_scores = 1 input 1 is the
// raw scores and the log-probabilities are recomputed.
void registerSoftmaxCrossEntropyLossGrad(OpRegistry& registry) {
  addCudaKernelFactory(registry, "SoftmaxCrossEntropyLossGrad", [](const KernelInit& init) {
    const LossConfig config = readLossConfig(init.attrs);
    const bool fromScores = init.attrs.getInt("from_scores", 0) != 0;
    return makeFunctionKernel([config, fromScores](KernelContext& ctx) {
      const Tensor& in = ctx.input(1);
      if (in.numel() == 0) {
        return;
      }
      const cudaStream_t stream = streamOf(ctx);
      visitDeviceFloat(in.dtype(), "SoftmaxCrossEntropyLossGrad", [&](auto tag) {
        using T = decltype(tag);
        const T* logProb = in.data<T>();
        if (fromScores) {
          // Into the output, which lossGradKernel rewrites in place (each element read before it is written): no
          // scratch of the scores' size (Note [Loss without log-probabilities], reduction_losses.cpp).
          const LossDims dims = lossDims(in.shape());
          launchSoftmax(in.dtype(), in.rawData(), ctx.output(0).rawData(), dims.n, dims.classes, dims.d, true, stream);
          logProb = ctx.output(0).data<T>();
        }
        const T* weights = ctx.hasInput(3) ? ctx.input(3).data<T>() : nullptr;
        visitLabelType(ctx.input(2).dtype(), [&](auto labelTag) {
          lossGradAs<T, decltype(labelTag), true>(ctx.input(0), logProb, ctx.input(2), weights, in.shape(), config,
                                                  ctx.output(0), stream);
        });
      });
    });
  });
}

// NegativeLogLikelihoodLossGrad(dLoss, labels, weights?) -> dInput of shape [N, classes, d...].
void registerNegativeLogLikelihoodLossGrad(OpRegistry& registry) {
  addCudaKernelFactory(registry, "NegativeLogLikelihoodLossGrad", [](const KernelInit& init) {
    const LossConfig config = readLossConfig(init.attrs);
    return makeFunctionKernel([config](KernelContext& ctx) {
      Tensor& out = ctx.output(0);
      if (out.numel() == 0) {
        return;
      }
      visitDeviceFloat(out.dtype(), "NegativeLogLikelihoodLossGrad", [&](auto tag) {
        using T = decltype(tag);
        const T* weights = ctx.hasInput(2) ? ctx.input(2).data<T>() : nullptr;
        visitLabelType(ctx.input(1).dtype(), [&](auto labelTag) {
          lossGradAs<T, decltype(labelTag), false>(ctx.input(0), nullptr, ctx.input(1), weights, out.shape(), config,
                                                   out, streamOf(ctx));
        });
      });
    });
  });
}

}  // namespace

}  // namespace reduce

void registerLossKernels(OpRegistry& registry) {
  reduce::addLoss(registry, "SoftmaxCrossEntropyLoss", true);
  reduce::addLoss(registry, "NegativeLogLikelihoodLoss", false);
}

void registerLossGradKernels(OpRegistry& registry) {
  reduce::registerSoftmaxCrossEntropyLossGrad(registry);
  reduce::registerNegativeLogLikelihoodLossGrad(registry);
}

}  // namespace strata::cuda
