#pragma once

// Attribute parsing and shape arithmetic of the reduction family, shared by the CPU kernels (reduction_*.cpp,
// grad_reduction_ops.cpp) and the CUDA ones (core/backend/cuda/kernels/reduction.cu, softmax.cu, losses.cu), so
// both backends split shapes the same way and fail with the same messages. Host code only.

#include <cstdint>
#include <optional>
#include <vector>

#include "strata/attributes.h"
#include "strata/shape.h"

namespace strata::cpu::reduction_detail {

// A tensor viewed as [outer, axis, inner] around one axis (in range; every axis of a scalar is a single element).
struct AxisSplit {
  std::int64_t outer = 1;
  std::int64_t axis = 1;
  std::int64_t inner = 1;
};
AxisSplit splitAtAxis(const Shape& shape, std::int64_t axis);

// The groups of kept and reduced dims of a contiguous input: neighbouring dims of the same kind merge and size-1
// dims do not matter. Dims and strides (in elements of the input) per group, outermost first.
struct ReduceGroups {
  std::int64_t outCount = 1;     // elements kept (the output's size)
  std::int64_t reduceCount = 1;  // elements reduced into each output
  std::vector<std::int64_t> keptDims, keptStrides;
  std::vector<std::int64_t> reducedDims, reducedStrides;
  bool innerReduced = false;  // whether the innermost group is reduced
};
ReduceGroups groupReducedAxes(const Shape& shape, const std::vector<bool>& reducedAxis);

// The attributes of SoftmaxCrossEntropyLoss, NegativeLogLikelihoodLoss and their gradients.
enum class LossReduction { None, Sum, Mean };

struct LossConfig {
  LossReduction reduction = LossReduction::Mean;
  std::optional<std::int64_t> ignoreIndex;
};

LossConfig readLossConfig(const Attributes& attrs);

}  // namespace strata::cpu::reduction_detail
