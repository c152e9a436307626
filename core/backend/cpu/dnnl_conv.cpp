// Conv and ConvTranspose on oneDNN convolution / deconvolution primitives.

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <utility>

#include "conv_batch_columns.h"
#include "conv_gemm.h"
#include "conv_geometry.h"
#include "conv_small_groups.h"
#include "conv_taps.h"
#include "conv_whole_map.h"
#include "conv_winograd.h"
#include "cpu_layouts.h"
#include "dnnl_context.h"
#include "dnnl_layout_detour.h"
#include "strata/channels_last.h"

namespace strata::cpu {
namespace {

using dnnl::memory;

struct ConvSetup {
  std::int64_t group = 1;
  WindowGeometry geometry;
  Shape output;
};

// Conv runs float32 on oneDNN and float64 on plain loops (dnnl_conv_f64.cpp); X, W and B share the type.
ConvSetup resolveConv(const Attributes& attrs, const TensorMeta& x, const TensorMeta& w, const TensorMeta* bias) {
  if (x.dtype != DType::Float32 && x.dtype != DType::Float64) {
    fail("only float32 and float64 are supported, X is {}", dtypeName(x.dtype));
  }
  if (w.dtype != x.dtype)
    fail("W is {} but X is {}; they must match", dtypeName(w.dtype), dtypeName(x.dtype));
  if (x.shape.size() < 3 || x.shape.size() > 5) {
    fail("X must have rank 3 to 5 (N, C, 1 to 3 spatial dims), got {}", shapeToString(x.shape));
  }
  if (w.shape.size() != x.shape.size()) {
    fail("W {} must have the same rank as X {}", shapeToString(w.shape), shapeToString(x.shape));
  }
  ConvSetup s;
  s.group = attrs.getInt("group", 1);
  if (s.group < 1)
    fail("group must be positive, got {}", s.group);
  const std::int64_t channels = x.shape[1];
  const std::int64_t filters = w.shape[0];
  if (channels != w.shape[1] * s.group) {
    fail("X has {} input channels but W expects {} (W.shape[1] {} * group {})", channels, w.shape[1] * s.group,
         w.shape[1], s.group);
  }
  if (filters % s.group != 0)
    fail("W has {} output channels, not divisible by group {}", filters, s.group);
  if (bias != nullptr) {
    if (bias->dtype != x.dtype)
      fail("B is {} but X is {}; they must match", dtypeName(bias->dtype), dtypeName(x.dtype));
    if (bias->shape != Shape{filters}) {
      fail("B has shape {}, expected [{}] (one per output channel)", shapeToString(bias->shape), filters);
    }
  }
  s.geometry = resolveWindow(attrs, spatialOf(x.shape), kernelShapeOf(attrs, w.shape), false);
  s.output = {x.shape[0], filters};
  s.output.insert(s.output.end(), s.geometry.output.begin(), s.geometry.output.end());
  return s;
}

std::vector<TensorMeta> inferConv(const ShapeContext& ctx) {
  if (!ctx.hasInput(0) || !ctx.hasInput(1))
    ctx.error("Conv needs inputs X and W");
  try {
    const TensorMeta* bias = ctx.hasInput(2) ? &ctx.input(2).meta : nullptr;
    ConvSetup s = resolveConv(ctx.attrs, ctx.input(0).meta, ctx.input(1).meta, bias);
    return {TensorMeta{ctx.input(0).meta.dtype, s.output}};
  } catch (const Error& e) {
    ctx.error(e.what());
  }
}

memory::dims toDims(const std::vector<std::int64_t>& v) {
  return memory::dims(v.begin(), v.end());
}

memory::dims dnnlDilations(const std::vector<std::int64_t>& dilations) {
  memory::dims d;
  for (std::int64_t v : dilations)
    d.push_back(v - 1);  // oneDNN counts dilation from 0
  return d;
}

// Weights as oneDNN wants them, grouped (G, O/G, I/G, k...) when group > 1; same bytes as ONNX's (O, I/G, k...).
// Kept for deconvolution too, where ONNX's layout is (I, O/G, k...) and oneDNN's is (G, O/G, I/G, k...): those are
// described with strides instead.
Shape groupedWeightDims(const Shape& w, std::int64_t group) {
  if (group == 1)
    return w;
  Shape dims{group, w[0] / group};
  dims.insert(dims.end(), w.begin() + 1, w.end());
  return dims;
}

// Caches a weight tensor reordered into the primitive's preferred layout.
// Note [Weight cache]: the reordered copy is keyed on the weight storage and its version. Weights change only
// through an optimizer step, which bumps the version of the flat parameter buffer (ParameterStore::bumpVersion),
// so forward-only runs reorder once and training reorders once per step. Code that edits weights in place by other
// means must bump the storage version too. Weights computed by the plan itself (a Transpose or Cast of a
// parameter, a scratch copy) are not known when the plan is built and carry no version a step bumps: they are
// reordered on every run.
class WeightCache {
 public:
  WeightCache() = default;
  // `byteOffset`: where the user layout starts in the weight tensor (a strided view of some taps, Note [Pruned taps]).
  WeightCache(const memory::desc& user, const memory::desc& preferred, std::int64_t numel, bool planTimeWeights,
              std::size_t byteOffset = 0)
      : needsReorder_(user != preferred || byteOffset != 0),
        cacheable_(planTimeWeights),
        numel_(numel),
        byteOffset_(byteOffset) {
    if (!needsReorder_)
      return;
    userMemory_ = memory(user, dnnlEngine(), nullptr);
    cached_ = Tensor::empty(DType::UInt8, {static_cast<std::int64_t>(preferred.get_size())}, MemoryCategory::Workspace);
    cachedMemory_ = memory(preferred, dnnlEngine(), cached_.rawData());
    reorder_ = dnnl::reorder(userMemory_, cachedMemory_);
  }

  // The memory holding `weights` in the preferred layout, reordering only when the weights changed.
  void* get(const Tensor& weights) {
    if (!needsReorder_)
      return weights.rawData();
    const void* ptr = weights.rawData();
    const std::uint64_t version = weights.storage()->version();
    if (ptr != cachedFrom_ || version != version_ || !everFilled_ || !cacheable_) {
      userMemory_.set_data_handle(static_cast<char*>(weights.rawData()) + byteOffset_);
      std::unordered_map<int, memory> args{{DNNL_ARG_FROM, userMemory_}, {DNNL_ARG_TO, cachedMemory_}};
      executeDnnl(reorder_, args, 0);
      cachedFrom_ = ptr;
      version_ = version;
      everFilled_ = true;
    }
    return cached_.rawData();
  }

 private:
  bool needsReorder_ = false;
  bool cacheable_ = false;
  std::int64_t numel_ = 0;
  std::size_t byteOffset_ = 0;
  memory userMemory_;
  memory cachedMemory_;
  dnnl::reorder reorder_;
  Tensor cached_;
  const void* cachedFrom_ = nullptr;
  std::uint64_t version_ = 0;
  bool everFilled_ = false;
};

// Note [Conv layouts]: Strata's tensors are plain NCHW, but every float32 convolution lets oneDNN pick its src/dst
// layouts (blocked nChw16c or channels-last) and reorders around the primitive through a LayoutDetour, with the
// copies in the shared scratchpad (Note [Layout detours]). Measured on a quiet 2-core AVX-512 machine
// (2026-11-21): ResNet50 forward at 32x32, batch 32 took 23 ms this way against 32 ms when 1x1 stride-1 convolutions
// ran on NCHW (oneDNN's im2col + sgemm path), and the training step 122 ms against 159 ms. Keeping activations blocked
// across nodes would also save the reorders.
// Note [Fused ReLU] (graphs/relu_fusion.h): with fused_relu the kernel writes max(conv(X, W) + B, 0), with fused_clip
// (inference plans only) min(max(conv(X, W) + B, clip_min), clip_max): a post-op of oneDNN's convolution, the
// Winograd output transform's last step, and an in-place pass after the one-GEMM and float64 paths (small outputs,
// still in cache).
struct FusedActivation {
  bool clip = false;  // fused_clip; otherwise fused_relu's [0, +inf)
  float lo = 0.0f;
  float hi = std::numeric_limits<float>::infinity();
};

std::optional<FusedActivation> fusedActivation(const Attributes& attrs) {
  if (attrs.getInt("fused_clip", 0) != 0) {
    return FusedActivation{.clip = true,
                           .lo = attrs.getFloat("clip_min", std::numeric_limits<float>::lowest()),
                           .hi = attrs.getFloat("clip_max", std::numeric_limits<float>::max())};
  }
  if (attrs.getInt("fused_relu", 0) != 0)
    return FusedActivation{};
  return std::nullopt;
}

// As the Clip and Relu kernels compute it: std::max keeps a NaN.
template <typename T>
void activateInPlace(T* y, std::int64_t n, const FusedActivation& a) {
  const T lo = static_cast<T>(a.lo);
  const T hi = a.clip ? static_cast<T>(a.hi) : std::numeric_limits<T>::infinity();
#pragma omp simd
  for (std::int64_t i = 0; i < n; ++i)
    y[i] = std::min(std::max(y[i], lo), hi);
}

class ConvKernel : public OpKernel {
 public:
  explicit ConvKernel(const KernelInit& init) {
    // Note [CPU channels-last]: everything below works on logical [N, C, spatial...] dims.
    const bool channelsLast = channelsLastOf(init.attrs);
    activation_ = fusedActivation(init.attrs);
    const TensorMeta x{init.inputs.at(0).meta.dtype, logicalShape(init.inputs.at(0).meta.shape, channelsLast)};
    const TensorMeta w{init.inputs.at(1).meta.dtype, logicalShape(init.inputs.at(1).meta.shape, channelsLast)};
    hasBias_ = init.inputs.size() > 2 && init.inputs[2].present;
    ConvSetup s = resolveConv(init.attrs, x, w, hasBias_ ? &init.inputs[2].meta : nullptr);
    group_ = s.group;
    empty_ = numElements(s.output) == 0 || numElements(x.shape) == 0;
    if (empty_)
      return;
    if (x.dtype == DType::Float64) {  // plain loops, no primitive (channels-last float64 is transposed around them)
      f64_ = std::make_unique<ConvSetup>(s);
      xShape_ = x.shape;
      wShape_ = w.shape;
      return;
    }

    // Note [Pruned taps]: the primitive convolves with the used taps only, read through a strided view of W.
    taps_ = usedTaps(s.geometry, spatialOf(x.shape));
    const int weightInner = weightInnermost(channelsLast, s.group > 1);
    const std::vector<std::int64_t> weightStrides =
        stridesWithInnermost(groupedWeightDims(w.shape, s.group), weightInner);
    Shape kernelWeights = w.shape;
    std::size_t weightByteOffset = 0;
    if (taps_.pruned) {
      s.geometry = croppedWindow(s.geometry, spatialOf(x.shape), taps_);
      kernelWeights = croppedWeightShape(w.shape, taps_);
      weightByteOffset =
          static_cast<std::size_t>(croppedOffset(weightStrides, s.group > 1 ? 3 : 2, taps_)) * sizeof(float);
    }
    tapNote_ = tapNote(w.shape, taps_);
    const std::size_t n = s.geometry.kernel.size();
    memory::dims padEnd(n);
    for (std::size_t i = 0; i < n; ++i)
      padEnd[i] = dnnlPadEnd(s.geometry, spatialOf(x.shape), i);

    const Shape weightDims = groupedWeightDims(kernelWeights, s.group);
    const memory::desc srcDesc = activationDesc(x.shape, channelsLast);
    const memory::desc dstDesc = activationDesc(s.output, channelsLast);
    const memory::desc userWeightDesc = memory::desc(toDims(weightDims), memory::data_type::f32, toDims(weightStrides));
    // Let the convolution pick its weight layout; the weights are reordered once (WeightCache).
    const memory::desc anyWeightDesc(toDims(weightDims), memory::data_type::f32, memory::format_tag::any);
    const memory::desc biasDesc = hasBias_ ? plainDesc({w.shape[0]}) : memory::desc();
    const memory::desc convSrcDesc(toDims(x.shape), memory::data_type::f32, memory::format_tag::any);
    const memory::desc convDstDesc(toDims(s.output), memory::data_type::f32, memory::format_tag::any);

    // Note [Convolutions as one GEMM]: one output pixel per image; the weights cached as a dense [O, K] copy (K in
    // the activations' order) when they are a strided view of some taps.
    gemm_ = withDnnlErrors(init.nodeName, "plan the convolution as a GEMM", [&] {
      return ConvGemm::plan(x.shape, kernelWeights, s.group, s.geometry, hasBias_, channelsLast);
    });
    if (gemm_ != nullptr) {
      weights_ = WeightCache(userWeightDesc, descWithInnermost(weightDims, weightInner), numElements(w.shape),
                             init.inputs[1].constant != nullptr, weightByteOffset);
      if (init.inputs[1].constant != nullptr)
        weights_.get(*init.inputs[1].constant);
      return;
    }
    // Note [Whole-map convolutions], Note [Small maps as batch columns]: one GEMM over reshaped operands.
    if (!taps_.pruned) {
      reshaped_ = withDnnlErrors(init.nodeName, "plan the convolution as a reshaped GEMM", [&] {
        return planReshapedGemmConv(x.shape, w.shape, s.group, s.geometry, hasBias_, channelsLast);
      });
      if (reshaped_ != nullptr)
        return;
    }
    // Note [Winograd convolutions]: 3x3, stride 1, with enough channels and pixels.
    if (!taps_.pruned) {
      winograd_ = withDnnlErrors(init.nodeName, "plan the Winograd convolution", [&] {
        return ConvWinograd::plan(ConvWinograd::Role::Forward, x.shape, w.shape, s.group, s.geometry, channelsLast);
      });
      if (winograd_ != nullptr)
        return;
    }
    withDnnlErrors(init.nodeName, "create the convolution", [&] {
      dnnl::convolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                           convSrcDesc, anyWeightDesc, biasDesc, convDstDesc,
                                           toDims(s.geometry.strides), dnnlDilations(s.geometry.dilations),
                                           toDims(s.geometry.padBegin), padEnd);
      dnnl::primitive_attr attr = userScratchpadAttr();
      if (activation_) {
        dnnl::post_ops ops;
        if (activation_->clip)
          ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_clip_v2, activation_->lo, activation_->hi);
        else
          ops.append_eltwise(1.0f, dnnl::algorithm::eltwise_relu, 0.0f, 0.0f);
        attr.set_post_ops(ops);
      }
      dnnl::convolution_forward::primitive_desc pd(desc, attr, dnnlEngine());
      primitive_ = dnnl::convolution_forward(pd);
      weights_ = WeightCache(userWeightDesc, pd.weights_desc(), numElements(w.shape),
                             init.inputs[1].constant != nullptr, weightByteOffset);
      weightMemory_ = memory(pd.weights_desc(), dnnlEngine(), nullptr);
      if (hasBias_)
        bias_ = memory(biasDesc, dnnlEngine(), nullptr);
      implementation_ = pd.impl_info_str();
      detour_ = LayoutDetour(srcDesc, pd.src_desc(), dstDesc, pd.dst_desc(), pd.scratchpad_desc().get_size());
      // Constant weights (the usual case after loading) are reordered now, at plan time, not on the first run.
      if (init.inputs[1].constant != nullptr)
        weights_.get(*init.inputs[1].constant);
    });
    // Note [Small-group convolutions]: where oneDNN's choice is its GEMM per image and group.
    if (!taps_.pruned && implementation_.find("gemm") != std::string::npos)
      smallGroups_ = SmallGroupConv::plan(x.shape, w.shape, s.group, s.geometry, channelsLast);
  }

  void compute(KernelContext& ctx) override {
    if (empty_)
      return;
    if (f64_ != nullptr) {
      convForwardF64(f64_->geometry, xShape_, wShape_, f64_->group, ctx.input(0).data<double>(),
                     ctx.input(1).data<double>(), hasBias_ ? ctx.input(2).data<double>() : nullptr,
                     ctx.output(0).data<double>());
      if (activation_)
        activateInPlace(ctx.output(0).data<double>(), ctx.output(0).numel(), *activation_);
      return;
    }
    if (reshaped_ != nullptr) {
      reshaped_->forward(ctx.input(0).data<float>(), ctx.input(1).data<float>(),
                         hasBias_ ? ctx.input(2).data<float>() : nullptr, ctx.output(0).data<float>(),
                         static_cast<char*>(dnnlScratchpad(reshaped_->forwardScratchBytes())));
      if (activation_)
        activateInPlace(ctx.output(0).data<float>(), ctx.output(0).numel(), *activation_);
      return;
    }
    if (gemm_ != nullptr) {
      gemm_->forward(ctx.input(0).data<float>(), static_cast<const float*>(weights_.get(ctx.input(1))),
                     hasBias_ ? ctx.input(2).data<float>() : nullptr, ctx.output(0).data<float>(),
                     static_cast<char*>(dnnlScratchpad(gemm_->scratchBytes())));
      if (activation_)
        activateInPlace(ctx.output(0).data<float>(), ctx.output(0).numel(), *activation_);
      return;
    }
    if (winograd_ != nullptr) {
      winograd_->run(
          ctx.input(0).data<float>(), ctx.input(1).data<float>(), hasBias_ ? ctx.input(2).data<float>() : nullptr,
          ctx.output(0).data<float>(), static_cast<char*>(dnnlScratchpad(winograd_->scratchBytes())),
          activation_ ? std::optional<std::pair<float, float>>({activation_->lo, activation_->hi}) : std::nullopt);
      return;
    }
    if (smallGroups_) {
      smallGroups_->forward(ctx.input(0).data<float>(), ctx.input(1).data<float>(),
                            hasBias_ ? ctx.input(2).data<float>() : nullptr, ctx.output(0).data<float>(),
                            static_cast<char*>(dnnlScratchpad(smallGroups_->scratchBytes())));
      if (activation_)
        activateInPlace(ctx.output(0).data<float>(), ctx.output(0).numel(), *activation_);
      return;
    }
    weightMemory_.set_data_handle(weights_.get(ctx.input(1)));
    std::unordered_map<int, memory> args{{DNNL_ARG_WEIGHTS, weightMemory_}};
    if (hasBias_) {
      bindDnnl(bias_, ctx.input(2));
      args[DNNL_ARG_BIAS] = bias_;
    }
    detour_.execute(primitive_, std::move(args), ctx.input(0), ctx.output(0));
  }

  std::string implementation() const override {
    const char* relu = !activation_ ? "" : activation_->clip ? " + Clip" : " + ReLU";
    if (f64_ != nullptr)
      return fmt::format("float64 im2col GEMM{}", relu);
    if (gemm_ != nullptr)
      return gemm_->implementation() + tapNote_ + relu;
    if (reshaped_ != nullptr)
      return reshaped_->implementation() + relu;
    if (winograd_ != nullptr)
      return winograd_->implementation() + relu;
    if (smallGroups_)
      return smallGroups_->implementation() + relu;
    return fmt::format("oneDNN {}{}{}{}{}", implementation_, perGroupGemmNote(implementation_, group_),
                       detourNote(detour_), tapNote_, relu);
  }

 private:
  bool hasBias_ = false;
  std::int64_t group_ = 1;
  std::optional<FusedActivation> activation_;  // Note [Fused ReLU]
  bool empty_ = false;
  std::unique_ptr<ConvSetup> f64_;  // set for float64, which runs convForwardF64 instead of oneDNN
  Shape xShape_, wShape_;
  TapCrop taps_;
  std::string tapNote_;
  std::unique_ptr<ConvGemm> gemm_;              // Note [Convolutions as one GEMM]: set instead of primitive_
  std::unique_ptr<ReshapedGemmConv> reshaped_;  // Notes [Whole-map convolutions], [Small maps as batch columns]
  std::unique_ptr<ConvWinograd> winograd_;      // Note [Winograd convolutions]: set instead of primitive_
  std::optional<SmallGroupConv> smallGroups_;   // Note [Small-group convolutions]: set: runs instead of primitive_
  dnnl::convolution_forward primitive_;
  std::string implementation_;
  LayoutDetour detour_;
  WeightCache weights_;
  memory weightMemory_;
  memory bias_;
};

// ---- ConvTranspose ----

struct DeconvSetup {
  std::int64_t group = 1;
  std::vector<std::int64_t> kernel, strides, dilations, padBegin, padEnd, outputPadding;
  Shape output;
};

DeconvSetup resolveDeconv(const Attributes& attrs, const TensorMeta& x, const TensorMeta& w, const TensorMeta* bias) {
  if (x.dtype != DType::Float32)
    fail("only float32 is supported, X is {}", dtypeName(x.dtype));
  if (w.dtype != DType::Float32)
    fail("only float32 is supported, W is {}", dtypeName(w.dtype));
  if (x.shape.size() < 3 || x.shape.size() > 5) {
    fail("X must have rank 3 to 5 (N, C, 1 to 3 spatial dims), got {}", shapeToString(x.shape));
  }
  if (w.shape.size() != x.shape.size()) {
    fail("W {} must have the same rank as X {}", shapeToString(w.shape), shapeToString(x.shape));
  }
  DeconvSetup s;
  s.group = attrs.getInt("group", 1);
  if (s.group < 1)
    fail("group must be positive, got {}", s.group);
  if (x.shape[1] != w.shape[0]) {
    fail("X has {} input channels but W (C, M/group, k...) has {}", x.shape[1], w.shape[0]);
  }
  if (w.shape[0] % s.group != 0)
    fail("W has {} input channels, not divisible by group {}", w.shape[0], s.group);
  const std::int64_t filters = w.shape[1] * s.group;
  if (bias != nullptr) {
    if (bias->dtype != DType::Float32)
      fail("only float32 is supported, B is {}", dtypeName(bias->dtype));
    if (bias->shape != Shape{filters}) {
      fail("B has shape {}, expected [{}] (one per output channel)", shapeToString(bias->shape), filters);
    }
  }
  DeconvWindow window = resolveDeconvWindow(attrs, x.shape, w.shape);
  s.kernel = std::move(window.kernel);
  s.strides = std::move(window.strides);
  s.dilations = std::move(window.dilations);
  s.outputPadding = std::move(window.outputPadding);
  s.padBegin = std::move(window.padBegin);
  s.padEnd = std::move(window.padEnd);
  const std::vector<std::int64_t>& outSpatial = window.output;
  s.output = {x.shape[0], filters};
  s.output.insert(s.output.end(), outSpatial.begin(), outSpatial.end());
  return s;
}

std::vector<TensorMeta> inferConvTranspose(const ShapeContext& ctx) {
  if (!ctx.hasInput(0) || !ctx.hasInput(1))
    ctx.error("ConvTranspose needs inputs X and W");
  try {
    const TensorMeta* bias = ctx.hasInput(2) ? &ctx.input(2).meta : nullptr;
    DeconvSetup s = resolveDeconv(ctx.attrs, ctx.input(0).meta, ctx.input(1).meta, bias);
    return {TensorMeta{DType::Float32, s.output}};
  } catch (const Error& e) {
    ctx.error(e.what());
  }
}

class ConvTransposeKernel : public OpKernel {
 public:
  explicit ConvTransposeKernel(const KernelInit& init) {
    const TensorMeta& x = init.inputs.at(0).meta;
    const TensorMeta& w = init.inputs.at(1).meta;
    hasBias_ = init.inputs.size() > 2 && init.inputs[2].present;
    DeconvSetup s = resolveDeconv(init.attrs, x, w, hasBias_ ? &init.inputs[2].meta : nullptr);
    empty_ = numElements(s.output) == 0 || numElements(x.shape) == 0;
    if (empty_)
      return;
    const std::size_t n = s.kernel.size();
    // oneDNN's deconvolution output size is strides*(in-1) + extent - padBegin - padEnd; output_padding (and an
    // output_shape) shrink the end padding, possibly below zero, which oneDNN accepts.
    memory::dims padEnd(n);
    for (std::size_t i = 0; i < n; ++i) {
      const std::int64_t extent = (s.kernel[i] - 1) * s.dilations[i] + 1;
      padEnd[i] = s.strides[i] * (x.shape[2 + i] - 1) + extent - s.padBegin[i] - s.output[2 + i];
    }
    // ONNX W is (C, M/G, k...) = (G, C/G, M/G, k...); oneDNN's grouped weights are (G, M/G, C/G, k...). Describe
    // ONNX's bytes with strides (swap the two channel dims) and let the weight cache reorder them.
    const std::int64_t g = s.group;
    const std::int64_t cPerG = w.shape[0] / g;
    const std::int64_t mPerG = w.shape[1];
    const std::int64_t kernelVolume = numElements(s.kernel);
    memory::dims weightDims;
    memory::dims weightStrides;
    if (g > 1) {
      weightDims = {g, mPerG, cPerG};
      weightStrides = {cPerG * mPerG * kernelVolume, kernelVolume, mPerG * kernelVolume};
    } else {
      weightDims = {mPerG, cPerG};
      weightStrides = {kernelVolume, mPerG * kernelVolume};
    }
    const std::vector<std::int64_t> kernelStrides = contiguousStrides(s.kernel);
    for (std::size_t i = 0; i < n; ++i) {
      weightDims.push_back(s.kernel[i]);
      weightStrides.push_back(kernelStrides[i]);
    }
    const memory::desc userWeightDesc(weightDims, memory::data_type::f32, weightStrides);
    const memory::desc anyWeightDesc(weightDims, memory::data_type::f32, memory::format_tag::any);
    const memory::desc srcDesc = plainDesc(x.shape);
    const memory::desc dstDesc = plainDesc(s.output);
    const memory::desc biasDesc = hasBias_ ? plainDesc({s.output[1]}) : memory::desc();
    withDnnlErrors(init.nodeName, "create the transposed convolution", [&] {
      dnnl::deconvolution_forward::desc desc(dnnl::prop_kind::forward_inference, dnnl::algorithm::deconvolution_direct,
                                             srcDesc, anyWeightDesc, biasDesc, dstDesc, toDims(s.strides),
                                             dnnlDilations(s.dilations), toDims(s.padBegin), padEnd);
      dnnl::deconvolution_forward::primitive_desc pd(desc, userScratchpadAttr(), dnnlEngine());
      primitive_ = dnnl::deconvolution_forward(pd);
      scratchpadBytes_ = pd.scratchpad_desc().get_size();
      weights_ =
          WeightCache(userWeightDesc, pd.weights_desc(), numElements(w.shape), init.inputs[1].constant != nullptr);
      src_ = memory(srcDesc, dnnlEngine(), nullptr);
      weightMemory_ = memory(pd.weights_desc(), dnnlEngine(), nullptr);
      dst_ = memory(dstDesc, dnnlEngine(), nullptr);
      if (hasBias_)
        bias_ = memory(biasDesc, dnnlEngine(), nullptr);
      if (init.inputs[1].constant != nullptr)
        weights_.get(*init.inputs[1].constant);
    });
  }

  void compute(KernelContext& ctx) override {
    if (empty_)
      return;
    bindDnnl(src_, ctx.input(0));
    weightMemory_.set_data_handle(weights_.get(ctx.input(1)));
    bindDnnl(dst_, ctx.output(0));
    std::unordered_map<int, memory> args{{DNNL_ARG_SRC, src_}, {DNNL_ARG_WEIGHTS, weightMemory_}, {DNNL_ARG_DST, dst_}};
    if (hasBias_) {
      bindDnnl(bias_, ctx.input(2));
      args[DNNL_ARG_BIAS] = bias_;
    }
    executeDnnl(primitive_, args, scratchpadBytes_);
  }

 private:
  bool hasBias_ = false;
  bool empty_ = false;
  dnnl::deconvolution_forward primitive_;
  std::size_t scratchpadBytes_ = 0;
  WeightCache weights_;
  memory src_;
  memory weightMemory_;
  memory bias_;
  memory dst_;
};

}  // namespace

void registerDnnlConvOps(OpRegistry& registry) {
  registry.addSchema({"Conv", inferConv, true});
  registry.addKernel(
      "Conv", DeviceType::CPU,
      [](const KernelInit& init) -> std::unique_ptr<OpKernel> { return std::make_unique<ConvKernel>(init); },
      // Note [CPU channels-last]: float32 runs NHWC activations and KRSC weights itself.
      [](const KernelInit& init) { return init.inputs.at(0).meta.dtype == DType::Float32; });
  registry.addSchema({"ConvTranspose", inferConvTranspose, true});
  registry.addKernel("ConvTranspose", DeviceType::CPU, [](const KernelInit& init) -> std::unique_ptr<OpKernel> {
    return std::make_unique<ConvTransposeKernel>(init);
  });
}

}  // namespace strata::cpu
