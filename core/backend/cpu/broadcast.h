#pragma once

// Numpy-style broadcasting helpers shared by the CPU kernels. Internal to the CPU backend.
//
// A BroadcastLayout describes how N inputs are read at each index of an output shape. Output dims of size 1 are
// dropped and adjacent dims that every input walks contiguously are merged, so the common cases collapse to one
// long row (same shape), or rows whose inner stride is 0 (broadcast along the last axis) or 1. Kernels then run a
// tight loop per row on raw pointers, choosing a loop per combination of inner strides.

#include <cstdint>
#include <span>
#include <vector>

#include "strata/shape.h"
#include "strata/tensor.h"
#include "strata/thread_pool.h"

namespace strata::cpu {

// Elements per parallel chunk for cheap elementwise work; below it loops stay on the calling thread.
inline constexpr std::int64_t kElementwiseGrain = std::int64_t{1} << 14;

struct BroadcastLayout {
  Shape dims;                                      // merged output dims, at least one
  std::vector<std::vector<std::int64_t>> strides;  // per input, element strides along dims (0 = broadcast)

  std::int64_t rowLength() const { return dims.back(); }
  std::int64_t rowCount() const;
  std::int64_t innerStride(std::size_t input) const { return strides[input].back(); }
};

// The layout for reading inputs of `inputShapes` at each index of `outShape`. The input shapes must broadcast to
// outShape (throws Error otherwise).
BroadcastLayout makeBroadcastLayout(const Shape& outShape, std::span<const Shape> inputShapes);

// The broadcast of any number of shapes; throws Error naming the shapes when they are incompatible.
Shape broadcastAllShapes(std::span<const Shape> shapes);

// Calls fn(outOffset, inputOffsets, rowLength) for rows [rowBegin, rowEnd) of the layout, where inputOffsets[k]
// is the element offset of the row's first element in input k. Offsets are advanced incrementally (no division
// per row).
template <typename Fn>
void forEachBroadcastRow(const BroadcastLayout& layout, std::int64_t rowBegin, std::int64_t rowEnd, Fn&& fn) {
  const std::size_t inputs = layout.strides.size();
  const std::size_t outer = layout.dims.size() - 1;  // dims walked by the odometer
  const std::int64_t rowLength = layout.rowLength();
  std::vector<std::int64_t> index(outer, 0);
  std::vector<std::int64_t> offsets(inputs, 0);
  std::int64_t rest = rowBegin;
  for (std::size_t d = outer; d-- > 0;) {
    index[d] = rest % layout.dims[d];
    rest /= layout.dims[d];
    for (std::size_t k = 0; k < inputs; ++k) {
      offsets[k] += index[d] * layout.strides[k][d];
    }
  }
  for (std::int64_t row = rowBegin; row < rowEnd; ++row) {
    fn(row * rowLength, static_cast<const std::int64_t*>(offsets.data()), rowLength);
    for (std::size_t d = outer; d-- > 0;) {
      for (std::size_t k = 0; k < inputs; ++k) {
        offsets[k] += layout.strides[k][d];
      }
      if (++index[d] < layout.dims[d]) {
        break;
      }
      for (std::size_t k = 0; k < inputs; ++k) {
        offsets[k] -= index[d] * layout.strides[k][d];
      }
      index[d] = 0;
    }
  }
}

// Runs fn(begin, end) over [0, count), split over the thread pool when count * costPerItem exceeds the grain.
// Tiny loops call fn directly, avoiding the std::function and fork/join overhead.
template <typename Fn>
void parallelChunks(std::int64_t count, std::int64_t costPerItem, Fn&& fn) {
  if (count <= 0) {
    return;
  }
  const std::int64_t cost = costPerItem < 1 ? 1 : costPerItem;
  if (count * cost <= kElementwiseGrain || count == 1) {
    fn(std::int64_t{0}, count);
    return;
  }
  const std::int64_t grain = (kElementwiseGrain + cost - 1) / cost;
  parallelFor(0, count, grain, [&fn](std::int64_t begin, std::int64_t end) { fn(begin, end); });
}

// Copies `src` broadcast to dst's shape (any dtype; dst must be contiguous and of the same dtype).
void broadcastCopy(const Tensor& src, Tensor& dst);

}  // namespace strata::cpu
