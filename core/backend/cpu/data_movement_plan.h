#pragma once

// Attribute parsing, validation and shape arithmetic of the shape and data-movement ops, shared by the CPU kernels
// (data_movement_*.cpp, grad_shape_ops.cpp, shape_ops.cpp) and the CUDA ones (core/backend/cuda/kernels/
// data_movement*), so both backends accept the same operands, compute the same shapes and fail with the same
// messages. Host code only; no kernel work.

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "slice_pad_plan.h"
#include "strata/attributes.h"
#include "strata/tensor.h"

namespace strata::cpu::shape_detail {

// The product of shape[begin..end).
std::int64_t productOf(const Shape& shape, std::size_t begin, std::size_t end);

// Transpose's permutation: the `perm` attribute (negative axes wrapped) or the reversed axes; fails unless it is a
// permutation of 0..rank-1.
std::vector<std::int64_t> transposePerm(const Attributes& attrs, std::int64_t rank);

// A transpose of contiguous data reduced to its essentials: unit axes dropped and output axes that are consecutive
// input axes merged. `shape` and `srcStrides` (in elements of the input) describe the output; when `copy` is set the
// transpose is a plain copy, when `rowsContiguous` is set the innermost axis stays innermost (a strided copy of
// contiguous rows). Otherwise it is a batch of 2-D transposes between the input's innermost axis (size `da`, output
// axis `q`) and the output's (size `db`), the batch axes being the output axes other than q and the last.
struct TransposePlan {
  bool copy = false;
  Shape shape;
  std::vector<std::int64_t> srcStrides;
  bool rowsContiguous = false;
  std::size_t q = 0;
  std::int64_t da = 0, db = 0;
  std::int64_t dstStrideA = 0;  // output stride of axis q
  std::int64_t srcStrideB = 0;  // input stride of the output's innermost axis
  Shape batchDims;
  std::vector<std::int64_t> batchIn, batchOut;  // input and output strides of the batch axes
};

// The plan of a transpose of a non-empty contiguous tensor of inShape: output axis i is input axis perm[i].
TransposePlan planTranspose(const Shape& inShape, const std::vector<std::int64_t>& perm);

// DepthToSpace and SpaceToDepth as a transpose of a 6-D view of the input.
struct BlockPlan {
  Shape view;                      // the input as 6-D
  std::vector<std::int64_t> perm;  // transpose of the view
  Shape out;
};

BlockPlan planDepthToSpace(const Shape& in, const Attributes& attrs);
BlockPlan planSpaceToDepth(const Shape& in, const Attributes& attrs);

using BlockPlanner = BlockPlan (*)(const Shape&, const Attributes&);

// Split's part sizes along the axis: the `split` input (opset 13), the `split` attribute (older opsets), or equal
// parts (opset 18's num_outputs allows a smaller last part).
std::vector<std::int64_t> splitSizes(std::int64_t dim, const Tensor* splitInput, const Attributes& attrs,
                                     std::size_t outputCount);

// Strides (in elements) that read `in` broadcast to outShape: 0 along broadcast axes.
std::vector<std::int64_t> broadcastStrides(const Shape& in, const Shape& outShape);

// Per-axis (begin, end) pads, from the pads input (opset 11+; optional axes input from opset 18) or attribute.
std::pair<std::vector<std::int64_t>, std::vector<std::int64_t>> padAmounts(const Shape& shape, const Tensor* padsInput,
                                                                           const Tensor* axesInput,
                                                                           const Attributes& attrs);

// The forward input's shape of a shape-family gradient, from the "shape" attribute, checked for negative dims.
Shape shapeAttr(const Attributes& attrs);

// PadGrad(dY) -> dX of attribute `shape`; attributes `mode` and `pads` ([begin_0, ..., end_n-1], negative pads
// crop).
struct PadGradPlan {
  Shape shape;  // dX
  slice_pad::PadMode mode = slice_pad::PadMode::Constant;
  std::vector<std::int64_t> begin, end;
  Shape outShape;  // dY
};

PadGradPlan planPadGrad(const Attributes& attrs);

// GatherElements / ScatterElements: indices must have data's rank and not exceed it outside `axis`.
void checkElementsShapes(const Shape& data, const Shape& indices, std::size_t axis, const char* op);

// The `reduction` attribute of ScatterElements and ScatterND.
enum class ScatterReduction { None, Add, Mul, Max, Min };

ScatterReduction scatterReductionOf(const Attributes& attrs);

// GatherND / ScatterND geometry.
struct NdPlan {
  std::int64_t batch = 1;       // product of the batch dims
  std::int64_t tuples = 1;      // index tuples per batch
  std::int64_t k = 0;           // coordinates per tuple
  std::int64_t sliceElems = 1;  // elements each tuple addresses
  Shape out;
};

NdPlan planNd(const Shape& data, const Shape& indices, std::int64_t batchDims, const char* op);

}  // namespace strata::cpu::shape_detail
