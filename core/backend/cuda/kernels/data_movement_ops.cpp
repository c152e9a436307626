// CUDA kernels of the data-movement ops Transpose, Concat, Split, Slice, Expand, Tile, Pad, DepthToSpace,
// SpaceToDepth and Trilu (core/backend/cpu/data_movement_ops.cpp). Attributes, operands and errors follow the CPU
// kernels, whose plan helpers (slice_pad_plan.h, data_movement_plan.h) this file shares; the device work is in
// data_movement.cu. registerDataMovementKernels also registers the shape and indexing families.

#include <algorithm>
#include <numeric>
#include <string>

#include "cuda_ops.h"
#include "data_movement_host.h"

namespace strata::cuda {

namespace dm {

namespace {

using cpu::shape_detail::BlockPlan;
using cpu::shape_detail::BlockPlanner;
using cpu::shape_detail::broadcastStrides;
using cpu::shape_detail::padAmounts;
using cpu::shape_detail::planDepthToSpace;
using cpu::shape_detail::planSpaceToDepth;
using cpu::shape_detail::splitSizes;
using cpu::shape_detail::toInt64Vector;
using cpu::shape_detail::transposePerm;
namespace slice_pad = cpu::slice_pad;

char* bytesOf(Tensor& t) {
  return static_cast<char*>(t.rawData());
}
const char* bytesOf(const Tensor& t) {
  return static_cast<const char*>(t.rawData());
}

// ---------------------------------------------------------------------------------------------------------------
// Transpose, DepthToSpace, SpaceToDepth

ComputeFn makeTranspose(const KernelInit& init) {
  const Attributes attrs = init.attrs;
  return [attrs](KernelContext& ctx) {
    if (!ctx.hasOutput(0)) {
      return;
    }
    const Tensor& in = ctx.input(0);
    transpose(ctx.output(0).rawData(), in.rawData(), in.shape(), transposePerm(attrs, in.rank()), elemSizeOf(in),
              streamOf(ctx));
  };
}

void addBlockKernel(OpRegistry& registry, const std::string& type, BlockPlanner planner) {
  addComputeFactory(registry, type, [planner](const KernelInit& init) -> ComputeFn {
    const Attributes attrs = init.attrs;
    return [planner, attrs](KernelContext& ctx) {
      if (!ctx.hasOutput(0)) {
        return;
      }
      const Tensor& in = ctx.input(0);
      const BlockPlan plan = planner(in.shape(), attrs);
      transpose(ctx.output(0).rawData(), in.rawData(), plan.view, plan.perm, elemSizeOf(in), streamOf(ctx));
    };
  });
}

// ---------------------------------------------------------------------------------------------------------------
// Concat and Split: one row copy per input (output), rows of the outer axes.

ComputeFn makeConcat(const KernelInit& init) {
  const std::int64_t axisAttr = init.attrs.getInt("axis");
  return [axisAttr](KernelContext& ctx) {
    if (!ctx.hasOutput(0)) {
      return;
    }
    Tensor& out = ctx.output(0);
    const auto axis = static_cast<std::size_t>(normalizeAxis(axisAttr, out.rank()));
    const std::size_t es = elemSizeOf(out);
    const std::int64_t outer = productOf(out.shape(), 0, axis);
    const auto inner = static_cast<std::size_t>(productOf(out.shape(), axis + 1, out.shape().size())) * es;
    const std::size_t rowBytes = static_cast<std::size_t>(out.shape()[axis]) * inner;
    if (rowBytes == 0 || outer == 0) {
      return;
    }
    const cudaStream_t stream = streamOf(ctx);
    std::size_t offset = 0;
    for (std::size_t j = 0; j < ctx.inputs.size(); ++j) {
      const Tensor& in = ctx.input(j);
      const std::size_t chunk = static_cast<std::size_t>(in.shape()[axis]) * inner;
      copyRows(bytesOf(out) + offset, rowBytes, in.rawData(), chunk, chunk, outer, stream);
      offset += chunk;
    }
  };
}

ComputeFn makeSplit(const KernelInit& init) {
  const Attributes attrs = init.attrs;
  // The declared output count, even if the executor leaves trailing unused outputs out of ctx.outputs.
  const std::size_t declaredOutputs = init.outputs.size();
  const HostConstants constants(init, {1});
  return [attrs, declaredOutputs, constants](KernelContext& ctx) {
    const Tensor& in = ctx.input(0);
    const auto axis = static_cast<std::size_t>(normalizeAxis(attrs.getInt("axis", 0), in.rank()));
    const std::size_t outputCount = declaredOutputs > 0 ? declaredOutputs : ctx.outputs.size();
    const Tensor split = constants.get(ctx, 1);
    const auto sizes = splitSizes(in.shape()[axis], split.defined() ? &split : nullptr, attrs, outputCount);
    const std::size_t es = elemSizeOf(in);
    const std::int64_t outer = productOf(in.shape(), 0, axis);
    const auto inner = static_cast<std::size_t>(productOf(in.shape(), axis + 1, in.shape().size())) * es;
    const std::size_t rowBytes = static_cast<std::size_t>(in.shape()[axis]) * inner;
    const cudaStream_t stream = streamOf(ctx);
    std::size_t offset = 0;
    for (std::size_t j = 0; j < sizes.size(); ++j) {
      const std::size_t chunk = static_cast<std::size_t>(sizes[j]) * inner;
      if (ctx.hasOutput(j)) {
        copyRows(ctx.output(j).rawData(), chunk, bytesOf(in) + offset, rowBytes, chunk, outer, stream);
      }
      offset += chunk;
    }
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Slice, Expand, Tile: strided copies.

ComputeFn makeSlice(const KernelInit& init) {
  const Attributes attrs = init.attrs;
  const HostConstants constants(init, {1, 2, 3, 4});
  return [attrs, constants](KernelContext& ctx) {
    if (!ctx.hasOutput(0)) {
      return;
    }
    const Tensor& in = ctx.input(0);
    const std::vector<Tensor> hosts = constants.all(ctx);
    const auto ops = slice_pad::sliceOperands(pointersTo(hosts), attrs);
    const slice_pad::SlicePlan plan = slice_pad::planSlice(in.shape(), ops.starts, ops.ends, ops.axes, ops.steps);
    if (numElements(plan.outShape) == 0) {
      return;
    }
    const slice_pad::SliceView view = slice_pad::sliceView(in.shape(), plan);
    const std::size_t es = elemSizeOf(in);
    stridedCopy(ctx.output(0).rawData(), bytesOf(in) + static_cast<std::size_t>(view.offset) * es, plan.outShape,
                view.strides, es, streamOf(ctx));
  };
}

void computeExpand(KernelContext& ctx) {
  if (!ctx.hasOutput(0)) {
    return;
  }
  const Tensor& in = ctx.input(0);
  Tensor& out = ctx.output(0);
  STRATA_CHECK(in.shape().size() <= out.shape().size(), "Expand: input {} has a higher rank than the output {}",
               shapeToString(in.shape()), shapeToString(out.shape()));
  stridedCopy(out.rawData(), in.rawData(), out.shape(), broadcastStrides(in.shape(), out.shape()), elemSizeOf(in),
              streamOf(ctx));
}

void computeTile(KernelContext& ctx) {
  if (!ctx.hasOutput(0)) {
    return;
  }
  const Tensor& in = ctx.input(0);
  Tensor& out = ctx.output(0);
  if (out.numel() == 0) {
    return;
  }
  // The output as a (repeat, dim) pair per axis, reading the input with stride 0 along the repeats.
  const auto strides = contiguousStrides(in.shape());
  Shape shape;
  std::vector<std::int64_t> srcStrides;
  for (std::size_t k = 0; k < strides.size(); ++k) {
    shape.push_back(out.shape()[k] / in.shape()[k]);
    srcStrides.push_back(0);
    shape.push_back(in.shape()[k]);
    srcStrides.push_back(strides[k]);
  }
  stridedCopy(out.rawData(), in.rawData(), shape, srcStrides, elemSizeOf(in), streamOf(ctx));
}

// ---------------------------------------------------------------------------------------------------------------
// Pad

ComputeFn makePad(const KernelInit& init) {
  const Attributes attrs = init.attrs;
  const HostConstants constants(init, {1, 3});
  return [attrs, constants](KernelContext& ctx) {
    if (!ctx.hasOutput(0)) {
      return;
    }
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.output(0);
    const std::size_t es = elemSizeOf(in);
    if (out.numel() == 0) {
      return;
    }
    const cudaStream_t stream = streamOf(ctx);
    const PadKind mode = padKind(slice_pad::padMode(attrs));
    const Tensor pads = constants.get(ctx, 1);
    const Tensor axes = constants.get(ctx, 3);
    const auto [begin, end] =
        padAmounts(in.shape(), pads.defined() ? &pads : nullptr, axes.defined() ? &axes : nullptr, attrs);
    std::vector<char> value(es, 0);
    const void* deviceValue = nullptr;
    if (ctx.hasInput(2) && ctx.input(2).numel() > 0) {
      STRATA_CHECK(ctx.input(2).dtype() == in.dtype(), "Pad: constant_value has type {}, data has {}",
                   dtypeName(ctx.input(2).dtype()), dtypeName(in.dtype()));
      deviceValue = ctx.input(2).rawData();
    } else if (!ctx.hasInput(1) && attrs.has("value")) {
      cpu::shape_detail::storeFromDouble(in.dtype(), value.data(), attrs.getFloat("value"));
    }
    if (out.rank() == 0) {
      copyBytes(out.rawData(), in.rawData(), es, stream);
      return;
    }
    pad(out.rawData(), in.rawData(), in.shape(), out.shape(), begin, mode, es, deviceValue, value.data(), stream);
  };
}

// ---------------------------------------------------------------------------------------------------------------
// Trilu

ComputeFn makeTrilu(const KernelInit& init) {
  const bool upper = init.attrs.getInt("upper", 1) != 0;
  const HostConstants constants(init, {1});
  return [upper, constants](KernelContext& ctx) {
    if (!ctx.hasOutput(0)) {
      return;
    }
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.output(0);
    if (out.numel() == 0) {
      return;
    }
    // k: a plan-time constant, read by the kernel when int64 on the device, else copied to the host.
    std::int64_t k = 0;
    const std::int64_t* deviceK = nullptr;
    if (ctx.hasInput(1)) {
      const Tensor& kInput = ctx.input(1);
      if (constants.constant(1).defined() || kInput.dtype() != DType::Int64 || kInput.numel() == 0) {
        const auto values = toInt64Vector(constants.get(ctx, 1));
        if (values.empty()) {
          fail("Trilu: k must hold one value");
        }
        k = values[0];
      } else {
        deviceK = kInput.data<std::int64_t>();
      }
    }
    const std::size_t rank = in.shape().size();
    const std::int64_t cols = in.shape()[rank - 1];
    trilu(out.rawData(), in.rawData(), in.numel() / cols, in.shape()[rank - 2], cols, upper, k, deviceK, elemSizeOf(in),
          streamOf(ctx));
  };
}

}  // namespace

}  // namespace dm

void registerDataMovementKernels(OpRegistry& registry) {
  using namespace dm;
  addComputeFactory(registry, "Transpose", makeTranspose);
  addComputeFactory(registry, "Concat", makeConcat);
  addComputeFactory(registry, "Split", makeSplit);
  addComputeFactory(registry, "Slice", makeSlice);
  addCudaKernel(registry, "Expand", computeExpand);
  addCudaKernel(registry, "Tile", computeTile);
  addComputeFactory(registry, "Pad", makePad);
  addBlockKernel(registry, "DepthToSpace", planDepthToSpace);
  addBlockKernel(registry, "SpaceToDepth", planSpaceToDepth);
  addComputeFactory(registry, "Trilu", makeTrilu);
  registerShapeKernels(registry);
  registerIndexingKernels(registry);
}

}  // namespace strata::cuda
