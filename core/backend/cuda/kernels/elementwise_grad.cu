// Gradient kernels of the elementwise family, mirroring core/backend/cpu/grad_elementwise_ops.cpp: unary
// gradients GradOp(dY, Z) -> dX (Z is the forward input or output), ClipGrad, DropoutGrad and the broadcasting
// gradients of Div, Pow and Min/Max (at the broadcast output shape; the rule sums them back to the inputs).

#include "cuda_ops.h"
#include "elementwise_kernels.cuh"

namespace strata::cuda {

namespace {

using namespace elementwise;

// Registers GradOp(dY, Z) -> dX. makeFn(attrs) returns a functor f(dy, z) over accumulation types.
template <typename MakeFn>
void addUnaryGrad(OpRegistry& registry, const std::string& type, MakeFn makeFn) {
  addCudaOp(registry, type, [type, makeFn](const KernelInit& init) {
    auto fn = makeFn(init.attrs);
    return [type, fn](KernelContext& ctx) {
      dispatchTypes<kFloatTypes>(ctx.input(0).dtype(), type.c_str(), [&](auto tag) {
        using T = decltype(tag);
        launchMap<T, T, T>(streamOf(ctx), ctx.output(0), AccFn<T, decltype(fn)>{fn}, ctx.input(0), ctx.input(1));
      });
    };
  });
}

// Activations whose derivative is a function of the output Y.

struct ReluGradFn {
  template <typename A>
  __host__ __device__ A operator()(A dy, A y) const {
    return y > A(0) ? dy : A(0);
  }
};

struct SigmoidGradFn {
  template <typename A>
  __host__ __device__ A operator()(A dy, A y) const {
    return dy * y * (A(1) - y);
  }
};

struct TanhGradFn {
  template <typename A>
  __host__ __device__ A operator()(A dy, A y) const {
    return dy * (A(1) - y * y);
  }
};

struct SqrtGradFn {
  template <typename A>
  __host__ __device__ A operator()(A dy, A y) const {
    return A(0.5) * dy / y;
  }
};

struct ReciprocalGradFn {
  template <typename A>
  __host__ __device__ A operator()(A dy, A y) const {
    return -dy * y * y;
  }
};

// Activations whose derivative is a function of the input X; branches mirror the forward kernels' so kinks fall
// on the same side.

struct LeakyReluGradFn {
  double alpha;
  template <typename A>
  __host__ __device__ A operator()(A dy, A x) const {
    return x < A(0) ? dy * A(alpha) : dy;
  }
};

struct ThresholdedReluGradFn {
  double alpha;
  template <typename A>
  __host__ __device__ A operator()(A dy, A x) const {
    return x > A(alpha) ? dy : A(0);
  }
};

struct HardSigmoidGradFn {
  double alpha;
  double beta;
  template <typename A>
  __host__ __device__ A operator()(A dy, A x) const {
    const A v = A(alpha) * x + A(beta);
    return (v > A(0) && v < A(1)) ? dy * A(alpha) : A(0);
  }
};

struct HardSwishGradFn {
  template <typename A>
  __host__ __device__ A operator()(A dy, A x) const {
    // y = x * clamp(x / 6 + 1/2, 0, 1): slope x / 3 + 1/2 inside (-3, 3).
    if (x < A(-3)) {
      return A(0);
    }
    if (x > A(3)) {
      return dy;
    }
    return dy * (x * A(1.0 / 3.0) + A(0.5));
  }
};

// The CPU's std::numbers constants, spelled out (device code cannot read them).
constexpr double kInvSqrtPi = 0.564189583547756286948079451560772586;
constexpr double kSqrt2 = 1.414213562373095048801688724209698079;

struct ErfGradFn {
  template <typename A>
  __host__ __device__ A operator()(A dy, A x) const {
    return dy * A(kInvSqrtPi * 2.0) * dExp(-x * x);
  }
};

struct GeluGradFn {
  bool useTanh;
  template <typename A>
  __host__ __device__ A operator()(A dy, A x) const {
    if (useTanh) {
      const A kScale = A(0.7978845608028654);  // sqrt(2/pi)
      const A kCubic = A(0.044715);
      const A t = dTanh(kScale * (x + kCubic * x * x * x));
      return dy * (A(0.5) * (A(1) + t) + A(0.5) * x * (A(1) - t * t) * kScale * (A(1) + A(3) * kCubic * x * x));
    }
    // d/dx x * Phi(x) = Phi(x) + x * phi(x).
    const A cdf = A(0.5) * (A(1) + dErf(x * A(kSqrt2 / 2)));
    const A pdf = dExp(A(-0.5) * x * x) * A(kInvSqrtPi / kSqrt2);
    return dy * (cdf + x * pdf);
  }
};

struct AbsGradFn {
  template <typename A>
  __host__ __device__ A operator()(A dy, A x) const {
    return x > A(0) ? dy : (x < A(0) ? -dy : A(0));
  }
};

struct SoftplusGradFn {
  template <typename A>
  __host__ __device__ A operator()(A dy, A x) const {
    return dy * sigmoid(x);
  }
};

struct SoftsignGradFn {
  template <typename A>
  __host__ __device__ A operator()(A dy, A x) const {
    const A d = A(1) + dFabs(x);
    return dy / (d * d);
  }
};

struct EluGradFn {
  double alpha;
  template <typename A>
  __host__ __device__ A operator()(A dy, A x) const {
    return x >= A(0) ? dy : dy * A(alpha) * dExp(x);
  }
};

struct CeluGradFn {
  double alpha;
  template <typename A>
  __host__ __device__ A operator()(A dy, A x) const {
    return x > A(0) ? dy : dy * dExp(x / A(alpha));
  }
};

struct SeluGradFn {
  double alpha;
  double gamma;
  template <typename A>
  __host__ __device__ A operator()(A dy, A x) const {
    return x > A(0) ? dy * A(gamma) : dy * A(gamma * alpha) * dExp(x);
  }
};

struct MishGradFn {
  template <typename A>
  __host__ __device__ A operator()(A dy, A x) const {
    // d/dx x * tanh(sp(x)) = tanh(sp) + x * (1 - tanh(sp)^2) * sigmoid(x), as sp' = sigmoid.
    const A t = dTanh(softplus(x));
    return dy * (t + x * (A(1) - t * t) * sigmoid(x));
  }
};

void registerActivationGrads(OpRegistry& registry) {
  addUnaryGrad(registry, "ReluGrad", plain<ReluGradFn>());
  addUnaryGrad(registry, "SigmoidGrad", plain<SigmoidGradFn>());
  addUnaryGrad(registry, "TanhGrad", plain<TanhGradFn>());
  addUnaryGrad(registry, "SqrtGrad", plain<SqrtGradFn>());
  addUnaryGrad(registry, "ReciprocalGrad", plain<ReciprocalGradFn>());
  addUnaryGrad(registry, "LeakyReluGrad",
               [](const Attributes& attrs) { return LeakyReluGradFn{attrs.getFloat("alpha", 0.01f)}; });
  addUnaryGrad(registry, "ThresholdedReluGrad",
               [](const Attributes& attrs) { return ThresholdedReluGradFn{attrs.getFloat("alpha", 1.0f)}; });
  addUnaryGrad(registry, "HardSigmoidGrad", [](const Attributes& attrs) {
    return HardSigmoidGradFn{attrs.getFloat("alpha", 0.2f), attrs.getFloat("beta", 0.5f)};
  });
  addUnaryGrad(registry, "HardSwishGrad", plain<HardSwishGradFn>());
  addUnaryGrad(registry, "ErfGrad", plain<ErfGradFn>());
  addUnaryGrad(registry, "GeluGrad", [](const Attributes& attrs) {
    const std::string approximate = attrs.getString("approximate", "none");
    STRATA_CHECK(approximate == "none" || approximate == "tanh", "GeluGrad: approximate must be none or tanh, got {}",
                 approximate);
    return GeluGradFn{approximate == "tanh"};
  });
  addUnaryGrad(registry, "AbsGrad", plain<AbsGradFn>());
  addUnaryGrad(registry, "SoftplusGrad", plain<SoftplusGradFn>());
  addUnaryGrad(registry, "SoftsignGrad", plain<SoftsignGradFn>());
  addUnaryGrad(registry, "EluGrad", [](const Attributes& attrs) { return EluGradFn{attrs.getFloat("alpha", 1.0f)}; });
  addUnaryGrad(registry, "CeluGrad", [](const Attributes& attrs) { return CeluGradFn{attrs.getFloat("alpha", 1.0f)}; });
  addUnaryGrad(registry, "SeluGrad", [](const Attributes& attrs) {
    return SeluGradFn{attrs.getFloat("alpha", 1.67326319217681884765625f),
                      attrs.getFloat("gamma", 1.05070102214813232421875f)};
  });
  addUnaryGrad(registry, "MishGrad", plain<MishGradFn>());
}

// ClipGrad(dY, X, min?, max?): dY where min <= X <= max. Bounds are read on the device (inputs, opset 11+) or come
// from the attributes; absent ones are infinite.
template <typename T>
struct ClipGradFn {
  const T* lo;
  const T* hi;
  Acc<T> loValue;
  Acc<T> hiValue;

  __host__ __device__ T operator()(T dy, T x) const {
    const Acc<T> l = lo != nullptr ? toAcc(*lo) : loValue;
    const Acc<T> h = hi != nullptr ? toAcc(*hi) : hiValue;
    const Acc<T> v = toAcc(x);
    return (v >= l && v <= h) ? dy : fromAcc<T>(Acc<T>(0));
  }
};

void registerClipGrad(OpRegistry& registry) {
  addCudaOp(registry, "ClipGrad", [](const KernelInit& init) {
    const bool hasMinAttr = init.attrs.has("min");
    const bool hasMaxAttr = init.attrs.has("max");
    const double minAttr = hasMinAttr ? init.attrs.getFloat("min") : 0.0;
    const double maxAttr = hasMaxAttr ? init.attrs.getFloat("max") : 0.0;
    return [=](KernelContext& ctx) {
      dispatchTypes<kFloatTypes>(ctx.input(0).dtype(), "ClipGrad", [&](auto tag) {
        using T = decltype(tag);
        using A = Acc<T>;
        ClipGradFn<T> fn{nullptr, nullptr, hasMinAttr ? accFromDouble<T>(minAttr) : -std::numeric_limits<A>::infinity(),
                         hasMaxAttr ? accFromDouble<T>(maxAttr) : std::numeric_limits<A>::infinity()};
        if (ctx.hasInput(2)) {
          fn.lo = ctx.input(2).data<T>();
        }
        if (ctx.hasInput(3)) {
          fn.hi = ctx.input(3).data<T>();
        }
        launchMap<T, T, T>(streamOf(ctx), ctx.output(0), fn, ctx.input(0), ctx.input(1));
      });
    };
  });
}

// DropoutGrad(dY, mask, ratio?, training_mode?): dY * mask / (1 - ratio), deciding like the forward kernel
// (identity without training or with ratio 0).
template <typename T>
__global__ void dropoutGradKernel(const T* dy, const bool* mask, T* dx, std::int64_t n, DropoutControl control) {
  using A = Acc<T>;
  const double ratio = control.ratioValue();
  const bool drop = control.trainingValue() && ratio != 0.0;
  const A scale = ratio >= 1.0 ? A(0) : static_cast<A>(1.0 / (1.0 - ratio));
  STRATA_GRID_STRIDE_LOOP(i, n) {
    if (!drop) {
      dx[i] = dy[i];
    } else {
      dx[i] = mask[i] ? fromAcc<T>(toAcc(dy[i]) * scale) : fromAcc<T>(A(0));
    }
  }
}

void registerDropoutGrad(OpRegistry& registry) {
  addCudaOp(registry, "DropoutGrad", [](const KernelInit& init) {
    const double ratioAttr = init.attrs.getFloat("ratio", 0.5f);
    return [ratioAttr](KernelContext& ctx) {
      const Tensor& dy = ctx.input(0);
      const std::int64_t n = dy.numel();
      if (n == 0) {
        return;
      }
      const DropoutControl control = dropoutControl(ctx, 2, ratioAttr);
      dispatchTypes<kFloatTypes>(dy.dtype(), "DropoutGrad", [&](auto tag) {
        using T = decltype(tag);
        dropoutGradKernel<T><<<blocksFor(n), kThreadsPerBlock, 0, streamOf(ctx)>>>(
            dy.data<T>(), ctx.input(1).data<bool>(), ctx.output(0).data<T>(), n, control);
        STRATA_CUDA_CHECK_LAUNCH();
      });
    };
  });
}

// DivGradDivisor(dY, Y, B) = -dY * Y / B: the gradient of Y = A / B with respect to B before summing to B's shape.
struct DivGradDivisorFn {
  template <typename A>
  __host__ __device__ A operator()(A dy, A y, A b) const {
    return -dy * y / b;
  }
};

// PowGradBase(dY, A, B) = dY * B * A^(B - 1), B of any numeric dtype (E is its accumulation type).
struct PowGradBaseFn {
  template <typename A, typename E>
  __host__ __device__ A operator()(A dy, A a, E e) const {
    const A exponent = static_cast<A>(e);
    if (exponent == A(2)) {  // x ** 2, which the CPU computes exactly as 2 * a * dy
      return A(2) * a * dy;
    }
    return exponent == A(0) ? A(0) : dy * exponent * dPow(a, exponent - A(1));
  }
};

// PowGradExponent(dY, A, Y) = dY * Y * log(A); 0 where Y == 0 (A == 0 with a positive exponent, where the limit of
// Y log A is 0).
struct PowGradExponentFn {
  template <typename A>
  __host__ __device__ A operator()(A dy, A a, A y) const {
    return y == A(0) ? A(0) : dy * y * dLog(a);
  }
};

void registerBinaryGrads(OpRegistry& registry) {
  addCudaKernel(registry, "DivGradDivisor", [](KernelContext& ctx) {
    dispatchTypes<kFloatTypes>(ctx.input(0).dtype(), "DivGradDivisor", [&](auto tag) {
      using T = decltype(tag);
      launchMap<T, T, T, T>(streamOf(ctx), ctx.output(0), AccFn<T, DivGradDivisorFn>{DivGradDivisorFn{}}, ctx.input(0),
                            ctx.input(1), ctx.input(2));
    });
  });
  addCudaKernel(registry, "PowGradBase", [](KernelContext& ctx) {
    dispatchTypes<kFloatTypes>(ctx.input(0).dtype(), "PowGradBase", [&](auto tag) {
      using T = decltype(tag);
      dispatchTypes<kNumericTypes>(ctx.input(2).dtype(), "PowGradBase exponent", [&](auto expTag) {
        using E = decltype(expTag);
        launchMap<T, T, T, E>(streamOf(ctx), ctx.output(0), AccFn<T, PowGradBaseFn>{PowGradBaseFn{}}, ctx.input(0),
                              ctx.input(1), ctx.input(2));
      });
    });
  });
  addCudaKernel(registry, "PowGradExponent", [](KernelContext& ctx) {
    dispatchTypes<kFloatTypes>(ctx.input(0).dtype(), "PowGradExponent", [&](auto tag) {
      using T = decltype(tag);
      launchMap<T, T, T, T>(streamOf(ctx), ctx.output(0), AccFn<T, PowGradExponentFn>{PowGradExponentFn{}},
                            ctx.input(0), ctx.input(1), ctx.input(2));
    });
  });
}

// MinMaxGrad(dY, Y, X0, ..., Xn-1) with attribute `index` = i: dY / t where Xi (broadcast) equals Y and t inputs
// do, else 0 (tied inputs share the gradient; Note [Min/Max ties] in the CPU kernel). Operands: dY, Y, X0, ...
template <typename T>
__global__ void minMaxGradKernel(T* out, std::int64_t n, OperandList<T> operands, int self) {
  using A = Acc<T>;
  STRATA_GRID_STRIDE_LOOP(i, n) {
    const A y = toAcc(operands.load(1, i));
    if (!(toAcc(operands.load(self, i)) == y)) {
      out[i] = fromAcc<T>(A(0));
      continue;
    }
    int ties = 0;
    for (int k = 2; k < operands.count; ++k) {
      ties += toAcc(operands.load(k, i)) == y ? 1 : 0;
    }
    out[i] = fromAcc<T>(toAcc(operands.load(0, i)) / static_cast<A>(ties));
  }
}

// With more inputs than one operand list holds: counts ties in passes (operand 0 is Y, the rest a chunk of Xs),
// adding to `ties` unless `first`.
template <typename T>
__global__ void countTiesKernel(std::int32_t* ties, std::int64_t n, OperandList<T> operands, bool first) {
  STRATA_GRID_STRIDE_LOOP(i, n) {
    const auto y = toAcc(operands.load(0, i));
    std::int32_t count = first ? 0 : ties[i];
    for (int k = 1; k < operands.count; ++k) {
      count += toAcc(operands.load(k, i)) == y ? 1 : 0;
    }
    ties[i] = count;
  }
}

struct MinMaxGradFinishFn {
  template <typename A>
  __host__ __device__ A operator()(A dy, A y, A x, std::int32_t ties) const {
    return x == y ? dy / static_cast<A>(ties) : A(0);
  }
};

template <typename T>
void minMaxGrad(KernelContext& ctx, std::size_t index) {
  Tensor& out = ctx.output(0);
  const std::int64_t n = out.numel();
  if (n == 0) {
    return;
  }
  const cudaStream_t stream = streamOf(ctx);
  std::vector<const Tensor*> inputs;
  for (std::size_t k = 0; k < ctx.inputs.size(); ++k) {
    inputs.push_back(&ctx.input(k));
  }
  const std::size_t self = 2 + index;
  if (inputs.size() <= static_cast<std::size_t>(kMaxOperands)) {
    minMaxGradKernel<T><<<blocksFor(n), kThreadsPerBlock, 0, stream>>>(
        out.data<T>(), n, makeOperandList<T>(out, inputs), static_cast<int>(self));
    STRATA_CUDA_CHECK_LAUNCH();
    return;
  }
  Tensor ties = Tensor::empty(TensorMeta{DType::Int32, out.shape()}, MemoryCategory::Workspace, out.device());
  std::size_t next = 2;
  while (next < inputs.size()) {
    std::vector<const Tensor*> chunk{inputs[1]};
    const bool first = next == 2;
    while (chunk.size() < static_cast<std::size_t>(kMaxOperands) && next < inputs.size()) {
      chunk.push_back(inputs[next++]);
    }
    countTiesKernel<T><<<blocksFor(n), kThreadsPerBlock, 0, stream>>>(ties.data<std::int32_t>(), n,
                                                                      makeOperandList<T>(out, chunk), first);
    STRATA_CUDA_CHECK_LAUNCH();
  }
  launchMap<T, T, T, T, std::int32_t>(stream, out, AccFn<T, MinMaxGradFinishFn>{MinMaxGradFinishFn{}}, *inputs[0],
                                      *inputs[1], *inputs[self], ties);
}

void registerMinMaxGrad(OpRegistry& registry) {
  addCudaOp(registry, "MinMaxGrad", [](const KernelInit& init) {
    const auto index = static_cast<std::size_t>(init.attrs.getInt("index", 0));
    return [index](KernelContext& ctx) {
      dispatchTypes<kFloatTypes>(ctx.input(0).dtype(), "MinMaxGrad",
                                 [&](auto tag) { minMaxGrad<decltype(tag)>(ctx, index); });
    };
  });
}

}  // namespace

void registerElementwiseGradKernels(OpRegistry& registry) {
  registerActivationGrads(registry);
  registerClipGrad(registry);
  registerDropoutGrad(registry);
  registerBinaryGrads(registry);
  registerMinMaxGrad(registry);
}

}  // namespace strata::cuda
