#pragma once

// Note [Convolutions as one GEMM]: oneDNN's convolutions compute one small GEMM per image whose rows are that image's
// output pixels, re-reading the weights for every image. On small maps that is a matrix-vector product per image or
// little more: ResNet-50's layer4 at 32x32 input (1x1 maps, 2 MB to 8 MB of weights per convolution, batch 32) ran its
// convolutions at 20-25 GFLOP/s, a third of its training step, and its layer3 (2x2 maps) at about 100. A float32
// convolution without groups is one GEMM over the whole batch instead when (after Note [Pruned taps]) either
// - its kernel covers its whole input, one output pixel per image: A is X itself, [N, C x pixels] (K in the order of
//   X's own layout, which the weights share: OIHW for NCHW, KRSC for NHWC), or
// - its kernel is a single tap (1x1, any stride, no padding left) and it has at most kMaxGemmPixels output pixels
//   per image: A is the [N x pixels, C] matrix of the pixels it reads, which is X itself for a channels-last X read
//   whole, and otherwise a copy a oneDNN reorder makes (a transpose of a small tensor).
// Then Y [rows, O] = A W^T + B, dA = dY W, dW = dY^T A and dB = the column sums of dY, with Y, dY and dA reordered
// from and to the tensors' own layouts where those are not already [rows, channels].

#include <cstdint>
#include <memory>
#include <string>

#include "dnnl_context.h"

namespace strata::cpu {

class ConvGemm {
 public:
  // Above this many output pixels per image oneDNN's convolutions run GEMMs of enough rows themselves. Measured on
  // ResNet-18, ResNet-50 and DenseNet-121 at 32x32 (2026-11-26, Zen 5, 2 threads): 1 pixel only 34 / 91 / 40 ms per
  // training step, up to 16 pixels 29 / 73 / 36 ms, up to 64 no faster than 16.
  static constexpr std::int64_t kMaxGemmPixels = 16;

  // The GEMM for a convolution of X of logical shape `x` with (cropped) weights of logical shape `w` ([O, C, k...])
  // and window `geometry` (after pruning), with a bias input when `bias`, or nullptr when it is not one. With
  // `channelsLast` (Note [CPU channels-last]) X and Y are stored [N, spatial..., C] and the weights KRSC.
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
  // A tensor seen as a [rows, columns] matrix: the tensor itself (`direct`), or a dense copy in the scratchpad that
  // `gather` fills from the tensor (a view of it) and `scatter` writes back.
  struct Rows {
    bool direct = true;
    dnnl::memory tensor, matrix;  // bound at run time
    dnnl::reorder gather, scatter;
    std::size_t offset = 0;  // of the copy in the scratchpad
  };

  ConvGemm() = default;
  // Sets `rows` up for a tensor `view` whose matrix layout is `matrix`; returns the reorders' scratchpad size.
  static std::size_t planRows(Rows& rows, const dnnl::memory::desc& view, const dnnl::memory::desc& matrix);
  // The matrix of `rows` for `data`: `data` itself, or its copy gathered into the scratchpad (when `copyIn`).
  const float* matrixOf(Rows& rows, const float* data, char* scratch, bool copyIn);
  char* own(char* scratch) const { return scratch + ownOffset_; }

  std::int64_t rows_ = 0, k_ = 0, o_ = 0;
  bool bias_ = false;
  bool zeroDx_ = false;  // the GEMM does not write every element of dX (strided or partial reads)
  std::int64_t xElements_ = 0;
  Rows a_, y_;  // X as A [rows, k] (and dX as dA), Y [rows, o] (and dY)
  std::size_t daOffset_ = 0, ownOffset_ = 0, ownBytes_ = 0, scratchBytes_ = 0;
  dnnl::matmul forward_, data_, weights_;
  std::string implementation_;
  // Memory objects of each matmul's operands, bound at run time: src, weights, dst (and the forward's bias).
  dnnl::memory fwdSrc_, fwdWeights_, fwdBias_, fwdDst_;
  dnnl::memory dataSrc_, dataWeights_, dataDst_;
  dnnl::memory wSrc_, wWeights_, wDst_;
};

}  // namespace strata::cpu
