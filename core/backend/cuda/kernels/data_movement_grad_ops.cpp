// CUDA kernels of the shape-family gradients: SliceGrad, GatherGrad, PadGrad (core/backend/cpu/grad_shape_ops.cpp).
// Attributes, operands and errors follow the CPU kernels, with the same Slice / Pad plan helpers; the device work
// is in data_movement.cu (SliceGrad's strided scatter) and data_movement_grad.cu.

#include <string>

#include "cuda_check.h"
#include "cuda_ops.h"
#include "data_movement_host.h"

namespace strata::cuda {

namespace dm {

namespace {

using cpu::shape_detail::PadGradPlan;
using cpu::shape_detail::planPadGrad;
namespace slice_pad = cpu::slice_pad;

// ---------------------------------------------------------------------------------------------------------------
// SliceGrad(dY, [starts, ends, axes, steps]) -> dX: zeros, with dY scattered where the forward Slice read.

ComputeFn makeSliceGrad(const KernelInit& init) {
  const Attributes attrs = init.attrs;
  const HostConstants constants(init, {1, 2, 3, 4});
  return [attrs, constants](KernelContext& ctx) {
    if (!ctx.hasOutput(0)) {
      return;
    }
    const Tensor& dy = ctx.input(0);
    Tensor& dx = ctx.output(0);
    const std::size_t es = dtypeSize(dx.dtype());
    const cudaStream_t stream = streamOf(ctx);
    if (dx.bytes() > 0) {
      STRATA_CUDA_CHECK(cudaMemsetAsync(dx.rawData(), 0, dx.bytes(), stream));
    }
    const std::vector<Tensor> hosts = constants.all(ctx);
    const auto ops = slice_pad::sliceOperands(pointersTo(hosts), attrs);
    const slice_pad::SlicePlan plan = slice_pad::planSlice(dx.shape(), ops.starts, ops.ends, ops.axes, ops.steps);
    if (numElements(plan.outShape) == 0) {
      return;
    }
    STRATA_CHECK(plan.outShape == dy.shape(), "SliceGrad: the gradient has shape {} but the slice has {}",
                 shapeToString(dy.shape()), shapeToString(plan.outShape));
    const slice_pad::SliceView view = slice_pad::sliceView(dx.shape(), plan);
    stridedScatter(static_cast<char*>(dx.rawData()) + static_cast<std::size_t>(view.offset) * es, dy.rawData(),
                   plan.outShape, view.strides, es, stream);
  };
}

// ---------------------------------------------------------------------------------------------------------------
// GatherGrad(dY, indices) -> dX of attribute `shape`, attribute `axis`: dX[.., idx[j], ..] += dY[.., j, ..].

ComputeFn makeGatherGrad(const KernelInit& init) {
  const std::int64_t axisAttr = init.attrs.getInt("axis", 0);
  const HostConstants constants(init, {1});
  return [axisAttr, constants](KernelContext& ctx) {
    if (!ctx.hasOutput(0)) {
      return;
    }
    const Tensor& dy = ctx.input(0);
    const Tensor& indices = ctx.input(1);
    Tensor& dx = ctx.output(0);
    const auto axis = static_cast<std::size_t>(normalizeAxis(axisAttr, dx.rank()));
    const std::int64_t dim = dx.shape()[axis];
    const std::int64_t outer = productOf(dx.shape(), 0, axis);
    const std::int64_t inner = productOf(dx.shape(), axis + 1, dx.shape().size());
    const cudaStream_t stream = streamOf(ctx);
    withIndexCheck(
        ctx, constants.constant(1), indices, "GatherGrad",
        [&](std::int64_t) { return std::pair<std::int64_t, std::int64_t>(static_cast<std::int64_t>(axis), dim); },
        [&](unsigned long long* bad) {
          gatherGrad(dx.rawData(), dy.rawData(), indices.rawData(), indices.dtype(), dx.dtype(), outer, dim,
                     indices.numel(), inner, dx.device(), bad, stream);
        });
  };
}

// ---------------------------------------------------------------------------------------------------------------
// PadGrad(dY) -> dX of attribute `shape`; attributes `mode` and `pads` ([begin_0, ..., end_n-1], negative pads
// crop). The map is separable: one padded axis folds back per pass, as on the CPU.

ComputeFn makePadGrad(const KernelInit& init) {
  const PadGradPlan plan = planPadGrad(init.attrs);
  return [plan](KernelContext& ctx) {
    if (!ctx.hasOutput(0)) {
      return;
    }
    const Tensor& dy = ctx.input(0);
    Tensor& dx = ctx.output(0);
    STRATA_CHECK(dy.shape() == plan.outShape && dx.shape() == plan.shape,
                 "PadGrad: gradient {} and input {} do not match padding {} to {}", shapeToString(dy.shape()),
                 shapeToString(dx.shape()), shapeToString(plan.shape), shapeToString(plan.outShape));
    const DType dtype = dx.dtype();
    const cudaStream_t stream = streamOf(ctx);
    const std::size_t rank = plan.shape.size();
    std::vector<std::size_t> folds;  // axes whose padding must be folded back
    for (std::size_t k = 0; k < rank; ++k) {
      if (plan.begin[k] != 0 || plan.end[k] != 0) {
        folds.push_back(k);
      }
    }
    if (folds.empty()) {
      copyBytes(dx.rawData(), dy.rawData(), dy.bytes(), stream);
      return;
    }
    // Fold one axis per pass: `current` has the input's sizes on folded axes, the output's elsewhere. Intermediate
    // results are stream-ordered workspace, so each may be released once the next pass is enqueued.
    Shape current = plan.outShape;
    Tensor previous;
    const void* src = dy.rawData();
    for (std::size_t f = 0; f < folds.size(); ++f) {
      const std::size_t k = folds[f];
      Shape next = current;
      next[k] = plan.shape[k];
      Tensor step;
      void* dst = dx.rawData();
      if (f + 1 < folds.size()) {
        step = Tensor::empty(TensorMeta{dtype, next}, MemoryCategory::Workspace, dx.device());
        dst = step.rawData();
      }
      padGradFold(dst, src, dtype, productOf(current, 0, k), current[k], next[k], productOf(current, k + 1, rank),
                  plan.begin[k], padKind(plan.mode), stream);
      previous = std::move(step);
      src = dst;
      current = next;
    }
  };
}

}  // namespace

}  // namespace dm

void registerDataMovementGradKernels(OpRegistry& registry) {
  dm::addComputeFactory(registry, "SliceGrad", dm::makeSliceGrad);
  dm::addComputeFactory(registry, "GatherGrad", dm::makeGatherGrad);
  dm::addComputeFactory(registry, "PadGrad", dm::makePadGrad);
}

}  // namespace strata::cuda
