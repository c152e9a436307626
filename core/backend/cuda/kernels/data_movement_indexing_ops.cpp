// CUDA kernels of the indexing ops: Gather, GatherElements, GatherND, ScatterElements, ScatterND, OneHot
// (core/backend/cpu/data_movement_indexing.cpp). Shapes, attributes and errors follow the CPU kernels; indices are
// validated as Note [Index validation] (data_movement.h) says; the device work is in data_movement_indexing.cu.

#include <algorithm>
#include <string>

#include "data_movement_host.h"

namespace strata::cuda::dm {

namespace {

using cpu::shape_detail::checkElementsShapes;
using cpu::shape_detail::NdPlan;
using cpu::shape_detail::planNd;

// ---------------------------------------------------------------------------------------------------------------
// Gather

ComputeFn makeGather(const KernelInit& init) {
  const std::int64_t axisAttr = init.attrs.getInt("axis", 0);
  const HostConstants constants(init, {1});
  return [axisAttr, constants](KernelContext& ctx) {
    if (!ctx.hasOutput(0)) {
      return;
    }
    const Tensor& data = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    const auto axis = static_cast<std::size_t>(normalizeAxis(axisAttr, data.rank()));
    const std::int64_t dim = data.shape()[axis];
    const std::int64_t n = indices.numel();
    const std::int64_t outer = productOf(data.shape(), 0, axis);
    const auto innerBytes =
        static_cast<std::size_t>(productOf(data.shape(), axis + 1, data.shape().size())) * elemSizeOf(data);
    void* dst = ctx.output(0).rawData();
    const cudaStream_t stream = streamOf(ctx);
    withIndexCheck(
        ctx, constants.constant(1), indices, "Gather",
        [&](std::int64_t) { return std::pair<std::int64_t, std::int64_t>(static_cast<std::int64_t>(axis), dim); },
        [&](unsigned long long* bad) {
          if (outer == 0 || innerBytes == 0) {
            // Nothing moves, but the indices are still checked (the CPU kernel checks them first).
            checkIndices(indices.rawData(), indices.dtype(), n, dim, bad, stream);
            return;
          }
          gather(dst, data.rawData(), indices.rawData(), indices.dtype(), outer, dim, n, innerBytes, bad, stream);
        });
  };
}

// ---------------------------------------------------------------------------------------------------------------
// GatherElements and ScatterElements

ComputeFn makeGatherElements(const KernelInit& init) {
  const std::int64_t axisAttr = init.attrs.getInt("axis", 0);
  const HostConstants constants(init, {1});
  return [axisAttr, constants](KernelContext& ctx) {
    if (!ctx.hasOutput(0)) {
      return;
    }
    const Tensor& data = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    const auto axis = static_cast<std::size_t>(normalizeAxis(axisAttr, data.rank()));
    checkElementsShapes(data.shape(), indices.shape(), axis, "GatherElements");
    const std::int64_t dim = data.shape()[axis];
    void* dst = ctx.output(0).rawData();
    const cudaStream_t stream = streamOf(ctx);
    withIndexCheck(
        ctx, constants.constant(1), indices, "GatherElements",
        [&](std::int64_t) { return std::pair<std::int64_t, std::int64_t>(static_cast<std::int64_t>(axis), dim); },
        [&](unsigned long long* bad) {
          gatherElements(dst, data.rawData(), indices.rawData(), indices.dtype(), indices.shape(), data.shape(), axis,
                         elemSizeOf(data), bad, stream);
        });
  };
}

ComputeFn makeScatterElements(const KernelInit& init) {
  const std::int64_t axisAttr = init.attrs.getInt("axis", 0);
  const Reduction reduction = cpu::shape_detail::scatterReductionOf(init.attrs);
  const HostConstants constants(init, {1});
  return [axisAttr, reduction, constants](KernelContext& ctx) {
    if (!ctx.hasOutput(0)) {
      return;
    }
    const Tensor& data = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    const Tensor& updates = ctx.input(2);
    Tensor& out = ctx.output(0);
    const auto axis = static_cast<std::size_t>(normalizeAxis(axisAttr, data.rank()));
    checkElementsShapes(data.shape(), indices.shape(), axis, "ScatterElements");
    STRATA_CHECK(updates.shape() == indices.shape() && updates.dtype() == data.dtype(),
                 "ScatterElements: updates {} must match indices {} and data {}", updates.meta().toString(),
                 shapeToString(indices.shape()), dtypeName(data.dtype()));
    const std::int64_t dim = data.shape()[axis];
    const cudaStream_t stream = streamOf(ctx);
    copyBytes(out.rawData(), data.rawData(), data.bytes(), stream);
    withIndexCheck(
        ctx, constants.constant(1), indices, "ScatterElements",
        [&](std::int64_t) { return std::pair<std::int64_t, std::int64_t>(static_cast<std::int64_t>(axis), dim); },
        [&](unsigned long long* bad) {
          scatterElements(out.rawData(), updates.rawData(), indices.rawData(), indices.dtype(), indices.shape(),
                          data.shape(), axis, data.dtype(), reduction, out.device(), bad, stream);
        });
  };
}

// ---------------------------------------------------------------------------------------------------------------
// GatherND and ScatterND

NdGeometry ndGeometry(const Shape& data, const NdPlan& plan, std::size_t b) {
  const auto strides = contiguousStrides(data);
  NdGeometry g;
  g.batch = plan.batch;
  g.tuples = plan.tuples;
  g.k = plan.k;
  g.sliceElems = plan.sliceElems;
  g.batchElems = plan.batch > 0 ? numElements(data) / plan.batch : 0;
  for (std::size_t j = 0; j < static_cast<std::size_t>(plan.k); ++j) {
    g.dims.push_back(data[b + j]);
    g.strides.push_back(strides[b + j]);
  }
  return g;
}

// The (axis, size) that coordinate `position` of an [.., k] index tensor addresses.
auto ndAxisOf(const Shape& data, std::int64_t k, std::size_t b) {
  return [&data, k, b](std::int64_t position) {
    const std::size_t axis = b + static_cast<std::size_t>(position % k);
    return std::pair<std::int64_t, std::int64_t>(static_cast<std::int64_t>(axis), data[axis]);
  };
}

ComputeFn makeGatherND(const KernelInit& init) {
  const std::int64_t batchDims = init.attrs.getInt("batch_dims", 0);
  const HostConstants constants(init, {1});
  return [batchDims, constants](KernelContext& ctx) {
    if (!ctx.hasOutput(0)) {
      return;
    }
    const Tensor& data = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    STRATA_CHECK(indices.dtype() == DType::Int64, "GatherND: indices must be int64, not {}",
                 dtypeName(indices.dtype()));
    const NdPlan plan = planNd(data.shape(), indices.shape(), batchDims, "GatherND");
    const auto b = static_cast<std::size_t>(batchDims);
    const NdGeometry geometry = ndGeometry(data.shape(), plan, b);
    void* dst = ctx.output(0).rawData();
    const cudaStream_t stream = streamOf(ctx);
    withIndexCheck(ctx, constants.constant(1), indices, "GatherND", ndAxisOf(data.shape(), plan.k, b),
                   [&](unsigned long long* bad) {
                     gatherND(dst, data.rawData(), indices.data<std::int64_t>(), geometry, elemSizeOf(data),
                              data.device(), bad, stream);
                   });
  };
}

ComputeFn makeScatterND(const KernelInit& init) {
  const Reduction reduction = cpu::shape_detail::scatterReductionOf(init.attrs);
  const HostConstants constants(init, {1});
  return [reduction, constants](KernelContext& ctx) {
    if (!ctx.hasOutput(0)) {
      return;
    }
    const Tensor& data = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    const Tensor& updates = ctx.input(2);
    Tensor& out = ctx.output(0);
    STRATA_CHECK(indices.dtype() == DType::Int64, "ScatterND: indices must be int64, not {}",
                 dtypeName(indices.dtype()));
    const NdPlan plan = planNd(data.shape(), indices.shape(), 0, "ScatterND");
    STRATA_CHECK(updates.shape() == plan.out && updates.dtype() == data.dtype(),
                 "ScatterND: updates are {}, expected {} of {}", updates.meta().toString(), dtypeName(data.dtype()),
                 shapeToString(plan.out));
    const NdGeometry geometry = ndGeometry(data.shape(), plan, 0);
    const cudaStream_t stream = streamOf(ctx);
    copyBytes(out.rawData(), data.rawData(), data.bytes(), stream);
    withIndexCheck(ctx, constants.constant(1), indices, "ScatterND", ndAxisOf(data.shape(), plan.k, 0),
                   [&](unsigned long long* bad) {
                     scatterND(out.rawData(), updates.rawData(), indices.data<std::int64_t>(), geometry, data.dtype(),
                               reduction, out.device(), bad, stream);
                   });
  };
}

// ---------------------------------------------------------------------------------------------------------------
// OneHot: out-of-range indices leave their vector off, as on the CPU, so there is nothing to validate.

ComputeFn makeOneHot(const KernelInit& init) {
  const std::int64_t axisAttr = init.attrs.getInt("axis", -1);
  return [axisAttr](KernelContext& ctx) {
    if (!ctx.hasOutput(0)) {
      return;
    }
    const Tensor& indices = ctx.input(0);
    const Tensor& values = ctx.input(2);
    Tensor& out = ctx.output(0);
    STRATA_CHECK(values.dtype() == out.dtype() && values.numel() >= 2, "OneHot: values {} for an output of {}",
                 values.meta().toString(), dtypeName(out.dtype()));
    const auto axis = static_cast<std::size_t>(normalizeAxis(axisAttr, out.rank()));
    const std::int64_t depth = out.shape()[axis];
    const std::int64_t outer = productOf(indices.shape(), 0, axis);
    const std::int64_t inner = productOf(indices.shape(), axis, indices.shape().size());
    oneHot(out.rawData(), indices.rawData(), indices.dtype(), values.rawData(), outer, depth, inner, elemSizeOf(out),
           streamOf(ctx));
  };
}

}  // namespace

void registerIndexingKernels(OpRegistry& registry) {
  addComputeFactory(registry, "Gather", makeGather);
  addComputeFactory(registry, "GatherElements", makeGatherElements);
  addComputeFactory(registry, "GatherND", makeGatherND);
  addComputeFactory(registry, "ScatterElements", makeScatterElements);
  addComputeFactory(registry, "ScatterND", makeScatterND);
  addComputeFactory(registry, "OneHot", makeOneHot);
}

}  // namespace strata::cuda::dm
