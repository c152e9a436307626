#pragma once

// Convolutions Strata computes as one GEMM over the batch after reshaping their operands (Note [Whole-map
// convolutions], Note [Small maps as batch columns]): the forward and every gradient of a float32 node whose shape
// one of them takes. The kernels hold whichever plan takes the node, tried in that order, in place of oneDNN's
// primitives.

#include <cstdint>
#include <memory>
#include <string>

#include "dnnl_context.h"

namespace strata::cpu {

class ReshapedGemmConv {
 public:
  virtual ~ReshapedGemmConv() = default;

  // Scratchpad bytes forward() and backward() need (64-byte aligned).
  virtual std::size_t forwardScratchBytes() const = 0;
  virtual std::size_t backwardScratchBytes() const = 0;
  // "one GEMM over the batch (oneDNN brg:avx512_core); whole-map windows", "...; batch columns".
  virtual std::string implementation() const = 0;

  // Y = conv(X, W) + B (`b` may be null).
  virtual void forward(const float* x, const float* w, const float* b, float* y, char* scratch) const = 0;
  // dX (needs `w`), dW (needs `x`) and dB, each when not null.
  virtual void backward(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db,
                        char* scratch) const = 0;
};

// The first plan that takes a convolution of X (logical shape `x`) with W (`w`, [K, C / group, k...]) and window
// `geometry` (unpruned; `bias`: with a bias input), or nullptr.
std::unique_ptr<ReshapedGemmConv> planReshapedGemmConv(const Shape& x, const Shape& w, std::int64_t group,
                                                       const WindowGeometry& geometry, bool bias, bool channelsLast);

}  // namespace strata::cpu
