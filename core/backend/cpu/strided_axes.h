#pragma once

// The axis merging of the strided copies (stridedCopy and stridedScatter on the CPU, shape_ops.cpp; their CUDA
// counterparts, core/backend/cuda/kernels/data_movement.cu): a strided view copied to or from a contiguous tensor
// moves the same bytes with its unit axes dropped and with neighbouring axes merged wherever the strided side is
// contiguous across them, so the innermost run is as long as possible. Host code only.

#include <cstdint>
#include <vector>

#include "strata/shape.h"

namespace strata::cpu {

// Fills `dims` and `mergedStrides` (element strides of the strided side) from `shape` and `strides`; returns false
// when the view is empty. A scalar view leaves both empty.
inline bool mergeStridedAxes(const Shape& shape, const std::vector<std::int64_t>& strides, Shape& dims,
                             std::vector<std::int64_t>& mergedStrides) {
  dims.clear();
  mergedStrides.clear();
  for (std::size_t k = 0; k < shape.size(); ++k) {
    if (shape[k] == 0)
      return false;
    if (shape[k] == 1)
      continue;
    if (!dims.empty() && mergedStrides.back() == strides[k] * shape[k]) {
      dims.back() *= shape[k];
      mergedStrides.back() = strides[k];
    } else {
      dims.push_back(shape[k]);
      mergedStrides.push_back(strides[k]);
    }
  }
  return true;
}

}  // namespace strata::cpu
