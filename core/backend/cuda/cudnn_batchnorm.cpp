// BatchNormalization (training mode on cuDNN, inference mode as one elementwise kernel), BatchNormalizationGrad and
// InstanceNormalization, with the CPU kernels' semantics (dnnl_batchnorm.cpp, grad_nn_norm.cpp).
//
// Note [Batch-norm running statistics]: ONNX updates running = input * momentum + batch * (1 - momentum) with the
// biased batch variance; cuDNN's exponentialAverageFactor weighs the batch instead, and its running variance is the
// unbiased one. So cuDNN runs with factor 1 into zeroed scratch (its "running" outputs are then the batch mean and
// the unbiased batch variance), and a small kernel applies ONNX's update, turning the variance back into the biased
// one. A single value per channel (count 1) has no unbiased variance: that case skips cuDNN (mean = x, var = 0).

#include <cstdlib>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "cuda_context.h"
#include "cuda_stream.h"
#include "cudnn_common.h"
#include "kernels/nn_kernels.h"

namespace strata::cuda {

void registerCudnnNormKernels(OpRegistry& registry);

namespace {

// The double a float attribute most likely stands for (its shortest decimal form), as the CPU's float64 kernels
// read epsilon and momentum.
double decimalOf(float value) {
  return std::strtod(fmt::format("{}", value).c_str(), nullptr);
}

std::int64_t innerSize(const Shape& shape) {
  std::int64_t inner = 1;
  for (std::size_t i = 2; i < shape.size(); ++i)
    inner *= shape[i];
  return inner;
}

void copyDevice(const KernelContext& ctx, Tensor& dst, const Tensor& src) {
  if (dst.bytes() > 0 && dst.rawData() != src.rawData()) {  // running statistics may be updated in place
    STRATA_CUDA_CHECK(
        cudaMemcpyAsync(dst.rawData(), src.rawData(), dst.bytes(), cudaMemcpyDeviceToDevice, streamOf(ctx)));
  }
}

void* outputOrNull(const KernelContext& ctx, std::size_t index) {
  return ctx.hasOutput(index) ? ctx.output(index).rawData() : nullptr;
}

class BatchNormKernel : public OpKernel {
 public:
  explicit BatchNormKernel(const KernelInit& init) {
    const TensorMeta& x = init.inputs.at(0).meta;
    dtype_ = x.dtype;
    const float epsilon = init.attrs.getFloat("epsilon", 1e-5f);
    const float momentum = init.attrs.getFloat("momentum", 0.9f);
    const bool f64 = dtype_ == DType::Float64;
    epsilon_ = f64 ? decimalOf(epsilon) : static_cast<double>(epsilon);
    momentum_ = f64 ? decimalOf(momentum) : static_cast<double>(momentum);
    // The ONNX attribute decides, as in the exported graph (an eval-mode export says 0 even when training).
    training_ = init.attrs.getInt("training_mode", 0) != 0;
    batch_ = x.shape.at(0);
    channels_ = x.shape.at(1);
    inner_ = innerSize(x.shape);
    empty_ = x.numel() == 0;
    if (empty_ || !training_ || batch_ * inner_ == 1)
      return;
    xDesc_.set(dtype_, cudnnDims(x.shape));
    STRATA_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(statsDesc_.get(), xDesc_.get(), CUDNN_BATCHNORM_SPATIAL));
  }

  void compute(KernelContext& ctx) override {
    if (empty_ || !training_) {
      if (!empty_) {
        nn::launchBatchNormApply(dtype_, ctx.input(0).rawData(), ctx.input(1).rawData(), ctx.input(2).rawData(),
                                 ctx.input(3).rawData(), ctx.input(4).rawData(), epsilon_, ctx.output(0).rawData(),
                                 batch_, channels_, inner_, streamOf(ctx));
      }
      // Inference (or no samples): the running statistics pass through; ONNX opset 14+ declares no such outputs in
      // inference mode, older graphs may still list them.
      for (std::size_t i = 1; i <= 2; ++i) {
        if (ctx.hasOutput(i))
          copyDevice(ctx, ctx.output(i), ctx.input(i + 2));
      }
      return;
    }
    const Device device = ctx.output(0).device();
    const cudaStream_t stream = streamOf(ctx);
    // Each statistic starts on a 256-byte boundary (cuDNN's per-channel kernels may load vectors).
    constexpr std::size_t kAlign = 256;
    const std::size_t statBytes =
        (static_cast<std::size_t>(channels_) * dtypeSize(dtype_) + kAlign - 1) / kAlign * kAlign;
    Tensor scratch = workspaceBytes(4 * statBytes, device);
    char* base = static_cast<char*>(scratch.rawData());
    void* batchMean = base;
    void* unbiasedVar = base + statBytes;
    void* savedMean = base + 2 * statBytes;
    void* savedInvStd = base + 3 * statBytes;
    const void* meanForUpdate = savedMean;
    const void* varForUpdate = unbiasedVar;
    if (batch_ * inner_ == 1) {
      // One value per channel: x itself is the mean ([1, C, 1...] is laid out as [C]) and the variance is 0.
      STRATA_CUDA_CHECK(cudaMemsetAsync(unbiasedVar, 0, statBytes, stream));
      nn::launchBatchNormApply(dtype_, ctx.input(0).rawData(), ctx.input(1).rawData(), ctx.input(2).rawData(),
                               ctx.input(0).rawData(), unbiasedVar, epsilon_, ctx.output(0).rawData(), batch_,
                               channels_, inner_, stream);
      meanForUpdate = ctx.input(0).rawData();
      varForUpdate = nullptr;
    } else {
      // Note [Batch-norm running statistics]: factor 1 over zeroed buffers leaves the batch statistics in them.
      STRATA_CUDA_CHECK(cudaMemsetAsync(base, 0, 2 * statBytes, stream));
      const CudnnScalars scalars(dtype_);
      STRATA_CUDNN_CHECK(cudnnBatchNormalizationForwardTraining(
          contextOf(ctx).cudnn, CUDNN_BATCHNORM_SPATIAL, scalars.one(), scalars.zero(), xDesc_.get(),
          ctx.input(0).rawData(), xDesc_.get(), ctx.output(0).rawData(), statsDesc_.get(), ctx.input(1).rawData(),
          ctx.input(2).rawData(), 1.0, batchMean, unbiasedVar, epsilon_, savedMean, savedInvStd));
    }
    nn::launchBatchNormRunningStats(dtype_, ctx.input(3).rawData(), ctx.input(4).rawData(), meanForUpdate, varForUpdate,
                                    momentum_, batch_ * inner_, outputOrNull(ctx, 1), outputOrNull(ctx, 2),
                                    outputOrNull(ctx, 3), outputOrNull(ctx, 4), channels_, stream);
  }

 private:
  DType dtype_ = DType::Float32;
  double epsilon_ = 1e-5;
  double momentum_ = 0.9;
  bool training_ = false;
  bool empty_ = false;
  std::int64_t batch_ = 0, channels_ = 0, inner_ = 0;
  TensorDescriptor xDesc_, statsDesc_;
};

// BatchNormalizationGrad: (dY, X, scale [, mean, var]) -> (dX, dScale, dB).
class BatchNormGradKernel : public OpKernel {
 public:
  explicit BatchNormGradKernel(const KernelInit& init) {
    training_ = init.attrs.getInt("training_mode", 0) != 0;
    dtype_ = init.inputs.at(0).meta.dtype;
    const float epsilon = init.attrs.getFloat("epsilon", 1e-5f);
    // Each dtype reads epsilon as its forward kernel does.
    epsilon_ = dtype_ == DType::Float64 ? decimalOf(epsilon) : static_cast<double>(epsilon);
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(1);
    const std::int64_t batch = x.dim(0), channels = x.dim(1);
    const std::int64_t inner = innerSize(x.shape());
    if (channels == 0)
      return;
    Tensor workspace = workspaceBytes(nn::batchNormGradWorkspaceBytes(dtype_, channels, batch * inner), x.device());
    nn::launchBatchNormGrad(dtype_, training_, epsilon_, ctx.input(0).rawData(), x.rawData(), ctx.input(2).rawData(),
                            training_ ? nullptr : ctx.input(3).rawData(), training_ ? nullptr : ctx.input(4).rawData(),
                            outputOrNull(ctx, 0), outputOrNull(ctx, 1), outputOrNull(ctx, 2), batch, channels, inner,
                            workspacePointer(workspace), streamOf(ctx));
  }

 private:
  bool training_ = false;
  DType dtype_ = DType::Float32;
  double epsilon_ = 1e-5;
};

}  // namespace

void registerCudnnNormKernels(OpRegistry& registry) {
  addCudaKernelFactory(registry, "BatchNormalization", [](const KernelInit& init) -> std::unique_ptr<OpKernel> {
    return std::make_unique<BatchNormKernel>(init);
  });
  addCudaKernelFactory(registry, "BatchNormalizationGrad", [](const KernelInit& init) -> std::unique_ptr<OpKernel> {
    return std::make_unique<BatchNormGradKernel>(init);
  });
  addCudaKernelFactory(registry, "InstanceNormalization", [](const KernelInit& init) -> std::unique_ptr<OpKernel> {
    const float epsilon = init.attrs.getFloat("epsilon", 1e-5f);
    return makeFunctionKernel([epsilon](KernelContext& ctx) {
      const Tensor& x = ctx.input(0);
      const std::int64_t planes = x.dim(0) * x.dim(1);
      const std::int64_t size = planes == 0 ? 0 : x.numel() / planes;
      nn::launchInstanceNorm(x.data<float>(), ctx.input(1).data<float>(), ctx.input(2).data<float>(), epsilon,
                             ctx.output(0).data<float>(), planes, x.dim(1), size, streamOf(ctx));
    });
  });
}

}  // namespace strata::cuda
