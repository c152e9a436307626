// Gradient kernels of the shape and data-movement family: SliceGrad (scatter a slice's gradient into zeros),
// GatherGrad (scatter-add rows, repeated indices accumulate) and PadGrad (fold the padding of reflect / edge /
// wrap / negative pads back onto the input). The rest of the family's backward graphs reuse forward ops
// (Reshape, Transpose, Split, Concat, ReduceSum, ScatterElements, DepthToSpace, ...).
//
// SliceGrad moves bytes, so it works on every dtype; GatherGrad and PadGrad add, so they need a floating-point
// dtype. The forward input's shape comes as the int64 list attribute "shape".

#include <algorithm>
#include <cstring>
#include <numeric>
#include <string>
#include <type_traits>

#include "cpu_ops.h"
#include "data_movement_plan.h"
#include "shape_ops_common.h"
#include "slice_pad_plan.h"
#include "strata/thread_pool.h"

namespace strata::cpu {

namespace {

using slice_pad::padSource;
using slice_pad::planSlice;
using slice_pad::sliceOperands;
using slice_pad::SliceOperands;
using slice_pad::SlicePlan;

using namespace shape_detail;

// Columns per parallel task when rows are accumulated: long enough to amortise the task, short enough that a
// single outer row (embedding tables, axis-0 pads) still splits over the threads.
constexpr std::int64_t kColumnBlock = 1024;

bool isFloatType(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::Float64 || dtype == DType::Float16 || dtype == DType::BFloat16;
}

// d[0..count) += s[0..count) for a floating-point T (Half and BFloat16 go through float).
template <typename T>
void addInto(T* d, const T* s, std::int64_t count) {
  for (std::int64_t i = 0; i < count; ++i) {
    if constexpr (std::is_same_v<T, Half>) {
      d[i].bits = floatToHalf(halfToFloat(d[i].bits) + halfToFloat(s[i].bits));
    } else if constexpr (std::is_same_v<T, BFloat16Bits>) {
      d[i].bits = floatToBFloat16(bfloat16ToFloat(d[i].bits) + bfloat16ToFloat(s[i].bits));
    } else {
      d[i] += s[i];
    }
  }
}

// The scatter-add both GatherGrad and PadGrad reduce to. src is [outer, srcRows, inner], dst is
// [outer, dstRows, inner] (zeroed by the caller); src row r is added to dst row rowMap[r], rows mapped to -1 are
// dropped. The map is inverted first (the source rows of each destination row, in order), so each task owns a set
// of destination elements: no two threads write the same element, embedding tables with one outer row still
// spread over the threads by vocabulary row, and repeated indices sum in index order (deterministic).
void scatterAddRows(void* dst, const void* src, std::int64_t outer, std::int64_t srcRows, std::int64_t dstRows,
                    std::int64_t inner, const std::vector<std::int64_t>& rowMap, DType dtype) {
  if (outer == 0 || srcRows == 0 || dstRows == 0 || inner == 0)
    return;
  std::vector<std::int64_t> first(static_cast<std::size_t>(dstRows) + 1, 0);
  for (std::int64_t to : rowMap) {
    if (to >= 0)
      ++first[static_cast<std::size_t>(to) + 1];
  }
  std::partial_sum(first.begin(), first.end(), first.begin());
  std::vector<std::int64_t> sources(static_cast<std::size_t>(first.back()));
  std::vector<std::int64_t> fill(first.begin(), first.end() - 1);
  for (std::int64_t r = 0; r < srcRows; ++r) {
    const std::int64_t to = rowMap[static_cast<std::size_t>(r)];
    if (to >= 0)
      sources[static_cast<std::size_t>(fill[static_cast<std::size_t>(to)]++)] = r;
  }
  const std::int64_t blocks = (inner + kColumnBlock - 1) / kColumnBlock;
  const std::int64_t blockLen = (inner + blocks - 1) / blocks;
  // A task reads about (srcRows / dstRows) rows of blockLen elements.
  const std::int64_t work = std::max<std::int64_t>(
      1, (srcRows + dstRows - 1) / dstRows * blockLen * static_cast<std::int64_t>(dtypeSize(dtype)));
  const std::int64_t grain = std::max<std::int64_t>(1, kParallelBytes / work);
  visitDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double> || std::is_same_v<T, Half> ||
                  std::is_same_v<T, BFloat16Bits>) {
      auto* d = static_cast<T*>(dst);
      const auto* s = static_cast<const T*>(src);
      parallelFor(0, outer * dstRows * blocks, grain, [&](std::int64_t begin, std::int64_t end) {
        for (std::int64_t t = begin; t < end; ++t) {
          const std::int64_t block = t % blocks;
          const std::int64_t row = t / blocks;  // o * dstRows + destination row
          const std::int64_t o = row / dstRows;
          const auto to = static_cast<std::size_t>(row % dstRows);
          const std::int64_t c0 = block * blockLen;
          const std::int64_t len = std::min(blockLen, inner - c0);
          if (len <= 0)
            continue;
          T* drow = d + row * inner + c0;
          for (std::int64_t k = first[to]; k < first[to + 1]; ++k) {
            addInto(drow, s + (o * srcRows + sources[static_cast<std::size_t>(k)]) * inner + c0, len);
          }
        }
      });
    } else {
      fail("cannot accumulate gradients of type {}", dtypeName(dtype));
    }
  });
}

// ---------------------------------------------------------------------------------------------------------------
// SliceGrad(dY, [starts, ends, axes, steps]) -> dX of attribute `shape`: dX is zero except where the forward Slice
// read, which receives dY. Operands are inputs 1-4 (as Slice opset 10+) or attributes starts/ends/axes/steps.

std::vector<TensorMeta> inferSliceGrad(const ShapeContext& ctx) {
  const TensorMeta& dy = ctx.input(0).meta;
  std::vector<const Tensor*> inputs(ctx.inputs.size(), nullptr);
  for (std::size_t i = 1; i < ctx.inputs.size(); ++i) {
    if (ctx.hasInput(i))
      inputs[i] = &ctx.constantInput(i);
  }
  return withNodeErrors(ctx, [&] {
    const Shape shape = shapeAttr(ctx.attrs);
    const auto ops = sliceOperands(inputs, ctx.attrs);
    const SlicePlan plan = planSlice(shape, ops.starts, ops.ends, ops.axes, ops.steps);
    if (plan.outShape != dy.shape) {
      fail("the gradient has shape {} but slicing {} gives {}", shapeToString(dy.shape), shapeToString(shape),
           shapeToString(plan.outShape));
    }
    return std::vector<TensorMeta>{TensorMeta{dy.dtype, shape}};
  });
}

ComputeFn makeSliceGrad(const KernelInit& init) {
  const Attributes attrs = init.attrs;
  return [attrs](KernelContext& ctx) {
    if (!ctx.hasOutput(0))
      return;
    const Tensor& dy = ctx.input(0);
    Tensor& dx = ctx.output(0);
    const std::size_t es = dtypeSize(dx.dtype());
    zeroBytes(dx.rawData(), dx.bytes());
    const auto ops = sliceOperands(ctx.inputs, attrs);
    const SlicePlan plan = planSlice(dx.shape(), ops.starts, ops.ends, ops.axes, ops.steps);
    if (numElements(plan.outShape) == 0)
      return;
    const slice_pad::SliceView view = slice_pad::sliceView(dx.shape(), plan);
    stridedScatter(static_cast<char*>(dx.rawData()) + static_cast<std::size_t>(view.offset) * es,
                   static_cast<const char*>(dy.rawData()), plan.outShape, view.strides, es);
  };
}

// ---------------------------------------------------------------------------------------------------------------
// GatherGrad(dY, indices) -> dX of attribute `shape`, attribute `axis`: dX[.., idx[j], ..] += dY[.., j, ..].

std::vector<TensorMeta> inferGatherGrad(const ShapeContext& ctx) {
  const TensorMeta& dy = ctx.input(0).meta;
  const TensorMeta& indices = ctx.input(1).meta;
  if (!isFloatType(dy.dtype))
    ctx.error(fmt::format("the gradient must be floating-point, not {}", dtypeName(dy.dtype)));
  if (indices.dtype != DType::Int64 && indices.dtype != DType::Int32) {
    ctx.error(fmt::format("indices must be int32 or int64, not {}", dtypeName(indices.dtype)));
  }
  return withNodeErrors(ctx, [&] {
    const Shape shape = shapeAttr(ctx.attrs);
    const auto axis =
        static_cast<std::size_t>(normalizeAxis(ctx.attrs.getInt("axis", 0), static_cast<std::int64_t>(shape.size())));
    Shape expected(shape.begin(), shape.begin() + static_cast<std::ptrdiff_t>(axis));
    expected.insert(expected.end(), indices.shape.begin(), indices.shape.end());
    expected.insert(expected.end(), shape.begin() + static_cast<std::ptrdiff_t>(axis) + 1, shape.end());
    if (expected != dy.shape) {
      fail("the gradient has shape {} but gathering {} from {} on axis {} gives {}", shapeToString(dy.shape),
           shapeToString(indices.shape), shapeToString(shape), axis, shapeToString(expected));
    }
    return std::vector<TensorMeta>{TensorMeta{dy.dtype, shape}};
  });
}

ComputeFn makeGatherGrad(const KernelInit& init) {
  const std::int64_t axisAttr = init.attrs.getInt("axis", 0);
  return [axisAttr](KernelContext& ctx) {
    if (!ctx.hasOutput(0))
      return;
    const Tensor& dy = ctx.input(0);
    Tensor& dx = ctx.output(0);
    std::memset(dx.rawData(), 0, dx.bytes());
    const auto axis = static_cast<std::size_t>(normalizeAxis(axisAttr, dx.rank()));
    const std::int64_t dim = dx.shape()[axis];
    // Validated here, before the parallel loop (exceptions must not escape worker threads).
    auto idx = toInt64Vector(ctx.input(1));
    for (auto& v : idx) {
      if (v < -dim || v >= dim)
        fail("GatherGrad: index {} is out of bounds for an axis of size {}", v, dim);
      if (v < 0)
        v += dim;
    }
    scatterAddRows(dx.rawData(), dy.rawData(), productOf(dx.shape(), 0, axis), static_cast<std::int64_t>(idx.size()),
                   dim, productOf(dx.shape(), axis + 1, dx.shape().size()), idx, dx.dtype());
  };
}

// ---------------------------------------------------------------------------------------------------------------
// PadGrad(dY) -> dX of attribute `shape`; attributes `mode` (constant, reflect, edge, wrap) and `pads`
// ([begin_0, ..., begin_n-1, end_0, ..., end_n-1], one pair per axis, negative pads crop). Every output element
// adds into the input element the forward Pad copied it from; the map is separable, so it folds one padded axis at
// a time.

std::vector<TensorMeta> inferPadGrad(const ShapeContext& ctx) {
  const TensorMeta& dy = ctx.input(0).meta;
  if (!isFloatType(dy.dtype))
    ctx.error(fmt::format("the gradient must be floating-point, not {}", dtypeName(dy.dtype)));
  return withNodeErrors(ctx, [&] {
    const PadGradPlan plan = planPadGrad(ctx.attrs);
    if (plan.outShape != dy.shape) {
      fail("the gradient has shape {} but padding {} gives {}", shapeToString(dy.shape), shapeToString(plan.shape),
           shapeToString(plan.outShape));
    }
    return std::vector<TensorMeta>{TensorMeta{dy.dtype, plan.shape}};
  });
}

ComputeFn makePadGrad(const KernelInit& init) {
  const PadGradPlan plan = planPadGrad(init.attrs);
  return [plan](KernelContext& ctx) {
    if (!ctx.hasOutput(0))
      return;
    const Tensor& dy = ctx.input(0);
    Tensor& dx = ctx.output(0);
    const DType dtype = dx.dtype();
    const std::size_t rank = plan.shape.size();
    std::vector<std::size_t> folds;  // axes whose padding must be folded back
    for (std::size_t k = 0; k < rank; ++k) {
      if (plan.begin[k] != 0 || plan.end[k] != 0)
        folds.push_back(k);
    }
    if (folds.empty()) {
      copyBytes(dx.rawData(), dy.rawData(), dy.bytes());
      return;
    }
    // Fold one axis per pass: current has the input's sizes on folded axes, the output's elsewhere.
    Shape current = plan.outShape;
    Tensor scratch;
    const void* src = dy.rawData();
    for (std::size_t f = 0; f < folds.size(); ++f) {
      const std::size_t k = folds[f];
      Shape next = current;
      next[k] = plan.shape[k];
      Tensor step;
      void* dst = dx.rawData();
      if (f + 1 < folds.size()) {
        step = Tensor::empty(dtype, next);
        dst = step.rawData();
      }
      std::memset(dst, 0, static_cast<std::size_t>(numElements(next)) * dtypeSize(dtype));
      std::vector<std::int64_t> rowMap(static_cast<std::size_t>(current[k]));
      for (std::int64_t o = 0; o < current[k]; ++o) {
        rowMap[static_cast<std::size_t>(o)] = padSource(o, plan.begin[k], plan.shape[k], plan.mode);
      }
      scatterAddRows(dst, src, productOf(current, 0, k), current[k], next[k], productOf(current, k + 1, rank), rowMap,
                     dtype);
      scratch = std::move(step);  // keeps this pass's result alive as the next pass's source
      src = dst;
      current = next;
    }
  };
}

}  // namespace

void registerShapeGradOps(OpRegistry& registry) {
  addOp(registry, "SliceGrad", inferSliceGrad, makeSliceGrad);
  addOp(registry, "GatherGrad", inferGatherGrad, makeGatherGrad);
  addOp(registry, "PadGrad", inferPadGrad, makePadGrad);
}

}  // namespace strata::cpu
