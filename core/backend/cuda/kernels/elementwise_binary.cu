// Broadcasting binary arithmetic (Add, Sub, Mul, Div, Pow, Mod, PRelu), variadic Max/Min/Sum/Mean, the comparisons
// and the boolean ops, mirroring core/backend/cpu/elementwise_binary.cpp and elementwise_logical.cpp.

#include "elementwise_kernels.cuh"

namespace strata::cuda {

namespace {

using namespace elementwise;

// Integer division that neither traps on a zero divisor (gives 0) nor on MIN / -1 (wraps).
template <typename T>
__host__ __device__ T intDiv(T x, T y) {
  if constexpr (std::is_signed_v<T>) {
    if (y == T(-1)) {
      return static_cast<T>(static_cast<std::make_unsigned_t<T>>(0) - static_cast<std::make_unsigned_t<T>>(x));
    }
  }
  return y == T(0) ? T(0) : static_cast<T>(x / y);
}

// Remainder with the sign of the divisor (Python %, ONNX Mod fmod=0) or of the dividend (C fmod, fmod=1).
template <typename T>
__host__ __device__ T modulo(T x, T y, bool cStyle) {
  if constexpr (std::is_floating_point_v<T>) {
    T r = dFmod(x, y);
    if (!cStyle && r != T(0) && ((r < T(0)) != (y < T(0)))) {
      r += y;
    }
    return r;
  } else {
    if (y == T(0)) {
      return T(0);
    }
    if constexpr (std::is_signed_v<T>) {
      if (y == T(-1)) {
        return T(0);
      }
    }
    T r = static_cast<T>(x % y);
    if constexpr (std::is_signed_v<T>) {
      if (!cStyle && r != T(0) && ((r < T(0)) != (y < T(0)))) {
        r = static_cast<T>(r + y);
      }
    }
    return r;
  }
}

// Exact integer power by squaring; negative exponents truncate toward zero like 1 / base^-e.
template <typename T, typename E>
__host__ __device__ T intPow(T base, E exponent) {
  if constexpr (std::is_signed_v<E>) {
    if (exponent < E(0)) {
      if (base == T(1)) {
        return T(1);
      }
      if constexpr (std::is_signed_v<T>) {
        if (base == T(-1)) {
          return (static_cast<std::int64_t>(exponent) % 2 == 0) ? T(1) : T(-1);
        }
      }
      return T(0);
    }
  }
  // Unsigned arithmetic wraps like two's complement, giving the low bits of the exact power.
  std::uint64_t result = 1;
  auto b = static_cast<std::uint64_t>(static_cast<std::int64_t>(base));
  auto e = static_cast<std::uint64_t>(exponent);
  while (e != 0) {
    if ((e & 1U) != 0) {
      result *= b;
    }
    b *= b;
    e >>= 1U;
  }
  return static_cast<T>(result);
}

struct AddFn {
  template <typename A>
  __host__ __device__ A operator()(A x, A y) const {
    return static_cast<A>(x + y);
  }
};

struct SubFn {
  template <typename A>
  __host__ __device__ A operator()(A x, A y) const {
    return static_cast<A>(x - y);
  }
};

struct MulFn {
  template <typename A>
  __host__ __device__ A operator()(A x, A y) const {
    return static_cast<A>(x * y);
  }
};

struct DivFn {
  template <typename A>
  __host__ __device__ A operator()(A x, A y) const {
    if constexpr (std::is_floating_point_v<A>) {
      return x / y;
    } else {
      return intDiv(x, y);
    }
  }
};

struct ModFn {
  bool cStyle;
  template <typename A>
  __host__ __device__ A operator()(A x, A y) const {
    return modulo(x, y, cStyle);
  }
};

// PRelu: the slope broadcasts to X.
struct PReluFn {
  template <typename A>
  __host__ __device__ A operator()(A x, A slope) const {
    return x < A(0) ? static_cast<A>(x * slope) : x;
  }
};

// Pow(base, exponent) with the exponent of any numeric dtype (A and B are their accumulation types).
struct PowFn {
  template <typename A, typename B>
  __host__ __device__ A operator()(A x, B y) const {
    if constexpr (std::is_floating_point_v<A>) {
      // x ** 2 as a multiply, exact like the CPU's (whose std::pow(x, 2) is correctly rounded too).
      const A e = static_cast<A>(y);
      return e == A(2) ? x * x : dPow(x, e);
    } else if constexpr (std::is_floating_point_v<B>) {
      return static_cast<A>(dPow(static_cast<double>(x), static_cast<double>(y)));
    } else {
      return intPow(x, y);
    }
  }
};

struct MaxFn {
  template <typename A>
  __host__ __device__ A operator()(A x, A y) const {
    if constexpr (std::is_floating_point_v<A>) {
      return (x > y || x != x) ? x : y;  // NaN propagates
    } else {
      return x > y ? x : y;
    }
  }
};

struct MinFn {
  template <typename A>
  __host__ __device__ A operator()(A x, A y) const {
    if constexpr (std::is_floating_point_v<A>) {
      return (x < y || x != x) ? x : y;
    } else {
      return x < y ? x : y;
    }
  }
};

struct EqualFn {
  template <typename A>
  __host__ __device__ bool operator()(A x, A y) const {
    return x == y;
  }
};
struct LessFn {
  template <typename A>
  __host__ __device__ bool operator()(A x, A y) const {
    return x < y;
  }
};
struct GreaterFn {
  template <typename A>
  __host__ __device__ bool operator()(A x, A y) const {
    return x > y;
  }
};
struct LessOrEqualFn {
  template <typename A>
  __host__ __device__ bool operator()(A x, A y) const {
    return x <= y;
  }
};
struct GreaterOrEqualFn {
  template <typename A>
  __host__ __device__ bool operator()(A x, A y) const {
    return x >= y;
  }
};

struct AndFn {
  __host__ __device__ bool operator()(bool x, bool y) const { return x && y; }
};
struct OrFn {
  __host__ __device__ bool operator()(bool x, bool y) const { return x || y; }
};
struct XorFn {
  __host__ __device__ bool operator()(bool x, bool y) const { return x != y; }
};
struct NotFn {
  __host__ __device__ bool operator()(bool x) const { return !x; }
};

// Registers a binary op whose output has the inputs' dtype. makeFn(attrs) returns a functor f(x, y).
template <unsigned Set, typename MakeFn>
void addBinary(OpRegistry& registry, const std::string& type, MakeFn makeFn) {
  addCudaOp(registry, type, [type, makeFn](const KernelInit& init) {
    // Note [Fused ReLU] (graphs/relu_fusion.h) is a CPU plan's fusion; a CUDA kernel must not ignore it.
    STRATA_CHECK(init.attrs.getInt("fused_relu", 0) == 0,
                 "{} with a fused ReLU runs on the CPU only (the CUDA plan keeps the Relu node)", type);
    auto fn = makeFn(init.attrs);
    return [type, fn](KernelContext& ctx) {
      dispatchTypes<Set>(ctx.input(0).dtype(), type.c_str(), [&](auto tag) {
        using T = decltype(tag);
        launchMap<T, T, T>(streamOf(ctx), ctx.output(0), AccFn<T, decltype(fn)>{fn}, ctx.input(0), ctx.input(1));
      });
    };
  });
}

// Registers a comparison with a bool output.
template <unsigned Set, typename F>
void addCompare(OpRegistry& registry, const std::string& type) {
  addCudaKernel(registry, type, [type](KernelContext& ctx) {
    dispatchTypes<Set>(ctx.input(0).dtype(), type.c_str(), [&](auto tag) {
      using T = decltype(tag);
      launchMap<bool, T, T>(streamOf(ctx), ctx.output(0), AccFn<bool, F>{F{}}, ctx.input(0), ctx.input(1));
    });
  });
}

template <typename F>
void addLogical(OpRegistry& registry, const std::string& type) {
  addCudaKernel(registry, type, [](KernelContext& ctx) {
    launchMap<bool, bool, bool>(streamOf(ctx), ctx.output(0), F{}, ctx.input(0), ctx.input(1));
  });
}

// out = in0 op in1 op ... (left to right, in the accumulation type), divided by `meanCount` when it is positive.
template <typename T, typename F>
__global__ void foldKernel(T* out, std::int64_t n, OperandList<T> operands, F f, int meanCount) {
  using A = Acc<T>;
  STRATA_GRID_STRIDE_LOOP(i, n) {
    A acc = toAcc(operands.load(0, i));
    for (int k = 1; k < operands.count; ++k) {
      acc = static_cast<A>(f(acc, toAcc(operands.load(k, i))));
    }
    if constexpr (kIsDeviceFloat<T>) {
      if (meanCount > 0) {
        acc = acc / static_cast<A>(meanCount);
      }
    }
    out[i] = fromAcc<T>(acc);
  }
}

// Registers a variadic op folding its inputs into the output (Max, Min, Sum, Mean). Inputs beyond one launch's
// operand list continue from the partial result in out.
template <unsigned Set, typename F>
void addVariadic(OpRegistry& registry, const std::string& type, bool mean = false) {
  addCudaKernel(registry, type, [type, mean](KernelContext& ctx) {
    Tensor& out = ctx.output(0);
    std::vector<const Tensor*> inputs;
    for (std::size_t i = 0; i < ctx.inputs.size(); ++i) {
      if (ctx.hasInput(i)) {
        inputs.push_back(&ctx.input(i));
      }
    }
    STRATA_CHECK(!inputs.empty(), "{} needs at least one input", type);
    const std::int64_t n = out.numel();
    if (n == 0) {
      return;
    }
    dispatchTypes<Set>(out.dtype(), type.c_str(), [&](auto tag) {
      using T = decltype(tag);
      std::size_t next = 0;
      while (next < inputs.size()) {
        std::vector<const Tensor*> chunk;
        if (next > 0) {
          chunk.push_back(&out);
        }
        while (chunk.size() < static_cast<std::size_t>(kMaxOperands) && next < inputs.size()) {
          chunk.push_back(inputs[next++]);
        }
        const bool last = next == inputs.size();
        const int meanCount = (mean && last && inputs.size() > 1) ? static_cast<int>(inputs.size()) : 0;
        foldKernel<T, F><<<blocksFor(n), kThreadsPerBlock, 0, streamOf(ctx)>>>(
            out.data<T>(), n, makeOperandList<T>(out, chunk), F{}, meanCount);
        STRATA_CUDA_CHECK_LAUNCH();
      }
    });
  });
}

void registerPow(OpRegistry& registry) {
  addCudaKernel(registry, "Pow", [](KernelContext& ctx) {
    const Tensor& a = ctx.input(0);
    const Tensor& b = ctx.input(1);
    dispatchTypes<kPowBaseTypes>(a.dtype(), "Pow", [&](auto baseTag) {
      using T = decltype(baseTag);
      dispatchTypes<kNumericTypes>(b.dtype(), "Pow", [&](auto expTag) {
        using E = decltype(expTag);
        launchMap<T, T, E>(streamOf(ctx), ctx.output(0), AccFn<T, PowFn>{PowFn{}}, a, b);
      });
    });
  });
}

}  // namespace

void registerBinaryElementwiseKernels(OpRegistry& registry) {
  addBinary<kNumericTypes>(registry, "Add", plain<AddFn>());
  addBinary<kNumericTypes>(registry, "Sub", plain<SubFn>());
  addBinary<kNumericTypes>(registry, "Mul", plain<MulFn>());
  addBinary<kNumericTypes>(registry, "Div", plain<DivFn>());
  addBinary<kNumericTypes>(registry, "Mod",
                           [](const Attributes& attrs) { return ModFn{attrs.getInt("fmod", 0) != 0}; });
  addBinary<kSignedTypes>(registry, "PRelu", plain<PReluFn>());
  registerPow(registry);

  addVariadic<kNumericTypes, MaxFn>(registry, "Max");
  addVariadic<kNumericTypes, MinFn>(registry, "Min");
  addVariadic<kNumericTypes, AddFn>(registry, "Sum");
  addVariadic<kFloatTypes, AddFn>(registry, "Mean", /*mean=*/true);

  addCompare<kAllTypes, EqualFn>(registry, "Equal");
  addCompare<kNumericTypes, LessFn>(registry, "Less");
  addCompare<kNumericTypes, GreaterFn>(registry, "Greater");
  addCompare<kNumericTypes, LessOrEqualFn>(registry, "LessOrEqual");
  addCompare<kNumericTypes, GreaterOrEqualFn>(registry, "GreaterOrEqual");

  addCudaKernel(registry, "Not",
                [](KernelContext& ctx) { launchMap<bool, bool>(streamOf(ctx), ctx.output(0), NotFn{}, ctx.input(0)); });
  addLogical<AndFn>(registry, "And");
  addLogical<OrFn>(registry, "Or");
  addLogical<XorFn>(registry, "Xor");
}

}  // namespace strata::cuda
