// Unary elementwise ops (activations and math functions), mirroring core/backend/cpu/elementwise_ops.cpp.

#include "elementwise_kernels.cuh"

namespace strata::cuda {

namespace {

using namespace elementwise;

// Registers a same-dtype unary op over the dtype set. makeFn(attrs) returns a functor over accumulation types.
template <unsigned Set, typename MakeFn>
void addUnary(OpRegistry& registry, const std::string& type, MakeFn makeFn) {
  addCudaOp(registry, type, [type, makeFn](const KernelInit& init) {
    auto fn = makeFn(init.attrs);
    return [type, fn](KernelContext& ctx) {
      const Tensor& in = ctx.input(0);
      dispatchTypes<Set>(in.dtype(), type.c_str(), [&](auto tag) {
        using T = decltype(tag);
        launchMap<T, T>(streamOf(ctx), ctx.output(0), AccFn<T, decltype(fn)>{fn}, in);
      });
    };
  });
}

// Registers a float unary op with a bool result (IsNaN, IsInf).
template <typename MakeFn>
void addPredicate(OpRegistry& registry, const std::string& type, MakeFn makeFn) {
  addCudaOp(registry, type, [type, makeFn](const KernelInit& init) {
    auto fn = makeFn(init.attrs);
    return [type, fn](KernelContext& ctx) {
      const Tensor& in = ctx.input(0);
      dispatchTypes<kFloatTypes>(in.dtype(), type.c_str(), [&](auto tag) {
        using T = decltype(tag);
        launchMap<bool, T>(streamOf(ctx), ctx.output(0), AccFn<bool, decltype(fn)>{fn}, in);
      });
    };
  });
}

struct ReluFn {
  template <typename A>
  __host__ __device__ A operator()(A x) const {
    return x > A(0) ? x : A(0);
  }
};

struct LeakyReluFn {
  double alpha;
  template <typename A>
  __host__ __device__ A operator()(A x) const {
    return x < A(0) ? x * A(alpha) : x;
  }
};

struct ThresholdedReluFn {
  double alpha;
  template <typename A>
  __host__ __device__ A operator()(A x) const {
    return x > A(alpha) ? x : A(0);
  }
};

struct SigmoidFn {
  template <typename A>
  __host__ __device__ A operator()(A x) const {
    return sigmoid(x);
  }
};

struct HardSigmoidFn {
  double alpha;
  double beta;
  template <typename A>
  __host__ __device__ A operator()(A x) const {
    return stdMax(A(0), stdMin(A(1), A(alpha) * x + A(beta)));
  }
};

struct HardSwishFn {
  template <typename A>
  __host__ __device__ A operator()(A x) const {
    return x * stdMax(A(0), stdMin(A(1), x * A(1.0 / 6.0) + A(0.5)));
  }
};

struct GeluFn {
  bool useTanh;
  template <typename A>
  __host__ __device__ A operator()(A x) const {
    if (useTanh) {
      const A inner = A(0.7978845608028654) * (x + A(0.044715) * x * x * x);  // sqrt(2/pi)
      return A(0.5) * x * (A(1) + dTanh(inner));
    }
    return A(0.5) * x * (A(1) + dErf(x * A(0.7071067811865476)));
  }
};

struct ReciprocalFn {
  template <typename A>
  __host__ __device__ A operator()(A x) const {
    return A(1) / x;
  }
};

struct NegFn {
  template <typename A>
  __host__ __device__ A operator()(A x) const {
    return static_cast<A>(-x);
  }
};

struct AbsFn {
  template <typename A>
  __host__ __device__ A operator()(A x) const {
    if constexpr (std::is_unsigned_v<A>) {
      return x;
    } else if constexpr (std::is_floating_point_v<A>) {
      return dFabs(x);
    } else {
      return x < A(0) ? A(-x) : x;
    }
  }
};

struct SignFn {
  template <typename A>
  __host__ __device__ A operator()(A x) const {
    if constexpr (std::is_unsigned_v<A>) {
      return static_cast<A>(A(0) < x);
    } else {
      return static_cast<A>((A(0) < x) - (x < A(0)));
    }
  }
};

struct SoftplusFn {
  template <typename A>
  __host__ __device__ A operator()(A x) const {
    return softplus(x);
  }
};

struct SoftsignFn {
  template <typename A>
  __host__ __device__ A operator()(A x) const {
    return x / (A(1) + dFabs(x));
  }
};

struct SeluFn {
  double alpha;
  double gamma;
  template <typename A>
  __host__ __device__ A operator()(A x) const {
    return x > A(0) ? A(gamma) * x : A(gamma) * (A(alpha) * dExp(x) - A(alpha));
  }
};

struct EluFn {
  double alpha;
  template <typename A>
  __host__ __device__ A operator()(A x) const {
    return x >= A(0) ? x : A(alpha) * (dExp(x) - A(1));
  }
};

struct CeluFn {
  double alpha;
  template <typename A>
  __host__ __device__ A operator()(A x) const {
    return stdMax(A(0), x) + stdMin(A(0), A(alpha) * (dExp(x / A(alpha)) - A(1)));
  }
};

struct MishFn {
  template <typename A>
  __host__ __device__ A operator()(A x) const {
    return x * dTanh(softplus(x));
  }
};

struct ShrinkFn {
  double lambd;
  double bias;
  template <typename A>
  __host__ __device__ A operator()(A x) const {
    return x < A(-lambd) ? x + A(bias) : (x > A(lambd) ? x - A(bias) : A(0));
  }
};

// Ops that are one device math function.
#define STRATA_EW_MATH_FN(Name, fn)               \
  struct Name {                                   \
    template <typename A>                         \
    __host__ __device__ A operator()(A x) const { \
      return fn(x);                               \
    }                                             \
  };

STRATA_EW_MATH_FN(TanhFn, dTanh)
STRATA_EW_MATH_FN(ErfFn, dErf)
STRATA_EW_MATH_FN(SqrtFn, dSqrt)
STRATA_EW_MATH_FN(ExpFn, dExp)
STRATA_EW_MATH_FN(LogFn, dLog)
STRATA_EW_MATH_FN(CeilFn, dCeil)
STRATA_EW_MATH_FN(FloorFn, dFloor)
STRATA_EW_MATH_FN(RoundFn, dRint)
STRATA_EW_MATH_FN(SinFn, dSin)
STRATA_EW_MATH_FN(CosFn, dCos)
STRATA_EW_MATH_FN(TanFn, dTan)
STRATA_EW_MATH_FN(AsinFn, dAsin)
STRATA_EW_MATH_FN(AcosFn, dAcos)
STRATA_EW_MATH_FN(AtanFn, dAtan)
STRATA_EW_MATH_FN(SinhFn, dSinh)
STRATA_EW_MATH_FN(CoshFn, dCosh)
STRATA_EW_MATH_FN(AsinhFn, dAsinh)
STRATA_EW_MATH_FN(AcoshFn, dAcosh)
STRATA_EW_MATH_FN(AtanhFn, dAtanh)

#undef STRATA_EW_MATH_FN

struct IsNaNFn {
  template <typename A>
  __host__ __device__ bool operator()(A x) const {
    return x != x;
  }
};

struct IsInfFn {
  bool negative;
  bool positive;
  template <typename A>
  __host__ __device__ bool operator()(A x) const {
    const bool inf = dFabs(x) == A(INFINITY);
    return inf && (x > A(0) ? positive : negative);
  }
};

}  // namespace

void registerUnaryElementwiseKernels(OpRegistry& registry) {
  addUnary<kSignedTypes>(registry, "Relu", plain<ReluFn>());
  addUnary<kFloatTypes>(registry, "LeakyRelu",
                        [](const Attributes& attrs) { return LeakyReluFn{attrs.getFloat("alpha", 0.01f)}; });
  addUnary<kFloatTypes>(registry, "ThresholdedRelu",
                        [](const Attributes& attrs) { return ThresholdedReluFn{attrs.getFloat("alpha", 1.0f)}; });
  addUnary<kFloatTypes>(registry, "Sigmoid", plain<SigmoidFn>());
  addUnary<kFloatTypes>(registry, "Tanh", plain<TanhFn>());
  addUnary<kFloatTypes>(registry, "HardSigmoid", [](const Attributes& attrs) {
    return HardSigmoidFn{attrs.getFloat("alpha", 0.2f), attrs.getFloat("beta", 0.5f)};
  });
  addUnary<kFloatTypes>(registry, "HardSwish", plain<HardSwishFn>());
  addUnary<kFloatTypes>(registry, "Erf", plain<ErfFn>());
  addUnary<kFloatTypes>(registry, "Gelu", [](const Attributes& attrs) {
    const std::string approximate = attrs.getString("approximate", "none");
    STRATA_CHECK(approximate == "none" || approximate == "tanh", "Gelu: approximate must be none or tanh, got {}",
                 approximate);
    return GeluFn{approximate == "tanh"};
  });
  addUnary<kFloatTypes>(registry, "Sqrt", plain<SqrtFn>());
  addUnary<kFloatTypes>(registry, "Reciprocal", plain<ReciprocalFn>());
  addUnary<kSignedTypes>(registry, "Neg", plain<NegFn>());
  addUnary<kFloatTypes>(registry, "Exp", plain<ExpFn>());
  addUnary<kFloatTypes>(registry, "Log", plain<LogFn>());
  addUnary<kNumericTypes>(registry, "Abs", plain<AbsFn>());
  addUnary<kFloatTypes>(registry, "Ceil", plain<CeilFn>());
  addUnary<kFloatTypes>(registry, "Floor", plain<FloorFn>());
  addUnary<kFloatTypes>(registry, "Round", plain<RoundFn>());
  addUnary<kNumericTypes>(registry, "Sign", plain<SignFn>());
  addUnary<kFloatTypes>(registry, "Softplus", plain<SoftplusFn>());
  addUnary<kFloatTypes>(registry, "Softsign", plain<SoftsignFn>());
  addUnary<kFloatTypes>(registry, "Selu", [](const Attributes& attrs) {
    return SeluFn{attrs.getFloat("alpha", 1.67326319217681884765625f),
                  attrs.getFloat("gamma", 1.05070102214813232421875f)};
  });
  addUnary<kFloatTypes>(registry, "Elu", [](const Attributes& attrs) { return EluFn{attrs.getFloat("alpha", 1.0f)}; });
  addUnary<kFloatTypes>(registry, "Celu",
                        [](const Attributes& attrs) { return CeluFn{attrs.getFloat("alpha", 1.0f)}; });
  addUnary<kFloatTypes>(registry, "Mish", plain<MishFn>());
  addUnary<kFloatTypes>(registry, "Shrink", [](const Attributes& attrs) {
    return ShrinkFn{attrs.getFloat("lambd", 0.5f), attrs.getFloat("bias", 0.0f)};
  });
  addUnary<kFloatTypes>(registry, "Sin", plain<SinFn>());
  addUnary<kFloatTypes>(registry, "Cos", plain<CosFn>());
  addUnary<kFloatTypes>(registry, "Tan", plain<TanFn>());
  addUnary<kFloatTypes>(registry, "Asin", plain<AsinFn>());
  addUnary<kFloatTypes>(registry, "Acos", plain<AcosFn>());
  addUnary<kFloatTypes>(registry, "Atan", plain<AtanFn>());
  addUnary<kFloatTypes>(registry, "Sinh", plain<SinhFn>());
  addUnary<kFloatTypes>(registry, "Cosh", plain<CoshFn>());
  addUnary<kFloatTypes>(registry, "Asinh", plain<AsinhFn>());
  addUnary<kFloatTypes>(registry, "Acosh", plain<AcoshFn>());
  addUnary<kFloatTypes>(registry, "Atanh", plain<AtanhFn>());

  addPredicate(registry, "IsNaN", plain<IsNaNFn>());
  addPredicate(registry, "IsInf", [](const Attributes& attrs) {
    return IsInfFn{attrs.getInt("detect_negative", 1) != 0, attrs.getInt("detect_positive", 1) != 0};
  });
}

}  // namespace strata::cuda
