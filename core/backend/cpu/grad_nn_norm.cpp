// BatchNormalizationGrad: (dY, X, scale [, mean, var]) -> (dX, dScale, dB).
//
// Note [Batch-norm backward]: two passes over dY and X, which is what memory bandwidth allows (float32: the loops of
// Note [Batch-norm loops]). The forward node's
// outputs carry no batch statistics (ONNX opset 14+ has none in training mode beyond the running ones), so pass 1
// recomputes them from X while it sums dY and dY * X per channel (no extra pass); pass 2 writes
// dX = a * dY + b * X + c with per-channel coefficients. This is also why it is hand-written rather than oneDNN's
// backward, which would need the mean and variance from a separate pass. The sums shift X by one of its own values
// per channel so that the variance (E[x^2] - E[x]^2) does not cancel catastrophically when |mean| >> std.
// training_mode = 0 (frozen statistics) takes the mean and variance inputs instead: dX = scale / sqrt(var + eps) * dY.
// With fused_relu (Note [Fused ReLU] in batch_norm_loops.h) input 5 is the fused node's output Y and dY counts only
// where Y > 0: the gradient of Relu(BatchNormalization(X)).

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <memory>

#include "batch_norm_loops.h"
#include "grad_nn_common.h"
#include "strata/channels_last.h"
#include "strata/thread_pool.h"

namespace strata::cpu::grad_nn {
namespace {

std::vector<TensorMeta> inferBatchNormGrad(const ShapeContext& ctx) {
  const bool training = ctx.attrs.getInt("training_mode", 0) != 0;
  const std::size_t needed = training ? 3 : 5;
  for (std::size_t i = 0; i < needed; ++i) {
    if (!ctx.hasInput(i)) {
      ctx.error(training ? "BatchNormalizationGrad needs dY, X and scale"
                         : "BatchNormalizationGrad in inference mode needs dY, X, scale, mean and var");
    }
  }
  const TensorMeta& dy = ctx.input(0).meta;
  const TensorMeta& x = ctx.input(1).meta;
  if (dy.dtype != DType::Float32 && dy.dtype != DType::Float64) {
    ctx.error(fmt::format("only float32 and float64 are supported, dY is {}", dtypeName(dy.dtype)));
  }
  if (x != dy)
    ctx.error(fmt::format("X {} and dY {} differ", x.toString(), dy.toString()));
  if (x.shape.size() < 2)
    ctx.error("X must have rank >= 2");
  for (std::size_t i = 2; i < needed; ++i) {
    const TensorMeta& m = ctx.input(i).meta;
    if (m.dtype != dy.dtype || m.shape != Shape{x.shape[1]}) {
      ctx.error(fmt::format("input {} must be {} [{}], got {}", i, dtypeName(dy.dtype), x.shape[1], m.toString()));
    }
  }
  const bool relu = ctx.attrs.getInt("fused_relu", 0) != 0;
  if (relu && (!ctx.hasInput(5) || ctx.input(5).meta != x)) {
    ctx.error(fmt::format("with fused_relu, input 5 must be the forward output Y, {}", x.toString()));
  }
  if (!relu && ctx.hasInput(5))
    ctx.error("input 5 (the forward output Y) is read only with fused_relu = 1");
  const TensorMeta channel{dy.dtype, {x.shape[1]}};
  return {x, channel, channel};
}

// The double a float attribute most likely stands for, as the float64 forward kernel reads it (dnnl_batchnorm.cpp).
double decimalOf(float value) {
  return std::strtod(fmt::format("{}", value).c_str(), nullptr);
}

constexpr std::int64_t kSumBlock = 2048;  // elements summed in T before the total moves to double

struct PlaneSums {
  double x = 0, xx = 0, dy = 0, dyx = 0;  // of x - shift
};

template <typename T>
void sumPlane(const T* x, const T* dy, std::int64_t size, T shift, PlaneSums& sums) {
  for (std::int64_t i0 = 0; i0 < size; i0 += kSumBlock) {
    const std::int64_t i1 = std::min(size, i0 + kSumBlock);
    T sx = 0, sxx = 0, sdy = 0, sdyx = 0;
#pragma omp simd reduction(+ : sx, sxx, sdy, sdyx)
    for (std::int64_t i = i0; i < i1; ++i) {
      const T xs = x[i] - shift;
      sx += xs;
      sxx += xs * xs;
      sdy += dy[i];
      sdyx += dy[i] * xs;
    }
    sums.x += sx;
    sums.xx += sxx;
    sums.dy += sdy;
    sums.dyx += sdyx;
  }
}

// One channel's gradient from its sums (of x - shift): dScale, dB and dX = a * dY + b * (X - mean) + c.
struct GradCoefficients {
  double dscale = 0, dbias = 0, mean = 0, a = 0, b = 0, c = 0;
};

GradCoefficients gradCoefficients(double sumX, double sumXX, double sumDy, double sumDyX, double shift, double count,
                                  double scale, double frozenVariance, bool training, double epsilon) {
  GradCoefficients g;
  g.mean = shift;
  double variance = frozenVariance;
  double sumDyCentred = sumDyX;  // sum of dY * (x - mean)
  if (training) {
    const double meanShift = count > 0 ? sumX / count : 0.0;
    g.mean += meanShift;
    variance = count > 0 ? std::max(0.0, sumXX / count - meanShift * meanShift) : 0.0;
    sumDyCentred -= meanShift * sumDy;
  }
  const double invStd = 1.0 / std::sqrt(variance + epsilon);
  g.dscale = sumDyCentred * invStd;
  g.dbias = sumDy;
  g.a = scale * invStd;
  if (training && count > 0) {
    // dX = a * (dY - sum(dY) / count - (x - mean) * invStd * dScale / count)
    g.b = -g.a * invStd * g.dscale / count;
    g.c = -g.a * sumDy / count;
  }
  return g;
}

// Float64 (finite-difference tests and float64 models): per channel, then per plane.
void batchNormGradF64(const KernelContext& ctx, bool training, double epsilon) {
  using T = double;
  const Tensor& xt = ctx.input(1);
  const std::int64_t batch = xt.dim(0), channels = xt.dim(1);
  const std::int64_t inner = batch * channels == 0 ? 0 : xt.numel() / (batch * channels);
  const T* dy = ctx.input(0).data<T>();
  std::vector<T> gated;  // Note [Fused ReLU]: dY where Y > 0 (float64 is for tests: a copy is fine)
  if (ctx.hasInput(5)) {
    const T* y = ctx.input(5).data<T>();
    gated.resize(static_cast<std::size_t>(xt.numel()));
    for (std::size_t i = 0; i < gated.size(); ++i)
      gated[i] = y[i] > T{0} ? dy[i] : T{0};
    dy = gated.data();
  }
  const T* x = xt.data<T>();
  const T* scale = ctx.input(2).data<T>();
  const T* mean = training ? nullptr : ctx.input(3).data<T>();
  const T* var = training ? nullptr : ctx.input(4).data<T>();
  T* dscale = ctx.hasOutput(1) ? ctx.output(1).data<T>() : nullptr;
  T* dbias = ctx.hasOutput(2) ? ctx.output(2).data<T>() : nullptr;
  const double count = static_cast<double>(batch * inner);
  std::vector<T> a(static_cast<std::size_t>(channels)), b(a.size()), c(a.size()), centre(a.size());
  parallelFor(0, channels, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t ch = begin; ch < end; ++ch) {
      const T shift = training ? (count > 0 ? x[ch * inner] : T{0}) : mean[ch];
      PlaneSums sums;
      for (std::int64_t n = 0; n < batch; ++n) {
        const std::int64_t offset = (n * channels + ch) * inner;
        sumPlane<T>(x + offset, dy + offset, inner, shift, sums);
      }
      const GradCoefficients g = gradCoefficients(sums.x, sums.xx, sums.dy, sums.dyx, shift, count, scale[ch],
                                                  training ? 0.0 : var[ch], training, epsilon);
      if (dscale != nullptr)
        dscale[ch] = g.dscale;
      if (dbias != nullptr)
        dbias[ch] = g.dbias;
      a[static_cast<std::size_t>(ch)] = g.a;
      b[static_cast<std::size_t>(ch)] = g.b;
      c[static_cast<std::size_t>(ch)] = g.c;
      centre[static_cast<std::size_t>(ch)] = g.mean;
    }
  });
  if (!ctx.hasOutput(0))
    return;
  T* dx = ctx.output(0).data<T>();
  parallelFor(0, batch * channels, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(inner, 1)),
              [&](std::int64_t begin, std::int64_t end) {
                for (std::int64_t plane = begin; plane < end; ++plane) {
                  const auto ch = static_cast<std::size_t>(plane % channels);
                  const T* g = dy + plane * inner;
                  const T* in = x + plane * inner;
                  T* out = dx + plane * inner;
                  for (std::int64_t i = 0; i < inner; ++i)
                    out[i] = a[ch] * g[i] + b[ch] * (in[i] - centre[ch]) + c[ch];
                }
              });
}

// Float32: the loops of Note [Batch-norm loops].
void batchNormGradF32(const KernelContext& ctx, bool training, bool channelsLast, double epsilon) {
  const Tensor& xt = ctx.input(1);
  const ChannelLayout layout = channelLayoutOf(xt.shape(), channelsLast);
  const float* dy = ctx.input(0).data<float>();
  const float* x = xt.data<float>();
  const float* scale = ctx.input(2).data<float>();
  const auto channels = static_cast<std::size_t>(layout.channels);
  std::vector<float> shift(channels);
  for (std::size_t ch = 0; ch < channels; ++ch) {
    shift[ch] = training ? (layout.count() > 0 ? x[static_cast<std::int64_t>(ch) * layout.inner] : 0.0f)
                         : ctx.input(3).data<float>()[ch];
  }
  const float* gate = ctx.hasInput(5) ? ctx.input(5).data<float>() : nullptr;  // Note [Fused ReLU]
  const ChannelSums sums = channelSums(layout, x, dy, shift.data(), gate);
  float* dscale = ctx.hasOutput(1) ? ctx.output(1).data<float>() : nullptr;
  float* dbias = ctx.hasOutput(2) ? ctx.output(2).data<float>() : nullptr;
  std::vector<float> a(channels), b(channels), c(channels), mean(channels);
  for (std::size_t ch = 0; ch < channels; ++ch) {
    const GradCoefficients g = gradCoefficients(
        sums.x[ch], sums.xx[ch], sums.dy[ch], sums.dyx[ch], shift[ch], static_cast<double>(layout.count()), scale[ch],
        training ? 0.0 : static_cast<double>(ctx.input(4).data<float>()[ch]), training, epsilon);
    if (dscale != nullptr)
      dscale[ch] = static_cast<float>(g.dscale);
    if (dbias != nullptr)
      dbias[ch] = static_cast<float>(g.dbias);
    a[ch] = static_cast<float>(g.a);
    b[ch] = static_cast<float>(g.b);
    c[ch] = static_cast<float>(g.c);
    mean[ch] = static_cast<float>(g.mean);
  }
  if (ctx.hasOutput(0))
    normalizeGrad(layout, dy, x, mean.data(), a.data(), b.data(), c.data(), ctx.output(0).data<float>(), gate);
}

}  // namespace

void registerNormGradOps(OpRegistry& registry) {
  registry.addSchema({"BatchNormalizationGrad", inferBatchNormGrad, true});
  registry.addKernel(
      "BatchNormalizationGrad", DeviceType::CPU,
      [](const KernelInit& init) -> std::unique_ptr<OpKernel> {
        const bool training = init.attrs.getInt("training_mode", 0) != 0;
        const bool channelsLast = channelsLastOf(init.attrs);  // float32 only (the predicate below)
        const float epsilon = init.attrs.getFloat("epsilon", 1e-5f);
        const DType dtype = init.inputs.at(0).meta.dtype;
        // Each dtype reads epsilon as its forward kernel does.
        const double eps = dtype == DType::Float64 ? decimalOf(epsilon) : static_cast<double>(epsilon);
        return makeFunctionKernel([training, channelsLast, eps, dtype](KernelContext& ctx) {
          if (dtype == DType::Float64) {
            batchNormGradF64(ctx, training, eps);
          } else {
            batchNormGradF32(ctx, training, channelsLast, eps);
          }
        });
      },
      // Note [CPU channels-last]: float32 channels-last nodes are [N x spatial, C] rows to the loops.
      [](const KernelInit& init) { return init.inputs.at(0).meta.dtype == DType::Float32; });
}

}  // namespace strata::cpu::grad_nn
