// BatchNormalization (float32: Note [Batch-norm loops]; float64: plain loops) and InstanceNormalization, as loops.

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <memory>
#include <vector>

#include "batch_norm_loops.h"
#include "cpu_layouts.h"
#include "dnnl_context.h"
#include "strata/thread_pool.h"

namespace strata::cpu {
namespace {

// Inputs X, scale, B, input_mean, input_var: all float32 or all float64, X of rank 2 to 5,
// the others [C].
void checkBatchNormInputs(const std::vector<TensorMeta>& metas) {
  const TensorMeta& x = metas[0];
  if (x.dtype != DType::Float32 && x.dtype != DType::Float64) {
    fail("only float32 and float64 are supported, X is {}", dtypeName(x.dtype));
  }
  if (x.shape.size() < 2 || x.shape.size() > 5)
    fail("X must have rank 2 to 5, got {}", shapeToString(x.shape));
  static constexpr const char* kNames[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (std::size_t i = 1; i < 5; ++i) {
    if (metas[i].dtype != x.dtype) {
      fail("{} is {} but X is {}; they must match", kNames[i], dtypeName(metas[i].dtype), dtypeName(x.dtype));
    }
    if (metas[i].shape != Shape{x.shape[1]}) {
      fail("{} has shape {}, expected [{}] (X's channel count)", kNames[i], shapeToString(metas[i].shape), x.shape[1]);
    }
  }
}

std::vector<TensorMeta> inferBatchNorm(const ShapeContext& ctx) {
  std::vector<TensorMeta> metas;
  for (std::size_t i = 0; i < 5; ++i) {
    if (!ctx.hasInput(i))
      ctx.error("BatchNormalization needs 5 inputs (X, scale, B, input_mean, input_var)");
    metas.push_back(ctx.input(i).meta);
  }
  try {
    checkBatchNormInputs(metas);
  } catch (const Error& e) {
    ctx.error(e.what());
  }
  if (ctx.outputCount > 5)
    ctx.error("BatchNormalization has at most 5 outputs");
  std::vector<TensorMeta> out{metas[0]};
  // Y, then running_mean and running_var (opset 14+; opset 9 also had saved_mean and saved_var): all [C].
  for (std::size_t i = 1; i < ctx.outputCount; ++i)
    out.push_back(metas[1]);
  return out;
}

// The double a float attribute most likely stands for: its shortest decimal form (1e-5f -> 1e-5, 0.9f -> 0.9).
// ONNX stores epsilon and momentum as float32; PyTorch's float64 run uses the decimal values.
double decimalOf(float value) {
  return std::strtod(fmt::format("{}", value).c_str(), nullptr);
}

// BatchNormalization in float64: the same semantics as the float32 loops. Training mode normalises
// with the batch statistics, the variance computed in two passes (mean first), biased as in ONNX's reference.
class BatchNormF64 {
 public:
  BatchNormF64(const Shape& shape, double epsilon, double momentum, bool training)
      : epsilon_(epsilon), momentum_(momentum), training_(training) {
    batch_ = shape[0];
    channels_ = shape[1];
    inner_ = numElements(Shape(shape.begin() + 2, shape.end()));
  }

  void compute(KernelContext& ctx) const {
    const double* x = ctx.input(0).data<double>();
    const double* scale = ctx.input(1).data<double>();
    const double* bias = ctx.input(2).data<double>();
    double* y = ctx.output(0).data<double>();
    std::vector<double> mean(static_cast<std::size_t>(channels_)), var(static_cast<std::size_t>(channels_));
    if (training_) {
      const double count = static_cast<double>(batch_ * inner_);
      parallelFor(0, channels_, 1, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t c = begin; c < end; ++c) {
          double sum = 0;
          for (std::int64_t n = 0; n < batch_; ++n) {
            const double* p = x + (n * channels_ + c) * inner_;
            for (std::int64_t i = 0; i < inner_; ++i)
              sum += p[i];
          }
          const double m = sum / count;
          double squares = 0;
          for (std::int64_t n = 0; n < batch_; ++n) {
            const double* p = x + (n * channels_ + c) * inner_;
            for (std::int64_t i = 0; i < inner_; ++i)
              squares += (p[i] - m) * (p[i] - m);
          }
          mean[static_cast<std::size_t>(c)] = m;
          var[static_cast<std::size_t>(c)] = squares / count;
        }
      });
    } else {
      std::copy(ctx.input(3).data<double>(), ctx.input(3).data<double>() + channels_, mean.begin());
      std::copy(ctx.input(4).data<double>(), ctx.input(4).data<double>() + channels_, var.begin());
    }
    parallelFor(0, batch_ * channels_, std::max<std::int64_t>(1, 4096 / std::max<std::int64_t>(inner_, 1)),
                [&](std::int64_t begin, std::int64_t end) {
                  for (std::int64_t plane = begin; plane < end; ++plane) {
                    const auto c = static_cast<std::size_t>(plane % channels_);
                    const double a = scale[c] / std::sqrt(var[c] + epsilon_);
                    const double m = mean[c];
                    const double b = bias[c];
                    const double* in = x + plane * inner_;
                    double* out = y + plane * inner_;
                    for (std::int64_t i = 0; i < inner_; ++i)
                      out[i] = (in[i] - m) * a + b;
                  }
                });
    if (!training_) {
      for (std::size_t i = 1; i <= 2; ++i) {
        if (ctx.hasOutput(i))
          ctx.output(i).copyFrom(ctx.input(i + 2));
      }
      return;
    }
    const double* inputStats[2] = {ctx.input(3).data<double>(), ctx.input(4).data<double>()};
    const std::vector<double>* batchStats[2] = {&mean, &var};
    for (std::size_t s = 0; s < 2; ++s) {
      if (ctx.hasOutput(1 + s)) {
        double* out = ctx.output(1 + s).data<double>();
        for (std::int64_t c = 0; c < channels_; ++c) {
          out[c] = inputStats[s][c] * momentum_ + (*batchStats[s])[static_cast<std::size_t>(c)] * (1.0 - momentum_);
        }
      }
      if (ctx.hasOutput(3 + s))
        std::copy(batchStats[s]->begin(), batchStats[s]->end(), ctx.output(3 + s).data<double>());
    }
  }

 private:
  double epsilon_;
  double momentum_;
  bool training_;
  std::int64_t batch_ = 0, channels_ = 0, inner_ = 0;
};

class BatchNormKernel : public OpKernel {
 public:
  explicit BatchNormKernel(const KernelInit& init) {
    // Note [CPU channels-last]: a float32 channels-last node is [N x spatial, C] rows to the loops.
    const bool channelsLast = channelsLastOf(init.attrs);
    std::vector<TensorMeta> metas;
    for (std::size_t i = 0; i < 5; ++i)
      metas.push_back(init.inputs.at(i).meta);
    metas[0].shape = logicalShape(metas[0].shape, channelsLast);
    checkBatchNormInputs(metas);
    epsilon_ = init.attrs.getFloat("epsilon", 1e-5f);
    momentum_ = init.attrs.getFloat("momentum", 0.9f);
    // The ONNX attribute decides, as in the exported graph (an eval-mode export says 0 even when training).
    training_ = init.attrs.getInt("training_mode", 0) != 0;
    relu_ = init.attrs.getInt("fused_relu", 0) != 0;  // Note [Fused ReLU]
    channels_ = metas[0].shape[1];
    empty_ = metas[0].numel() == 0;
    if (empty_)
      return;
    if (metas[0].dtype == DType::Float64) {
      f64_ = std::make_unique<BatchNormF64>(metas[0].shape, decimalOf(epsilon_), decimalOf(momentum_), training_);
      return;
    }
    layout_ = channelLayoutOf(init.inputs.at(0).meta.shape, channelsLast);
    channelsLast_ = channelsLast;
  }

  std::string implementation() const override {
    const std::string relu = relu_ ? ", ReLU fused" : "";
    if (f64_ != nullptr)
      return "float64 loop" + relu;
    return (channelsLast_ ? "vectorised loop, channels-last" : "vectorised loop") + relu;
  }

  void compute(KernelContext& ctx) override {
    if (empty_) {
      // No samples: the batch statistics are undefined; keep the running ones.
      for (std::size_t i = 1; i <= 2; ++i) {
        if (ctx.hasOutput(i))
          ctx.output(i).copyFrom(ctx.input(i + 2));
      }
      return;
    }
    if (f64_ != nullptr) {
      f64_->compute(ctx);
      if (relu_) {
        double* y = ctx.output(0).data<double>();
        for (std::int64_t i = 0; i < ctx.output(0).numel(); ++i)
          y[i] = y[i] > 0.0 ? y[i] : 0.0;
      }
      return;
    }
    Tensor batchMean;
    Tensor batchVar;
    computeWithLoops(ctx, batchMean, batchVar);
    if (!training_) {
      // Inference: ONNX (opset 14+) declares no statistics outputs; older graphs may still list them.
      for (std::size_t i = 1; i <= 2; ++i) {
        if (ctx.hasOutput(i))
          ctx.output(i).copyFrom(ctx.input(i + 2));
      }
      return;
    }
    // ONNX: running = input * momentum + batch * (1 - momentum), where the batch variance is the biased
    // (population) one, as the ONNX reference (numpy var) computes it. PyTorch would use the unbiased one here.
    const float* inputStats[2] = {ctx.input(3).data<float>(), ctx.input(4).data<float>()};
    const float* batchStats[2] = {batchMean.data<float>(), batchVar.data<float>()};
    for (std::size_t s = 0; s < 2; ++s) {
      if (ctx.hasOutput(1 + s)) {
        float* out = ctx.output(1 + s).data<float>();
        for (std::int64_t c = 0; c < channels_; ++c) {
          out[c] = inputStats[s][c] * momentum_ + batchStats[s][c] * (1.0f - momentum_);
        }
      }
      // Opset 9's saved_mean / saved_var outputs: the batch statistics themselves.
      if (ctx.hasOutput(3 + s))
        ctx.output(3 + s).copyFrom(s == 0 ? batchMean : batchVar);
    }
  }

 private:
  // Note [Batch-norm loops]: statistics (training) and y = a x + b per channel.
  void computeWithLoops(KernelContext& ctx, Tensor& batchMean, Tensor& batchVar) {
    const float* x = ctx.input(0).data<float>();
    const float* scale = ctx.input(1).data<float>();
    const float* bias = ctx.input(2).data<float>();
    const auto channels = static_cast<std::size_t>(channels_);
    std::vector<float> mean(channels), a(channels);
    if (training_) {
      batchMean = Tensor::empty(DType::Float32, {channels_}, MemoryCategory::Workspace);
      batchVar = Tensor::empty(DType::Float32, {channels_}, MemoryCategory::Workspace);
      std::vector<float> shift(channels);
      for (std::size_t c = 0; c < channels; ++c)
        shift[c] = x[static_cast<std::int64_t>(c) * layout_.inner];
      const ChannelSums sums = channelSums(layout_, x, nullptr, shift.data());
      const auto count = static_cast<double>(layout_.count());
      for (std::size_t c = 0; c < channels; ++c) {
        const double meanShift = sums.x[c] / count;
        const double var = std::max(0.0, sums.xx[c] / count - meanShift * meanShift);
        mean[c] = static_cast<float>(shift[c] + meanShift);
        a[c] = static_cast<float>(scale[c] / std::sqrt(var + static_cast<double>(epsilon_)));
        batchMean.data<float>()[c] = mean[c];
        batchVar.data<float>()[c] = static_cast<float>(var);
      }
    } else {
      const float* var = ctx.input(4).data<float>();
      std::copy(ctx.input(3).data<float>(), ctx.input(3).data<float>() + channels_, mean.begin());
      for (std::size_t c = 0; c < channels; ++c)
        a[c] = static_cast<float>(scale[c] / std::sqrt(static_cast<double>(var[c]) + static_cast<double>(epsilon_)));
    }
    normalize(layout_, x, mean.data(), a.data(), bias, ctx.output(0).data<float>(), relu_);
  }

  float epsilon_ = 1e-5f;
  float momentum_ = 0.9f;
  bool training_ = false;
  bool relu_ = false;  // Note [Fused ReLU]: max(y, 0)
  bool empty_ = false;
  std::int64_t channels_ = 0;
  std::unique_ptr<BatchNormF64> f64_;  // set for float64
  ChannelLayout layout_;
  bool channelsLast_ = false;
};

// ---- InstanceNormalization: y = scale * (x - mean) / sqrt(var + epsilon) + B per (n, c) plane ----

std::vector<TensorMeta> inferInstanceNorm(const ShapeContext& ctx) {
  for (std::size_t i = 0; i < 3; ++i) {
    if (!ctx.hasInput(i))
      ctx.error("InstanceNormalization needs 3 inputs (input, scale, B)");
  }
  const TensorMeta& x = ctx.input(0).meta;
  if (x.dtype != DType::Float32)
    ctx.error("only float32 is supported, input is " + std::string(dtypeName(x.dtype)));
  if (x.shape.size() < 3)
    ctx.error("input must have rank >= 3 (N, C, spatial...), got " + shapeToString(x.shape));
  for (std::size_t i = 1; i < 3; ++i) {
    const TensorMeta& m = ctx.input(i).meta;
    if (m.dtype != DType::Float32 || m.shape != Shape{x.shape[1]}) {
      ctx.error(fmt::format("{} must be float32 [{}], got {} {}", i == 1 ? "scale" : "B", x.shape[1],
                            dtypeName(m.dtype), shapeToString(m.shape)));
    }
  }
  return {x};
}

void computeInstanceNorm(const KernelContext& ctx, float epsilon) {
  const Tensor& x = ctx.input(0);
  const std::int64_t channels = x.dim(1);
  const std::int64_t planes = x.dim(0) * channels;
  const std::int64_t size = planes == 0 ? 0 : x.numel() / planes;
  const float* src = x.data<float>();
  const float* scale = ctx.input(1).data<float>();
  const float* bias = ctx.input(2).data<float>();
  float* dst = ctx.output(0).data<float>();
  parallelFor(0, planes, 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t p = begin; p < end; ++p) {
      const float* in = src + p * size;
      float* out = dst + p * size;
      double sum = 0;
      for (std::int64_t i = 0; i < size; ++i)
        sum += in[i];
      const double mean = size > 0 ? sum / static_cast<double>(size) : 0.0;
      double squares = 0;
      for (std::int64_t i = 0; i < size; ++i)
        squares += (in[i] - mean) * (in[i] - mean);
      const double var = size > 0 ? squares / static_cast<double>(size) : 0.0;
      const std::int64_t c = p % channels;
      const float a = static_cast<float>(scale[c] / std::sqrt(var + epsilon));
      const float b = static_cast<float>(bias[c] - mean * a);
      for (std::int64_t i = 0; i < size; ++i)
        out[i] = in[i] * a + b;
    }
  });
}

}  // namespace

void registerNormOps(OpRegistry& registry) {
  registry.addSchema({"BatchNormalization", inferBatchNorm, true});
  registry.addKernel(
      "BatchNormalization", DeviceType::CPU,
      [](const KernelInit& init) -> std::unique_ptr<OpKernel> { return std::make_unique<BatchNormKernel>(init); },
      [](const KernelInit& init) { return init.inputs.at(0).meta.dtype == DType::Float32; });
  registry.addSchema({"InstanceNormalization", inferInstanceNorm, true});
  registry.addKernel("InstanceNormalization", DeviceType::CPU, [](const KernelInit& init) -> std::unique_ptr<OpKernel> {
    const float epsilon = init.attrs.getFloat("epsilon", 1e-5f);
    return makeFunctionKernel([epsilon](KernelContext& ctx) { computeInstanceNorm(ctx, epsilon); });
  });
}

}  // namespace strata::cpu
