// BatchNormalization on oneDNN's batch_normalization primitive, and InstanceNormalization as a direct loop.

#include <cmath>
#include <memory>

#include "dnnl_context.h"
#include "strata/thread_pool.h"

namespace strata::cpu {
namespace {

using dnnl::memory;

// Inputs X, scale, B, input_mean, input_var: float32, X of rank 2 to 5, the others [C].
void checkBatchNormInputs(const std::vector<TensorMeta>& metas) {
  const TensorMeta& x = metas[0];
  if (x.dtype != DType::Float32) fail("only float32 is supported, X is {}", dtypeName(x.dtype));
  if (x.shape.size() < 2 || x.shape.size() > 5) fail("X must have rank 2 to 5, got {}", shapeToString(x.shape));
  static constexpr const char* kNames[] = {"X", "scale", "B", "input_mean", "input_var"};
  for (std::size_t i = 1; i < 5; ++i) {
    if (metas[i].dtype != DType::Float32) fail("only float32 is supported, {} is {}", kNames[i], dtypeName(metas[i].dtype));
    if (metas[i].shape != Shape{x.shape[1]}) {
      fail("{} has shape {}, expected [{}] (X's channel count)", kNames[i], shapeToString(metas[i].shape), x.shape[1]);
    }
  }
}

std::vector<TensorMeta> inferBatchNorm(const ShapeContext& ctx) {
  std::vector<TensorMeta> metas;
  for (std::size_t i = 0; i < 5; ++i) {
    if (!ctx.hasInput(i)) ctx.error("BatchNormalization needs 5 inputs (X, scale, B, input_mean, input_var)");
    metas.push_back(ctx.input(i).meta);
  }
  try {
    checkBatchNormInputs(metas);
  } catch (const Error& e) {
    ctx.error(e.what());
  }
  if (ctx.outputCount > 5) ctx.error("BatchNormalization has at most 5 outputs");
  std::vector<TensorMeta> out{metas[0]};
  // Y, then running_mean and running_var (opset 14+; opset 9 also had saved_mean and saved_var): all [C].
  for (std::size_t i = 1; i < ctx.outputCount; ++i) out.push_back(metas[1]);
  return out;
}

class BatchNormKernel : public OpKernel {
 public:
  explicit BatchNormKernel(const KernelInit& init) {
    std::vector<TensorMeta> metas;
    for (std::size_t i = 0; i < 5; ++i) metas.push_back(init.inputs.at(i).meta);
    checkBatchNormInputs(metas);
    epsilon_ = init.attrs.getFloat("epsilon", 1e-5f);
    momentum_ = init.attrs.getFloat("momentum", 0.9f);
    // The ONNX attribute decides, as in the exported graph (an eval-mode export says 0 even when training).
    training_ = init.attrs.getInt("training_mode", 0) != 0;
    channels_ = metas[0].shape[1];
    empty_ = metas[0].numel() == 0;
    if (empty_) return;
    const memory::desc dataDesc = plainDesc(metas[0].shape);
    withDnnlErrors(init.nodeName, "create the batch normalization", [&] {
      const dnnl::normalization_flags flags =
          training_ ? dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift
                    : dnnl::normalization_flags::use_global_stats | dnnl::normalization_flags::use_scale |
                          dnnl::normalization_flags::use_shift;
      const dnnl::prop_kind prop = training_ ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference;
      dnnl::batch_normalization_forward::desc desc(prop, dataDesc, epsilon_, flags);
      dnnl::batch_normalization_forward::primitive_desc pd(desc, userScratchpadAttr(), dnnlEngine());
      primitive_ = dnnl::batch_normalization_forward(pd);
      scratchpadBytes_ = pd.scratchpad_desc().get_size();
      const memory::desc channelDesc = plainDesc({channels_});
      src_ = memory(dataDesc, dnnlEngine(), nullptr);
      dst_ = memory(dataDesc, dnnlEngine(), nullptr);
      scale_ = memory(channelDesc, dnnlEngine(), nullptr);
      shift_ = memory(channelDesc, dnnlEngine(), nullptr);
      mean_ = memory(channelDesc, dnnlEngine(), nullptr);
      variance_ = memory(channelDesc, dnnlEngine(), nullptr);
    });
  }

  void compute(KernelContext& ctx) override {
    if (empty_) {
      // No samples: the batch statistics are undefined; keep the running ones.
      for (std::size_t i = 1; i <= 2; ++i) {
        if (ctx.hasOutput(i)) ctx.output(i).copyFrom(ctx.input(i + 2));
      }
      return;
    }
    bindDnnl(src_, ctx.input(0));
    bindDnnl(dst_, ctx.output(0));
    bindDnnl(scale_, ctx.input(1));
    bindDnnl(shift_, ctx.input(2));
    Tensor batchMean;
    Tensor batchVar;
    if (training_) {
      batchMean = Tensor::empty(DType::Float32, {channels_}, MemoryCategory::Workspace);
      batchVar = Tensor::empty(DType::Float32, {channels_}, MemoryCategory::Workspace);
      bindDnnl(mean_, batchMean);
      bindDnnl(variance_, batchVar);
    } else {
      bindDnnl(mean_, ctx.input(3));
      bindDnnl(variance_, ctx.input(4));
    }
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_},     {DNNL_ARG_DST, dst_},
                                         {DNNL_ARG_SCALE, scale_}, {DNNL_ARG_SHIFT, shift_},
                                         {DNNL_ARG_MEAN, mean_},   {DNNL_ARG_VARIANCE, variance_}};
    executeDnnl(primitive_, args, scratchpadBytes_);
    if (!training_) {
      // Inference: ONNX (opset 14+) declares no statistics outputs; older graphs may still list them.
      for (std::size_t i = 1; i <= 2; ++i) {
        if (ctx.hasOutput(i)) ctx.output(i).copyFrom(ctx.input(i + 2));
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
      if (ctx.hasOutput(3 + s)) ctx.output(3 + s).copyFrom(s == 0 ? batchMean : batchVar);
    }
  }

 private:
  float epsilon_ = 1e-5f;
  float momentum_ = 0.9f;
  bool training_ = false;
  bool empty_ = false;
  std::int64_t channels_ = 0;
  dnnl::batch_normalization_forward primitive_;
  std::size_t scratchpadBytes_ = 0;
  memory src_, dst_, scale_, shift_, mean_, variance_;
};

// ---- InstanceNormalization: y = scale * (x - mean) / sqrt(var + epsilon) + B per (n, c) plane ----

std::vector<TensorMeta> inferInstanceNorm(const ShapeContext& ctx) {
  for (std::size_t i = 0; i < 3; ++i) {
    if (!ctx.hasInput(i)) ctx.error("InstanceNormalization needs 3 inputs (input, scale, B)");
  }
  const TensorMeta& x = ctx.input(0).meta;
  if (x.dtype != DType::Float32) ctx.error("only float32 is supported, input is " + std::string(dtypeName(x.dtype)));
  if (x.shape.size() < 3) ctx.error("input must have rank >= 3 (N, C, spatial...), got " + shapeToString(x.shape));
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
      for (std::int64_t i = 0; i < size; ++i) sum += in[i];
      const double mean = size > 0 ? sum / static_cast<double>(size) : 0.0;
      double squares = 0;
      for (std::int64_t i = 0; i < size; ++i) squares += (in[i] - mean) * (in[i] - mean);
      const double var = size > 0 ? squares / static_cast<double>(size) : 0.0;
      const std::int64_t c = p % channels;
      const float a = static_cast<float>(scale[c] / std::sqrt(var + epsilon));
      const float b = static_cast<float>(bias[c] - mean * a);
      for (std::int64_t i = 0; i < size; ++i) out[i] = in[i] * a + b;
    }
  });
}

}  // namespace

void registerDnnlNormOps(OpRegistry& registry) {
  registry.addSchema({"BatchNormalization", inferBatchNorm, true});
  registry.addKernel("BatchNormalization", DeviceType::CPU,
                     [](const KernelInit& init) -> std::unique_ptr<OpKernel> {
                       return std::make_unique<BatchNormKernel>(init);
                     });
  registry.addSchema({"InstanceNormalization", inferInstanceNorm, true});
  registry.addKernel("InstanceNormalization", DeviceType::CPU,
                     [](const KernelInit& init) -> std::unique_ptr<OpKernel> {
                       const float epsilon = init.attrs.getFloat("epsilon", 1e-5f);
                       return makeFunctionKernel([epsilon](KernelContext& ctx) { computeInstanceNorm(ctx, epsilon); });
                     });
}

}  // namespace strata::cpu
