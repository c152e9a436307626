// MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool on oneDNN pooling primitives, with a direct loop for
// what oneDNN does not cover (MaxPool's Indices output, float64 and integer types, the divisor of AveragePool with
// count_include_pad in ceil mode).

#include <algorithm>
#include <cmath>
#include <limits>
#include <memory>

#include "cpu_layouts.h"
#include "dnnl_context.h"
#include "dnnl_layout_detour.h"
#include "max_pool_3x3.h"
#include "max_pool_pairs.h"
#include "strata/thread_pool.h"

namespace strata::cpu {
namespace {

using dnnl::memory;

enum class PoolKind { Max, Average };

struct PoolSetup {
  PoolKind kind = PoolKind::Max;
  bool countIncludePad = false;
  std::int64_t storageOrder = 0;
  WindowGeometry geometry;
  Shape output;
};

PoolSetup resolvePool(const std::string& opType, const Attributes& attrs, const TensorMeta& x) {
  PoolSetup s;
  const bool global = opType == "GlobalAveragePool" || opType == "GlobalMaxPool";
  s.kind = (opType == "MaxPool" || opType == "GlobalMaxPool") ? PoolKind::Max : PoolKind::Average;
  const bool floatOnly = s.kind == PoolKind::Average || global;
  if (floatOnly && x.dtype != DType::Float32 && x.dtype != DType::Float64) {
    fail("only float32 and float64 are supported, X is {}", dtypeName(x.dtype));
  }
  if (!floatOnly && x.dtype != DType::Float32 && x.dtype != DType::Float64 && x.dtype != DType::Int8 &&
      x.dtype != DType::UInt8) {
    fail("X must be float32, float64, int8 or uint8, got {}", dtypeName(x.dtype));
  }
  if (x.shape.size() < 3)
    fail("X must have rank >= 3 (N, C, spatial...), got {}", shapeToString(x.shape));
  const std::vector<std::int64_t> spatial(x.shape.begin() + 2, x.shape.end());
  if (global) {
    Attributes none;
    s.geometry = resolveWindow(none, spatial, spatial, false);
  } else {
    if (!attrs.has("kernel_shape"))
      fail("the kernel_shape attribute is required");
    s.countIncludePad = attrs.getInt("count_include_pad", 0) != 0;
    s.storageOrder = attrs.getInt("storage_order", 0);
    s.geometry = resolveWindow(attrs, spatial, attrs.getInts("kernel_shape"), attrs.getInt("ceil_mode", 0) != 0);
  }
  s.output = {x.shape[0], x.shape[1]};
  s.output.insert(s.output.end(), s.geometry.output.begin(), s.geometry.output.end());
  return s;
}

std::vector<TensorMeta> inferPool(const ShapeContext& ctx) {
  if (!ctx.hasInput(0))
    ctx.error(ctx.opType + " needs input X");
  if (ctx.outputCount > 1 && ctx.opType != "MaxPool")
    ctx.error(ctx.opType + " has one output");
  if (ctx.outputCount > 2)
    ctx.error("MaxPool has at most two outputs (Y, Indices)");
  try {
    PoolSetup s = resolvePool(ctx.opType, ctx.attrs, ctx.input(0).meta);
    std::vector<TensorMeta> out{TensorMeta{ctx.input(0).meta.dtype, s.output}};
    if (ctx.outputCount == 2)
      out.push_back(TensorMeta{DType::Int64, s.output});
    return out;
  } catch (const Error& e) {
    ctx.error(e.what());
  }
}

// Direct N-d pooling over one (n, c) plane per task. The average's divisor counts the window positions inside the
// input (count_include_pad = 0) or inside input + explicit pads (= 1), never the extra ceil_mode positions: the
// PyTorch / ONNX-reference rule.
template <typename T>
void naivePool(const PoolSetup& s, const Tensor& x, Tensor& y, Tensor* indices) {
  const WindowGeometry& g = s.geometry;
  const std::size_t n = g.kernel.size();
  const Shape& xs = x.shape();
  const std::vector<std::int64_t> in(xs.begin() + 2, xs.end());
  const std::int64_t inPlane = numElements(in);
  const std::int64_t outPlane = numElements(g.output);
  const std::int64_t windowSize = numElements(g.kernel);
  const std::vector<std::int64_t> inStrides = contiguousStrides(in);
  // Column-major spatial strides for storage_order = 1.
  std::vector<std::int64_t> colStrides(n, 1);
  for (std::size_t i = 1; i < n; ++i)
    colStrides[i] = colStrides[i - 1] * in[i - 1];
  const T* src = x.data<T>();
  T* dst = y.data<T>();
  std::int64_t* idx = indices != nullptr ? indices->data<std::int64_t>() : nullptr;
  const std::int64_t planes = xs[0] * xs[1];
  parallelFor(0, planes, 1, [&](std::int64_t begin, std::int64_t end) {
    std::vector<std::int64_t> o(n), k(n);
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const T* p = src + plane * inPlane;
      std::fill(o.begin(), o.end(), 0);
      for (std::int64_t oi = 0; oi < outPlane; ++oi) {
        double sum = 0;
        double best = -std::numeric_limits<double>::infinity();
        std::int64_t bestIndex = -1;
        std::int64_t count = 0;
        std::int64_t padded = 1;
        for (std::size_t d = 0; d < n; ++d) {
          // Window positions inside [-padBegin, in + padEnd), for the count_include_pad divisor.
          const std::int64_t start = o[d] * g.strides[d] - g.padBegin[d];
          std::int64_t inside = 0;
          for (std::int64_t kk = 0; kk < g.kernel[d]; ++kk) {
            const std::int64_t pos = start + kk * g.dilations[d];
            if (pos >= -g.padBegin[d] && pos < in[d] + g.padEnd[d])
              ++inside;
          }
          padded *= inside;
        }
        std::fill(k.begin(), k.end(), 0);
        for (std::int64_t ki = 0; ki < windowSize; ++ki) {
          std::int64_t offset = 0;
          std::int64_t colOffset = 0;
          bool valid = true;
          for (std::size_t d = 0; d < n && valid; ++d) {
            const std::int64_t pos = o[d] * g.strides[d] - g.padBegin[d] + k[d] * g.dilations[d];
            valid = pos >= 0 && pos < in[d];
            offset += pos * inStrides[d];
            colOffset += pos * colStrides[d];
          }
          if (valid) {
            const double v = static_cast<double>(p[offset]);
            sum += v;
            ++count;
            // The first maximum or the first NaN (Note [Pooling backward]); a window of -inf picks its first.
            if (bestIndex < 0 || (!(v <= best) && best == best)) {
              best = v;
              bestIndex = plane * inPlane + (s.storageOrder == 1 ? colOffset : offset);
            }
          }
          for (std::size_t d = n; d-- > 0;) {  // next window position
            if (++k[d] < g.kernel[d])
              break;
            k[d] = 0;
          }
        }
        double value = 0;
        if (s.kind == PoolKind::Max) {
          value = count > 0 ? best : 0;
        } else {
          const std::int64_t divisor = s.countIncludePad ? padded : count;
          value = divisor > 0 ? sum / static_cast<double>(divisor) : 0;
        }
        dst[plane * outPlane + oi] = static_cast<T>(value);
        if (idx != nullptr)
          idx[plane * outPlane + oi] = bestIndex;
        for (std::size_t d = n; d-- > 0;) {  // next output position
          if (++o[d] < g.output[d])
            break;
          o[d] = 0;
        }
      }
    }
  });
}

class PoolKernel : public OpKernel {
 public:
  PoolKernel(const std::string& opType, const KernelInit& init) {
    // Note [CPU channels-last]: a channels-last node runs on oneDNN only (runsOnDnnl), on logical dims.
    const bool channelsLast = channelsLastOf(init.attrs);
    const TensorMeta x{init.inputs.at(0).meta.dtype, logicalShape(init.inputs.at(0).meta.shape, channelsLast)};
    setup_ = resolvePool(opType, init.attrs, x);
    empty_ = numElements(setup_.output) == 0;
    if (empty_ || x.dtype != DType::Float32 || x.shape.size() > 5)
      return;  // the direct loop handles these
    // Note [Global mean loop]: a plain float32 global average pool is a mean over each contiguous (n, c) plane. Run on
    // oneDNN it went through 8- or 16-channel blocks with reorders in and out (a full activation's copy each way, for
    // a [N, C] result): EfficientNet's squeeze-excitation blocks ran 31 of them per forward.
    if (opType == "GlobalAveragePool" && !channelsLast) {
      planes_ = x.shape[0] * x.shape[1];
      pixels_ = numElements(x.shape) / std::max<std::int64_t>(planes_, 1);
      return;
    }
    const WindowGeometry& g = setup_.geometry;
    // Note [2x2 max pooling loop], on either layout; a node that also returns Indices runs the direct loop.
    const bool max = setup_.kind == PoolKind::Max && init.outputs.size() == 1;
    if (max && isMaxPool2x2(g, x.shape)) {
      pairs_ = true;
      channelsLast_ = channelsLast;
      logicalX_ = x.shape;
      return;
    }
    const bool plainMax = max && !channelsLast;
    if (plainMax && isMaxPool3x3Stride2(g, x.shape)) {  // Note [3x3 max pooling loop]
      overlapping3x3_ = true;
      return;
    }
    const std::size_t n = g.kernel.size();
    const std::vector<std::int64_t> in(x.shape.begin() + 2, x.shape.end());
    memory::dims padEnd(n);
    bool extended = false;  // whether ceil_mode needs positions past the explicit end padding
    for (std::size_t i = 0; i < n; ++i) {
      padEnd[i] = dnnlPadEnd(g, in, i);
      extended = extended || padEnd[i] > g.padEnd[i];
    }
    // oneDNN would count the extra ceil_mode positions in the divisor.
    if (setup_.kind == PoolKind::Average && setup_.countIncludePad && extended)
      return;
    memory::dims dilations;
    for (std::int64_t d : g.dilations)
      dilations.push_back(d - 1);
    const dnnl::algorithm algorithm = setup_.kind == PoolKind::Max ? dnnl::algorithm::pooling_max
                                      : setup_.countIncludePad     ? dnnl::algorithm::pooling_avg_include_padding
                                                                   : dnnl::algorithm::pooling_avg_exclude_padding;
    const memory::desc srcDesc = activationDesc(x.shape, channelsLast);
    const memory::desc dstDesc = activationDesc(setup_.output, channelsLast);
    const memory::desc anyDstDesc(memory::dims(setup_.output.begin(), setup_.output.end()), memory::data_type::f32,
                                  memory::format_tag::any);
    try {
      // Note [Layout detours]: on AVX2 oneDNN pools plain NCHW with a reference loop.
      const auto pd = pickJitLayout<dnnl::pooling_v2_forward::primitive_desc>(srcDesc, [&](const memory::desc& src) {
        dnnl::pooling_v2_forward::desc desc(dnnl::prop_kind::forward_inference, algorithm, src, anyDstDesc,
                                            memory::dims(g.strides.begin(), g.strides.end()),
                                            memory::dims(g.kernel.begin(), g.kernel.end()), dilations,
                                            memory::dims(g.padBegin.begin(), g.padBegin.end()), padEnd);
        return dnnl::pooling_v2_forward::primitive_desc(desc, userScratchpadAttr(), dnnlEngine());
      });
      primitive_ = dnnl::pooling_v2_forward(pd);
      implementation_ = pd.impl_info_str();
      detour_ = LayoutDetour(srcDesc, pd.src_desc(), dstDesc, pd.dst_desc(), pd.scratchpad_desc().get_size());
      useDnnl_ = true;
    } catch (const dnnl::error&) {
      // Geometry oneDNN rejects (e.g. padding as large as the kernel) runs on the direct loop.
      useDnnl_ = false;
    }
  }

  std::string implementation() const override {
    if (planes_ > 0)
      return "vectorised mean per plane";
    if (pairs_)
      return "2x2 windows, vectorised loop";
    if (overlapping3x3_)
      return "3x3 windows at stride 2, vectorised loop";
    return useDnnl_ ? fmt::format("oneDNN {}{}", implementation_, detourNote(detour_)) : "direct loop";
  }

  // Whether the node runs on oneDNN or the global mean's loop (the direct loops are channels-first only).
  bool runsOnDnnl() const { return useDnnl_ || empty_ || planes_ > 0 || pairs_; }

  void compute(KernelContext& ctx) override {
    if (empty_)
      return;
    const Tensor& x = ctx.input(0);
    Tensor& y = ctx.output(0);
    if (planes_ > 0) {
      globalMean(x.data<float>(), y.data<float>());
      return;
    }
    if (pairs_) {
      const Shape& s = logicalX_;  // [N, C, H, W]
      if (channelsLast_) {
        maxPool2x2ChannelsLast(x.data<float>(), y.data<float>(), s[0], s[2], s[3], s[1]);
      } else {
        maxPool2x2(x.data<float>(), y.data<float>(), s[0] * s[1], s[2], s[3]);
      }
      return;
    }
    if (overlapping3x3_) {
      maxPool3x3(x.data<float>(), y.data<float>(), maxPool3x3Shape(setup_.geometry, x.shape()));
      return;
    }
    Tensor* indices = ctx.hasOutput(1) ? &ctx.output(1) : nullptr;
    if (useDnnl_ && indices == nullptr) {
      detour_.execute(primitive_, {}, x, y);
      return;
    }
    switch (x.dtype()) {
      case DType::Float32:
        naivePool<float>(setup_, x, y, indices);
        break;
      case DType::Float64:
        naivePool<double>(setup_, x, y, indices);
        break;
      case DType::Int8:
        naivePool<std::int8_t>(setup_, x, y, indices);
        break;
      case DType::UInt8:
        naivePool<std::uint8_t>(setup_, x, y, indices);
        break;
      default:
        fail("pooling: unsupported dtype {}", dtypeName(x.dtype()));
    }
  }

 private:
  // Note [Global mean loop]: each plane summed in float lanes (as oneDNN's average pooling accumulates).
  void globalMean(const float* x, float* y) const {
    const std::int64_t pixels = pixels_;
    const float scale = 1.0f / static_cast<float>(pixels);
    parallelFor(0, planes_, std::max<std::int64_t>(1, 16384 / std::max<std::int64_t>(pixels, 1)),
                [&](std::int64_t begin, std::int64_t end) {
                  for (std::int64_t plane = begin; plane < end; ++plane) {
                    const float* in = x + plane * pixels;
                    float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
                    for (std::int64_t i = 0; i < pixels; ++i)
                      sum += in[i];
                    y[plane] = sum * scale;
                  }
                });
  }

  PoolSetup setup_;
  std::int64_t planes_ = 0;  // Note [Global mean loop]: set when the node runs it
  std::int64_t pixels_ = 0;
  bool empty_ = false;
  bool pairs_ = false;           // Note [2x2 max pooling loop]
  bool channelsLast_ = false;    // its layout
  Shape logicalX_;               // its input's logical shape
  bool overlapping3x3_ = false;  // Note [3x3 max pooling loop]
  bool useDnnl_ = false;
  dnnl::pooling_v2_forward primitive_;
  std::string implementation_;
  LayoutDetour detour_;
};

}  // namespace

void registerDnnlPoolOps(OpRegistry& registry) {
  for (const char* type : {"MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool"}) {
    const std::string opType = type;
    registry.addSchema({opType, inferPool, true});
    registry.addKernel(
        opType, DeviceType::CPU,
        [opType](const KernelInit& init) -> std::unique_ptr<OpKernel> {
          return std::make_unique<PoolKernel>(opType, init);
        },
        [opType](const KernelInit& init) { return init.outputs.size() == 1 && PoolKernel(opType, init).runsOnDnnl(); });
  }
}

}  // namespace strata::cpu
