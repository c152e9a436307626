// Reduce* ops and ArgMax/ArgMin.
//
// A reduction merges the input's dims into alternating groups of kept and reduced axes (the input is contiguous,
// so neighbouring axes of the same kind merge), then runs one of two loops:
//  - the innermost group is reduced: each output reduces contiguous runs (8 independent accumulators, which the
//    compiler vectorises);
//  - the innermost group is kept: each output row accumulates whole contiguous rows of the input (vectorised
//    across the row).

#include <algorithm>
#include <cmath>
#include <limits>

#include "cpu_ops.h"
#include "reduction_common.h"

namespace strata::cpu {

namespace reduction_detail {

namespace {

using elementwise_detail::TypeList;
using ReduceTypes = TypeList<float, double, std::int32_t, std::int64_t, std::int8_t, std::uint8_t>;

// Sums accumulate in double (floats) or int64 (integers, wrapping to the output type like numpy).
template <typename T>
using WideAcc = std::conditional_t<std::is_floating_point_v<T>, double, std::int64_t>;

template <typename T>
struct SumOp {
  using Acc = WideAcc<T>;
  static Acc init() { return Acc(0); }
  static Acc map(T x) { return static_cast<Acc>(x); }
  static Acc combine(Acc a, Acc b) { return a + b; }
  static T finish(Acc a, std::int64_t) { return static_cast<T>(a); }
};

template <typename T>
struct MeanOp : SumOp<T> {
  static T finish(WideAcc<T> a, std::int64_t n) { return static_cast<T>(static_cast<double>(a) / n); }
};

template <typename T>
struct ProdOp {
  using Acc = WideAcc<T>;
  static Acc init() { return Acc(1); }
  static Acc map(T x) { return static_cast<Acc>(x); }
  static Acc combine(Acc a, Acc b) { return a * b; }
  static T finish(Acc a, std::int64_t) { return static_cast<T>(a); }
};

template <typename T>
struct MaxOp {
  using Acc = T;
  static Acc init() {
    return std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity()
                                                : std::numeric_limits<T>::lowest();
  }
  static Acc map(T x) { return x; }
  // NaN propagates, as in numpy.
  static Acc combine(Acc a, Acc b) { return (a > b || a != a) ? a : b; }
  static T finish(Acc a, std::int64_t) { return a; }
};

template <typename T>
struct MinOp {
  using Acc = T;
  static Acc init() {
    return std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::max();
  }
  static Acc map(T x) { return x; }
  static Acc combine(Acc a, Acc b) { return (a < b || a != a) ? a : b; }
  static T finish(Acc a, std::int64_t) { return a; }
};

template <typename T>
struct L1Op : SumOp<T> {
  static WideAcc<T> map(T x) {
    const auto v = static_cast<WideAcc<T>>(x);
    return v < 0 ? -v : v;
  }
};

template <typename T>
struct SumSquareOp : SumOp<T> {
  static WideAcc<T> map(T x) {
    const auto v = static_cast<WideAcc<T>>(x);
    return v * v;
  }
};

template <typename T>
struct L2Op : SumSquareOp<T> {
  static T finish(WideAcc<T> a, std::int64_t) { return static_cast<T>(std::sqrt(static_cast<double>(a))); }
};

template <typename T>
struct LogSumOp : SumOp<T> {
  static T finish(WideAcc<T> a, std::int64_t) { return static_cast<T>(std::log(static_cast<double>(a))); }
};

// Reduces a contiguous run with 8 independent accumulators.
template <typename T, typename Op>
typename Op::Acc reduceRun(const T* p, std::int64_t n) {
  using Acc = typename Op::Acc;
  constexpr int kLanes = 8;
  Acc lanes[kLanes];
  for (Acc& lane : lanes) {
    lane = Op::init();
  }
  std::int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    for (int j = 0; j < kLanes; ++j) {
      lanes[j] = Op::combine(lanes[j], Op::map(p[i + j]));
    }
  }
  Acc acc = Op::init();
  for (const Acc lane : lanes) {
    acc = Op::combine(acc, lane);
  }
  for (; i < n; ++i) {
    acc = Op::combine(acc, Op::map(p[i]));
  }
  return acc;
}

// Dims with element strides, walked as an odometer.
struct DimGroup {
  std::vector<std::int64_t> dims;
  std::vector<std::int64_t> strides;

  std::int64_t count() const {
    std::int64_t n = 1;
    for (const std::int64_t d : dims) {
      n *= d;
    }
    return n;
  }
  std::int64_t offsetOf(std::int64_t linear) const {
    std::int64_t offset = 0;
    for (std::size_t d = dims.size(); d-- > 0;) {
      offset += (linear % dims[d]) * strides[d];
      linear /= dims[d];
    }
    return offset;
  }
  // Calls fn(offset) for every index, in row-major order.
  template <typename Fn>
  void forEach(Fn&& fn) const {
    const std::int64_t total = count();
    std::vector<std::int64_t> index(dims.size(), 0);
    std::int64_t offset = 0;
    for (std::int64_t i = 0; i < total; ++i) {
      fn(offset);
      for (std::size_t d = dims.size(); d-- > 0;) {
        offset += strides[d];
        if (++index[d] < dims[d]) {
          break;
        }
        offset -= index[d] * strides[d];
        index[d] = 0;
      }
    }
  }
};

template <typename T, typename Op>
void reduceTyped(const Tensor& in, Tensor& out, const std::vector<bool>& reducedAxis) {
  const T* src = in.data<T>();
  T* dst = out.data<T>();
  const std::int64_t outCount = out.numel();
  // Merge the input's dims into groups of the same kind, innermost last; size-1 dims do not matter.
  const ReduceGroups groups = groupReducedAxes(in.shape(), reducedAxis);
  const std::int64_t reduceCount = groups.reduceCount;
  if (outCount == 0) {
    return;
  }
  if (in.numel() == 0) {  // reducing an empty set gives the identity
    std::fill(dst, dst + outCount, Op::finish(Op::init(), 0));
    return;
  }
  DimGroup kept{groups.keptDims, groups.keptStrides};
  DimGroup reduced{groups.reducedDims, groups.reducedStrides};

  if (groups.innerReduced) {
    // Innermost group reduced: contiguous runs of `run` elements.
    const std::int64_t run = reduced.dims.back();
    reduced.dims.pop_back();
    reduced.strides.pop_back();
    if (outCount == 1 && reduced.dims.empty()) {
      // A full reduction of one long run: split it over the threads.
      constexpr std::int64_t kChunk = std::int64_t{1} << 16;
      const std::int64_t chunks = (run + kChunk - 1) / kChunk;
      std::vector<typename Op::Acc> partial(static_cast<std::size_t>(chunks));
      parallelChunks(chunks, kChunk, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t c = begin; c < end; ++c) {
          const std::int64_t first = c * kChunk;
          partial[static_cast<std::size_t>(c)] = reduceRun<T, Op>(src + first, std::min(kChunk, run - first));
        }
      });
      typename Op::Acc acc = Op::init();
      for (const auto value : partial) {
        acc = Op::combine(acc, value);
      }
      dst[0] = Op::finish(acc, reduceCount);
      return;
    }
    parallelChunks(outCount, reduceCount, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t o = begin; o < end; ++o) {
        const T* base = src + kept.offsetOf(o);
        typename Op::Acc acc = Op::init();
        reduced.forEach([&](std::int64_t offset) { acc = Op::combine(acc, reduceRun<T, Op>(base + offset, run)); });
        dst[o] = Op::finish(acc, reduceCount);
      }
    });
    return;
  }

  // Innermost group kept (or nothing to reduce): accumulate contiguous rows of `row` elements, in chunks so the
  // accumulators stay in cache.
  const std::int64_t row = kept.dims.empty() ? 1 : kept.dims.back();
  if (!kept.dims.empty()) {
    kept.dims.pop_back();
    kept.strides.pop_back();
  }
  constexpr std::int64_t kChunk = 1024;
  const std::int64_t chunksPerRow = (row + kChunk - 1) / kChunk;
  const std::int64_t rows = outCount / row;
  parallelChunks(rows * chunksPerRow, std::min(row, kChunk) * reduceCount, [&](std::int64_t begin, std::int64_t end) {
    typename Op::Acc acc[kChunk];
    for (std::int64_t task = begin; task < end; ++task) {
      const std::int64_t r = task / chunksPerRow;
      const std::int64_t first = (task % chunksPerRow) * kChunk;
      const std::int64_t len = std::min(kChunk, row - first);
      const T* base = src + kept.offsetOf(r) + first;
      std::fill(acc, acc + len, Op::init());
      reduced.forEach([&](std::int64_t offset) {
        const T* p = base + offset;
        for (std::int64_t i = 0; i < len; ++i) {
          acc[i] = Op::combine(acc[i], Op::map(p[i]));
        }
      });
      T* outRow = dst + r * row + first;
      for (std::int64_t i = 0; i < len; ++i) {
        outRow[i] = Op::finish(acc[i], reduceCount);
      }
    }
  });
}

// Which axes a Reduce* node reduces, from the axes input (opset 13+ ReduceSum, 18+ others) or attribute.
struct ReduceSpec {
  std::vector<bool> reducedAxis;
  bool keepdims = true;
};

ReduceSpec makeReduceSpec(const Shape& shape, const std::vector<std::int64_t>& axes, bool keepdims,
                          bool noopWithEmptyAxes) {
  const auto rank = static_cast<std::int64_t>(shape.size());
  ReduceSpec spec;
  spec.keepdims = keepdims;
  if (axes.empty()) {
    // No axes: reduce everything, or nothing when noop_with_empty_axes (then only the map/finish apply).
    spec.reducedAxis.assign(shape.size(), !noopWithEmptyAxes);
    return spec;
  }
  spec.reducedAxis.assign(shape.size(), false);
  for (const std::int64_t axis : axes) {
    spec.reducedAxis[static_cast<std::size_t>(normalizeAxis(axis, rank))] = true;
  }
  return spec;
}

Shape reducedShape(const Shape& shape, const ReduceSpec& spec) {
  Shape out;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    if (!spec.reducedAxis[d]) {
      out.push_back(shape[d]);
    } else if (spec.keepdims) {
      out.push_back(1);
    }
  }
  return out;
}

// log(sum(exp(x))) shifted by the max for stability: max pass, then a sum of exp(x - max).
template <typename T>
void reduceLogSumExp(const Tensor& in, Tensor& out, const std::vector<bool>& reducedAxis) {
  ReduceSpec keep{reducedAxis, true};
  const Shape keptShape = reducedShape(in.shape(), keep);
  Tensor maxima = Tensor::empty(in.dtype(), keptShape, MemoryCategory::Workspace);
  reduceTyped<T, MaxOp<T>>(in, maxima, reducedAxis);
  T* m = maxima.data<T>();
  for (std::int64_t i = 0; i < maxima.numel(); ++i) {
    if (!std::isfinite(static_cast<double>(m[i]))) {
      m[i] = T(0);  // all -inf (or inf/NaN present): no shift, let exp/log give the IEEE answer
    }
  }
  Tensor shifted = Tensor::empty(in.meta(), MemoryCategory::Workspace);
  elementwise_detail::binaryLoop<T, T, T>(in, maxima, shifted, 8, [](T x, T mx) {
    return static_cast<T>(std::exp(static_cast<double>(x) - static_cast<double>(mx)));
  });
  Tensor sums = Tensor::empty(in.dtype(), keptShape, MemoryCategory::Workspace);
  reduceTyped<T, SumOp<T>>(shifted, sums, reducedAxis);
  const T* s = sums.data<T>();
  T* dst = out.data<T>();
  for (std::int64_t i = 0; i < out.numel(); ++i) {
    dst[i] = static_cast<T>(std::log(static_cast<double>(s[i])) + static_cast<double>(m[i]));
  }
}

enum class ReduceKind { Sum, Mean, Prod, Max, Min, L1, L2, SumSquare, LogSum, LogSumExp };

template <typename T>
void runReduce(ReduceKind kind, const Tensor& in, Tensor& out, const std::vector<bool>& reducedAxis) {
  switch (kind) {
    case ReduceKind::Sum:
      reduceTyped<T, SumOp<T>>(in, out, reducedAxis);
      break;
    case ReduceKind::Mean:
      reduceTyped<T, MeanOp<T>>(in, out, reducedAxis);
      break;
    case ReduceKind::Prod:
      reduceTyped<T, ProdOp<T>>(in, out, reducedAxis);
      break;
    case ReduceKind::Max:
      reduceTyped<T, MaxOp<T>>(in, out, reducedAxis);
      break;
    case ReduceKind::Min:
      reduceTyped<T, MinOp<T>>(in, out, reducedAxis);
      break;
    case ReduceKind::L1:
      reduceTyped<T, L1Op<T>>(in, out, reducedAxis);
      break;
    case ReduceKind::L2:
      reduceTyped<T, L2Op<T>>(in, out, reducedAxis);
      break;
    case ReduceKind::SumSquare:
      reduceTyped<T, SumSquareOp<T>>(in, out, reducedAxis);
      break;
    case ReduceKind::LogSum:
      reduceTyped<T, LogSumOp<T>>(in, out, reducedAxis);
      break;
    case ReduceKind::LogSumExp:
      reduceLogSumExp<T>(in, out, reducedAxis);
      break;
  }
}

std::vector<std::int64_t> axesFromInput(const Tensor& axes) {
  STRATA_CHECK(axes.rank() <= 1, "axes must be a 1-D tensor, got shape {}", shapeToString(axes.shape()));
  return elementwise_detail::tensorToInts(axes);
}

void addReduce(OpRegistry& registry, const std::string& type, ReduceKind kind) {
  addOp(
      registry, type,
      [](const ShapeContext& ctx) {
        requireDType(ctx, 0, ReduceTypes{});
        const Shape& shape = ctx.input(0).meta.shape;
        std::vector<std::int64_t> axes = ctx.attrs.getInts("axes", {});
        if (ctx.hasInput(1)) {
          axes = axesFromInput(ctx.constantInput(1));
        }
        try {
          const ReduceSpec spec = makeReduceSpec(shape, axes, ctx.attrs.getInt("keepdims", 1) != 0,
                                                 ctx.attrs.getInt("noop_with_empty_axes", 0) != 0);
          return repeatMeta(ctx, TensorMeta{ctx.input(0).meta.dtype, reducedShape(shape, spec)});
        } catch (const Error& e) {
          ctx.error(e.what());
        }
      },
      [type, kind](const KernelInit& init) -> ComputeFn {
        const std::vector<std::int64_t> attrAxes = init.attrs.getInts("axes", {});
        const bool keepdims = init.attrs.getInt("keepdims", 1) != 0;
        const bool noop = init.attrs.getInt("noop_with_empty_axes", 0) != 0;
        return [type, kind, attrAxes, keepdims, noop](KernelContext& ctx) {
          const Tensor& in = ctx.input(0);
          const std::vector<std::int64_t> axes = ctx.hasInput(1) ? axesFromInput(ctx.input(1)) : attrAxes;
          const ReduceSpec spec = makeReduceSpec(in.shape(), axes, keepdims, noop);
          dispatch(ReduceTypes{}, in.dtype(), type.c_str(),
                   [&](auto tag) { runReduce<decltype(tag)>(kind, in, ctx.output(0), spec.reducedAxis); });
        };
      });
}

template <typename T>
void argReduce(const Tensor& in, Tensor& out, std::int64_t axis, bool isMax, bool selectLast) {
  const AxisSplit s = splitAtAxis(in.shape(), axis);
  const T* src = in.data<T>();
  std::int64_t* dst = out.data<std::int64_t>();
  // `better` says whether candidate x replaces the best so far; ties keep the first index unless selectLast.
  const auto better = [isMax, selectLast](T x, T best) {
    if (isMax) {
      return selectLast ? x >= best : x > best;
    }
    return selectLast ? x <= best : x < best;
  };
  parallelChunks(s.outer, s.axis * s.inner, [&](std::int64_t begin, std::int64_t end) {
    std::vector<T> best(static_cast<std::size_t>(s.inner));
    for (std::int64_t o = begin; o < end; ++o) {
      const T* base = src + o * s.axis * s.inner;
      std::int64_t* outRow = dst + o * s.inner;
      std::copy(base, base + s.inner, best.begin());
      std::fill(outRow, outRow + s.inner, 0);
      for (std::int64_t a = 1; a < s.axis; ++a) {
        const T* p = base + a * s.inner;
        for (std::int64_t i = 0; i < s.inner; ++i) {
          if (better(p[i], best[static_cast<std::size_t>(i)])) {
            best[static_cast<std::size_t>(i)] = p[i];
            outRow[i] = a;
          }
        }
      }
    }
  });
}

void addArgReduce(OpRegistry& registry, const std::string& type, bool isMax) {
  addOp(
      registry, type,
      [](const ShapeContext& ctx) {
        requireDType(ctx, 0, ReduceTypes{});
        Shape shape = ctx.input(0).meta.shape;
        const auto rank = static_cast<std::int64_t>(shape.size());
        const std::int64_t axisAttr = ctx.attrs.getInt("axis", 0);
        if (axisAttr < -rank || axisAttr >= std::max<std::int64_t>(rank, 1)) {
          ctx.error(fmt::format("axis {} is out of range for rank {}", axisAttr, rank));
        }
        if (rank == 0) {
          return repeatMeta(ctx, TensorMeta{DType::Int64, {}});
        }
        const std::int64_t axis = normalizeAxis(axisAttr, rank);
        if (shape[static_cast<std::size_t>(axis)] == 0) {
          ctx.error("cannot take the arg of an empty axis");
        }
        if (ctx.attrs.getInt("keepdims", 1) != 0) {
          shape[static_cast<std::size_t>(axis)] = 1;
        } else {
          shape.erase(shape.begin() + axis);
        }
        return repeatMeta(ctx, TensorMeta{DType::Int64, shape});
      },
      [type, isMax](const KernelInit& init) -> ComputeFn {
        const std::int64_t axisAttr = init.attrs.getInt("axis", 0);
        const bool selectLast = init.attrs.getInt("select_last_index", 0) != 0;
        return [type, isMax, axisAttr, selectLast](KernelContext& ctx) {
          const Tensor& in = ctx.input(0);
          const std::int64_t axis = in.rank() == 0 ? 0 : normalizeAxis(axisAttr, in.rank());
          dispatch(ReduceTypes{}, in.dtype(), type.c_str(),
                   [&](auto tag) { argReduce<decltype(tag)>(in, ctx.output(0), axis, isMax, selectLast); });
        };
      });
}

}  // namespace

}  // namespace reduction_detail

void registerReductionOps(OpRegistry& registry) {
  using reduction_detail::ReduceKind;
  reduction_detail::addReduce(registry, "ReduceSum", ReduceKind::Sum);
  reduction_detail::addReduce(registry, "ReduceMean", ReduceKind::Mean);
  reduction_detail::addReduce(registry, "ReduceProd", ReduceKind::Prod);
  reduction_detail::addReduce(registry, "ReduceMax", ReduceKind::Max);
  reduction_detail::addReduce(registry, "ReduceMin", ReduceKind::Min);
  reduction_detail::addReduce(registry, "ReduceL1", ReduceKind::L1);
  reduction_detail::addReduce(registry, "ReduceL2", ReduceKind::L2);
  reduction_detail::addReduce(registry, "ReduceSumSquare", ReduceKind::SumSquare);
  reduction_detail::addReduce(registry, "ReduceLogSum", ReduceKind::LogSum);
  reduction_detail::addReduce(registry, "ReduceLogSumExp", ReduceKind::LogSumExp);
  reduction_detail::addArgReduce(registry, "ArgMax", true);
  reduction_detail::addArgReduce(registry, "ArgMin", false);
  reduction_detail::registerSoftmaxOps(registry);
  reduction_detail::registerLossOps(registry);
}

}  // namespace strata::cpu
