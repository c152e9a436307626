#pragma once

// Helpers shared by the shape and data-movement CPU ops (shape_ops.cpp, data_movement_*.cpp). Internal to the
// CPU backend.

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "strata/op_registry.h"
#include "strata/tensor.h"

namespace strata::cpu::shape_detail {

// Below this many bytes a copy stays on the calling thread.
inline constexpr std::int64_t kParallelBytes = std::int64_t{1} << 16;

using ComputeFn = std::function<void(KernelContext&)>;
// Builds a node's compute function at plan time; lets kernels capture attributes (KernelContext has none).
using ComputeFactory = std::function<ComputeFn(const KernelInit&)>;

// Registers a schema plus a CPU kernel built by `factory`.
void addOp(OpRegistry& registry, const std::string& type, ShapeFn infer, ComputeFactory factory);

// The elements of an integer (or any numeric) tensor as int64.
std::vector<std::int64_t> toInt64Vector(const Tensor& tensor);
// Element i of a numeric tensor as double.
double elementAsDouble(const Tensor& tensor, std::int64_t index = 0);

// memcpy and memset to zero, split over the thread pool when large.
void copyBytes(void* dst, const void* src, std::size_t bytes);
void zeroBytes(void* dst, std::size_t bytes);
// Fills `count` elements of `elemSize` bytes at dst with the element at `value`.
void fillElements(void* dst, const void* value, std::int64_t count, std::size_t elemSize);

// Copies a strided view into contiguous dst: dst element (i0, ..., in) = src element sum(ik * srcStrides[k]).
// Strides are in elements and may be zero (broadcast) or negative (reversed slices).
void stridedCopy(void* dst, const void* src, const Shape& shape, const std::vector<std::int64_t>& srcStrides,
                 std::size_t elemSize);
// The inverse: contiguous src of `shape` into the strided view of dst (which must not overlap itself, as slices do
// not). Both merge the axes that are contiguous on the strided side, so whole runs move with one memcpy.
void stridedScatter(void* dst, const void* src, const Shape& shape, const std::vector<std::int64_t>& dstStrides,
                    std::size_t elemSize);

// Transposes contiguous src of inShape into contiguous dst: output axis i is input axis perm[i].
void transposeBytes(void* dst, const void* src, const Shape& inShape, const std::vector<std::int64_t>& perm,
                    std::size_t elemSize);

// "[a, b, ...]" with negative values shown as they are (shapeToString shows them as "?").
std::string listToString(const std::vector<std::int64_t>& values);

// Writes `value` converted to dtype at dst (one element).
void storeFromDouble(DType dtype, void* dst, double value);

// Runs fn, turning an Error into ctx.error so the message names the node.
template <typename Fn>
auto withNodeErrors(const ShapeContext& ctx, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    ctx.error(e.what());
  }
}

void registerDataMovementOps(OpRegistry& registry);  // Transpose, Concat, Split, Slice, Expand, Tile, Pad, ...
void registerIndexingOps(OpRegistry& registry);      // Gather, GatherElements, ScatterElements, OneHot, ...

}  // namespace strata::cpu::shape_detail
