#pragma once

// MatMul's numpy semantics, shared by the CPU kernel (dnnl_matmul.cpp) and the CUDA one
// (core/backend/cuda/blas_gemm.cpp). Host code only.

#include <cstdint>

#include "strata/shape.h"

namespace strata::cpu {

// A [.., M, K] x [.., K, N] product: 1-D operands are promoted (A [K] -> [1, K], B [K] -> [K, 1]) and the added
// dims dropped from the output; the batch dims broadcast.
struct MatmulShape {
  std::int64_t m = 0, n = 0, k = 0;
  Shape batchA, batchB, batch;  // batch dims, both padded with leading 1s to batch's rank
  Shape output;
};

// Fails when the inner dimensions differ or the batch dims do not broadcast; a and b must have rank >= 1.
MatmulShape matmulShape(const Shape& a, const Shape& b);

}  // namespace strata::cpu
