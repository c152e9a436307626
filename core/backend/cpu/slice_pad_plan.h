#pragma once

// Slice and Pad index arithmetic shared by the forward kernels (data_movement_ops.cpp) and their gradients
// (grad_shape_ops.cpp), so both read exactly the same elements.
#include <cstdint>
#include <vector>

#include "strata/attributes.h"
#include "strata/tensor.h"

namespace strata::cpu::slice_pad {

struct SlicePlan {
  Shape outShape;
  std::vector<std::int64_t> starts;  // per axis of the input
  std::vector<std::int64_t> steps;
};

// The output shape, start and step per axis of a Slice, with ONNX's clamping of out-of-range bounds.
SlicePlan planSlice(const Shape& shape, const std::vector<std::int64_t>& starts, const std::vector<std::int64_t>& ends,
                    std::vector<std::int64_t> axes, std::vector<std::int64_t> steps);

// Where a slice sits inside the full tensor: the element offset of its first element and, per axis, the stride
// (in elements of the full tensor) between consecutive slice elements.
struct SliceView {
  std::int64_t offset = 0;
  std::vector<std::int64_t> strides;
};

SliceView sliceView(const Shape& full, const SlicePlan& plan);

// Slice's operands: inputs 1-4 (opset 10+) or attributes (opset 1, and SliceGrad).
struct SliceOperands {
  std::vector<std::int64_t> starts, ends, axes, steps;
};

SliceOperands sliceOperands(const std::vector<const Tensor*>& inputs, const Attributes& attrs);

enum class PadMode { Constant, Reflect, Edge, Wrap };

PadMode padMode(const Attributes& attrs);

// The input index that output index o of an axis reads, or -1 for the constant.
std::int64_t padSource(std::int64_t o, std::int64_t begin, std::int64_t dim, PadMode mode);

}  // namespace strata::cpu::slice_pad
