#pragma once

// Note [Convolutions as one GEMM]: oneDNN's convolutions compute one small GEMM per image whose rows are that image's
// output pixels, re-reading the weights for every image. On a 1x1 output map that is a matrix-vector product per
// image: ResNet-50's layer4 at 32x32 input (1x1 maps, 2 MB to 8 MB of weights per convolution, batch 32) ran its
// convolutions at 20-25 GFLOP/s, a third of its training step. A float32 convolution with one output pixel, no groups
// and (after Note [Pruned taps]) either a kernel that covers its whole input or a single tap is one GEMM over the
// batch instead:
//   Y [N, O] = A [N, K] x W^T [K, O] + B,   dA = dY x W,   dW = dY^T x A,   dB = the column sums of dY,
// where A is X itself (K = C x the input's pixels) or, for a single tap, the one input pixel it reads (K = C),
// gathered into the scratchpad.

#include <cstdint>
#include <memory>
#include <string>

#include "dnnl_context.h"

namespace strata::cpu {

class ConvGemm {
 public:
  // The GEMM for a convolution of X of logical shape `x` with (cropped) weights of logical shape `w` ([O, C, k...])
  // and window `geometry` (after pruning), with a bias input when `bias`, or nullptr when it is not one. With
  // `channelsLast` (Note [CPU channels-last]) X is stored [N, spatial..., C] and the weights KRSC, so K runs over
  // (spatial..., C) instead of (C, spatial...).
  static std::unique_ptr<ConvGemm> plan(const Shape& x, const Shape& w, std::int64_t group,
                                        const WindowGeometry& geometry, bool bias, bool channelsLast = false);

  // Scratchpad bytes forward() and backward() need at `scratch` (64-byte aligned).
  std::size_t scratchBytes() const { return scratchBytes_; }
  // "one GEMM over the batch (oneDNN brg:avx512_core)".
  std::string implementation() const;

  // Y = A W^T (+ bias, when planned with one); `w` holds the dense [O, K] weights.
  void forward(const float* x, const float* w, const float* bias, float* y, char* scratch);
  // dX (when not null; every element written), dW (dense [O, K], when not null) and dB (when not null).
  void backward(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db, char* scratch);

 private:
  ConvGemm() = default;
  // A: X itself, or its one read pixel per (image, channel) gathered at the scratchpad's start.
  const float* sourceRows(const float* x, char* scratch) const;

  std::int64_t n_ = 0, k_ = 0, o_ = 0;
  // A single-tap GEMM reads one pixel of each image's channels, gathered: A[n, c] = X[n * imageSize_ + pixel_ +
  // c * channelStride_] (imageSize_ 0: A is X itself).
  std::int64_t pixel_ = 0, imageSize_ = 0, channelStride_ = 1;
  std::size_t rowsBytes_ = 0;   // the gathered A and dA, each, at the scratchpad's start (single tap only)
  std::size_t ownScratch_ = 0;  // after them: the largest of the matmuls' own scratchpads
  std::size_t scratchBytes_ = 0;
  bool bias_ = false;
  dnnl::matmul forward_, data_, weights_;
  std::string implementation_;
  // Memory objects of each matmul's operands, bound at run time: src, weights, dst (and the forward's bias).
  dnnl::memory fwdSrc_, fwdWeights_, fwdBias_, fwdDst_;
  dnnl::memory dataSrc_, dataWeights_, dataDst_;
  dnnl::memory wSrc_, wWeights_, wDst_;
};

}  // namespace strata::cpu
