// BatchNormalization (training mode on cuDNN, inference mode as one elementwise kernel), BatchNormalizationGrad and
// InstanceNormalization, with the CPU kernels' semantics (dnnl_batchnorm.cpp, grad_nn_norm.cpp).
//
// Note [Batch-norm running statistics]: ONNX updates running = input * momentum + batch * (1 - momentum) with the
// biased batch variance; cuDNN's exponentialAverageFactor weighs the batch instead, and its running variance is the
// unbiased one. So cuDNN runs with factor 1 into zeroed scratch (its "running" outputs are then the batch mean and
// the unbiased batch variance), and a small kernel applies ONNX's update, turning the variance back into the biased
// one. A single value per channel (count 1) has no unbiased variance: that case skips cuDNN (mean = x, var = 0).
//
// cuDNN's training forward is not the only one: where cuDNN refuses the call (CUDNN_STATUS_NOT_SUPPORTED*, say a
// dtype or layout its build lacks), and for sizes PyTorch keeps off it (more than 880801 samples, 2^31 elements or
// more), the statistics come from Strata's per-channel sums (the gradient's, in double) and the apply kernel
// normalises; the running statistics are updated the same way after either.
//
// Mixed precision: X, Y, dY and dX may be float16 or bfloat16 while scale, B, the statistics and their gradients
// stay float32, as in PyTorch autocast over cuDNN (nn::checkBatchNormDTypes lists the pairs).
//
// Channels-last (Note [Channels-last]) runs natively except the float64 training forward: cuDNN gets NHWC
// descriptors and, in persistent mode through the Ex call, its NHWC kernels (PyTorch's channels-last path; the
// statistics it returns are those of the plain call, so the note above holds); the per-channel kernels read
// [N, spatial..., C] as [N * spatial, C, 1], and the gradient has a channels-last reduction.

#include <cstdlib>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include "cuda_context.h"
#include "cuda_stream.h"
#include "cudnn_common.h"
#include "kernels/nn_kernels.h"
#include "strata/channels_last.h"

namespace strata::cuda {

void registerCudnnNormKernels(OpRegistry& registry);

namespace {

// The double a float attribute most likely stands for (its shortest decimal form), as the CPU's float64 kernels
// read epsilon and momentum.
double decimalOf(float value) {
  return std::strtod(fmt::format("{}", value).c_str(), nullptr);
}

// The product of the spatial dims of [N, C, spatial...], or with channelsLast of [N, spatial..., C].
std::int64_t innerSize(const Shape& shape, bool channelsLast) {
  std::int64_t inner = 1;
  for (std::size_t i = channelsLast ? 1 : 2; i + (channelsLast ? 1 : 0) < shape.size(); ++i)
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

// Checks the (data, parameter) dtype pair, and that the inputs in `dataSlots` and `paramSlots` and output 0 (the
// data result) have them: the kernels read raw pointers by these dtypes.
void checkDTypes(const KernelInit& init, const char* op, DType xDtype, DType paramDtype,
                 std::initializer_list<std::size_t> dataSlots, std::initializer_list<std::size_t> paramSlots) {
  nn::checkBatchNormDTypes(op, xDtype, paramDtype);
  const auto check = [&](std::size_t i, DType want) {
    if (i < init.inputs.size() && init.inputs[i].present && init.inputs[i].meta.dtype != want) {
      fail("{} on CUDA: input {} is {}, expected {} (X is {}, parameters {})", op, i,
           dtypeName(init.inputs[i].meta.dtype), dtypeName(want), dtypeName(xDtype), dtypeName(paramDtype));
    }
  };
  for (std::size_t i : dataSlots)
    check(i, xDtype);
  for (std::size_t i : paramSlots)
    check(i, paramDtype);
  STRATA_CHECK(init.outputs.empty() || init.outputs[0].dtype == xDtype,
               "{} on CUDA: output 0 is {}, expected {} like X (parameters {})", op, dtypeName(init.outputs[0].dtype),
               dtypeName(xDtype), dtypeName(paramDtype));
}

class BatchNormKernel : public OpKernel {
 public:
  explicit BatchNormKernel(const KernelInit& init) {
    const TensorMeta& x = init.inputs.at(0).meta;
    xDtype_ = x.dtype;
    // scale (input 1) sets the dtype of every per-channel tensor: float32 beside 16-bit X.
    paramDtype_ = init.inputs.at(1).meta.dtype;
    checkDTypes(init, "BatchNormalization", xDtype_, paramDtype_, {}, {2, 3, 4});
    const float epsilon = init.attrs.getFloat("epsilon", 1e-5f);
    const float momentum = init.attrs.getFloat("momentum", 0.9f);
    const bool f64 = paramDtype_ == DType::Float64;
    epsilon_ = f64 ? decimalOf(epsilon) : static_cast<double>(epsilon);
    momentum_ = f64 ? decimalOf(momentum) : static_cast<double>(momentum);
    // The ONNX attribute decides, as in the exported graph (an eval-mode export says 0 even when training).
    training_ = init.attrs.getInt("training_mode", 0) != 0;
    const bool channelsLast = channelsLastOf(init.attrs);
    const Shape dims = channelsLast ? toChannelsFirst(x.shape) : x.shape;  // [N, C, spatial...]
    batch_ = dims.at(0);
    channels_ = dims.at(1);
    inner_ = innerSize(dims, false);
    if (channelsLast) {  // the per-channel kernels' view of [N, spatial..., C]
      batch_ *= inner_;
      inner_ = 1;
    }
    empty_ = x.numel() == 0;
    channelsLast_ = channelsLast;
    if (empty_ || !training_ || batch_ * inner_ == 1)
      return;
    // PyTorch's limits for cuDNN's training forward (its _select_batch_norm_backend); STRATA_CUDA_BATCHNORM=strata
    // chooses Strata's kernels for every size (to compare the two, and to test them on a GPU).
    const char* choice = std::getenv("STRATA_CUDA_BATCHNORM");
    ownStatistics_ = dims.at(0) > 880801 || x.numel() >= std::int64_t{0x7fffffff} ||
                     (choice != nullptr && std::string_view(choice) == "strata");
    if (ownStatistics_)
      return;
    // X and Y share one descriptor; for 16-bit X cuDNN derives a float statistics descriptor.
    xDesc_.set(xDtype_, cudnnDims(dims), channelsLast);
    STRATA_CUDNN_CHECK(cudnnDeriveBNTensorDescriptor(statsDesc_.get(), xDesc_.get(), CUDNN_BATCHNORM_SPATIAL));
    persistent_ = channelsLast;
  }

  void compute(KernelContext& ctx) override {
    if (empty_ || !training_) {
      if (!empty_) {
        nn::launchBatchNormApply(xDtype_, paramDtype_, ctx.input(0).rawData(), ctx.input(1).rawData(),
                                 ctx.input(2).rawData(), ctx.input(3).rawData(), ctx.input(4).rawData(), epsilon_,
                                 ctx.output(0).rawData(), batch_, channels_, inner_, streamOf(ctx));
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
        (static_cast<std::size_t>(channels_) * dtypeSize(paramDtype_) + kAlign - 1) / kAlign * kAlign;
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
      const void* xMean = ctx.input(0).rawData();
      if (xDtype_ != paramDtype_) {
        // 16-bit x: the statistics are float32, and widening is exact.
        nn::launchWidenToFloat(xDtype_, xMean, static_cast<float*>(batchMean), channels_, stream);
        xMean = batchMean;
      }
      STRATA_CUDA_CHECK(cudaMemsetAsync(unbiasedVar, 0, statBytes, stream));
      nn::launchBatchNormApply(xDtype_, paramDtype_, ctx.input(0).rawData(), ctx.input(1).rawData(),
                               ctx.input(2).rawData(), xMean, unbiasedVar, epsilon_, ctx.output(0).rawData(), batch_,
                               channels_, inner_, stream);
      meanForUpdate = xMean;
      varForUpdate = nullptr;
    } else {
      if (!ownStatistics_) {
        // Note [Batch-norm running statistics]: factor 1 over zeroed buffers leaves the batch statistics in them.
        STRATA_CUDA_CHECK(cudaMemsetAsync(base, 0, 2 * statBytes, stream));
        ownStatistics_ = !cudnnForward(ctx, batchMean, unbiasedVar, savedMean, savedInvStd);
      }
      if (ownStatistics_) {
        void* biasedVar = savedMean;  // scratch here
        Tensor sums =
            workspaceBytes(nn::batchNormStatsWorkspaceBytes(batch_, channels_, inner_, channelsLast_), device);
        nn::launchBatchNormBatchStats(xDtype_, paramDtype_, ctx.input(0).rawData(), batchMean, biasedVar, unbiasedVar,
                                      batch_, channels_, inner_, channelsLast_, workspacePointer(sums), stream);
        nn::launchBatchNormApply(xDtype_, paramDtype_, ctx.input(0).rawData(), ctx.input(1).rawData(),
                                 ctx.input(2).rawData(), batchMean, biasedVar, epsilon_, ctx.output(0).rawData(),
                                 batch_, channels_, inner_, stream);
        meanForUpdate = batchMean;
      }
    }
    nn::launchBatchNormRunningStats(paramDtype_, ctx.input(3).rawData(), ctx.input(4).rawData(), meanForUpdate,
                                    varForUpdate, momentum_, batch_ * inner_, outputOrNull(ctx, 1),
                                    outputOrNull(ctx, 2), outputOrNull(ctx, 3), outputOrNull(ctx, 4), channels_,
                                    stream);
  }

 private:
  // cuDNN's training forward with exponentialAverageFactor 1 (savedMean / savedInvStd are scratch: the gradient
  // recomputes the statistics). False where cuDNN does not support the problem (nothing was launched then).
  bool cudnnForward(const KernelContext& ctx, void* batchMean, void* unbiasedVar, void* savedMean, void* savedInvStd) {
    const cudnnHandle_t handle = contextOf(ctx).cudnn;
    const CudnnScalars scalars(paramDtype_);  // float unless float64: cuDNN's compute type
    const void* x = ctx.input(0).rawData();
    void* y = ctx.output(0).rawData();
    if (persistent_) {
      constexpr cudnnBatchNormMode_t kMode = CUDNN_BATCHNORM_SPATIAL_PERSISTENT;
      constexpr cudnnBatchNormOps_t kOps = CUDNN_BATCHNORM_OPS_BN;
      std::size_t workspaceSize = 0, reserveSize = 0;
      cudnnStatus_t status = cudnnGetBatchNormalizationForwardTrainingExWorkspaceSize(
          handle, kMode, kOps, xDesc_.get(), xDesc_.get(), xDesc_.get(), statsDesc_.get(), nullptr, &workspaceSize);
      if (status == CUDNN_STATUS_SUCCESS) {
        status = cudnnGetBatchNormalizationTrainingExReserveSpaceSize(handle, kMode, kOps, nullptr, xDesc_.get(),
                                                                      &reserveSize);
      }
      if (status == CUDNN_STATUS_SUCCESS) {
        const Device device = ctx.output(0).device();
        Tensor workspace = workspaceBytes(workspaceSize, device);
        Tensor reserve = workspaceBytes(reserveSize, device);  // read only by cuDNN's backward, which we don't run
        status = cudnnBatchNormalizationForwardTrainingEx(
            handle, kMode, kOps, scalars.one(), scalars.zero(), xDesc_.get(), x, nullptr, nullptr, xDesc_.get(), y,
            statsDesc_.get(), ctx.input(1).rawData(), ctx.input(2).rawData(), 1.0, batchMean, unbiasedVar, epsilon_,
            savedMean, savedInvStd, nullptr, workspacePointer(workspace), workspaceSize, workspacePointer(reserve),
            reserveSize);
      }
      if (status == CUDNN_STATUS_SUCCESS)
        return true;
      // cuDNN declined (before launching anything: the zeroed statistics are intact); the plain call, from now on.
      persistent_ = false;
    }
    const cudnnStatus_t status = cudnnBatchNormalizationForwardTraining(
        handle, CUDNN_BATCHNORM_SPATIAL, scalars.one(), scalars.zero(), xDesc_.get(), x, xDesc_.get(), y,
        statsDesc_.get(), ctx.input(1).rawData(), ctx.input(2).rawData(), 1.0, batchMean, unbiasedVar, epsilon_,
        savedMean, savedInvStd);
    if (CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED) {
      spdlog::debug("BatchNormalization on CUDA: cuDNN does not support {} X ({}); Strata's kernels take it",
                    dtypeName(xDtype_), cudnnGetErrorString(status));
      return false;
    }
    STRATA_CUDNN_CHECK(status);
    return true;
  }

  DType xDtype_ = DType::Float32;      // X and Y
  DType paramDtype_ = DType::Float32;  // scale, B and the statistics
  double epsilon_ = 1e-5;
  double momentum_ = 0.9;
  bool training_ = false;
  bool empty_ = false;
  bool persistent_ = false;     // channels-last: try CUDNN_BATCHNORM_SPATIAL_PERSISTENT first
  bool ownStatistics_ = false;  // Strata's kernels instead of cuDNN's (see the top of this file)
  bool channelsLast_ = false;
  std::int64_t batch_ = 0, channels_ = 0, inner_ = 0;  // X as [batch, channels, inner] (see above)
  TensorDescriptor xDesc_, statsDesc_;
};

// BatchNormalizationGrad: (dY, X, scale [, mean, var]) -> (dX, dScale, dB).
class BatchNormGradKernel : public OpKernel {
 public:
  explicit BatchNormGradKernel(const KernelInit& init) {
    training_ = init.attrs.getInt("training_mode", 0) != 0;
    channelsLast_ = channelsLastOf(init.attrs);
    // dY (input 0) sets the data dtype, X (input 1) must match; scale (input 2) sets the parameters'.
    xDtype_ = init.inputs.at(0).meta.dtype;
    paramDtype_ = init.inputs.at(2).meta.dtype;
    checkDTypes(init, "BatchNormalizationGrad", xDtype_, paramDtype_, {1}, {3, 4});
    const float epsilon = init.attrs.getFloat("epsilon", 1e-5f);
    // Each dtype reads epsilon as its forward kernel does.
    epsilon_ = paramDtype_ == DType::Float64 ? decimalOf(epsilon) : static_cast<double>(epsilon);
  }

  void compute(KernelContext& ctx) override {
    const Tensor& x = ctx.input(1);
    const Shape& shape = x.shape();
    const std::int64_t batch = shape.at(0), channels = channelsLast_ ? shape.back() : shape.at(1);
    const std::int64_t inner = innerSize(shape, channelsLast_);
    if (channels == 0)
      return;
    Tensor workspace =
        workspaceBytes(nn::batchNormGradWorkspaceBytes(paramDtype_, batch, channels, inner, channelsLast_), x.device());
    nn::launchBatchNormGrad(xDtype_, paramDtype_, training_, epsilon_, ctx.input(0).rawData(), x.rawData(),
                            ctx.input(2).rawData(), training_ ? nullptr : ctx.input(3).rawData(),
                            training_ ? nullptr : ctx.input(4).rawData(), outputOrNull(ctx, 0), outputOrNull(ctx, 1),
                            outputOrNull(ctx, 2), batch, channels, inner, channelsLast_, workspacePointer(workspace),
                            streamOf(ctx));
  }

 private:
  bool training_ = false;
  bool channelsLast_ = false;          // dY, X and dX are [N, spatial..., C]
  DType xDtype_ = DType::Float32;      // dY, X and dX
  DType paramDtype_ = DType::Float32;  // scale, mean, var, dScale and dB
  double epsilon_ = 1e-5;
};

// Note [Fused ReLU] (core/backend/cpu/batch_norm_loops.h) is a CPU plan's fusion; a CUDA kernel must not ignore it.
void refuseFusedRelu(const KernelInit& init) {
  STRATA_CHECK(init.attrs.getInt("fused_relu", 0) == 0,
               "batch norm with a fused ReLU runs on the CPU only (the CUDA plan keeps the Relu node)");
}

}  // namespace

void registerCudnnNormKernels(OpRegistry& registry) {
  addCudaKernelFactory(
      registry, "BatchNormalization",
      [](const KernelInit& init) -> std::unique_ptr<OpKernel> {
        refuseFusedRelu(init);
        return std::make_unique<BatchNormKernel>(init);
      },
      [](const KernelInit& init) {
        // Channels-last cuDNN batch norm is for the float types of tensor-core training; the float64 training
        // forward (reference checks) keeps the channels-first path.
        const bool training = init.attrs.getInt("training_mode", 0) != 0;
        return !training ||
               (init.inputs.at(0).meta.dtype != DType::Float64 && init.inputs.at(0).meta.shape.size() <= 5);
      });
  addCudaKernelFactory(
      registry, "BatchNormalizationGrad",
      [](const KernelInit& init) -> std::unique_ptr<OpKernel> {
        refuseFusedRelu(init);
        return std::make_unique<BatchNormGradKernel>(init);
      },
      [](const KernelInit&) { return true; });
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
