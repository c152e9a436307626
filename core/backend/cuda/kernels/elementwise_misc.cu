// Where, Cast, CastLike, Identity, Clip and Dropout, mirroring core/backend/cpu/elementwise_logical.cpp and
// elementwise_misc.cpp; also the entry point that registers every elementwise family.

#include "cuda_ops.h"
#include "elementwise_kernels.cuh"

namespace strata::cuda {

namespace {

using namespace elementwise;

// Where on raw elements: the values are only copied, so any dtype of the element's size works.
struct WhereFn {
  template <typename E>
  __host__ __device__ E operator()(bool c, E x, E y) const {
    return c ? x : y;
  }
};

void registerWhere(OpRegistry& registry) {
  addCudaKernel(registry, "Where", [](KernelContext& ctx) {
    const Tensor& cond = ctx.input(0);
    const Tensor& x = ctx.input(1);
    const Tensor& y = ctx.input(2);
    Tensor& out = ctx.output(0);
    const cudaStream_t stream = streamOf(ctx);
    switch (dtypeSize(x.dtype())) {
      case 1:
        launchMap<std::uint8_t, bool, std::uint8_t, std::uint8_t>(stream, out, WhereFn{}, cond, x, y);
        break;
      case 2:
        launchMap<std::uint16_t, bool, std::uint16_t, std::uint16_t>(stream, out, WhereFn{}, cond, x, y);
        break;
      case 4:
        launchMap<std::uint32_t, bool, std::uint32_t, std::uint32_t>(stream, out, WhereFn{}, cond, x, y);
        break;
      case 8:
        launchMap<std::uint64_t, bool, std::uint64_t, std::uint64_t>(stream, out, WhereFn{}, cond, x, y);
        break;
      default:
        fail("Where: unsupported dtype {}", dtypeName(x.dtype()));
    }
  });
}

// Reads one element of device type S as an arithmetic value (16-bit floats widen to float).
template <typename S>
__host__ __device__ auto loadValue(S value) {
  if constexpr (std::is_same_v<S, __half>) {
    return __half2float(value);
  } else if constexpr (std::is_same_v<S, __nv_bfloat16>) {
    return __bfloat162float(value);
  } else {
    return value;
  }
}

// Converts an arithmetic value to device type D, as the CPU's storeValue: float to integer truncates toward zero;
// out-of-range values go through int64 and wrap instead of being undefined behaviour.
template <typename D, typename V>
__host__ __device__ D storeValue(V value) {
  if constexpr (std::is_same_v<D, __half>) {
    return __float2half_rn(static_cast<float>(value));
  } else if constexpr (std::is_same_v<D, __nv_bfloat16>) {
    return __float2bfloat16_rn(static_cast<float>(value));
  } else if constexpr (std::is_same_v<D, bool>) {
    return value != V(0);
  } else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<V>) {
    constexpr auto kLimit = static_cast<V>(9.2233720368547758e18);  // 2^63
    if (!(value > -kLimit && value < kLimit)) {
      return static_cast<D>(static_cast<std::int64_t>(0x8000000000000000ULL));  // int64 min
    }
    if constexpr (sizeof(D) < sizeof(std::int64_t)) {
      return static_cast<D>(static_cast<std::int64_t>(value));
    } else {
      return static_cast<D>(value);
    }
  } else {
    return static_cast<D>(value);
  }
}

template <typename D>
struct CastFn {
  template <typename S>
  __host__ __device__ D operator()(S x) const {
    return storeValue<D>(loadValue(x));
  }
};

void copyDevice(const Tensor& in, Tensor& out, cudaStream_t stream) {
  if (in.rawData() == out.rawData() || in.bytes() == 0) {
    return;
  }
  STRATA_CUDA_CHECK(cudaMemcpyAsync(out.rawData(), in.rawData(), in.bytes(), cudaMemcpyDeviceToDevice, stream));
}

void castTensor(const Tensor& in, Tensor& out, cudaStream_t stream) {
  if (in.dtype() == out.dtype()) {
    copyDevice(in, out, stream);
    return;
  }
  dispatchTypes<kAllTypes>(in.dtype(), "Cast", [&](auto srcTag) {
    using S = decltype(srcTag);
    dispatchTypes<kAllTypes>(out.dtype(), "Cast", [&](auto dstTag) {
      using D = decltype(dstTag);
      launchMap<D, S>(stream, out, CastFn<D>{}, in);
    });
  });
}

void registerCasts(OpRegistry& registry) {
  addCudaKernel(registry, "Cast", [](KernelContext& ctx) { castTensor(ctx.input(0), ctx.output(0), streamOf(ctx)); });
  addCudaKernel(registry, "CastLike",
                [](KernelContext& ctx) { castTensor(ctx.input(0), ctx.output(0), streamOf(ctx)); });
  addCudaKernel(registry, "Identity",
                [](KernelContext& ctx) { copyDevice(ctx.input(0), ctx.output(0), streamOf(ctx)); });
}

// Clip with bounds read on the device (absent bound inputs fall back to the attribute or the type's range).
template <typename T>
struct ClipFn {
  const T* lo;
  const T* hi;
  Acc<T> loValue;
  Acc<T> hiValue;

  __host__ __device__ T operator()(T x) const {
    const Acc<T> l = lo != nullptr ? toAcc(*lo) : loValue;
    const Acc<T> h = hi != nullptr ? toAcc(*hi) : hiValue;
    // std::max(x, lo) keeps a NaN x; min > max yields max everywhere, as the spec asks.
    return fromAcc<T>(stdMin(stdMax(toAcc(x), l), h));
  }
};

// numeric_limits<T>::lowest() and max() of the element type, widened.
template <typename T>
Acc<T> lowestOf() {
  if constexpr (std::is_same_v<T, __half>) {
    return -65504.0f;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return -3.38953138925153547590470800371487866880e38f;
  } else {
    return std::numeric_limits<T>::lowest();
  }
}
template <typename T>
Acc<T> maxOf() {
  if constexpr (std::is_same_v<T, __half>) {
    return 65504.0f;
  } else if constexpr (std::is_same_v<T, __nv_bfloat16>) {
    return 3.38953138925153547590470800371487866880e38f;
  } else {
    return std::numeric_limits<T>::max();
  }
}

void registerClip(OpRegistry& registry) {
  addCudaOp(registry, "Clip", [](const KernelInit& init) {
    // Before opset 11 the bounds were float attributes.
    const bool hasMinAttr = init.attrs.has("min");
    const bool hasMaxAttr = init.attrs.has("max");
    const double minAttr = hasMinAttr ? init.attrs.getFloat("min") : 0.0;
    const double maxAttr = hasMaxAttr ? init.attrs.getFloat("max") : 0.0;
    return [=](KernelContext& ctx) {
      const Tensor& in = ctx.input(0);
      dispatchTypes<kNumericTypes>(in.dtype(), "Clip", [&](auto tag) {
        using T = decltype(tag);
        ClipFn<T> fn{nullptr, nullptr, hasMinAttr ? accFromDouble<T>(minAttr) : lowestOf<T>(),
                     hasMaxAttr ? accFromDouble<T>(maxAttr) : maxOf<T>()};
        if (ctx.hasInput(1)) {
          fn.lo = ctx.input(1).data<T>();
        }
        if (ctx.hasInput(2)) {
          fn.hi = ctx.input(2).data<T>();
        }
        launchMap<T, T>(streamOf(ctx), ctx.output(0), fn, in);
      });
    };
  });
}

// Keep element i when a 24-bit uniform in [0, 1) is >= ratio; the kept ones are scaled by 1 / (1 - ratio).
// Without training (or with ratio 0) the op is an identity with an all-true mask.
// The run index comes from device memory when the executor provides it (KernelContext::deviceStep), so a replayed
// CUDA graph draws a new mask each run; the mask is the CPU kernel's for the same seed and run.
template <typename T>
__global__ void dropoutKernel(const T* x, T* y, bool* mask, std::int64_t n, DropoutControl control, std::uint64_t seed,
                              const std::uint64_t* deviceStep, std::uint64_t hostStep) {
  using A = Acc<T>;
  const std::uint64_t stream = mix64(seed ^ mix64(deviceStep != nullptr ? *deviceStep : hostStep));
  const double ratio = control.ratioValue();
  const bool drop = control.trainingValue() && ratio != 0.0;
  const auto threshold = static_cast<std::uint64_t>(ceil(ratio * 16777216.0));
  const A scale = ratio >= 1.0 ? A(0) : static_cast<A>(1.0 / (1.0 - ratio));
  STRATA_GRID_STRIDE_LOOP(i, n) {
    if (!drop) {
      y[i] = x[i];
      if (mask != nullptr) {
        mask[i] = true;
      }
      continue;
    }
    const bool keep = (mix64(stream + static_cast<std::uint64_t>(i)) >> 40U) >= threshold;
    y[i] = keep ? fromAcc<T>(toAcc(x[i]) * scale) : fromAcc<T>(A(0));
    if (mask != nullptr) {
      mask[i] = keep;
    }
  }
}

void checkRatio(double ratio) {
  STRATA_CHECK(ratio >= 0.0 && ratio <= 1.0, "Dropout: ratio must be in [0, 1], got {}", ratio);
}

class DropoutKernel final : public OpKernel {
 public:
  explicit DropoutKernel(const KernelInit& init)
      : seed_(static_cast<std::uint64_t>(init.attrs.getInt("seed", 0))),
        ratioAttr_(init.attrs.getFloat("ratio", 0.5f)) {  // an attribute before opset 12
    // The ratio is read on the device at run time (no host synchronisation), so it is checked here when it is
    // known at plan time.
    const bool ratioInput = init.inputs.size() > 1 && init.inputs[1].present;
    if (!ratioInput) {
      checkRatio(ratioAttr_);
    } else if (init.inputs[1].constant != nullptr) {
      checkRatio(hostScalarAsDouble(*init.inputs[1].constant));
    }
  }

  bool readsDeviceStep() const override { return true; }

  void compute(KernelContext& ctx) override {
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.output(0);
    const std::int64_t n = in.numel();
    if (n == 0) {
      return;
    }
    bool* mask = ctx.hasOutput(1) ? ctx.output(1).data<bool>() : nullptr;
    const DropoutControl control = dropoutControl(ctx, 1, ratioAttr_);
    dispatchTypes<kFloatTypes>(in.dtype(), "Dropout", [&](auto tag) {
      using T = decltype(tag);
      dropoutKernel<T><<<blocksFor(n), kThreadsPerBlock, 0, streamOf(ctx)>>>(in.data<T>(), out.data<T>(), mask, n,
                                                                             control, seed_, ctx.deviceStep, ctx.step);
      STRATA_CUDA_CHECK_LAUNCH();
    });
  }

 private:
  std::uint64_t seed_;
  double ratioAttr_;
};

void registerDropout(OpRegistry& registry) {
  addCudaKernelFactory(registry, "Dropout", [](const KernelInit& init) -> std::unique_ptr<OpKernel> {
    return std::make_unique<DropoutKernel>(init);
  });
}

}  // namespace

void registerMiscElementwiseKernels(OpRegistry& registry) {
  registerWhere(registry);
  registerCasts(registry);
  registerClip(registry);
  registerDropout(registry);
}

void registerElementwiseKernels(OpRegistry& registry) {
  registerUnaryElementwiseKernels(registry);
  registerBinaryElementwiseKernels(registry);
  registerMiscElementwiseKernels(registry);
}

}  // namespace strata::cuda
