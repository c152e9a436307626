// Resize (opsets 11 to 19, as the importer downgrades them to 17) and ResizeGrad, its gradient with respect to X:
// separable passes over float32 or float64 (Note [Separable resize] in resize_plan.h). Both are layout-aware
// (Note [Channels-last]) and read channels-last operands themselves: their passes then run along H and W with the
// channels innermost, so every pass moves contiguous rows.
//
// ResizeGrad(dY, roi, scales, sizes) -> dX: the forward node's sampling operands and attributes, plus input_shape
// (X's shape as stored).

#include <algorithm>
#include <memory>
#include <string>

#include <fmt/format.h>

#include "cpu_ops.h"
#include "data_movement_plan.h"
#include "resize_passes.h"
#include "resize_plan.h"
#include "shape_ops_common.h"
#include "strata/channels_last.h"

namespace strata::cpu {

namespace {

using namespace resize;
using shape_detail::copyBytes;
using shape_detail::productOf;
using shape_detail::withNodeErrors;

bool isResizeDType(DType dtype) {
  return dtype == DType::Float32 || dtype == DType::Float64;
}

// The sampling operands at shape inference: they must be plan-time constants (empty ones count as absent).
Operands shapeOperands(const ShapeContext& ctx, const Options& options) {
  const auto constant = [&](std::size_t i) -> const Tensor* {
    if (!ctx.hasInput(i) || ctx.input(i).meta.numel() == 0)
      return nullptr;
    const InputInfo& info = ctx.input(i);
    if (info.constant == nullptr) {
      ctx.error(fmt::format(
          "{} (input {}) must be known when the plan is built (a constant or shape arithmetic on static shapes): "
          "Strata makes Resize's sampling tables at plan time",
          kOperandNames[i], i));
    }
    return info.constant;
  };
  Operands operands;
  if (options.coordinates == Coordinates::TfCropAndResize)
    operands.roi = constant(1);
  operands.scales = constant(2);
  operands.sizes = constant(3);
  return operands;
}

Options nodeOptions(const ShapeContext& ctx) {
  return withNodeErrors(ctx, [&] { return readOptions(ctx.attrs); });
}

void checkDType(const ShapeContext& ctx, const char* what) {
  const DType dtype = ctx.input(0).meta.dtype;
  if (!isResizeDType(dtype)) {
    ctx.error(fmt::format("{} of type {} is not supported (float32 and float64 only)", what, dtypeName(dtype)));
  }
}

Shape inputShapeAttr(const Attributes& attrs) {
  const Shape shape = attrs.getInts("input_shape");
  for (std::int64_t d : shape) {
    if (d < 0)
      fail("input_shape {} has a negative dimension", shapeToString(shape));
  }
  return shape;
}

std::vector<TensorMeta> inferResize(const ShapeContext& ctx) {
  checkDType(ctx, "X");
  const Options options = nodeOptions(ctx);
  const Operands operands = shapeOperands(ctx, options);
  const TensorMeta& x = ctx.input(0).meta;
  return {TensorMeta{x.dtype, withNodeErrors(ctx, [&] { return outputShape(options, x.shape, operands); })}};
}

std::vector<TensorMeta> inferResizeGrad(const ShapeContext& ctx) {
  checkDType(ctx, "the gradient");
  const Options options = nodeOptions(ctx);
  const Operands operands = shapeOperands(ctx, options);
  const TensorMeta& dy = ctx.input(0).meta;
  return withNodeErrors(ctx, [&] {
    const Shape x = inputShapeAttr(ctx.attrs);
    const Shape expected = outputShape(options, x, operands);
    if (expected != dy.shape) {
      fail("the gradient has shape {} but resizing {} gives {}", shapeToString(dy.shape), shapeToString(x),
           shapeToString(expected));
    }
    return std::vector<TensorMeta>{TensorMeta{dy.dtype, x}};
  });
}

// The passes of two resized axes as the outer one (a) and the inner one (b), with the tensor viewed as
// [outer, a, mid, b, inner] (Note [Fused resize passes]).
struct FusedView {
  std::size_t a = 0, b = 1;  // indices into the passes
  std::int64_t outer = 1, mid = 1, inner = 1;
};

template <typename T>
FusedView fusedView(const std::vector<TypedPass<T>>& passes, const Shape& shape) {
  FusedView view;
  if (passes[1].axis < passes[0].axis)
    std::swap(view.a, view.b);
  const auto a = static_cast<std::size_t>(passes[view.a].axis);
  const auto b = static_cast<std::size_t>(passes[view.b].axis);
  view.outer = productOf(shape, 0, a);
  view.mid = productOf(shape, a + 1, b);
  view.inner = productOf(shape, b + 1, shape.size());
  return view;
}

template <typename T>
void runForward(const Plan& plan, const std::vector<TypedPass<T>>& passes, const Tensor& x, Tensor& y) {
  if (y.numel() == 0)
    return;
  if (passes.empty()) {  // every axis keeps its size and its positions
    copyBytes(y.rawData(), x.rawData(), x.bytes());
    return;
  }
  if (passes.size() == 2) {
    const FusedView v = fusedView(passes, plan.inShape);
    fusedForward(passes[v.a], passes[v.b], x.data<T>(), y.data<T>(), v.outer, v.mid, v.inner);
    for (const TypedPass<T>& pass : passes)
      fillExtrapolated(pass, y.data<T>(), plan.outShape, static_cast<T>(plan.options.extrapolation));
    return;
  }
  Shape current = plan.inShape;
  const T* src = x.data<T>();
  Tensor scratch[2];
  for (std::size_t k = 0; k < passes.size(); ++k) {
    const TypedPass<T>& pass = passes[k];
    const auto axis = static_cast<std::size_t>(pass.axis);
    Shape next = current;
    next[axis] = pass.outSize;
    T* dst = y.data<T>();
    if (k + 1 < passes.size()) {
      scratch[k % 2] = Tensor::empty(dtypeOf<T>(), next, MemoryCategory::Workspace);
      dst = scratch[k % 2].data<T>();
    }
    forwardPass(pass, src, dst, productOf(current, 0, axis), productOf(current, axis + 1, current.size()));
    src = dst;
    current = next;
  }
  for (const TypedPass<T>& pass : passes)
    fillExtrapolated(pass, y.data<T>(), plan.outShape, static_cast<T>(plan.options.extrapolation));
}

// The forward passes transposed, last first.
template <typename T>
void runAdjoint(const Plan& plan, const std::vector<TypedPass<T>>& passes, const Tensor& dy, Tensor& dx) {
  if (dx.numel() == 0)
    return;
  if (dy.numel() == 0) {  // nothing read X: its gradient is zero
    std::fill(dx.data<T>(), dx.data<T>() + dx.numel(), T(0));
    return;
  }
  if (passes.empty()) {
    copyBytes(dx.rawData(), dy.rawData(), dy.bytes());
    return;
  }
  if (passes.size() == 2) {
    const FusedView v = fusedView(passes, plan.inShape);
    fusedAdjoint(passes[v.a], passes[v.b], dy.data<T>(), dx.data<T>(), v.outer, v.mid, v.inner);
    return;
  }
  Shape current = plan.outShape;
  const T* src = dy.data<T>();
  Tensor scratch[2];
  for (std::size_t k = passes.size(); k-- > 0;) {
    const TypedPass<T>& pass = passes[k];
    const auto axis = static_cast<std::size_t>(pass.axis);
    Shape next = current;
    next[axis] = pass.inSize;
    T* dst = dx.data<T>();
    if (k > 0) {
      scratch[k % 2] = Tensor::empty(dtypeOf<T>(), next, MemoryCategory::Workspace);
      dst = scratch[k % 2].data<T>();
    }
    adjointPass(pass, src, dst, productOf(current, 0, axis), productOf(current, axis + 1, current.size()));
    src = dst;
    current = next;
  }
}

// Resize (adjoint false) and ResizeGrad (adjoint true). The sampling tables are made when the kernel is created if
// the operands are known then; on a GPU's host fallback (Note [Host fallback]) they arrive with the first run.
class ResizeKernel final : public OpKernel {
 public:
  ResizeKernel(const KernelInit& init, bool adjoint)
      : nodeName_(init.nodeName),
        opType_(adjoint ? "ResizeGrad" : "Resize"),
        adjoint_(adjoint),
        dtype_(init.inputs.at(0).meta.dtype) {
    withErrors([&] {
      options_ = readOptions(init.attrs);
      channelsLast_ = channelsLastOf(init.attrs);
      storedInput_ = adjoint ? inputShapeAttr(init.attrs) : init.inputs[0].meta.shape;
    });
    std::vector<const Tensor*> operands(4, nullptr);
    bool known = true;
    for (std::size_t i = 1; i < init.inputs.size() && i < 4; ++i) {
      const InputInfo& info = init.inputs[i];
      if (!info.present || info.meta.numel() == 0 || (i == 1 && !usesRoi()))
        continue;
      operands[i] = info.constant;
      known = known && info.constant != nullptr;
    }
    if (known)
      plan(operands);
  }

  void compute(KernelContext& ctx) override {
    if (!planned_) {
      std::vector<const Tensor*> operands(4, nullptr);
      for (std::size_t i = 1; i < ctx.inputs.size() && i < 4; ++i)
        operands[i] = ctx.inputs[i];
      plan(operands);
    }
    if (!ctx.hasOutput(0))
      return;
    if (dtype_ == DType::Float32) {
      run(passes32_, ctx);
    } else {
      run(passes64_, ctx);
    }
  }

  std::string implementation() const override {
    if (!planned_)
      return {};
    const std::size_t count = plan_.passes.size();
    return fmt::format(
        "{}{}",
        count == 2 ? std::string("two axes fused") : fmt::format("{} separable pass{}", count, count == 1 ? "" : "es"),
        channelsLast_ ? ", channels-last" : "");
  }

 private:
  bool usesRoi() const { return options_.coordinates == Coordinates::TfCropAndResize; }

  template <typename Fn>
  void withErrors(Fn&& fn) const {
    try {
      fn();
    } catch (const Error& e) {
      fail("node '{}' ({}): {}", nodeName_, opType_, e.what());
    }
  }

  void plan(const std::vector<const Tensor*>& operands) {
    withErrors([&] {
      if (!isResizeDType(dtype_))
        fail("type {} is not supported (float32 and float64 only)", dtypeName(dtype_));
      Operands sampling;
      sampling.roi = usesRoi() ? operands[1] : nullptr;
      sampling.scales = operands[2];
      sampling.sizes = operands[3];
      plan_ = makePlan(options_, storedInput_, channelsLast_, sampling);
    });
    for (const AxisTaps& taps : plan_.passes) {
      if (dtype_ == DType::Float32) {
        passes32_.push_back(typedPass<float>(taps, adjoint_));
      } else {
        passes64_.push_back(typedPass<double>(taps, adjoint_));
      }
    }
    planned_ = true;
  }

  template <typename T>
  void run(const std::vector<TypedPass<T>>& passes, KernelContext& ctx) const {
    const Tensor& in = ctx.input(0);
    Tensor& out = ctx.output(0);
    const Shape& expectedIn = adjoint_ ? plan_.outShape : plan_.inShape;
    const Shape& expectedOut = adjoint_ ? plan_.inShape : plan_.outShape;
    if (in.shape() != expectedIn || out.shape() != expectedOut || in.dtype() != dtype_ || out.dtype() != dtype_) {
      fail("node '{}' ({}): planned for {} -> {} ({}), run on {} -> {}", nodeName_, opType_, shapeToString(expectedIn),
           shapeToString(expectedOut), dtypeName(dtype_), in.meta().toString(), out.meta().toString());
    }
    if (adjoint_) {
      runAdjoint<T>(plan_, passes, in, out);
    } else {
      runForward<T>(plan_, passes, in, out);
    }
  }

  std::string nodeName_;
  std::string opType_;
  bool adjoint_ = false;
  DType dtype_ = DType::Float32;
  Options options_;
  bool channelsLast_ = false;
  Shape storedInput_;
  bool planned_ = false;
  Plan plan_;
  std::vector<TypedPass<float>> passes32_;
  std::vector<TypedPass<double>> passes64_;
};

}  // namespace

void registerResizeOps(OpRegistry& registry) {
  // Both read channels-last operands themselves (the passes only need each axis's place).
  const auto native = [](const KernelInit&) { return true; };
  registry.addSchema(OpSchema{"Resize", inferResize, true});
  registry.addKernel(
      "Resize", DeviceType::CPU,
      [](const KernelInit& init) -> std::unique_ptr<OpKernel> { return std::make_unique<ResizeKernel>(init, false); },
      native);
  registry.addSchema(OpSchema{"ResizeGrad", inferResizeGrad, true});
  registry.addKernel(
      "ResizeGrad", DeviceType::CPU,
      [](const KernelInit& init) -> std::unique_ptr<OpKernel> { return std::make_unique<ResizeKernel>(init, true); },
      native);
}

}  // namespace strata::cpu
