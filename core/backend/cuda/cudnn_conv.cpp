// Conv, ConvTranspose and the convolution gradients (ConvGradInput, ConvGradWeight, ConvGrad) on cuDNN, with the
// geometry resolved exactly as the CPU kernels resolve it (dnnl_conv.cpp, grad_nn_conv.cpp).
//
// Note [Asymmetric conv padding]: cuDNN pads both ends of a spatial dim by the same amount q. ONNX's windows start
// at o * stride - padBegin; whenever a symmetric pad of padBegin gives the same output size, cuDNN runs the
// convolution as it is. Otherwise X is first copied into a workspace tensor padded (or cropped) at each end so that
// a symmetric q reproduces exactly the windows ONNX asks for, and the data gradient is computed for that copy and
// cropped back. ConvTranspose is the data gradient of the convolution whose output is its input, so it takes the
// same path (output_padding and output_shape become end pads of that convolution, possibly negative).
//
// Channels-last Conv, ConvGradInput, ConvGradWeight and ConvGrad (Note [Channels-last]) run natively with NHWC
// descriptors and the NHWC (KRSC) filter format, the format of cuDNN's tensor-core kernels, when cuDNN's symmetric
// padding expresses them and the dtype is float32, float16 or bfloat16; the padded copy is channels-first only, so
// the transposing adapter runs the rest (nativeChannelsLast below).

#include <algorithm>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "../cpu/conv_geometry.h"
#include "../cpu/dnnl_context.h"
#include "cuda_context.h"
#include "cuda_ops.h"
#include "cuda_stream.h"
#include "cudnn_common.h"
#include "cudnn_conv_algo_cache.h"
#include "kernels/nn_kernels.h"
#include "strata/channels_last.h"

namespace strata::cuda {

void registerCudnnPoolKernels(OpRegistry& registry);  // cudnn_pool.cpp
void registerCudnnNormKernels(OpRegistry& registry);  // cudnn_batchnorm.cpp

namespace {

using cpu::ConvGradMode;
using cpu::ConvGradOperands;
using cpu::kernelShapeOf;
using cpu::spatialOf;

// A forward convolution x [N, C, in...] * w [M, C / group, k...] -> y [N, M, out...] in ONNX terms: windows start
// at o * stride - padBegin; the end padding is whatever makes y's size. The shapes are in that logical order
// whatever the layout; with channelsLast the tensors are [N, spatial..., C] and w [M, k..., C / group] in memory.
struct ConvShape {
  DType dtype = DType::Float32;
  std::int64_t group = 1;
  bool channelsLast = false;
  Shape x, w, y;
  std::vector<std::int64_t> strides, dilations, padBegin;
};

// A node's operand shape in logical [N, C, spatial...] order.
Shape logicalShape(const Shape& shape, bool channelsLast) {
  return channelsLast ? toChannelsFirst(shape) : shape;
}

// Fills s's window from the node's attributes, checking it against y's spatial dims.
void resolveConvWindow(const KernelInit& init, ConvShape& s) {
  const cpu::WindowGeometry g = cpu::resolveWindow(init.attrs, spatialOf(s.x), kernelShapeOf(init.attrs, s.w), false);
  STRATA_CHECK(Shape(g.output.begin(), g.output.end()) == spatialOf(s.y),
               "{}: the convolution output {} disagrees with the window's {}", init.nodeName, shapeToString(s.y),
               shapeToString(g.output));
  s.strides = g.strides;
  s.dilations = g.dilations;
  s.padBegin = g.padBegin;
}

// Conv: x, w [, bias] -> y.
ConvShape convShapeOf(const KernelInit& init) {
  ConvShape s;
  s.dtype = init.inputs.at(0).meta.dtype;
  s.group = init.attrs.getInt("group", 1);
  s.channelsLast = channelsLastOf(init.attrs);
  s.x = logicalShape(init.inputs.at(0).meta.shape, s.channelsLast);
  s.w = logicalShape(init.inputs.at(1).meta.shape, s.channelsLast);
  s.y = logicalShape(init.outputs.at(0).shape, s.channelsLast);
  resolveConvWindow(init, s);
  return s;
}

// ConvGradInput, ConvGradWeight, ConvGrad: the convolution whose dY is input 0 (X and W as `io` found them).
ConvShape convGradShapeOf(const KernelInit& init, const cpu::ConvGradOperands& io) {
  ConvShape s;
  s.dtype = init.inputs.at(0).meta.dtype;
  s.group = init.attrs.getInt("group", 1);
  s.channelsLast = channelsLastOf(init.attrs);
  s.x = logicalShape(io.x, s.channelsLast);
  s.w = logicalShape(io.w, s.channelsLast);
  s.y = logicalShape(init.inputs.at(0).meta.shape, s.channelsLast);
  resolveConvWindow(init, s);
  return s;
}

// Whether cuDNN's symmetric pad of padBegin gives the windows ONNX asks for along spatial dim i.
bool symmetricAlong(const ConvShape& s, std::size_t i) {
  const std::int64_t extent = (s.w[2 + i] - 1) * s.dilations[i] + 1;
  const std::int64_t span = s.x[2 + i] + 2 * s.padBegin[i] - extent;
  return span >= 0 && span / s.strides[i] + 1 == s.y[2 + i];
}

// Whether ConvPlan runs a channels-last convolution itself: cuDNN's NHWC kernels for the float types of tensor-core
// training (float64 stays channels-first) and no padded copy (Note [Asymmetric conv padding]).
bool nativeChannelsLast(const ConvShape& s) {
  const std::size_t n = s.x.size() - 2;
  if (s.dtype == DType::Float64 || n < 1 || n > 3)
    return false;
  for (std::size_t i = 0; i < n; ++i) {
    if (s.padBegin[i] < 0 || !symmetricAlong(s, i))
      return false;
  }
  return true;
}

std::string joined(const std::vector<std::int64_t>& v) {
  return shapeToString(v);
}

std::size_t alignmentOf(const void* p) {
  const auto address = reinterpret_cast<std::uintptr_t>(p);
  std::size_t alignment = 1;
  while (alignment < 256 && address % (alignment * 2) == 0)
    alignment *= 2;
  return alignment;
}

Device deviceOf(const KernelContext& ctx) {
  STRATA_CHECK(ctx.stream != nullptr, "a CUDA kernel was run without a stream");
  return ctx.stream->device();
}

// cuDNN descriptors, padding plan and algorithm choices of one convolution (Note [Asymmetric conv padding]).
class ConvPlan {
 public:
  ConvPlan(const ConvShape& s, const std::string& nodeName)
      : dtype_(s.dtype), channelsLast_(s.channelsLast), scalars_(s.dtype) {
    const std::size_t n = s.x.size() - 2;
    STRATA_CHECK(n >= 1 && n <= 3, "{}: convolutions on CUDA take 1 to 3 spatial dims, got {}", nodeName, n);
    std::vector<std::int64_t> symmetricPad(n), xPadded(n);
    bool copy = false;
    std::vector<bool> direct(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t pb = s.padBegin[i];
      STRATA_CHECK(pb >= 0, "{}: negative pads ({} along spatial dim {}) are not supported on CUDA", nodeName, pb, i);
      direct[i] = symmetricAlong(s, i);
      copy = copy || !direct[i];
    }
    // The copy kernel is channels-first; nativeChannelsLast leaves such nodes to the transposing adapter.
    STRATA_CHECK(!copy || !s.channelsLast, "{}: a channels-last convolution that needs the padded copy", nodeName);
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t in = s.x[2 + i], out = s.y[2 + i];
      const std::int64_t extent = (s.w[2 + i] - 1) * s.dilations[i] + 1;
      const std::int64_t pb = s.padBegin[i];
      if (!copy || direct[i]) {
        symmetricPad[i] = pb;
        xPadded[i] = in;
        continue;
      }
      // The end pad that makes exactly `out` windows; q pads both ends, the copy adds the rest (or crops).
      const std::int64_t padEnd = (out - 1) * s.strides[i] + extent - in - pb;
      const std::int64_t q = std::min(pb, std::max<std::int64_t>(0, padEnd));
      symmetricPad[i] = q;
      offset_.d[3 - n + i] = -(pb - q);
      xPadded[i] = in + (pb - q) + (padEnd - q);
      const std::int64_t span = xPadded[i] + 2 * q - extent;
      STRATA_CHECK(span >= 0 && span / s.strides[i] + 1 == out, "{}: internal error: padded convolution geometry",
                   nodeName);
    }
    padded_ = copy;
    planes_ = s.x[0] * s.x[1];
    yBatch_ = s.y[0];
    yChannels_ = s.y[1];
    yInner_ = numElements(s.y) / (yBatch_ * yChannels_);
    if (s.channelsLast) {  // [N, out..., M] as [N * out, M, 1]
      yBatch_ *= yInner_;
      yInner_ = 1;
    }
    for (std::size_t i = 0; i < n; ++i) {
      inSize_.d[3 - n + i] = s.x[2 + i];
      paddedSize_.d[3 - n + i] = xPadded[i];
    }
    Shape xDims{s.x[0], s.x[1]};
    xDims.insert(xDims.end(), xPadded.begin(), xPadded.end());
    paddedShape_ = xDims;
    xDims = cudnnDims(xDims);
    const Shape wDims = cudnnDims(s.w);
    const Shape yDims = cudnnDims(s.y);
    // 1-D convolutions run as 2-D ones over a height of 1.
    std::vector<std::int64_t> pads = symmetricPad, strides = s.strides, dilations = s.dilations;
    if (n == 1) {
      pads.insert(pads.begin(), 0);
      strides.insert(strides.begin(), 1);
      dilations.insert(dilations.begin(), 1);
    }
    xDesc_.set(dtype_, xDims, s.channelsLast);
    wDesc_.set(dtype_, wDims, s.channelsLast);
    yDesc_.set(dtype_, yDims, s.channelsLast);
    Shape biasDims(yDims.size(), 1);
    biasDims[1] = s.y[1];
    biasDesc_.set(dtype_, biasDims, s.channelsLast);
    const std::vector<int> padInts = toCudnnInts(pads, "pads");
    const std::vector<int> strideInts = toCudnnInts(strides, "strides");
    const std::vector<int> dilationInts = toCudnnInts(dilations, "dilations");
    const cudnnDataType_t computeType = dtype_ == DType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
    for (auto& conv : conv_) {
      STRATA_CUDNN_CHECK(cudnnSetConvolutionNdDescriptor(conv.get(), static_cast<int>(padInts.size()), padInts.data(),
                                                         strideInts.data(), dilationInts.data(),
                                                         CUDNN_CROSS_CORRELATION, computeType));
      STRATA_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv.get(), static_cast<int>(s.group)));
      STRATA_CUDNN_CHECK(cudnnSetConvolutionMathType(conv.get(), requestedConvMathType(dtype_)));
    }
    // cuDNN must see the output size ONNX wants.
    std::vector<int> cudnnOut(yDims.size());
    STRATA_CUDNN_CHECK(cudnnGetConvolutionNdForwardOutputDim(conv_[0].get(), xDesc_.get(), wDesc_.get(),
                                                             static_cast<int>(cudnnOut.size()), cudnnOut.data()));
    STRATA_CHECK(std::vector<std::int64_t>(cudnnOut.begin(), cudnnOut.end()) == yDims,
                 "{}: cuDNN's convolution output {} differs from the expected {}", nodeName,
                 shapeToString(std::vector<std::int64_t>(cudnnOut.begin(), cudnnOut.end())), shapeToString(yDims));
    geometry_ = fmt::format("x {} w {} y {} pads {} strides {} dilations {} groups {}", joined(xDims), joined(wDims),
                            joined(yDims), joined(pads), joined(strides), joined(dilations), s.group);
  }

  // y = conv(x, w).
  void forward(const KernelContext& ctx, const void* x, const void* w, void* y) {
    CudaContext& context = contextOf(ctx);
    Tensor paddedX;
    const void* input = prepareInput(ctx, x, paddedX);
    const ConvAlgoChoice& algo = choose(ConvDirection::Forward, context, ctx, input, w, y);
    Tensor workspace = workspaceBytes(algo.workspaceBytes, deviceOf(ctx));
    STRATA_CUDNN_CHECK(
        cudnnConvolutionForward(context.cudnn, scalars_.one(), xDesc_.get(), input, wDesc_.get(), w,
                                convFor(ConvDirection::Forward), static_cast<cudnnConvolutionFwdAlgo_t>(algo.algo),
                                workspacePointer(workspace), algo.workspaceBytes, scalars_.zero(), yDesc_.get(), y));
  }

  // dx = the gradient of conv(x, w) with respect to x, given dy.
  void backwardData(const KernelContext& ctx, const void* dy, const void* w, void* dx) {
    CudaContext& context = contextOf(ctx);
    Tensor paddedDx;
    void* target = dx;
    if (padded_) {
      paddedDx = Tensor::empty(dtype_, paddedShape_, MemoryCategory::Workspace, deviceOf(ctx));
      target = paddedDx.rawData();
    }
    const ConvAlgoChoice& algo = choose(ConvDirection::BackwardData, context, ctx, target, w, dy);
    Tensor workspace = workspaceBytes(algo.workspaceBytes, deviceOf(ctx));
    STRATA_CUDNN_CHECK(cudnnConvolutionBackwardData(
        context.cudnn, scalars_.one(), wDesc_.get(), w, yDesc_.get(), dy, convFor(ConvDirection::BackwardData),
        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo.algo), workspacePointer(workspace), algo.workspaceBytes,
        scalars_.zero(), xDesc_.get(), target));
    if (padded_) {
      nn::Spatial3 crop;
      for (int d = 0; d < 3; ++d)
        crop.d[d] = -offset_.d[d];
      nn::launchWindowCopy(dtypeSize(dtype_), target, dx, planes_, paddedSize_, inSize_, crop, streamOf(ctx));
    }
  }

  // dw = the gradient of conv(x, w) with respect to w, given dy.
  void backwardFilter(const KernelContext& ctx, const void* x, const void* dy, void* dw) {
    CudaContext& context = contextOf(ctx);
    Tensor paddedX;
    const void* input = prepareInput(ctx, x, paddedX);
    const ConvAlgoChoice& algo = choose(ConvDirection::BackwardFilter, context, ctx, input, dw, dy);
    Tensor workspace = workspaceBytes(algo.workspaceBytes, deviceOf(ctx));
    STRATA_CUDNN_CHECK(cudnnConvolutionBackwardFilter(
        context.cudnn, scalars_.one(), xDesc_.get(), input, yDesc_.get(), dy, convFor(ConvDirection::BackwardFilter),
        static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo.algo), workspacePointer(workspace), algo.workspaceBytes,
        scalars_.zero(), wDesc_.get(), dw));
  }

  // y += bias broadcast over y's channels.
  void addBias(const KernelContext& ctx, const void* bias, void* y) {
    STRATA_CUDNN_CHECK(
        cudnnAddTensor(contextOf(ctx).cudnn, scalars_.one(), biasDesc_.get(), bias, scalars_.one(), yDesc_.get(), y));
  }

  // db = dy summed over everything but the channels; for the 16-bit floats by our own kernel, which sums in float.
  void backwardBias(const KernelContext& ctx, const void* dy, void* db) {
    if (dtype_ == DType::Float16 || dtype_ == DType::BFloat16) {
      nn::launchChannelSum(dtype_, dy, db, yBatch_, yChannels_, yInner_, deviceOf(ctx), streamOf(ctx));
      return;
    }
    STRATA_CUDNN_CHECK(cudnnConvolutionBackwardBias(contextOf(ctx).cudnn, scalars_.one(), yDesc_.get(), dy,
                                                    scalars_.zero(), biasDesc_.get(), db));
  }

 private:
  cudnnConvolutionDescriptor_t convFor(ConvDirection direction) const {
    return conv_[static_cast<std::size_t>(direction)].get();
  }

  // X as cuDNN reads it: X itself, or its padded / cropped copy in `holder`.
  const void* prepareInput(const KernelContext& ctx, const void* x, Tensor& holder) const {
    if (!padded_)
      return x;
    holder = Tensor::empty(dtype_, paddedShape_, MemoryCategory::Workspace, deviceOf(ctx));
    nn::launchWindowCopy(dtypeSize(dtype_), x, holder.rawData(), planes_, inSize_, paddedSize_, offset_, streamOf(ctx));
    return holder.rawData();
  }

  // The algorithm of a direction, chosen on its first run with that run's buffers (Note [Conv algorithm cache]).
  const ConvAlgoChoice& choose(ConvDirection direction, CudaContext& context, const KernelContext& ctx, const void* x,
                               const void* w, const void* y) {
    const auto index = static_cast<std::size_t>(direction);
    if (!chosen_[index]) {
      ConvAlgoProblem problem;
      problem.direction = direction;
      problem.dtype = dtype_;
      problem.handle = context.cudnn;
      problem.device = deviceOf(ctx);
      problem.x = xDesc_.get();
      problem.w = wDesc_.get();
      problem.conv = convFor(direction);
      problem.y = yDesc_.get();
      problem.channelsLast = channelsLast_;
      // cuDNN reads through these and overwrites only the direction's output.
      problem.xData = const_cast<void*>(x);
      problem.wData = const_cast<void*>(w);
      problem.yData = const_cast<void*>(y);
      problem.geometry = fmt::format("{} align {}", geometry_,
                                     std::min({alignmentOf(x), alignmentOf(w), alignmentOf(y), std::size_t{16}}));
      algo_[index] = chooseConvAlgo(problem);
      chosen_[index] = true;
    }
    return algo_[index];
  }

  DType dtype_;
  bool channelsLast_;  // NHWC descriptors and the NHWC filter format
  CudnnScalars scalars_;
  bool padded_ = false;
  std::int64_t planes_ = 0;         // N * C of X
  nn::Spatial3 inSize_;             // X's spatial dims, promoted to 3
  nn::Spatial3 paddedSize_;         // the padded copy's
  nn::Spatial3 offset_{{0, 0, 0}};  // copy[j] = X[j + offset]; 0 along dims that need no copy
  Shape paddedShape_;               // [N, C, padded spatial...]
  TensorDescriptor xDesc_, yDesc_, biasDesc_;
  FilterDescriptor wDesc_;
  ConvolutionDescriptor conv_[3];  // one per direction: each keeps its algorithm's math type
  std::string geometry_;
  std::int64_t yBatch_ = 0, yChannels_ = 0, yInner_ = 0;  // Y as [batch, M, inner], for the bias gradient
  bool chosen_[3] = {false, false, false};
  ConvAlgoChoice algo_[3];
};

// ---- Conv ----

class ConvKernel : public OpKernel {
 public:
  explicit ConvKernel(const KernelInit& init) {
    const TensorMeta& x = init.inputs.at(0).meta;
    const TensorMeta& w = init.inputs.at(1).meta;
    hasBias_ = init.inputs.size() > 2 && init.inputs[2].present;
    // Note [Fused ReLU] (graphs/relu_fusion.h) is a CPU plan's fusion; this kernel must not ignore it.
    STRATA_CHECK(init.attrs.getInt("fused_relu", 0) == 0 && init.attrs.getInt("fused_clip", 0) == 0,
                 "a convolution with a fused ReLU or Clip runs on the CPU only (the CUDA plan keeps the Relu or Clip)");
    const Shape& y = init.outputs.at(0).shape;
    empty_ = numElements(y) == 0 || numElements(x.shape) == 0 || numElements(w.shape) == 0;
    if (empty_)
      return;
    plan_ = std::make_unique<ConvPlan>(convShapeOf(init), init.nodeName);
  }

  void compute(KernelContext& ctx) override {
    Tensor& y = ctx.output(0);
    if (empty_) {
      // No input channels (or no positions): a sum over nothing.
      if (y.numel() > 0)
        STRATA_CUDA_CHECK(cudaMemsetAsync(y.rawData(), 0, y.bytes(), streamOf(ctx)));
      return;
    }
    plan_->forward(ctx, ctx.input(0).rawData(), ctx.input(1).rawData(), y.rawData());
    if (hasBias_)
      plan_->addBias(ctx, ctx.input(2).rawData(), y.rawData());
  }

 private:
  bool hasBias_ = false;
  bool empty_ = false;
  std::unique_ptr<ConvPlan> plan_;
};

// ---- ConvTranspose: the data gradient of the convolution from its output back to its input ----

class ConvTransposeKernel : public OpKernel {
 public:
  explicit ConvTransposeKernel(const KernelInit& init) {
    const TensorMeta& x = init.inputs.at(0).meta;
    const TensorMeta& w = init.inputs.at(1).meta;
    hasBias_ = init.inputs.size() > 2 && init.inputs[2].present;
    const Shape& y = init.outputs.at(0).shape;
    empty_ = numElements(y) == 0 || numElements(x.shape) == 0 || numElements(w.shape) == 0;
    if (empty_)
      return;
    // The window as the CPU resolves it (conv_geometry.h); the end pads follow from the output size.
    cpu::DeconvWindow window = cpu::resolveDeconvWindow(init.attrs, x.shape, w.shape);
    ConvShape s;
    s.dtype = x.dtype;
    s.group = init.attrs.getInt("group", 1);
    s.x = y;  // the convolution runs from ConvTranspose's output ...
    s.w = w.shape;
    s.y = x.shape;  // ... to its input
    s.strides = std::move(window.strides);
    s.dilations = std::move(window.dilations);
    s.padBegin = std::move(window.padBegin);
    plan_ = std::make_unique<ConvPlan>(s, init.nodeName);
    if (hasBias_) {
      Shape biasDims(cudnnDims(y).size(), 1);
      biasDims[1] = y[1];
      outputDesc_.set(x.dtype, cudnnDims(y));
      biasDesc_.set(x.dtype, biasDims);
    }
  }

  void compute(KernelContext& ctx) override {
    Tensor& y = ctx.output(0);
    if (empty_) {
      if (y.numel() > 0)
        STRATA_CUDA_CHECK(cudaMemsetAsync(y.rawData(), 0, y.bytes(), streamOf(ctx)));
      return;
    }
    plan_->backwardData(ctx, ctx.input(0).rawData(), ctx.input(1).rawData(), y.rawData());
    if (hasBias_) {
      const CudnnScalars scalars(y.dtype());
      STRATA_CUDNN_CHECK(cudnnAddTensor(contextOf(ctx).cudnn, scalars.one(), biasDesc_.get(), ctx.input(2).rawData(),
                                        scalars.one(), outputDesc_.get(), y.rawData()));
    }
  }

 private:
  bool hasBias_ = false;
  bool empty_ = false;
  std::unique_ptr<ConvPlan> plan_;
  TensorDescriptor outputDesc_, biasDesc_;
};

// ---- ConvGradInput (dY, W -> dX), ConvGradWeight (dY, X -> dW [, dB]), ConvGrad (dY, X, W -> dX, dW [, dB]) ----

class ConvGradKernel : public OpKernel {
 public:
  ConvGradKernel(ConvGradMode mode, const KernelInit& init) {
    const TensorMeta& dy = init.inputs.at(0).meta;
    io_ = cpu::convGradOperands(mode, init);
    const Shape& x = io_.x;
    const Shape& w = io_.w;
    empty_ = numElements(x) == 0 || numElements(w) == 0 || numElements(dy.shape) == 0;
    if (empty_)
      return;
    plan_ = std::make_unique<ConvPlan>(convGradShapeOf(init, io_), init.nodeName);
  }

  void compute(KernelContext& ctx) override {
    Tensor* dx = output(ctx, io_.dxOut);
    Tensor* dw = output(ctx, io_.dwOut);
    Tensor* db = output(ctx, io_.dbOut);
    if (empty_) {
      for (Tensor* t : {dx, dw, db}) {
        if (t != nullptr && t->bytes() > 0)
          STRATA_CUDA_CHECK(cudaMemsetAsync(t->rawData(), 0, t->bytes(), streamOf(ctx)));
      }
      return;
    }
    const void* dy = ctx.input(0).rawData();
    if (dw != nullptr)
      plan_->backwardFilter(ctx, ctx.input(static_cast<std::size_t>(io_.xIndex)).rawData(), dy, dw->rawData());
    if (db != nullptr)
      plan_->backwardBias(ctx, dy, db->rawData());
    if (dx != nullptr)
      plan_->backwardData(ctx, dy, ctx.input(static_cast<std::size_t>(io_.wIndex)).rawData(), dx->rawData());
  }

 private:
  static Tensor* output(const KernelContext& ctx, int index) {
    return index >= 0 && ctx.hasOutput(static_cast<std::size_t>(index)) ? &ctx.output(static_cast<std::size_t>(index))
                                                                        : nullptr;
  }

  bool empty_ = false;
  ConvGradOperands io_;  // positions of the operands and outputs
  std::unique_ptr<ConvPlan> plan_;
};

void registerCudnnConvKernels(OpRegistry& registry) {
  addCudaKernelFactory(
      registry, "Conv",
      [](const KernelInit& init) -> std::unique_ptr<OpKernel> { return std::make_unique<ConvKernel>(init); },
      [](const KernelInit& init) { return nativeChannelsLast(convShapeOf(init)); });
  addCudaKernelFactory(registry, "ConvTranspose", [](const KernelInit& init) -> std::unique_ptr<OpKernel> {
    return std::make_unique<ConvTransposeKernel>(init);
  });
  const std::pair<const char*, ConvGradMode> grads[] = {{"ConvGradInput", ConvGradMode::Input},
                                                        {"ConvGradWeight", ConvGradMode::Weight},
                                                        {"ConvGrad", ConvGradMode::Both}};
  for (const auto& [type, mode] : grads) {
    addCudaKernelFactory(
        registry, type,
        [mode](const KernelInit& init) -> std::unique_ptr<OpKernel> {
          return std::make_unique<ConvGradKernel>(mode, init);
        },
        [mode](const KernelInit& init) {
          return nativeChannelsLast(convGradShapeOf(init, cpu::convGradOperands(mode, init)));
        });
  }
}

}  // namespace

void registerCudnnKernels(OpRegistry& registry) {
  registerCudnnConvKernels(registry);
  registerCudnnPoolKernels(registry);
  registerCudnnNormKernels(registry);
}

}  // namespace strata::cuda
