// MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool and their gradients (MaxPoolGrad, AveragePoolGrad).
// The forward runs on cuDNN where cuDNN computes exactly what the CPU does (float32, no dilation, a
// symmetric pad smaller than the window that yields the output size, no Indices output); everything else, and
// both gradients, run the direct kernels of kernels/nn_pool.cu, which follow the CPU's loops rule for rule
// (dnnl_pool.cpp, grad_nn_pool.cpp).
//
// Channels-last MaxPool, AveragePool and their gradients (Note [Channels-last]) run natively on both paths: cuDNN
// with NHWC descriptors, the direct kernels with PoolWindow::channels. Only a MaxPool with the Indices output
// (which channels-last nodes cannot have) is left to the transposing adapter.

#include <memory>
#include <string>
#include <vector>

#include "../cpu/dnnl_context.h"
#include "cuda_context.h"
#include "cuda_stream.h"
#include "cudnn_common.h"
#include "kernels/nn_kernels.h"
#include "strata/channels_last.h"

namespace strata::cuda {

void registerCudnnPoolKernels(OpRegistry& registry);

namespace {

std::vector<std::int64_t> spatialOf(const Shape& shape) {
  return {shape.begin() + 2, shape.end()};
}

// The window promoted to 3 spatial dims for the direct kernels.
nn::PoolWindow promote(const cpu::WindowGeometry& g, const Shape& x, const std::string& nodeName) {
  const std::size_t n = g.kernel.size();
  STRATA_CHECK(n >= 1 && n <= 3, "{}: pooling on CUDA takes 1 to 3 spatial dims, got {}", nodeName, n);
  nn::PoolWindow w;
  const std::size_t lead = 3 - n;
  std::int64_t colStride = 1;  // column-major spatial strides, for MaxPool's storage_order = 1 indices
  for (std::size_t j = 0; j < n; ++j) {
    const std::size_t i = lead + j;
    w.in[i] = x[2 + j];
    w.out[i] = g.output[j];
    w.kernel[i] = g.kernel[j];
    w.stride[i] = g.strides[j];
    w.dilation[i] = g.dilations[j];
    w.padBegin[i] = g.padBegin[j];
    w.padEnd[i] = g.padEnd[j];
    w.colStride[i] = colStride;
    colStride *= x[2 + j];
  }
  return w;
}

class PoolKernel : public OpKernel {
 public:
  PoolKernel(const std::string& opType, const KernelInit& init) {
    const TensorMeta& meta = init.inputs.at(0).meta;
    dtype_ = meta.dtype;
    const bool global = opType == "GlobalAveragePool" || opType == "GlobalMaxPool";
    isMax_ = opType == "MaxPool" || opType == "GlobalMaxPool";
    const bool channelsLast = !global && channelsLastOf(init.attrs);
    const Shape x = channelsLast ? toChannelsFirst(meta.shape) : meta.shape;  // [N, C, spatial...]
    const std::vector<std::int64_t> spatial = spatialOf(x);
    cpu::WindowGeometry g;
    if (global) {
      const Attributes none;
      g = cpu::resolveWindow(none, spatial, spatial, false);
    } else {
      countIncludePad_ = init.attrs.getInt("count_include_pad", 0) != 0;
      columnMajorIndices_ = init.attrs.getInt("storage_order", 0) == 1;
      g = cpu::resolveWindow(init.attrs, spatial, init.attrs.getInts("kernel_shape"),
                             init.attrs.getInt("ceil_mode", 0) != 0);
    }
    Shape y{x[0], x[1]};
    y.insert(y.end(), g.output.begin(), g.output.end());
    empty_ = numElements(y) == 0;
    if (empty_)
      return;
    window_ = promote(g, x, init.nodeName);
    window_.channels = channelsLast ? x[1] : 0;
    planes_ = x[0] * x[1];
    useCudnn_ = cudnnExpresses(g, spatial) && setUpCudnn(g, x, y, channelsLast);
  }

  void compute(KernelContext& ctx) override {
    if (empty_)
      return;
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    std::int64_t* indices = ctx.hasOutput(1) ? ctx.output(1).data<std::int64_t>() : nullptr;
    if (useCudnn_ && indices == nullptr) {
      const CudnnScalars scalars(dtype_);
      STRATA_CUDNN_CHECK(cudnnPoolingForward(contextOf(ctx).cudnn, pooling_.get(), scalars.one(), xDesc_.get(),
                                             x.rawData(), scalars.zero(), yDesc_.get(), y.rawData()));
      return;
    }
    nn::launchPoolForward(dtype_, isMax_, countIncludePad_, window_, planes_, x.rawData(), y.rawData(), indices,
                          columnMajorIndices_, streamOf(ctx));
  }

 private:
  // Whether cuDNN's pooling computes the CPU's result: float32, no dilation, and per dim a symmetric pad smaller than
  // the window whose floor-mode output size is the expected one (so no window reaches past the padding, none lies
  // wholly in it, and count_include_pad's divisor is the window size).
  bool cudnnExpresses(const cpu::WindowGeometry& g, const std::vector<std::int64_t>& in) const {
    if (dtype_ != DType::Float32)  // float64 exists for reference checks: the direct kernel, in double throughout
      return false;
    for (std::size_t i = 0; i < g.kernel.size(); ++i) {
      const std::int64_t pad = g.padBegin[i];
      if (g.dilations[i] != 1 || pad >= g.kernel[i])
        return false;
      if (countIncludePad_ && g.padEnd[i] != pad)
        return false;
      const std::int64_t span = in[i] + 2 * pad - g.kernel[i];
      if (span < 0 || span / g.strides[i] + 1 != g.output[i])
        return false;
    }
    return true;
  }

  // Descriptors for cuDNN (x and y in logical [N, C, spatial...] order); false (the direct kernel then runs) when
  // cuDNN declines the geometry.
  bool setUpCudnn(const cpu::WindowGeometry& g, const Shape& x, const Shape& y, bool channelsLast) {
    std::vector<std::int64_t> window = g.kernel, pads = g.padBegin, strides = g.strides;
    if (window.size() == 1) {  // 1-D runs as 2-D over a height of 1
      window.insert(window.begin(), 1);
      pads.insert(pads.begin(), 0);
      strides.insert(strides.begin(), 1);
    }
    const std::vector<int> windowInts = toCudnnInts(window, "pooling window");
    const std::vector<int> padInts = toCudnnInts(pads, "pooling pads");
    const std::vector<int> strideInts = toCudnnInts(strides, "pooling strides");
    const cudnnPoolingMode_t mode = isMax_             ? CUDNN_POOLING_MAX
                                    : countIncludePad_ ? CUDNN_POOLING_AVERAGE_COUNT_INCLUDE_PADDING
                                                       : CUDNN_POOLING_AVERAGE_COUNT_EXCLUDE_PADDING;
    if (cudnnSetPoolingNdDescriptor(pooling_.get(), mode, CUDNN_NOT_PROPAGATE_NAN, static_cast<int>(windowInts.size()),
                                    windowInts.data(), padInts.data(), strideInts.data()) != CUDNN_STATUS_SUCCESS) {
      return false;
    }
    const Shape xDims = cudnnDims(x);
    const Shape yDims = cudnnDims(y);
    xDesc_.set(dtype_, xDims, channelsLast);
    yDesc_.set(dtype_, yDims, channelsLast);
    std::vector<int> out(yDims.size());
    if (cudnnGetPoolingNdForwardOutputDim(pooling_.get(), xDesc_.get(), static_cast<int>(out.size()), out.data()) !=
        CUDNN_STATUS_SUCCESS) {
      return false;
    }
    return std::vector<std::int64_t>(out.begin(), out.end()) == yDims;
  }

  DType dtype_ = DType::Float32;
  bool isMax_ = false;
  bool countIncludePad_ = false;
  bool columnMajorIndices_ = false;
  bool empty_ = false;
  bool useCudnn_ = false;
  std::int64_t planes_ = 0;
  nn::PoolWindow window_;
  PoolingDescriptor pooling_;
  TensorDescriptor xDesc_, yDesc_;
};

// MaxPoolGrad (dY, X -> dX) and AveragePoolGrad (dY -> dX, X's shape in the input_shape attribute).
class PoolGradKernel : public OpKernel {
 public:
  PoolGradKernel(bool isMax, const KernelInit& init) : isMax_(isMax) {
    const TensorMeta& dy = init.inputs.at(0).meta;
    dtype_ = dy.dtype;
    const bool channelsLast = channelsLastOf(init.attrs);
    Shape x = isMax ? init.inputs.at(1).meta.shape : Shape(init.attrs.getInts("input_shape"));
    if (channelsLast)
      x = toChannelsFirst(x);  // [N, C, spatial...]
    countIncludePad_ = init.attrs.getInt("count_include_pad", 0) != 0;
    const cpu::WindowGeometry g = cpu::resolveWindow(init.attrs, spatialOf(x), init.attrs.getInts("kernel_shape"),
                                                     init.attrs.getInt("ceil_mode", 0) != 0);
    window_ = promote(g, x, init.nodeName);
    window_.channels = channelsLast ? x[1] : 0;
    planes_ = x[0] * x[1];
  }

  void compute(KernelContext& ctx) override {
    Tensor& dx = ctx.output(0);
    if (dx.numel() == 0)
      return;
    const cudaStream_t stream = streamOf(ctx);
    if (window_.outVolume() == 0) {
      STRATA_CUDA_CHECK(cudaMemsetAsync(dx.rawData(), 0, dx.bytes(), stream));
      return;
    }
    if (isMax_) {
      Tensor argmax =
          Tensor::empty(DType::Int64, {planes_ * window_.outVolume()}, MemoryCategory::Workspace, dx.device());
      nn::launchMaxPoolGrad(dtype_, window_, planes_, ctx.input(0).rawData(), ctx.input(1).rawData(),
                            argmax.data<std::int64_t>(), dx.rawData(), stream);
    } else {
      nn::launchAveragePoolGrad(dtype_, countIncludePad_, window_, planes_, ctx.input(0).rawData(), dx.rawData(),
                                stream);
    }
  }

 private:
  bool isMax_;
  bool countIncludePad_ = false;
  DType dtype_ = DType::Float32;
  std::int64_t planes_ = 0;
  nn::PoolWindow window_;
};

}  // namespace

void registerCudnnPoolKernels(OpRegistry& registry) {
  // Channels-last nodes: native but for MaxPool's Indices (counted in channels-first positions).
  const auto native = [](const KernelInit& init) { return init.outputs.size() == 1; };
  for (const char* type : {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}) {
    const std::string opType = type;
    addCudaKernelFactory(
        registry, opType,
        [opType](const KernelInit& init) -> std::unique_ptr<OpKernel> {
          return std::make_unique<PoolKernel>(opType, init);
        },
        native);  // the Global pools are not layout-aware: never asked
  }
  addCudaKernelFactory(
      registry, "MaxPoolGrad",
      [](const KernelInit& init) -> std::unique_ptr<OpKernel> { return std::make_unique<PoolGradKernel>(true, init); },
      native);
  addCudaKernelFactory(
      registry, "AveragePoolGrad",
      [](const KernelInit& init) -> std::unique_ptr<OpKernel> { return std::make_unique<PoolGradKernel>(false, init); },
      native);
}

}  // namespace strata::cuda
