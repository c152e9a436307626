// Indexing CPU ops: Gather, GatherElements, GatherND, ScatterElements, ScatterND, OneHot.
// Indices are validated before any parallel loop (exceptions must not escape worker threads).

#include <algorithm>
#include <cstring>
#include <string>
#include <type_traits>

#include "data_movement_plan.h"
#include "shape_ops_common.h"
#include "strata/thread_pool.h"

namespace strata::cpu::shape_detail {

namespace {

std::size_t elemSizeOf(const Tensor& t) {
  return dtypeSize(t.dtype());
}

void checkIndexType(const ShapeContext& ctx, std::size_t i) {
  const DType t = ctx.input(i).meta.dtype;
  if (t != DType::Int64 && t != DType::Int32) {
    ctx.error(fmt::format("indices must be int32 or int64, not {}", dtypeName(t)));
  }
}

// Reads indices as int64, wraps negatives by dim and fails on any outside [-dim, dim).
std::vector<std::int64_t> normalizedIndices(const Tensor& indices, std::int64_t dim, const char* op) {
  auto idx = toInt64Vector(indices);
  for (auto& v : idx) {
    if (v < -dim || v >= dim)
      fail("{}: index {} is out of bounds for an axis of size {}", op, v, dim);
    if (v < 0)
      v += dim;
  }
  return idx;
}

std::int64_t axisFrom(const ShapeContext& ctx, std::int64_t axis, std::int64_t rank) {
  if (axis < -rank || axis >= rank)
    ctx.error(fmt::format("axis {} is out of range for rank {}", axis, rank));
  return axis < 0 ? axis + rank : axis;
}

// ---------------------------------------------------------------------------------------------------------------
// Gather

std::vector<TensorMeta> inferGather(const ShapeContext& ctx) {
  const TensorMeta& data = ctx.input(0).meta;
  const TensorMeta& indices = ctx.input(1).meta;
  checkIndexType(ctx, 1);
  const auto axis = static_cast<std::size_t>(
      axisFrom(ctx, ctx.attrs.getInt("axis", 0), static_cast<std::int64_t>(data.shape.size())));
  Shape out(data.shape.begin(), data.shape.begin() + static_cast<std::ptrdiff_t>(axis));
  out.insert(out.end(), indices.shape.begin(), indices.shape.end());
  out.insert(out.end(), data.shape.begin() + static_cast<std::ptrdiff_t>(axis) + 1, data.shape.end());
  return {TensorMeta{data.dtype, out}};
}

ComputeFn makeGather(const KernelInit& init) {
  const std::int64_t axisAttr = init.attrs.getInt("axis", 0);
  return [axisAttr](KernelContext& ctx) {
    if (!ctx.hasOutput(0))
      return;
    const Tensor& data = ctx.input(0);
    const auto axis = static_cast<std::size_t>(normalizeAxis(axisAttr, data.rank()));
    const std::int64_t dim = data.shape()[axis];
    const auto idx = normalizedIndices(ctx.input(1), dim, "Gather");
    const auto n = static_cast<std::int64_t>(idx.size());
    const std::int64_t outer = productOf(data.shape(), 0, axis);
    const auto innerBytes =
        static_cast<std::size_t>(productOf(data.shape(), axis + 1, data.shape().size())) * elemSizeOf(data);
    if (n == 0 || outer == 0 || innerBytes == 0)
      return;
    const auto* src = static_cast<const char*>(data.rawData());
    auto* dst = static_cast<char*>(ctx.output(0).rawData());
    const std::int64_t grain = std::max<std::int64_t>(1, kParallelBytes / static_cast<std::int64_t>(innerBytes));
    parallelFor(0, outer * n, grain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t t = begin; t < end; ++t) {
        const std::int64_t o = t / n;
        const std::int64_t row = o * dim + idx[static_cast<std::size_t>(t % n)];
        std::memcpy(dst + static_cast<std::size_t>(t) * innerBytes, src + static_cast<std::size_t>(row) * innerBytes,
                    innerBytes);
      }
    });
  };
}

// ---------------------------------------------------------------------------------------------------------------
// GatherElements and ScatterElements

// Calls fn(position, dataOffset) for every element of an index tensor of `shape`, where dataOffset is the element
// offset in data (strides dataStrides) with the axis coordinate replaced by the index value. Serial.
template <typename Fn>
void forEachElementIndex(const Shape& shape, const std::vector<std::int64_t>& idx, std::size_t axis,
                         const std::vector<std::int64_t>& dataStrides, std::int64_t begin, std::int64_t end, Fn&& fn) {
  const std::size_t rank = shape.size();
  std::vector<std::int64_t> coord(rank, 0);
  std::int64_t rem = begin;
  std::int64_t base = 0;  // offset of the coordinates other than axis
  for (std::size_t k = rank; k-- > 0;) {
    coord[k] = rem % shape[k];
    rem /= shape[k];
    if (k != axis)
      base += coord[k] * dataStrides[k];
  }
  for (std::int64_t p = begin; p < end; ++p) {
    fn(p, base + idx[static_cast<std::size_t>(p)] * dataStrides[axis]);
    for (std::size_t k = rank; k-- > 0;) {
      const std::int64_t step = k == axis ? 0 : dataStrides[k];
      base += step;
      if (++coord[k] < shape[k])
        break;
      base -= step * shape[k];
      coord[k] = 0;
    }
  }
}

std::vector<TensorMeta> inferGatherElements(const ShapeContext& ctx) {
  const TensorMeta& data = ctx.input(0).meta;
  const TensorMeta& indices = ctx.input(1).meta;
  checkIndexType(ctx, 1);
  const auto axis = static_cast<std::size_t>(
      axisFrom(ctx, ctx.attrs.getInt("axis", 0), static_cast<std::int64_t>(data.shape.size())));
  withNodeErrors(ctx, [&] { checkElementsShapes(data.shape, indices.shape, axis, "GatherElements"); });
  return {TensorMeta{data.dtype, indices.shape}};
}

ComputeFn makeGatherElements(const KernelInit& init) {
  const std::int64_t axisAttr = init.attrs.getInt("axis", 0);
  return [axisAttr](KernelContext& ctx) {
    if (!ctx.hasOutput(0))
      return;
    const Tensor& data = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    const auto axis = static_cast<std::size_t>(normalizeAxis(axisAttr, data.rank()));
    checkElementsShapes(data.shape(), indices.shape(), axis, "GatherElements");
    const auto idx = normalizedIndices(indices, data.shape()[axis], "GatherElements");
    const auto strides = contiguousStrides(data.shape());
    const std::size_t es = elemSizeOf(data);
    const auto* src = static_cast<const char*>(data.rawData());
    auto* dst = static_cast<char*>(ctx.output(0).rawData());
    parallelFor(
        0, indices.numel(), std::max<std::int64_t>(1, kParallelBytes / static_cast<std::int64_t>(es)),
        [&](std::int64_t begin, std::int64_t end) {
          forEachElementIndex(indices.shape(), idx, axis, strides, begin, end, [&](std::int64_t p, std::int64_t off) {
            std::memcpy(dst + static_cast<std::size_t>(p) * es, src + static_cast<std::size_t>(off) * es, es);
          });
        });
  };
}

using Reduction = ScatterReduction;

template <typename T>
T combine(T a, T b, Reduction r) {
  switch (r) {
    case Reduction::None:
      return b;
    case Reduction::Add:
      return static_cast<T>(a + b);
    case Reduction::Mul:
      return static_cast<T>(a * b);
    case Reduction::Max:
      return std::max(a, b);
    case Reduction::Min:
      return std::min(a, b);
  }
  return b;
}

// dst[0..count) = combine(dst, src) elementwise, for any dtype.
void reduceInto(void* dst, const void* src, std::int64_t count, DType dtype, Reduction r) {
  if (r == Reduction::None) {
    std::memcpy(dst, src, static_cast<std::size_t>(count) * dtypeSize(dtype));
    return;
  }
  visitDType(dtype, [&](auto tag) {
    using T = decltype(tag);
    auto* d = static_cast<T*>(dst);
    const auto* s = static_cast<const T*>(src);
    for (std::int64_t i = 0; i < count; ++i) {
      if constexpr (std::is_same_v<T, Half>) {
        d[i].bits = floatToHalf(combine(halfToFloat(d[i].bits), halfToFloat(s[i].bits), r));
      } else if constexpr (std::is_same_v<T, BFloat16Bits>) {
        d[i].bits = floatToBFloat16(combine(bfloat16ToFloat(d[i].bits), bfloat16ToFloat(s[i].bits), r));
      } else if constexpr (std::is_same_v<T, bool>) {
        // add and max are or; mul and min are and.
        d[i] = (r == Reduction::Add || r == Reduction::Max) ? (d[i] || s[i]) : (d[i] && s[i]);
      } else {
        d[i] = combine(d[i], s[i], r);
      }
    }
  });
}

std::vector<TensorMeta> inferScatterElements(const ShapeContext& ctx) {
  const TensorMeta& data = ctx.input(0).meta;
  const TensorMeta& indices = ctx.input(1).meta;
  const TensorMeta& updates = ctx.input(2).meta;
  checkIndexType(ctx, 1);
  const auto axis = static_cast<std::size_t>(
      axisFrom(ctx, ctx.attrs.getInt("axis", 0), static_cast<std::int64_t>(data.shape.size())));
  if (indices.shape != updates.shape) {
    ctx.error(fmt::format("updates {} must have the shape of indices {}", shapeToString(updates.shape),
                          shapeToString(indices.shape)));
  }
  if (updates.dtype != data.dtype)
    ctx.error("updates must have the type of data");
  withNodeErrors(ctx, [&] {
    checkElementsShapes(data.shape, indices.shape, axis, "ScatterElements");
    scatterReductionOf(ctx.attrs);
  });
  return {data};
}

ComputeFn makeScatterElements(const KernelInit& init) {
  const std::int64_t axisAttr = init.attrs.getInt("axis", 0);
  const Reduction reduction = scatterReductionOf(init.attrs);
  return [axisAttr, reduction](KernelContext& ctx) {
    if (!ctx.hasOutput(0))
      return;
    const Tensor& data = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    const Tensor& updates = ctx.input(2);
    Tensor& out = ctx.output(0);
    const auto axis = static_cast<std::size_t>(normalizeAxis(axisAttr, data.rank()));
    checkElementsShapes(data.shape(), indices.shape(), axis, "ScatterElements");
    const auto idx = normalizedIndices(indices, data.shape()[axis], "ScatterElements");
    copyBytes(out.rawData(), data.rawData(), data.bytes());
    const auto strides = contiguousStrides(data.shape());
    const std::size_t es = elemSizeOf(data);
    const auto* src = static_cast<const char*>(updates.rawData());
    auto* dst = static_cast<char*>(out.rawData());
    // Serial: repeated indices apply in order.
    forEachElementIndex(indices.shape(), idx, axis, strides, 0, indices.numel(), [&](std::int64_t p, std::int64_t off) {
      reduceInto(dst + static_cast<std::size_t>(off) * es, src + static_cast<std::size_t>(p) * es, 1, data.dtype(),
                 reduction);
    });
  };
}

// ---------------------------------------------------------------------------------------------------------------
// GatherND and ScatterND

// Element offsets (within one batch of data) of every index tuple, validated.
std::vector<std::int64_t> ndOffsets(const Shape& data, const Tensor& indices, const NdPlan& plan, std::size_t b,
                                    const char* op) {
  const auto raw = toInt64Vector(indices);
  const auto strides = contiguousStrides(data);
  std::vector<std::int64_t> offsets(static_cast<std::size_t>(plan.batch * plan.tuples));
  for (std::size_t t = 0; t < offsets.size(); ++t) {
    std::int64_t off = 0;
    for (std::int64_t j = 0; j < plan.k; ++j) {
      const std::size_t axis = b + static_cast<std::size_t>(j);
      std::int64_t v = raw[t * static_cast<std::size_t>(plan.k) + static_cast<std::size_t>(j)];
      if (v < -data[axis] || v >= data[axis])
        fail("{}: index {} is out of bounds for axis {} of size {}", op, v, axis, data[axis]);
      if (v < 0)
        v += data[axis];
      off += v * strides[axis];
    }
    offsets[t] = off;
  }
  return offsets;
}

std::vector<TensorMeta> inferGatherND(const ShapeContext& ctx) {
  const TensorMeta& data = ctx.input(0).meta;
  if (ctx.input(1).meta.dtype != DType::Int64)
    ctx.error("indices must be int64");
  return {TensorMeta{
      data.dtype, withNodeErrors(ctx, [&] {
        return planNd(data.shape, ctx.input(1).meta.shape, ctx.attrs.getInt("batch_dims", 0), "GatherND").out;
      })}};
}

ComputeFn makeGatherND(const KernelInit& init) {
  const std::int64_t batchDims = init.attrs.getInt("batch_dims", 0);
  return [batchDims](KernelContext& ctx) {
    if (!ctx.hasOutput(0))
      return;
    const Tensor& data = ctx.input(0);
    const NdPlan plan = planNd(data.shape(), ctx.input(1).shape(), batchDims, "GatherND");
    const auto offsets = ndOffsets(data.shape(), ctx.input(1), plan, static_cast<std::size_t>(batchDims), "GatherND");
    const std::size_t es = elemSizeOf(data);
    const auto sliceBytes = static_cast<std::size_t>(plan.sliceElems) * es;
    if (sliceBytes == 0 || offsets.empty())
      return;
    const std::int64_t batchElems = data.numel() / plan.batch;
    const auto* src = static_cast<const char*>(data.rawData());
    auto* dst = static_cast<char*>(ctx.output(0).rawData());
    const auto total = static_cast<std::int64_t>(offsets.size());
    parallelFor(0, total, std::max<std::int64_t>(1, kParallelBytes / static_cast<std::int64_t>(sliceBytes)),
                [&](std::int64_t begin, std::int64_t end) {
                  for (std::int64_t t = begin; t < end; ++t) {
                    const std::int64_t off = (t / plan.tuples) * batchElems + offsets[static_cast<std::size_t>(t)];
                    std::memcpy(dst + static_cast<std::size_t>(t) * sliceBytes,
                                src + static_cast<std::size_t>(off) * es, sliceBytes);
                  }
                });
  };
}

std::vector<TensorMeta> inferScatterND(const ShapeContext& ctx) {
  const TensorMeta& data = ctx.input(0).meta;
  const TensorMeta& updates = ctx.input(2).meta;
  if (ctx.input(1).meta.dtype != DType::Int64)
    ctx.error("indices must be int64");
  const NdPlan plan = withNodeErrors(ctx, [&] {
    scatterReductionOf(ctx.attrs);
    return planNd(data.shape, ctx.input(1).meta.shape, 0, "ScatterND");
  });
  if (updates.shape != plan.out) {
    ctx.error(fmt::format("updates have shape {}, expected {}", shapeToString(updates.shape), shapeToString(plan.out)));
  }
  if (updates.dtype != data.dtype)
    ctx.error("updates must have the type of data");
  return {data};
}

ComputeFn makeScatterND(const KernelInit& init) {
  const Reduction reduction = scatterReductionOf(init.attrs);
  return [reduction](KernelContext& ctx) {
    if (!ctx.hasOutput(0))
      return;
    const Tensor& data = ctx.input(0);
    const Tensor& updates = ctx.input(2);
    Tensor& out = ctx.output(0);
    const NdPlan plan = planNd(data.shape(), ctx.input(1).shape(), 0, "ScatterND");
    const auto offsets = ndOffsets(data.shape(), ctx.input(1), plan, 0, "ScatterND");
    copyBytes(out.rawData(), data.rawData(), data.bytes());
    const std::size_t es = elemSizeOf(data);
    const auto* src = static_cast<const char*>(updates.rawData());
    auto* dst = static_cast<char*>(out.rawData());
    for (std::size_t t = 0; t < offsets.size(); ++t) {
      reduceInto(dst + static_cast<std::size_t>(offsets[t]) * es,
                 src + t * static_cast<std::size_t>(plan.sliceElems) * es, plan.sliceElems, data.dtype(), reduction);
    }
  };
}

// ---------------------------------------------------------------------------------------------------------------
// OneHot

std::vector<TensorMeta> inferOneHot(const ShapeContext& ctx) {
  const TensorMeta& indices = ctx.input(0).meta;
  const TensorMeta& values = ctx.input(2).meta;
  if (values.numel() != 2)
    ctx.error(fmt::format("values must hold [off, on], not shape {}", shapeToString(values.shape)));
  const Tensor& depthTensor = ctx.constantInput(1);
  if (depthTensor.numel() != 1)
    ctx.error("depth must be a scalar");
  const auto depth = static_cast<std::int64_t>(elementAsDouble(depthTensor));
  if (depth <= 0)
    ctx.error(fmt::format("depth {} must be positive", depth));
  const auto outRank = static_cast<std::int64_t>(indices.shape.size()) + 1;
  const auto axis = static_cast<std::size_t>(axisFrom(ctx, ctx.attrs.getInt("axis", -1), outRank));
  Shape out = indices.shape;
  out.insert(out.begin() + static_cast<std::ptrdiff_t>(axis), depth);
  return {TensorMeta{values.dtype, out}};
}

ComputeFn makeOneHot(const KernelInit& init) {
  const std::int64_t axisAttr = init.attrs.getInt("axis", -1);
  return [axisAttr](KernelContext& ctx) {
    if (!ctx.hasOutput(0))
      return;
    const Tensor& indices = ctx.input(0);
    const Tensor& values = ctx.input(2);
    Tensor& out = ctx.output(0);
    const auto axis = static_cast<std::size_t>(normalizeAxis(axisAttr, out.rank()));
    const std::int64_t depth = out.shape()[axis];
    const auto idx = toInt64Vector(indices);
    const std::int64_t inner = productOf(indices.shape(), axis, indices.shape().size());
    const std::size_t es = elemSizeOf(out);
    const auto* off = static_cast<const char*>(values.rawData());
    const char* on = off + es;
    auto* dst = static_cast<char*>(out.rawData());
    fillElements(dst, off, out.numel(), es);
    for (std::size_t i = 0; i < idx.size(); ++i) {
      std::int64_t v = idx[i];
      if (v < 0)
        v += depth;
      if (v < 0 || v >= depth)
        continue;  // out of range: the whole one-hot vector stays off
      const std::int64_t o = static_cast<std::int64_t>(i) / inner;
      const std::int64_t r = static_cast<std::int64_t>(i) % inner;
      std::memcpy(dst + static_cast<std::size_t>((o * depth + v) * inner + r) * es, on, es);
    }
  };
}

}  // namespace

void registerIndexingOps(OpRegistry& registry) {
  addOp(registry, "Gather", inferGather, makeGather);
  addOp(registry, "GatherElements", inferGatherElements, makeGatherElements);
  addOp(registry, "GatherND", inferGatherND, makeGatherND);
  addOp(registry, "ScatterElements", inferScatterElements, makeScatterElements);
  addOp(registry, "ScatterND", inferScatterND, makeScatterND);
  addOp(registry, "OneHot", inferOneHot, makeOneHot);
}

}  // namespace strata::cpu::shape_detail
