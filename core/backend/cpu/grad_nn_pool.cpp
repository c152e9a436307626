// Pooling gradients: MaxPoolGrad (dY, X -> dX) and AveragePoolGrad (dY -> dX, the input shape as an attribute).
// GlobalMaxPool and GlobalAveragePool use them with kernel_shape = the input's spatial dims.
//
// Note [Pooling backward]: MaxPoolGrad routes each gradient to the first maximum of its window in row-major window
// order, as PyTorch does. oneDNN's max-pooling backward needs the workspace of a forward_training run, which the
// forward kernel (forward_inference, shared with inference plans) does not produce, so the float32 kernel runs
// oneDNN's forward_training again on X (its workspace and output in the scratchpad) and then its backward: JIT
// kernels, on the first layout that has them (Note [Layout detours]). That is 0.3 ms against 7 ms for a direct loop
// on the bundled CNN's first pooling (batch 64, one thread), where the loop took 40% of the training step. oneDNN's
// JIT pooling keeps the first maximum on ties (checked by MaxPoolGradTiesGoToFirstMaximum on every layout it picks);
// a window with a NaN routes its gradient wherever oneDNN's comparison leaves it (the loss is NaN then anyway).
// 2x2 windows at stride 2 (VGG's, most small CNNs') and 3x3 windows at stride 2 (ResNet's stem, SqueezeNet) run
// Strata's vectorised loops instead (Note [2x2 max pooling loop] in max_pool_pairs.h, Note [3x3 max pooling loop] in
// max_pool_3x3.h): no forward again, no reorders.
// Float64, and geometry oneDNN has no JIT kernel for, run direct loops over one (n, c) plane per task, with the same
// rule and a gradient to the first NaN of a window. AveragePoolGrad is a direct loop using the forward kernel's
// divisor rule (count_include_pad counts explicit pads but never the extra ceil_mode positions) in float64; float32
// runs oneDNN's average-pooling backward where its divisor is the same (DenseNet-121's four pools 0.23 -> 0.10 ms
// per step), except a window over the whole map (global pooling), whose gradient the direct kernel spreads in one
// fill per plane. Channels-last nodes (Note [CPU channels-last]) are transposed around the loop where oneDNN cannot.

#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "cpu_layouts.h"
#include "dnnl_layout_detour.h"
#include "grad_nn_common.h"
#include "max_pool_3x3.h"
#include "max_pool_pairs.h"
#include "strata/thread_pool.h"

namespace strata::cpu::grad_nn {
namespace {

using dnnl::memory;

struct PoolGradSetup {
  bool countIncludePad = false;
  WindowGeometry geometry;
  Shape x, y;
};

PoolGradSetup resolvePoolGrad(const Attributes& attrs, DType dtype, const Shape& x, const Shape& dy) {
  if (dtype != DType::Float32 && dtype != DType::Float64) {
    fail("only float32 and float64 are supported, got {}", dtypeName(dtype));
  }
  if (x.size() < 3 || x.size() > 5)
    fail("X must have rank 3 to 5, got {}", shapeToString(x));
  if (!attrs.has("kernel_shape"))
    fail("the kernel_shape attribute is required");
  PoolGradSetup s;
  s.x = x;
  s.countIncludePad = attrs.getInt("count_include_pad", 0) != 0;
  s.geometry = resolveWindow(attrs, std::vector<std::int64_t>(x.begin() + 2, x.end()), attrs.getInts("kernel_shape"),
                             attrs.getInt("ceil_mode", 0) != 0);
  s.y = {x[0], x[1]};
  s.y.insert(s.y.end(), s.geometry.output.begin(), s.geometry.output.end());
  if (dy != s.y)
    fail("dY has shape {} but the pooling output is {}", shapeToString(dy), shapeToString(s.y));
  return s;
}

std::vector<TensorMeta> inferPoolGrad(bool isMax, const ShapeContext& ctx) {
  const std::size_t needed = isMax ? 2 : 1;
  for (std::size_t i = 0; i < needed; ++i) {
    if (!ctx.hasInput(i))
      ctx.error(fmt::format("{} needs {} inputs", ctx.opType, needed));
  }
  const TensorMeta& dy = ctx.input(0).meta;
  Shape x;
  if (isMax) {
    if (ctx.input(1).meta.dtype != dy.dtype)
      ctx.error("X and dY must have the same dtype");
    x = ctx.input(1).meta.shape;
  } else {
    if (!ctx.attrs.has("input_shape"))
      ctx.error("the input_shape attribute is required");
    x = ctx.attrs.getInts("input_shape");
  }
  try {
    resolvePoolGrad(ctx.attrs, dy.dtype, x, dy.shape);
  } catch (const Error& e) {
    ctx.error(e.what());
  }
  return {TensorMeta{dy.dtype, x}};
}

// The valid window of each output position along one dim: the first input index and how many follow (dilated).
struct DimWindows {
  std::vector<std::int64_t> first, count;
};

DimWindows dimWindows(const Window3& g, int dim) {
  DimWindows w;
  for (std::int64_t o = 0; o < g.out[dim]; ++o) {
    const std::int64_t start = o * g.stride[dim] - g.pad[dim];
    std::int64_t k0, k1;
    validKernelRange(g.in[dim], g.kernel[dim], g.dilation[dim], start, k0, k1);
    w.first.push_back(start + k0 * g.dilation[dim]);
    w.count.push_back(k1 - k0);
  }
  return w;
}

// Each gradient goes to the first maximum of its window (row-major window order), or to the first NaN. The
// windows are computed once per dim, not per output: this loop ran at 4.5 ns per input element with the ranges
// recomputed per output (40% of the bundled CNN's training step).
template <typename T>
class MaxPoolGradLoop {
 public:
  explicit MaxPoolGradLoop(const PoolGradSetup& s)
      : g_(promoteWindow(s.geometry, s.x)), wd_(dimWindows(g_, 0)), wh_(dimWindows(g_, 1)), ww_(dimWindows(g_, 2)) {}

  // dX's plane `plane` (one (n, c) pair), overwritten.
  void plane(std::int64_t plane, const T* dy, const T* x, T* dx) const {
    const std::int64_t inVolume = g_.inVolume(), outVolume = g_.outVolume();
    const std::int64_t rowStride = g_.in[2], depthStride = g_.in[1] * g_.in[2];
    const std::int64_t dd = g_.dilation[0] * depthStride, dh = g_.dilation[1] * rowStride, dw = g_.dilation[2];
    const T* in = x + plane * inVolume;
    const T* grad = dy + plane * outVolume;
    T* out = dx + plane * inVolume;
    std::fill(out, out + inVolume, T{0});
    for (std::int64_t od = 0; od < g_.out[0]; ++od) {
      const std::int64_t nd = wd_.count[od];
      for (std::int64_t oh = 0; oh < g_.out[1]; ++oh) {
        const std::int64_t nh = wh_.count[oh];
        const std::int64_t rowBase = wd_.first[od] * depthStride + wh_.first[oh] * rowStride;
        for (std::int64_t ow = 0; ow < g_.out[2]; ++ow) {
          const std::int64_t nw = ww_.count[ow];
          if (nd == 0 || nh == 0 || nw == 0)
            continue;
          const std::int64_t origin = rowBase + ww_.first[ow];
          std::int64_t best = origin;
          T bestValue = in[origin];
          for (std::int64_t kd = 0; kd < nd; ++kd) {
            for (std::int64_t kh = 0; kh < nh; ++kh) {
              const std::int64_t row = origin + kd * dd + kh * dh;
              for (std::int64_t kw = 0; kw < nw; ++kw) {
                const std::int64_t index = row + kw * dw;
                const T v = in[index];
                // Greater, or a NaN after a number; nothing replaces a NaN (it compares equal to itself never).
                if (!(v <= bestValue) && bestValue == bestValue) {
                  best = index;
                  bestValue = v;
                }
              }
            }
          }
          out[best] += grad[(od * g_.out[1] + oh) * g_.out[2] + ow];
        }
      }
    }
  }

 private:
  Window3 g_;
  DimWindows wd_, wh_, ww_;
};

template <typename T>
void maxPoolGrad(const PoolGradSetup& s, const T* dy, const T* x, T* dx) {
  const MaxPoolGradLoop<T> loop(s);
  parallelFor(0, s.x[0] * s.x[1], 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane)
      loop.plane(plane, dy, x, dx);
  });
}

// How many of a dim's window positions starting at `start` lie inside [-padBegin, in + padEnd): the
// count_include_pad divisor's factor for that dim.
std::int64_t paddedCount(std::int64_t in, std::int64_t kernel, std::int64_t dilation, std::int64_t start,
                         std::int64_t padBegin, std::int64_t padEnd) {
  std::int64_t count = 0;
  for (std::int64_t k = 0; k < kernel; ++k) {
    const std::int64_t pos = start + k * dilation;
    if (pos >= -padBegin && pos < in + padEnd)
      ++count;
  }
  return count;
}

// One window per plane covering the whole map, without padding: global average pooling.
bool windowIsWholeMap(const PoolGradSetup& s) {
  const WindowGeometry& g = s.geometry;
  for (std::size_t i = 0; i < g.kernel.size(); ++i) {
    const std::int64_t in = s.x[2 + i];
    if (g.kernel[i] != in || g.padBegin[i] != 0 || g.padEnd[i] != 0 || s.y[2 + i] != 1 ||
        (!g.dilations.empty() && g.dilations[i] != 1))
      return false;
  }
  return true;
}

template <typename T>
void averagePoolGrad(const PoolGradSetup& s, const T* dy, T* dx) {
  const Window3 g = promoteWindow(s.geometry, s.x);
  // Explicit end pads promoted like the rest (leading dims have none).
  std::int64_t padEnd[3] = {0, 0, 0};
  const std::size_t lead = 3 - s.geometry.kernel.size();
  for (std::size_t i = lead; i < 3; ++i)
    padEnd[i] = s.geometry.padEnd[i - lead];
  const std::int64_t inVolume = g.inVolume(), outVolume = g.outVolume();
  if (windowIsWholeMap(s)) {
    // Global pooling (ResNet's last pool): each plane's gradient spread evenly, the result the loops below give.
    // Their window bookkeeping per plane took 0.5 ms on ResNet-50's 65536 planes of one pixel at 32x32 input.
    parallelFor(0, s.x[0] * s.x[1], std::max<std::int64_t>(1, 16384 / inVolume),
                [&](std::int64_t begin, std::int64_t end) {
                  for (std::int64_t plane = begin; plane < end; ++plane) {
                    std::fill(dx + plane * inVolume, dx + (plane + 1) * inVolume, dy[plane] / static_cast<T>(inVolume));
                  }
                });
    return;
  }
  parallelFor(0, s.x[0] * s.x[1], 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const T* grad = dy + plane * outVolume;
      T* out = dx + plane * inVolume;
      std::fill(out, out + inVolume, T{0});
      for (std::int64_t od = 0; od < g.out[0]; ++od) {
        const std::int64_t sd = od * g.stride[0] - g.pad[0];
        std::int64_t kd0, kd1;
        validKernelRange(g.in[0], g.kernel[0], g.dilation[0], sd, kd0, kd1);
        const std::int64_t pd = paddedCount(g.in[0], g.kernel[0], g.dilation[0], sd, g.pad[0], padEnd[0]);
        for (std::int64_t oh = 0; oh < g.out[1]; ++oh) {
          const std::int64_t sh = oh * g.stride[1] - g.pad[1];
          std::int64_t kh0, kh1;
          validKernelRange(g.in[1], g.kernel[1], g.dilation[1], sh, kh0, kh1);
          const std::int64_t ph = paddedCount(g.in[1], g.kernel[1], g.dilation[1], sh, g.pad[1], padEnd[1]);
          for (std::int64_t ow = 0; ow < g.out[2]; ++ow) {
            const std::int64_t sw = ow * g.stride[2] - g.pad[2];
            std::int64_t kw0, kw1;
            validKernelRange(g.in[2], g.kernel[2], g.dilation[2], sw, kw0, kw1);
            const std::int64_t divisor =
                s.countIncludePad ? pd * ph * paddedCount(g.in[2], g.kernel[2], g.dilation[2], sw, g.pad[2], padEnd[2])
                                  : (kd1 - kd0) * (kh1 - kh0) * (kw1 - kw0);
            if (divisor == 0)
              continue;
            const T value = grad[(od * g.out[1] + oh) * g.out[2] + ow] / static_cast<T>(divisor);
            for (std::int64_t kd = kd0; kd < kd1; ++kd) {
              const std::int64_t id = sd + kd * g.dilation[0];
              for (std::int64_t kh = kh0; kh < kh1; ++kh) {
                T* row = out + (id * g.in[1] + sh + kh * g.dilation[1]) * g.in[2] + sw;
                for (std::int64_t kw = kw0; kw < kw1; ++kw)
                  row[kw * g.dilation[2]] += value;
              }
            }
          }
        }
      }
    }
  });
}

// Pooling backward on oneDNN (Note [Pooling backward]): for max pooling forward_training first, for its
// workspace, then backward, both on the layout pickJitLayout chooses, with X and dY reordered in and dX out when it
// is not Strata's. Average pooling needs no forward.
class DnnlPoolGrad {
 public:
  // False when oneDNN has no JIT kernel for this geometry on this host, or (average pooling) would count other
  // positions in its divisor: the direct loop runs instead.
  bool init(const PoolGradSetup& s, bool isMax, bool channelsLast) {
    isMax_ = isMax;
    const WindowGeometry& g = s.geometry;
    const std::vector<std::int64_t> in(s.x.begin() + 2, s.x.end());
    memory::dims padEnd, dilations;
    bool extended = false;  // whether ceil_mode needs positions past the explicit end padding
    for (std::size_t i = 0; i < g.kernel.size(); ++i) {
      padEnd.push_back(dnnlPadEnd(g, in, i));
      dilations.push_back(g.dilations[i] - 1);  // oneDNN counts dilation from 0
      extended = extended || padEnd.back() > g.padEnd[i];
    }
    if (!isMax && s.countIncludePad && extended)
      return false;  // oneDNN would count the extra ceil_mode positions in the divisor
    const dnnl::algorithm algorithm = isMax               ? dnnl::algorithm::pooling_max
                                      : s.countIncludePad ? dnnl::algorithm::pooling_avg_include_padding
                                                          : dnnl::algorithm::pooling_avg_exclude_padding;
    const memory::dims strides(g.strides.begin(), g.strides.end()), kernel(g.kernel.begin(), g.kernel.end());
    const memory::dims padBegin(g.padBegin.begin(), g.padBegin.end());
    const memory::desc xPlain = activationDesc(s.x, channelsLast), yPlain = activationDesc(s.y, channelsLast);
    const memory::desc yAny(memory::dims(s.y.begin(), s.y.end()), memory::data_type::f32, memory::format_tag::any);
    try {
      const auto forwardPd =
          pickJitLayout<dnnl::pooling_v2_forward::primitive_desc>(xPlain, [&](const memory::desc& src) {
            dnnl::pooling_v2_forward::desc desc(dnnl::prop_kind::forward_training, algorithm, src, yAny, strides,
                                                kernel, dilations, padBegin, padEnd);
            return dnnl::pooling_v2_forward::primitive_desc(desc, userScratchpadAttr(), dnnlEngine());
          });
      dnnl::pooling_v2_backward::desc backwardDesc(algorithm, forwardPd.src_desc(), forwardPd.dst_desc(), strides,
                                                   kernel, dilations, padBegin, padEnd);
      dnnl::pooling_v2_backward::primitive_desc backwardPd(backwardDesc, userScratchpadAttr(), dnnlEngine(), forwardPd);
      implementation_ = backwardPd.impl_info_str();
      if (!isJitImplementation(forwardPd.impl_info_str()) || !isJitImplementation(implementation_))
        return false;
      backward_ = dnnl::pooling_v2_backward(backwardPd);
      std::size_t own = backwardPd.scratchpad_desc().get_size();
      own = std::max(own, dy_.init(yPlain, backwardPd.diff_dst_desc(), true));
      own = std::max(own, dx_.init(xPlain, backwardPd.diff_src_desc(), false));
      if (isMax) {
        forward_ = dnnl::pooling_v2_forward(forwardPd);
        own = std::max(own, forwardPd.scratchpad_desc().get_size());
        own = std::max(own, x_.init(xPlain, forwardPd.src_desc(), true));
        y_ = memory(forwardPd.dst_desc(), dnnlEngine(), nullptr);
        workspace_ = memory(forwardPd.workspace_desc(), dnnlEngine(), nullptr);
      }
      // Scratchpad: [the largest own scratchpad | X's copy | Y | workspace | dY's copy | dX's copy].
      ownScratchBytes_ = own;
      std::size_t offset = alignUp(own);
      x_.offset = offset;
      offset += alignUp(x_.bytes);
      yOffset_ = offset;
      offset += isMax ? alignUp(forwardPd.dst_desc().get_size()) : 0;
      workspaceOffset_ = offset;
      offset += isMax ? alignUp(forwardPd.workspace_desc().get_size()) : 0;
      dy_.offset = offset;
      offset += alignUp(dy_.bytes);
      dx_.offset = offset;
      offset += alignUp(dx_.bytes);
      totalScratchBytes_ = offset;
      if (dx_.needed)
        layout_ = reorderNote(backwardPd.diff_src_desc(), backwardPd.diff_dst_desc());
      return true;
    } catch (const dnnl::error&) {
      return false;  // geometry oneDNN rejects
    }
  }

  // `x` is read by max pooling only.
  void run(const Tensor& dy, const Tensor* x, Tensor& dx) {
    char* scratch = static_cast<char*>(dnnlScratchpad(totalScratchBytes_));
    std::unordered_map<int, memory> backwardArgs{{DNNL_ARG_DIFF_DST, dy_.bind(dy, scratch, ownScratchBytes_, true)},
                                                 {DNNL_ARG_DIFF_SRC, dx_.bind(dx, scratch, ownScratchBytes_, false)}};
    if (isMax_) {
      y_.set_data_handle(scratch + yOffset_);
      workspace_.set_data_handle(scratch + workspaceOffset_);
      std::unordered_map<int, memory> forwardArgs{{DNNL_ARG_SRC, x_.bind(*x, scratch, ownScratchBytes_, true)},
                                                  {DNNL_ARG_DST, y_},
                                                  {DNNL_ARG_WORKSPACE, workspace_}};
      executeDnnlAt(forward_, forwardArgs, scratch, ownScratchBytes_);
      backwardArgs[DNNL_ARG_WORKSPACE] = workspace_;
    }
    executeDnnlAt(backward_, backwardArgs, scratch, ownScratchBytes_);
    dx_.copyOut(scratch, ownScratchBytes_);
  }

  std::string implementation() const { return fmt::format("oneDNN {}{}", implementation_, layout_); }

 private:
  bool isMax_ = true;
  dnnl::pooling_v2_forward forward_;
  dnnl::pooling_v2_backward backward_;
  std::string implementation_, layout_;
  LayoutCopy x_, dy_, dx_;
  memory y_, workspace_;
  std::size_t ownScratchBytes_ = 0, yOffset_ = 0, workspaceOffset_ = 0, totalScratchBytes_ = 0;
};

class PoolGradKernel : public OpKernel {
 public:
  PoolGradKernel(bool isMax, const KernelInit& init) : isMax_(isMax) {
    // Note [CPU channels-last]: a channels-last node runs on oneDNN only (runsOnDnnl), on logical dims.
    const bool channelsLast = channelsLastOf(init.attrs);
    const TensorMeta& dy = init.inputs.at(0).meta;
    const Shape x = isMax ? init.inputs.at(1).meta.shape : Shape(init.attrs.getInts("input_shape"));
    setup_ = resolvePoolGrad(init.attrs, dy.dtype, logicalShape(x, channelsLast), logicalShape(dy.shape, channelsLast));
    dtype_ = dy.dtype;
    // Float32 tries oneDNN (Note [Pooling backward]), except average pooling over the whole map, which the direct
    // kernel spreads in one fill (on channels-last nodes the direct loop cannot run at all).
    wholeMap_ = !isMax && windowIsWholeMap(setup_);
    const bool plainMax = isMax && dtype_ == DType::Float32 && !channelsLast;
    pairs_ = isMax && dtype_ == DType::Float32 && isMaxPool2x2(setup_.geometry, setup_.x);  // either layout
    channelsLast_ = channelsLast;
    overlapping3x3_ = plainMax && isMaxPool3x3Stride2(setup_.geometry, setup_.x);
    if (!pairs_ && !overlapping3x3_ && dtype_ == DType::Float32 && numElements(setup_.y) > 0 && x.size() <= 5 &&
        (!wholeMap_ || channelsLast))
      useDnnl_ = dnnl_.init(setup_, isMax, channelsLast);
  }

  std::string implementation() const override {
    if (pairs_)
      return "2x2 windows, vectorised loop";
    if (overlapping3x3_)
      return "3x3 windows at stride 2, vectorised loop";
    if (useDnnl_)
      return dnnl_.implementation();
    return wholeMap_ && dtype_ == DType::Float32 ? "whole-map spread (vectorised fill)" : "direct loop";
  }

  // Whether the node runs on oneDNN (the direct loops are channels-first only).
  bool runsOnDnnl() const { return useDnnl_ || numElements(setup_.y) == 0 || pairs_; }

  void compute(KernelContext& ctx) override {
    Tensor& dx = ctx.output(0);
    if (dx.numel() == 0)
      return;
    if (numElements(setup_.y) == 0) {
      std::memset(dx.rawData(), 0, dx.bytes());
      return;
    }
    const Tensor& dy = ctx.input(0);
    if (dtype_ == DType::Float64) {
      if (isMax_) {
        maxPoolGrad<double>(setup_, dy.data<double>(), ctx.input(1).data<double>(), dx.data<double>());
      } else {
        averagePoolGrad<double>(setup_, dy.data<double>(), dx.data<double>());
      }
    } else if (pairs_) {
      const Shape& x = setup_.x;  // logical [N, C, H, W]
      if (channelsLast_) {
        maxPool2x2GradChannelsLast(dy.data<float>(), ctx.input(1).data<float>(), dx.data<float>(), x[0], x[2], x[3],
                                   x[1]);
      } else {
        maxPool2x2Grad(dy.data<float>(), ctx.input(1).data<float>(), dx.data<float>(), x[0] * x[1], x[2], x[3]);
      }
    } else if (overlapping3x3_) {
      const float* x = ctx.input(1).data<float>();
      const MaxPoolGradLoop<float> direct(setup_);
      maxPool3x3Grad(dy.data<float>(), x, dx.data<float>(), maxPool3x3Shape(setup_.geometry, setup_.x),
                     [&](std::int64_t plane) { direct.plane(plane, dy.data<float>(), x, dx.data<float>()); });
    } else if (useDnnl_) {
      dnnl_.run(dy, isMax_ ? &ctx.input(1) : nullptr, dx);
    } else if (isMax_) {
      maxPoolGrad<float>(setup_, dy.data<float>(), ctx.input(1).data<float>(), dx.data<float>());
    } else {
      averagePoolGrad<float>(setup_, dy.data<float>(), dx.data<float>());
    }
  }

 private:
  bool isMax_;
  bool wholeMap_ = false;        // average pooling over the whole map (global pooling)
  bool pairs_ = false;           // Note [2x2 max pooling loop]
  bool channelsLast_ = false;    // its layout
  bool overlapping3x3_ = false;  // Note [3x3 max pooling loop]
  DType dtype_ = DType::Float32;
  PoolGradSetup setup_;
  bool useDnnl_ = false;
  DnnlPoolGrad dnnl_;
};

void addPoolGradOp(OpRegistry& registry, const std::string& type, bool isMax) {
  registry.addSchema({type, [isMax](const ShapeContext& ctx) { return inferPoolGrad(isMax, ctx); }, true});
  registry.addKernel(
      type, DeviceType::CPU,
      [isMax](const KernelInit& init) -> std::unique_ptr<OpKernel> {
        return std::make_unique<PoolGradKernel>(isMax, init);
      },
      [isMax](const KernelInit& init) { return PoolGradKernel(isMax, init).runsOnDnnl(); });
}

}  // namespace

void registerPoolGradOps(OpRegistry& registry) {
  addPoolGradOp(registry, "MaxPoolGrad", true);
  addPoolGradOp(registry, "AveragePoolGrad", false);
}

}  // namespace strata::cpu::grad_nn
