#include "reduction_plan.h"

#include <string>

#include "strata/error.h"

namespace strata::cpu::reduction_detail {

AxisSplit splitAtAxis(const Shape& shape, std::int64_t axis) {
  AxisSplit split;
  for (std::int64_t d = 0; d < static_cast<std::int64_t>(shape.size()); ++d) {
    const std::int64_t dim = shape[static_cast<std::size_t>(d)];
    if (d < axis) {
      split.outer *= dim;
    } else if (d == axis) {
      split.axis = dim;
    } else {
      split.inner *= dim;
    }
  }
  return split;
}

ReduceGroups groupReducedAxes(const Shape& shape, const std::vector<bool>& reducedAxis) {
  ReduceGroups g;
  std::vector<std::int64_t> groupDims;
  std::vector<bool> groupReduced;
  for (std::size_t d = 0; d < shape.size(); ++d) {
    const std::int64_t dim = shape[d];
    (reducedAxis[d] ? g.reduceCount : g.outCount) *= dim;
    if (dim == 1) {
      continue;
    }
    if (!groupDims.empty() && groupReduced.back() == reducedAxis[d]) {
      groupDims.back() *= dim;
    } else {
      groupDims.push_back(dim);
      groupReduced.push_back(reducedAxis[d]);
    }
  }
  std::int64_t stride = 1;
  for (std::size_t i = groupDims.size(); i-- > 0;) {
    auto& dims = groupReduced[i] ? g.reducedDims : g.keptDims;
    auto& strides = groupReduced[i] ? g.reducedStrides : g.keptStrides;
    dims.insert(dims.begin(), groupDims[i]);
    strides.insert(strides.begin(), stride);
    stride *= groupDims[i];
  }
  g.innerReduced = !groupDims.empty() && groupReduced.back();
  return g;
}

LossConfig readLossConfig(const Attributes& attrs) {
  LossConfig config;
  const std::string name = attrs.getString("reduction", "mean");
  if (name == "none") {
    config.reduction = LossReduction::None;
  } else if (name == "sum") {
    config.reduction = LossReduction::Sum;
  } else if (name == "mean") {
    config.reduction = LossReduction::Mean;
  } else {
    fail("reduction must be none, sum or mean, got '{}'", name);
  }
  if (attrs.has("ignore_index")) {
    config.ignoreIndex = attrs.getInt("ignore_index");
  }
  return config;
}

}  // namespace strata::cpu::reduction_detail
