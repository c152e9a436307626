// Pooling gradients: MaxPoolGrad (dY, X -> dX) and AveragePoolGrad (dY -> dX, the input shape as an attribute).
// GlobalMaxPool and GlobalAveragePool use them with kernel_shape = the input's spatial dims.
//
// Note [Pooling backward]: these are direct loops over one (n, c) plane per task rather than oneDNN's pooling
// backward. oneDNN's max-pooling backward needs the workspace of a forward_training run, which the forward kernel
// (forward_inference, shared with inference plans) does not produce, so MaxPoolGrad recomputes the argmax from X:
// one pass over the windows, as cheap as the forward. It routes each gradient to the first maximum of its window in
// row-major window order, as PyTorch does, and to the first NaN when there is one. AveragePoolGrad uses the forward
// kernel's divisor rule (count_include_pad counts explicit pads but never the extra ceil_mode positions).

#include <cmath>
#include <cstring>
#include <memory>

#include "grad_nn_common.h"
#include "strata/thread_pool.h"

namespace strata::cpu::grad_nn {
namespace {

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

template <typename T>
void maxPoolGrad(const PoolGradSetup& s, const T* dy, const T* x, T* dx) {
  const Window3 g = promoteWindow(s.geometry, s.x);
  const std::int64_t inVolume = g.inVolume(), outVolume = g.outVolume();
  parallelFor(0, s.x[0] * s.x[1], 1, [&](std::int64_t begin, std::int64_t end) {
    for (std::int64_t plane = begin; plane < end; ++plane) {
      const T* in = x + plane * inVolume;
      const T* grad = dy + plane * outVolume;
      T* out = dx + plane * inVolume;
      std::fill(out, out + inVolume, T{0});
      for (std::int64_t od = 0; od < g.out[0]; ++od) {
        const std::int64_t sd = od * g.stride[0] - g.pad[0];
        std::int64_t kd0, kd1;
        validKernelRange(g.in[0], g.kernel[0], g.dilation[0], sd, kd0, kd1);
        for (std::int64_t oh = 0; oh < g.out[1]; ++oh) {
          const std::int64_t sh = oh * g.stride[1] - g.pad[1];
          std::int64_t kh0, kh1;
          validKernelRange(g.in[1], g.kernel[1], g.dilation[1], sh, kh0, kh1);
          for (std::int64_t ow = 0; ow < g.out[2]; ++ow) {
            const std::int64_t sw = ow * g.stride[2] - g.pad[2];
            std::int64_t kw0, kw1;
            validKernelRange(g.in[2], g.kernel[2], g.dilation[2], sw, kw0, kw1);
            std::int64_t best = -1;
            T bestValue = T{0};
            for (std::int64_t kd = kd0; kd < kd1; ++kd) {
              const std::int64_t id = sd + kd * g.dilation[0];
              for (std::int64_t kh = kh0; kh < kh1; ++kh) {
                const std::int64_t row = (id * g.in[1] + sh + kh * g.dilation[1]) * g.in[2];
                for (std::int64_t kw = kw0; kw < kw1; ++kw) {
                  const std::int64_t index = row + sw + kw * g.dilation[2];
                  const T v = in[index];
                  if (best < 0 || v > bestValue || (std::isnan(v) && !std::isnan(bestValue))) {
                    best = index;
                    bestValue = v;
                  }
                }
              }
            }
            if (best >= 0)
              out[best] += grad[(od * g.out[1] + oh) * g.out[2] + ow];
          }
        }
      }
    }
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

template <typename T>
void averagePoolGrad(const PoolGradSetup& s, const T* dy, T* dx) {
  const Window3 g = promoteWindow(s.geometry, s.x);
  // Explicit end pads promoted like the rest (leading dims have none).
  std::int64_t padEnd[3] = {0, 0, 0};
  const std::size_t lead = 3 - s.geometry.kernel.size();
  for (std::size_t i = lead; i < 3; ++i)
    padEnd[i] = s.geometry.padEnd[i - lead];
  const std::int64_t inVolume = g.inVolume(), outVolume = g.outVolume();
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

class PoolGradKernel : public OpKernel {
 public:
  PoolGradKernel(bool isMax, const KernelInit& init) : isMax_(isMax) {
    const TensorMeta& dy = init.inputs.at(0).meta;
    const Shape x = isMax ? init.inputs.at(1).meta.shape : Shape(init.attrs.getInts("input_shape"));
    setup_ = resolvePoolGrad(init.attrs, dy.dtype, x, dy.shape);
    dtype_ = dy.dtype;
  }

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
    } else if (isMax_) {
      maxPoolGrad<float>(setup_, dy.data<float>(), ctx.input(1).data<float>(), dx.data<float>());
    } else {
      averagePoolGrad<float>(setup_, dy.data<float>(), dx.data<float>());
    }
  }

 private:
  bool isMax_;
  DType dtype_ = DType::Float32;
  PoolGradSetup setup_;
};

void addPoolGradOp(OpRegistry& registry, const std::string& type, bool isMax) {
  registry.addSchema({type, [isMax](const ShapeContext& ctx) { return inferPoolGrad(isMax, ctx); }, true});
  registry.addKernel(type, DeviceType::CPU, [isMax](const KernelInit& init) -> std::unique_ptr<OpKernel> {
    return std::make_unique<PoolGradKernel>(isMax, init);
  });
}

}  // namespace

void registerPoolGradOps(OpRegistry& registry) {
  addPoolGradOp(registry, "MaxPoolGrad", true);
  addPoolGradOp(registry, "AveragePoolGrad", false);
}

}  // namespace strata::cpu::grad_nn
