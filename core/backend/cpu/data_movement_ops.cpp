// Data-movement CPU ops: Transpose, Concat, Split, Slice, Expand, Tile, Pad, DepthToSpace, SpaceToDepth, Trilu.
// All work on raw bytes with the element size, so every dtype is supported; contiguous runs copy with memcpy.

#include <algorithm>
#include <cstring>
#include <string>

#include "data_movement_plan.h"
#include "shape_ops_common.h"
#include "slice_pad_plan.h"
#include "strata/thread_pool.h"

namespace strata::cpu::shape_detail {

namespace {

using slice_pad::PadMode;
using slice_pad::padMode;
using slice_pad::padSource;
using slice_pad::planSlice;
using slice_pad::sliceOperands;
using slice_pad::SliceOperands;
using slice_pad::SlicePlan;

std::size_t elemSizeOf(const Tensor& t) {
  return dtypeSize(t.dtype());
}

// ---------------------------------------------------------------------------------------------------------------
// Transpose

std::vector<TensorMeta> inferTranspose(const ShapeContext& ctx) {
  const TensorMeta& in = ctx.input(0).meta;
  const auto perm =
      withNodeErrors(ctx, [&] { return transposePerm(ctx.attrs, static_cast<std::int64_t>(in.shape.size())); });
  Shape out(perm.size());
  for (std::size_t i = 0; i < perm.size(); ++i)
    out[i] = in.shape[static_cast<std::size_t>(perm[i])];
  return {TensorMeta{in.dtype, out}};
}

ComputeFn makeTranspose(const KernelInit& init) {
  const Attributes attrs = init.attrs;
  return [attrs](KernelContext& ctx) {
    if (!ctx.hasOutput(0))
      return;
    const Tensor& in = ctx.input(0);
    const auto perm = transposePerm(attrs, in.rank());
    transposeBytes(ctx.output(0).rawData(), in.rawData(), in.shape(), perm, elemSizeOf(in));
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Concat and Split

std::vector<TensorMeta> inferConcat(const ShapeContext& ctx) {
  if (ctx.inputs.empty())
    ctx.error("needs at least one input");
  const TensorMeta& first = ctx.input(0).meta;
  const auto rank = static_cast<std::int64_t>(first.shape.size());
  if (rank == 0)
    ctx.error("cannot concatenate scalars");
  const std::int64_t axisAttr = ctx.attrs.getInt("axis");
  if (axisAttr < -rank || axisAttr >= rank)
    ctx.error(fmt::format("axis {} is out of range for rank {}", axisAttr, rank));
  const auto axis = static_cast<std::size_t>(axisAttr < 0 ? axisAttr + rank : axisAttr);
  Shape out = first.shape;
  out[axis] = 0;
  for (std::size_t i = 0; i < ctx.inputs.size(); ++i) {
    if (!ctx.hasInput(i))
      ctx.error(fmt::format("input {} is missing", i));
    const TensorMeta& m = ctx.input(i).meta;
    if (m.dtype != first.dtype) {
      ctx.error(fmt::format("input {} has type {}, input 0 has {}", i, dtypeName(m.dtype), dtypeName(first.dtype)));
    }
    bool ok = m.shape.size() == first.shape.size();
    for (std::size_t k = 0; ok && k < m.shape.size(); ++k)
      ok = k == axis || m.shape[k] == first.shape[k];
    if (!ok) {
      ctx.error(fmt::format("input {} of shape {} does not match input 0 of shape {} outside axis {}", i,
                            shapeToString(m.shape), shapeToString(first.shape), axisAttr));
    }
    out[axis] += m.shape[axis];
  }
  return {TensorMeta{first.dtype, out}};
}

ComputeFn makeConcat(const KernelInit& init) {
  const std::int64_t axisAttr = init.attrs.getInt("axis");
  return [axisAttr](KernelContext& ctx) {
    if (!ctx.hasOutput(0))
      return;
    Tensor& out = ctx.output(0);
    const auto axis = static_cast<std::size_t>(normalizeAxis(axisAttr, out.rank()));
    const std::size_t es = elemSizeOf(out);
    const std::int64_t outer = productOf(out.shape(), 0, axis);
    const auto inner = static_cast<std::size_t>(productOf(out.shape(), axis + 1, out.shape().size())) * es;
    const std::size_t rowBytes = static_cast<std::size_t>(out.shape()[axis]) * inner;
    std::vector<const char*> srcs;
    std::vector<std::size_t> chunks;
    for (const Tensor* in : ctx.inputs) {
      srcs.push_back(static_cast<const char*>(in->rawData()));
      chunks.push_back(static_cast<std::size_t>(in->shape()[axis]) * inner);
    }
    auto* dst = static_cast<char*>(out.rawData());
    if (rowBytes == 0 || outer == 0)
      return;
    if (outer == 1) {
      for (std::size_t j = 0; j < srcs.size(); ++j) {
        copyBytes(dst, srcs[j], chunks[j]);
        dst += chunks[j];
      }
      return;
    }
    const std::int64_t grain = std::max<std::int64_t>(1, kParallelBytes / static_cast<std::int64_t>(rowBytes));
    parallelFor(0, outer, grain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t o = begin; o < end; ++o) {
        char* d = dst + static_cast<std::size_t>(o) * rowBytes;
        for (std::size_t j = 0; j < srcs.size(); ++j) {
          if (chunks[j] == 0)
            continue;
          std::memcpy(d, srcs[j] + static_cast<std::size_t>(o) * chunks[j], chunks[j]);
          d += chunks[j];
        }
      }
    });
  };
}

std::vector<TensorMeta> inferSplit(const ShapeContext& ctx) {
  const TensorMeta& in = ctx.input(0).meta;
  const auto rank = static_cast<std::int64_t>(in.shape.size());
  const std::int64_t axisAttr = ctx.attrs.getInt("axis", 0);
  if (axisAttr < -rank || axisAttr >= rank)
    ctx.error(fmt::format("axis {} is out of range for rank {}", axisAttr, rank));
  const auto axis = static_cast<std::size_t>(axisAttr < 0 ? axisAttr + rank : axisAttr);
  const Tensor* splitInput = ctx.hasInput(1) ? &ctx.constantInput(1) : nullptr;
  const auto sizes =
      withNodeErrors(ctx, [&] { return splitSizes(in.shape[axis], splitInput, ctx.attrs, ctx.outputCount); });
  std::vector<TensorMeta> outs;
  for (std::int64_t s : sizes) {
    TensorMeta m = in;
    m.shape[axis] = s;
    outs.push_back(m);
  }
  return outs;
}

ComputeFn makeSplit(const KernelInit& init) {
  const Attributes attrs = init.attrs;
  // The declared output count, even if the executor leaves trailing unused outputs out of ctx.outputs.
  const std::size_t declaredOutputs = init.outputs.size();
  return [attrs, declaredOutputs](KernelContext& ctx) {
    const Tensor& in = ctx.input(0);
    const auto axis = static_cast<std::size_t>(normalizeAxis(attrs.getInt("axis", 0), in.rank()));
    const std::size_t outputCount = declaredOutputs > 0 ? declaredOutputs : ctx.outputs.size();
    const auto sizes = splitSizes(in.shape()[axis], ctx.hasInput(1) ? &ctx.input(1) : nullptr, attrs, outputCount);
    const std::size_t es = elemSizeOf(in);
    const std::int64_t outer = productOf(in.shape(), 0, axis);
    const auto inner = static_cast<std::size_t>(productOf(in.shape(), axis + 1, in.shape().size())) * es;
    const std::size_t rowBytes = static_cast<std::size_t>(in.shape()[axis]) * inner;
    const auto* src = static_cast<const char*>(in.rawData());
    std::size_t offset = 0;
    for (std::size_t j = 0; j < sizes.size(); ++j) {
      const std::size_t chunk = static_cast<std::size_t>(sizes[j]) * inner;
      if (ctx.hasOutput(j) && chunk > 0 && outer > 0) {
        auto* dst = static_cast<char*>(ctx.output(j).rawData());
        if (outer == 1) {
          copyBytes(dst, src + offset, chunk);
        } else {
          const std::int64_t grain = std::max<std::int64_t>(1, kParallelBytes / static_cast<std::int64_t>(chunk));
          parallelFor(0, outer, grain, [&](std::int64_t begin, std::int64_t end) {
            for (std::int64_t o = begin; o < end; ++o) {
              std::memcpy(dst + static_cast<std::size_t>(o) * chunk,
                          src + static_cast<std::size_t>(o) * rowBytes + offset, chunk);
            }
          });
        }
      }
      offset += chunk;
    }
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Slice

std::vector<TensorMeta> inferSlice(const ShapeContext& ctx) {
  const TensorMeta& in = ctx.input(0).meta;
  std::vector<const Tensor*> inputs(ctx.inputs.size(), nullptr);
  for (std::size_t i = 1; i < ctx.inputs.size(); ++i) {
    if (ctx.hasInput(i))
      inputs[i] = &ctx.constantInput(i);
  }
  return withNodeErrors(ctx, [&] {
    const auto ops = sliceOperands(inputs, ctx.attrs);
    return std::vector<TensorMeta>{
        TensorMeta{in.dtype, planSlice(in.shape, ops.starts, ops.ends, ops.axes, ops.steps).outShape}};
  });
}

ComputeFn makeSlice(const KernelInit& init) {
  const Attributes attrs = init.attrs;
  return [attrs](KernelContext& ctx) {
    if (!ctx.hasOutput(0))
      return;
    const Tensor& in = ctx.input(0);
    const auto ops = sliceOperands(ctx.inputs, attrs);
    const SlicePlan plan = planSlice(in.shape(), ops.starts, ops.ends, ops.axes, ops.steps);
    if (numElements(plan.outShape) == 0)
      return;
    const slice_pad::SliceView view = slice_pad::sliceView(in.shape(), plan);
    const std::size_t es = elemSizeOf(in);
    stridedCopy(ctx.output(0).rawData(),
                static_cast<const char*>(in.rawData()) + static_cast<std::size_t>(view.offset) * es, plan.outShape,
                view.strides, es);
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Expand and Tile

std::vector<TensorMeta> inferExpand(const ShapeContext& ctx) {
  const TensorMeta& in = ctx.input(0).meta;
  const Shape target = toInt64Vector(ctx.constantInput(1));
  return {TensorMeta{in.dtype, withNodeErrors(ctx, [&] { return broadcastShapes(in.shape, target); })}};
}

void computeExpand(KernelContext& ctx) {
  if (!ctx.hasOutput(0))
    return;
  const Tensor& in = ctx.input(0);
  Tensor& out = ctx.output(0);
  stridedCopy(out.rawData(), in.rawData(), out.shape(), broadcastStrides(in.shape(), out.shape()), elemSizeOf(in));
}

std::vector<TensorMeta> inferTile(const ShapeContext& ctx) {
  const TensorMeta& in = ctx.input(0).meta;
  const auto repeats = toInt64Vector(ctx.constantInput(1));
  if (repeats.size() != in.shape.size()) {
    ctx.error(fmt::format("repeats {} must have one entry per axis of the input {}", listToString(repeats),
                          shapeToString(in.shape)));
  }
  Shape out = in.shape;
  for (std::size_t k = 0; k < out.size(); ++k) {
    if (repeats[k] < 0)
      ctx.error(fmt::format("repeats {} has a negative entry", listToString(repeats)));
    out[k] *= repeats[k];
  }
  return {TensorMeta{in.dtype, out}};
}

void computeTile(KernelContext& ctx) {
  if (!ctx.hasOutput(0))
    return;
  const Tensor& in = ctx.input(0);
  Tensor& out = ctx.output(0);
  if (out.numel() == 0)
    return;
  // The output as an (repeat, dim) pair per axis, reading the input with stride 0 along the repeats.
  const auto strides = contiguousStrides(in.shape());
  Shape shape;
  std::vector<std::int64_t> srcStrides;
  for (std::size_t k = 0; k < strides.size(); ++k) {
    shape.push_back(out.shape()[k] / in.shape()[k]);
    srcStrides.push_back(0);
    shape.push_back(in.shape()[k]);
    srcStrides.push_back(strides[k]);
  }
  stridedCopy(out.rawData(), in.rawData(), shape, srcStrides, elemSizeOf(in));
}

// ---------------------------------------------------------------------------------------------------------------
// Pad

const Tensor* optionalConstant(const ShapeContext& ctx, std::size_t i) {
  return ctx.hasInput(i) ? &ctx.constantInput(i) : nullptr;
}

std::vector<TensorMeta> inferPad(const ShapeContext& ctx) {
  const TensorMeta& in = ctx.input(0).meta;
  return withNodeErrors(ctx, [&] {
    const PadMode mode = padMode(ctx.attrs);
    const auto [begin, end] = padAmounts(in.shape, optionalConstant(ctx, 1), optionalConstant(ctx, 3), ctx.attrs);
    Shape out = in.shape;
    for (std::size_t k = 0; k < out.size(); ++k) {
      out[k] += begin[k] + end[k];
      if (out[k] < 0)
        fail("pads make axis {} of input {} negative", k, shapeToString(in.shape));
      if (mode != PadMode::Constant && in.shape[k] == 0 && out[k] > 0) {
        fail("cannot pad the empty axis {} in a non-constant mode", k);
      }
    }
    return std::vector<TensorMeta>{TensorMeta{in.dtype, out}};
  });
}

ComputeFn makePad(const KernelInit& init) {
  const Attributes attrs = init.attrs;
  return [attrs](KernelContext& ctx) {
    if (!ctx.hasOutput(0))
      return;
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.output(0);
    const std::size_t es = elemSizeOf(in);
    if (out.numel() == 0)
      return;
    const PadMode mode = padMode(attrs);
    const auto [begin, end] = padAmounts(in.shape(), ctx.hasInput(1) ? &ctx.input(1) : nullptr,
                                         ctx.hasInput(3) ? &ctx.input(3) : nullptr, attrs);
    std::vector<char> value(es, 0);
    if (ctx.hasInput(2) && ctx.input(2).numel() > 0) {
      STRATA_CHECK(ctx.input(2).dtype() == in.dtype(), "Pad: constant_value has type {}, data has {}",
                   dtypeName(ctx.input(2).dtype()), dtypeName(in.dtype()));
      std::memcpy(value.data(), ctx.input(2).rawData(), es);
    } else if (!ctx.hasInput(1) && attrs.has("value")) {
      storeFromDouble(in.dtype(), value.data(), attrs.getFloat("value"));
    }
    const std::size_t rank = out.shape().size();
    if (rank == 0) {
      std::memcpy(out.rawData(), in.rawData(), es);
      return;
    }
    // Per-axis source maps; the innermost axis is cut into runs of consecutive source indices (or constants).
    std::vector<std::vector<std::int64_t>> maps(rank);
    for (std::size_t k = 0; k < rank; ++k) {
      maps[k].resize(static_cast<std::size_t>(out.shape()[k]));
      for (std::int64_t o = 0; o < out.shape()[k]; ++o) {
        maps[k][static_cast<std::size_t>(o)] = padSource(o, begin[k], in.shape()[k], mode);
      }
    }
    struct Run {
      std::int64_t outStart, length, inStart;
    };
    std::vector<Run> runs;
    for (std::int64_t o = 0; o < out.shape()[rank - 1]; ++o) {
      const std::int64_t s = maps[rank - 1][static_cast<std::size_t>(o)];
      if (!runs.empty()) {
        Run& last = runs.back();
        const bool extends = last.inStart < 0 ? s < 0 : s == last.inStart + last.length;
        if (extends) {
          ++last.length;
          continue;
        }
      }
      runs.push_back({o, 1, s});
    }
    const auto inStrides = contiguousStrides(in.shape());
    const std::int64_t rowLen = out.shape()[rank - 1];
    const std::int64_t rows = out.numel() / rowLen;
    const auto rowBytes = static_cast<std::size_t>(rowLen) * es;
    const auto* src = static_cast<const char*>(in.rawData());
    auto* dst = static_cast<char*>(out.rawData());
    const Shape& outShape = out.shape();
    const std::int64_t grain = std::max<std::int64_t>(1, kParallelBytes / static_cast<std::int64_t>(rowBytes));
    parallelFor(0, rows, grain, [&](std::int64_t rowBegin, std::int64_t rowEnd) {
      for (std::int64_t row = rowBegin; row < rowEnd; ++row) {
        char* d = dst + static_cast<std::size_t>(row) * rowBytes;
        std::int64_t rem = row;
        std::int64_t inRow = 0;
        bool constantRow = false;
        for (std::size_t k = rank - 1; k-- > 0;) {
          const std::int64_t s = maps[k][static_cast<std::size_t>(rem % outShape[k])];
          rem /= outShape[k];
          if (s < 0)
            constantRow = true;
          inRow += s * inStrides[k];
        }
        if (constantRow) {
          fillElements(d, value.data(), rowLen, es);
          continue;
        }
        for (const Run& r : runs) {
          char* dr = d + static_cast<std::size_t>(r.outStart) * es;
          if (r.inStart < 0) {
            fillElements(dr, value.data(), r.length, es);
          } else {
            std::memcpy(dr, src + static_cast<std::size_t>(inRow + r.inStart) * es,
                        static_cast<std::size_t>(r.length) * es);
          }
        }
      }
    });
  };
}

// ---------------------------------------------------------------------------------------------------------------
// DepthToSpace and SpaceToDepth: a 6-D transpose each.

void addBlockOp(OpRegistry& registry, const std::string& type, BlockPlanner planner) {
  addOp(
      registry, type,
      [planner](const ShapeContext& ctx) {
        const TensorMeta& in = ctx.input(0).meta;
        return std::vector<TensorMeta>{
            TensorMeta{in.dtype, withNodeErrors(ctx, [&] { return planner(in.shape, ctx.attrs).out; })}};
      },
      [planner](const KernelInit& init) -> ComputeFn {
        const Attributes attrs = init.attrs;
        return [planner, attrs](KernelContext& ctx) {
          if (!ctx.hasOutput(0))
            return;
          const Tensor& in = ctx.input(0);
          const BlockPlan plan = planner(in.shape(), attrs);
          transposeBytes(ctx.output(0).rawData(), in.rawData(), plan.view, plan.perm, elemSizeOf(in));
        };
      });
}

// ---------------------------------------------------------------------------------------------------------------
// Trilu

std::vector<TensorMeta> inferTrilu(const ShapeContext& ctx) {
  const TensorMeta& in = ctx.input(0).meta;
  if (in.shape.size() < 2)
    ctx.error(fmt::format("input must have rank >= 2, not {}", shapeToString(in.shape)));
  return {in};
}

ComputeFn makeTrilu(const KernelInit& init) {
  const bool upper = init.attrs.getInt("upper", 1) != 0;
  return [upper](KernelContext& ctx) {
    if (!ctx.hasOutput(0))
      return;
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.output(0);
    if (out.numel() == 0)
      return;
    const std::int64_t k = ctx.hasInput(1) ? toInt64Vector(ctx.input(1)).at(0) : 0;
    const std::size_t es = elemSizeOf(in);
    const std::size_t rank = in.shape().size();
    const std::int64_t rowsPerMatrix = in.shape()[rank - 2];
    const std::int64_t cols = in.shape()[rank - 1];
    const std::int64_t rows = in.numel() / cols;
    const auto rowBytes = static_cast<std::size_t>(cols) * es;
    const auto* src = static_cast<const char*>(in.rawData());
    auto* dst = static_cast<char*>(out.rawData());
    const std::int64_t grain = std::max<std::int64_t>(1, kParallelBytes / static_cast<std::int64_t>(rowBytes));
    parallelFor(0, rows, grain, [&](std::int64_t begin, std::int64_t end) {
      for (std::int64_t row = begin; row < end; ++row) {
        const std::int64_t i = row % rowsPerMatrix;
        // Upper keeps columns j >= i + k; lower keeps j <= i + k.
        const std::int64_t split = std::clamp<std::int64_t>(upper ? i + k : i + k + 1, 0, cols);
        const auto splitBytes = static_cast<std::size_t>(split) * es;
        char* d = dst + static_cast<std::size_t>(row) * rowBytes;
        const char* s = src + static_cast<std::size_t>(row) * rowBytes;
        if (upper) {
          std::memset(d, 0, splitBytes);
          std::memcpy(d + splitBytes, s + splitBytes, rowBytes - splitBytes);
        } else {
          std::memcpy(d, s, splitBytes);
          std::memset(d + splitBytes, 0, rowBytes - splitBytes);
        }
      }
    });
  };
}

ComputeFactory statelessFn(void (*fn)(KernelContext&)) {
  return [fn](const KernelInit&) -> ComputeFn { return fn; };
}

}  // namespace

void registerDataMovementOps(OpRegistry& registry) {
  addOp(registry, "Transpose", inferTranspose, makeTranspose);
  addOp(registry, "Concat", inferConcat, makeConcat);
  addOp(registry, "Split", inferSplit, makeSplit);
  addOp(registry, "Slice", inferSlice, makeSlice);
  addOp(registry, "Expand", inferExpand, statelessFn(computeExpand));
  addOp(registry, "Tile", inferTile, statelessFn(computeTile));
  addOp(registry, "Pad", inferPad, makePad);
  addBlockOp(registry, "DepthToSpace", planDepthToSpace);
  addBlockOp(registry, "SpaceToDepth", planSpaceToDepth);
  addOp(registry, "Trilu", inferTrilu, makeTrilu);
}

}  // namespace strata::cpu::shape_detail
