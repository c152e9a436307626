// Reduce* ops and ArgMax/ArgMin on CUDA, mirroring core/backend/cpu/reduction_ops.cpp: the input's dims merge
// into alternating groups of kept and reduced axes, and the reduction engine (Note [CUDA reduction engine]) runs
// over them. Sums of integers accumulate in int64 and wrap to the output type like the CPU; floats accumulate in
// float (double for double).

#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "../../cpu/reduction_plan.h"
#include "cuda_ops.h"
#include "reduce_kernels.cuh"

namespace strata::cuda {

namespace reduce {

namespace {

enum class ReduceKind { Sum, Mean, Prod, Max, Min, L1, L2, SumSquare, LogSum, LogSumExp };

// Sums: int64 for integers and double for float and double, like the CPU (a float32 sum of squares overflows
// where the CPU's does not); float for the 16-bit floats. Reductions are bound by memory bandwidth, so the wider
// accumulator costs little.
template <typename T>
using SumAccOf = std::conditional_t<std::is_integral_v<T>, std::int64_t,
                                    std::conditional_t<std::is_same_v<T, float>, double, typename AccTypeOf<T>::type>>;
// Comparisons: a type that shuffles in whole 32-bit words and holds every value of T.
template <typename T>
using CmpAccOf = std::conditional_t<std::is_integral_v<T>, std::conditional_t<sizeof(T) == 8, std::int64_t, int>,
                                    typename AccTypeOf<T>::type>;

template <typename T, typename A>
__host__ __device__ __forceinline__ A lowestOf() {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<A>(std::numeric_limits<T>::lowest());
  } else {
    return -std::numeric_limits<A>::infinity();
  }
}

template <typename T, typename A>
__host__ __device__ __forceinline__ A highestOf() {
  if constexpr (std::is_integral_v<T>) {
    return static_cast<A>(std::numeric_limits<T>::max());
  } else {
    return std::numeric_limits<A>::infinity();
  }
}

template <typename T, ReduceKind K>
struct ReduceOp {
  static constexpr bool kCompare = K == ReduceKind::Max || K == ReduceKind::Min;
  using Acc = std::conditional_t<kCompare, CmpAccOf<T>, SumAccOf<T>>;
  // Mean, L2 and LogSum finish in double unless the sum itself is float (the 16-bit floats), like the CPU: a
  // float32 sum held in double must not be narrowed first (a sum of squares above FLT_MAX has a finite root, and
  // float(count) is inexact above 2^24).
  using M = std::conditional_t<std::is_same_v<Acc, float>, float, double>;

  const T* src;
  T* dst;
  std::int64_t count;  // elements per output (Mean divides by it)

  __host__ __device__ Acc init() const {
    if constexpr (K == ReduceKind::Prod) {
      return Acc(1);
    } else if constexpr (K == ReduceKind::Max) {
      return lowestOf<T, Acc>();
    } else if constexpr (K == ReduceKind::Min) {
      return highestOf<T, Acc>();
    } else {
      return Acc(0);
    }
  }
  __host__ __device__ Acc map(std::int64_t offset, std::int64_t, std::int64_t) const {
    const Acc v = cvt<Acc>(src[offset]);
    if constexpr (K == ReduceKind::L1) {
      return v < Acc(0) ? -v : v;
    } else if constexpr (K == ReduceKind::L2 || K == ReduceKind::SumSquare) {
      return v * v;
    } else {
      return v;
    }
  }
  __host__ __device__ Acc combine(Acc a, Acc b) const {
    if constexpr (K == ReduceKind::Prod) {
      return a * b;
    } else if constexpr (K == ReduceKind::Max) {
      return (a > b || isNan(a)) ? a : b;  // NaN propagates, as on the CPU
    } else if constexpr (K == ReduceKind::Min) {
      return (a < b || isNan(a)) ? a : b;
    } else {
      return a + b;
    }
  }
  __host__ __device__ void finish(Acc a, std::int64_t o) const {
    if constexpr (K == ReduceKind::Mean) {
      dst[o] = cvt<T>(cvt<M>(a) / static_cast<M>(count));
    } else if constexpr (K == ReduceKind::L2) {
      dst[o] = cvt<T>(dSqrt(cvt<M>(a)));
    } else if constexpr (K == ReduceKind::LogSum) {
      dst[o] = cvt<T>(dLog(cvt<M>(a)));
    } else {
      dst[o] = cvt<T>(a);
    }
  }
};

// The second pass of ReduceLogSumExp: log(sum(exp(x - m))) + m with m the per-output maximum (0 when not finite,
// so that all -inf gives -inf and inf/NaN propagate). Like the CPU, exp(x - m) is rounded to T before summing.
template <typename T>
struct LogSumExpOp {
  using Acc = SumAccOf<T>;
  using M = MathTypeOf<T>;

  const T* src;
  const T* maxima;
  T* dst;

  __host__ __device__ M shiftOf(std::int64_t o) const {
    const M m = cvt<M>(maxima[o]);
    return dIsFinite(m) ? m : M(0);
  }
  __host__ __device__ Acc init() const { return Acc(0); }
  __host__ __device__ Acc map(std::int64_t offset, std::int64_t o, std::int64_t) const {
    return cvt<Acc>(cvt<T>(dExp(cvt<M>(src[offset]) - shiftOf(o))));
  }
  __host__ __device__ Acc combine(Acc a, Acc b) const { return a + b; }
  __host__ __device__ void finish(Acc a, std::int64_t o) const { dst[o] = cvt<T>(dLog(cvt<M>(a)) + shiftOf(o)); }
};

// ArgMax/ArgMin as an associative combine that reproduces the CPU's sequential scan: NaNs are skipped except at
// index 0, which then wins (the scan never replaces a NaN best); ties keep the first index unless select_last.
template <typename A>
struct ArgAcc {
  std::int64_t idx;
  A val;
  int state;  // 0: nothing seen, 1: a value, 2: NaN at index 0
};

template <typename T, bool IsMax>
struct ArgOp {
  using A = CmpAccOf<T>;
  using Acc = ArgAcc<A>;

  const T* src;
  std::int64_t* dst;
  bool selectLast;

  __host__ __device__ Acc init() const { return Acc{0, A(0), 0}; }
  __host__ __device__ Acc map(std::int64_t offset, std::int64_t, std::int64_t r) const {
    const A v = cvt<A>(src[offset]);
    if (isNan(v)) {
      return r == 0 ? Acc{0, v, 2} : init();
    }
    return Acc{r, v, 1};
  }
  __host__ __device__ Acc combine(Acc a, Acc b) const {
    if (a.state == 2 || b.state == 0) {
      return a;
    }
    if (b.state == 2 || a.state == 0) {
      return b;
    }
    if (IsMax ? a.val > b.val : a.val < b.val) {
      return a;
    }
    if (IsMax ? b.val > a.val : b.val < a.val) {
      return b;
    }
    return (selectLast ? a.idx > b.idx : a.idx < b.idx) ? a : b;
  }
  __host__ __device__ void finish(Acc a, std::int64_t o) const { dst[o] = a.state == 0 ? 0 : a.idx; }
};

// The groups of kept and reduced dims of a contiguous input (neighbouring dims of the same kind merge; size-1
// dims do not matter), as in the CPU kernel.
ReduceGeometry makeGeometry(const Shape& shape, const std::vector<bool>& reducedAxis) {
  const cpu::reduction_detail::ReduceGroups groups = cpu::reduction_detail::groupReducedAxes(shape, reducedAxis);
  STRATA_CHECK(groups.keptDims.size() <= static_cast<std::size_t>(kMaxDims) &&
                   groups.reducedDims.size() <= static_cast<std::size_t>(kMaxDims),
               "CUDA reductions take at most {} groups of kept or reduced axes, got shape {}", kMaxDims,
               shapeToString(shape));
  const auto fill = [](Indexer& indexer, const std::vector<std::int64_t>& dims,
                       const std::vector<std::int64_t>& strides) {
    indexer.rank = static_cast<int>(dims.size());
    for (std::size_t d = 0; d < dims.size(); ++d) {
      indexer.sizes[d] = dims[d];
      indexer.strides[d] = strides[d];
    }
  };
  ReduceGeometry g;
  g.outCount = groups.outCount;
  g.reduceCount = groups.reduceCount;
  fill(g.kept, groups.keptDims, groups.keptStrides);
  fill(g.reduced, groups.reducedDims, groups.reducedStrides);
  g.innerReduced = groups.innerReduced;
  return g;
}

// Which axes a Reduce* node reduces: the listed ones, or all (none with noop_with_empty_axes) when none are listed.
std::vector<bool> reducedAxes(const Shape& shape, const std::vector<std::int64_t>& axes, bool noopWithEmptyAxes) {
  if (axes.empty()) {
    return std::vector<bool>(shape.size(), !noopWithEmptyAxes);
  }
  std::vector<bool> reduced(shape.size(), false);
  const auto rank = static_cast<std::int64_t>(shape.size());
  for (const std::int64_t axis : axes) {
    reduced[static_cast<std::size_t>(normalizeAxis(axis, rank))] = true;
  }
  return reduced;
}

// The values of a small integer tensor (an axes input) on the host.
std::vector<std::int64_t> hostInts(const Tensor& t) {
  STRATA_CHECK(t.rank() <= 1, "axes must be a 1-D tensor, got shape {}", shapeToString(t.shape()));
  const Tensor host = t.to(Device::cpu());
  std::vector<std::int64_t> values(static_cast<std::size_t>(host.numel()));
  for (std::size_t i = 0; i < values.size(); ++i) {
    if (host.dtype() == DType::Int64) {
      values[i] = host.data<std::int64_t>()[i];
    } else if (host.dtype() == DType::Int32) {
      values[i] = host.data<std::int32_t>()[i];
    } else {
      fail("axes must be int64 or int32, got {}", dtypeName(host.dtype()));
    }
  }
  return values;
}

// The CPU's reduction dtypes (float, double, int32, int64, int8, uint8) plus the 16-bit floats.
template <typename Fn>
void visitReduceType(DType dtype, const char* op, Fn&& fn) {
  switch (dtype) {
    case DType::Float32:
      return fn(float{});
    case DType::Float64:
      return fn(double{});
    case DType::Float16:
      return fn(__half{});
    case DType::BFloat16:
      return fn(__nv_bfloat16{});
    case DType::Int32:
      return fn(std::int32_t{});
    case DType::Int64:
      return fn(std::int64_t{});
    case DType::Int8:
      return fn(std::int8_t{});
    case DType::UInt8:
      return fn(std::uint8_t{});
    default:
      fail("{} on CUDA does not support dtype {}", op, dtypeName(dtype));
  }
}

template <typename T, ReduceKind K>
void reduceAs(const Tensor& in, Tensor& out, const ReduceGeometry& g, cudaStream_t stream) {
  launchReduce(ReduceOp<T, K>{in.data<T>(), out.data<T>(), g.reduceCount}, g, out.device(), stream);
}

template <typename T>
void runReduce(ReduceKind kind, const Tensor& in, Tensor& out, const ReduceGeometry& g, cudaStream_t stream) {
  switch (kind) {
    case ReduceKind::Sum:
      return reduceAs<T, ReduceKind::Sum>(in, out, g, stream);
    case ReduceKind::Mean:
      return reduceAs<T, ReduceKind::Mean>(in, out, g, stream);
    case ReduceKind::Prod:
      return reduceAs<T, ReduceKind::Prod>(in, out, g, stream);
    case ReduceKind::Max:
      return reduceAs<T, ReduceKind::Max>(in, out, g, stream);
    case ReduceKind::Min:
      return reduceAs<T, ReduceKind::Min>(in, out, g, stream);
    case ReduceKind::L1:
      return reduceAs<T, ReduceKind::L1>(in, out, g, stream);
    case ReduceKind::L2:
      return reduceAs<T, ReduceKind::L2>(in, out, g, stream);
    case ReduceKind::SumSquare:
      return reduceAs<T, ReduceKind::SumSquare>(in, out, g, stream);
    case ReduceKind::LogSum:
      return reduceAs<T, ReduceKind::LogSum>(in, out, g, stream);
    case ReduceKind::LogSumExp: {
      Tensor maxima = Tensor::empty(TensorMeta{in.dtype(), Shape{g.outCount}}, MemoryCategory::Workspace, out.device());
      launchReduce(ReduceOp<T, ReduceKind::Max>{in.data<T>(), maxima.data<T>(), g.reduceCount}, g, out.device(),
                   stream);
      launchReduce(LogSumExpOp<T>{in.data<T>(), maxima.data<T>(), out.data<T>()}, g, out.device(), stream);
      return;
    }
  }
}

void addReduce(OpRegistry& registry, const std::string& type, ReduceKind kind) {
  addCudaKernelFactory(registry, type, [type, kind](const KernelInit& init) {
    const std::vector<std::int64_t> attrAxes = init.attrs.getInts("axes", {});
    const bool noop = init.attrs.getInt("noop_with_empty_axes", 0) != 0;
    // The axes input is a constant at plan time (shape inference needs it); read it once.
    std::optional<std::vector<std::int64_t>> constAxes;
    if (init.inputs.size() > 1 && init.inputs[1].present && init.inputs[1].constant != nullptr) {
      constAxes = hostInts(*init.inputs[1].constant);
    }
    return makeFunctionKernel([type, kind, attrAxes, noop, constAxes](KernelContext& ctx) {
      const Tensor& in = ctx.input(0);
      std::vector<std::int64_t> axes = attrAxes;
      if (ctx.hasInput(1)) {
        axes = constAxes ? *constAxes : hostInts(ctx.input(1));
      }
      const ReduceGeometry g = makeGeometry(in.shape(), reducedAxes(in.shape(), axes, noop));
      visitReduceType(in.dtype(), type.c_str(),
                      [&](auto tag) { runReduce<decltype(tag)>(kind, in, ctx.output(0), g, streamOf(ctx)); });
    });
  });
}

void addArgReduce(OpRegistry& registry, const std::string& type, bool isMax) {
  addCudaKernelFactory(registry, type, [type, isMax](const KernelInit& init) {
    const std::int64_t axisAttr = init.attrs.getInt("axis", 0);
    const bool selectLast = init.attrs.getInt("select_last_index", 0) != 0;
    return makeFunctionKernel([type, isMax, axisAttr, selectLast](KernelContext& ctx) {
      const Tensor& in = ctx.input(0);
      std::vector<bool> reduced(in.shape().size(), false);
      if (in.rank() > 0) {
        reduced[static_cast<std::size_t>(normalizeAxis(axisAttr, in.rank()))] = true;
      }
      const ReduceGeometry g = makeGeometry(in.shape(), reduced);
      Tensor& out = ctx.output(0);
      visitReduceType(in.dtype(), type.c_str(), [&](auto tag) {
        using T = decltype(tag);
        if (isMax) {
          launchReduce(ArgOp<T, true>{in.data<T>(), out.data<std::int64_t>(), selectLast}, g, out.device(),
                       streamOf(ctx));
        } else {
          launchReduce(ArgOp<T, false>{in.data<T>(), out.data<std::int64_t>(), selectLast}, g, out.device(),
                       streamOf(ctx));
        }
      });
    });
  });
}

}  // namespace

}  // namespace reduce

void registerReductionKernels(OpRegistry& registry) {
  reduce::addReduce(registry, "ReduceSum", reduce::ReduceKind::Sum);
  reduce::addReduce(registry, "ReduceMean", reduce::ReduceKind::Mean);
  reduce::addReduce(registry, "ReduceProd", reduce::ReduceKind::Prod);
  reduce::addReduce(registry, "ReduceMax", reduce::ReduceKind::Max);
  reduce::addReduce(registry, "ReduceMin", reduce::ReduceKind::Min);
  reduce::addReduce(registry, "ReduceL1", reduce::ReduceKind::L1);
  reduce::addReduce(registry, "ReduceL2", reduce::ReduceKind::L2);
  reduce::addReduce(registry, "ReduceSumSquare", reduce::ReduceKind::SumSquare);
  reduce::addReduce(registry, "ReduceLogSum", reduce::ReduceKind::LogSum);
  reduce::addReduce(registry, "ReduceLogSumExp", reduce::ReduceKind::LogSumExp);
  reduce::addArgReduce(registry, "ArgMax", true);
  reduce::addArgReduce(registry, "ArgMin", false);
  registerSoftmaxKernels(registry);
  registerLayerNormKernels(registry);
  registerLossKernels(registry);
}

}  // namespace strata::cuda
