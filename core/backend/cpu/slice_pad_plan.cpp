#include "slice_pad_plan.h"

#include <algorithm>
#include <numeric>
#include <string>

#include "shape_ops_common.h"
#include "strata/error.h"

namespace strata::cpu::slice_pad {

using shape_detail::listToString;
using shape_detail::toInt64Vector;

SlicePlan planSlice(const Shape& shape, const std::vector<std::int64_t>& starts, const std::vector<std::int64_t>& ends,
                    std::vector<std::int64_t> axes, std::vector<std::int64_t> steps) {
  const auto rank = static_cast<std::int64_t>(shape.size());
  if (starts.size() != ends.size())
    fail("starts {} and ends {} differ in length", listToString(starts), listToString(ends));
  if (axes.empty()) {
    axes.resize(starts.size());
    std::iota(axes.begin(), axes.end(), std::int64_t{0});
  }
  if (steps.empty())
    steps.assign(starts.size(), 1);
  if (axes.size() != starts.size() || steps.size() != starts.size()) {
    fail("starts {}, ends {}, axes {} and steps {} differ in length", listToString(starts), listToString(ends),
         listToString(axes), listToString(steps));
  }
  SlicePlan plan{shape, std::vector<std::int64_t>(shape.size(), 0), std::vector<std::int64_t>(shape.size(), 1)};
  std::vector<bool> seen(shape.size(), false);
  for (std::size_t i = 0; i < axes.size(); ++i) {
    if (axes[i] < -rank || axes[i] >= rank)
      fail("axis {} is out of range for rank {}", axes[i], rank);
    const auto axis = static_cast<std::size_t>(axes[i] < 0 ? axes[i] + rank : axes[i]);
    if (seen[axis])
      fail("axis {} is repeated in axes {}", axes[i], listToString(axes));
    seen[axis] = true;
    const std::int64_t dim = shape[axis];
    const std::int64_t step = steps[i];
    if (step == 0)
      fail("step 0 on axis {}", axes[i]);
    std::int64_t start = starts[i];
    std::int64_t end = ends[i];
    if (start < 0)
      start += dim;  // cannot overflow: dim >= 0 and start < 0
    if (end < 0)
      end += dim;
    std::int64_t count = 0;
    // Ceiling divisions written as 1 + (span - 1) / step so huge steps cannot overflow.
    if (step > 0) {
      start = std::clamp<std::int64_t>(start, 0, dim);
      end = std::clamp<std::int64_t>(end, 0, dim);
      count = end > start ? 1 + (end - start - 1) / step : 0;
    } else if (dim > 0) {
      start = std::clamp<std::int64_t>(start, 0, dim - 1);
      end = std::clamp<std::int64_t>(end, -1, dim - 1);
      count = start > end ? 1 + (start - end - 1) / -(step < -dim ? -dim : step) : 0;
    }
    plan.outShape[axis] = count;
    plan.starts[axis] = count > 0 ? start : 0;
    // A single element needs no step (and a huge step would overflow the stride).
    plan.steps[axis] = count > 1 ? step : 1;
  }
  return plan;
}

SliceOperands sliceOperands(const std::vector<const Tensor*>& inputs, const Attributes& attrs) {
  SliceOperands ops;
  auto get = [&](std::size_t i) {
    return i < inputs.size() && inputs[i] != nullptr ? toInt64Vector(*inputs[i]) : std::vector<std::int64_t>{};
  };
  if (inputs.size() >= 3) {
    ops.starts = get(1);
    ops.ends = get(2);
    ops.axes = get(3);
    ops.steps = get(4);
  } else {
    ops.starts = attrs.getInts("starts");
    ops.ends = attrs.getInts("ends");
    ops.axes = attrs.getInts("axes", {});
    ops.steps = attrs.getInts("steps", {});  // SliceGrad's attribute form; opset-1 Slice has none
  }
  return ops;
}

PadMode padMode(const Attributes& attrs) {
  const std::string mode = attrs.getString("mode", "constant");
  if (mode == "constant")
    return PadMode::Constant;
  if (mode == "reflect")
    return PadMode::Reflect;
  if (mode == "edge")
    return PadMode::Edge;
  if (mode == "wrap")
    return PadMode::Wrap;
  fail("unknown mode '{}' (expected constant, reflect, edge or wrap)", mode);
}

std::int64_t padSource(std::int64_t o, std::int64_t begin, std::int64_t dim, PadMode mode) {
  const std::int64_t i = o - begin;
  if (i >= 0 && i < dim)
    return i;
  switch (mode) {
    case PadMode::Constant:
      return -1;
    case PadMode::Edge:
      return std::clamp<std::int64_t>(i, 0, dim - 1);
    case PadMode::Wrap:
      return ((i % dim) + dim) % dim;
    case PadMode::Reflect: {
      if (dim == 1)
        return 0;
      const std::int64_t period = 2 * (dim - 1);
      const std::int64_t m = ((i % period) + period) % period;
      return m < dim ? m : period - m;
    }
  }
  return -1;
}

SliceView sliceView(const Shape& full, const SlicePlan& plan) {
  const auto strides = contiguousStrides(full);
  SliceView view;
  view.strides.resize(strides.size());
  for (std::size_t k = 0; k < strides.size(); ++k) {
    view.offset += plan.starts[k] * strides[k];
    view.strides[k] = strides[k] * plan.steps[k];
  }
  return view;
}

}  // namespace strata::cpu::slice_pad
