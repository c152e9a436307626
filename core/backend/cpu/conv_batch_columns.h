#pragma once

// Note [Small maps as batch columns]: a channels-last 2-D convolution with a few output pixels per image (at most
// ConvGemm::kMaxGemmPixels) and a kernel of several taps, which neither Note [Convolutions as one GEMM] nor Note
// [Whole-map convolutions] takes: ResNet's strided 3x3 convolutions at 32x32 input (layer2.0's 8x8 -> 4x4,
// layer3.0's 4x4 -> 2x2, 128 and 256 channels, batch 32). oneDNN runs one small GEMM per image there (4 to 16 rows):
// layer3.0's forward at 60 GFLOP/s and its backward at 95 on a Zen 5 core pair whose sgemm peak is 390. Strided
// ones only: the columns compute the taps that meet padding too, and oneDNN runs the stride-1 ones well enough
// (ResNet-50's three 3x3 convolutions on 4x4 maps took 3.9 ms a step on oneDNN, 4.5 as columns). Here the
// batch's columns, C [N x P, taps x C] (each tap a run of C channels of one input pixel, zeros where it meets
// padding), make it one GEMM over the batch: Y [N x P, K] = C W^T, where the KRSC weights are [K, taps x C] as they
// lie and Y [N x P, K] is Y's NHWC bytes; backward dW = dY^T C (KRSC as it lies), dC = dY W added back into dX per
// tap. The GEMMs are Note [Convolutions as one GEMM]'s, on the columns as a [N x P, taps x C, 1, 1] input.
// ResNet-50's layer2.0 and layer3.0 conv2, forward and backward: 5.5 -> 3.2 ms a step natively, 11.2-12.2 -> 7.0 ms
// under the AVX2 cap (`strata train --profile`, batch 32, 2 threads).

#include <cstdint>
#include <memory>
#include <string>

#include "conv_gemm.h"
#include "conv_reshaped_gemm.h"
#include "dnnl_context.h"

namespace strata::cpu {

class BatchColumnsConv final : public ReshapedGemmConv {
 public:
  // The plan for a channels-last convolution of X (logical shape `x`, [N, C, H, W]) with W ([K, C, kh, kw]) and
  // window `geometry` (`bias`: with a bias input), or nullptr when it is channels-first, grouped, not 2-D, not
  // strided, has one tap or more than ConvGemm::kMaxGemmPixels output pixels per image, or its columns would pass
  // `maxBytes`.
  static std::unique_ptr<BatchColumnsConv> plan(const Shape& x, const Shape& w, std::int64_t group,
                                                const WindowGeometry& geometry, bool bias, bool channelsLast,
                                                std::size_t maxBytes = std::size_t{64} << 20);

  std::size_t forwardScratchBytes() const override { return forwardBytes_; }
  std::size_t backwardScratchBytes() const override { return backwardBytes_; }
  std::string implementation() const override;
  void forward(const float* x, const float* w, const float* b, float* y, char* scratch) const override;
  void backward(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db,
                char* scratch) const override;

 private:
  BatchColumnsConv() = default;
  // C from X: row (n, oh, ow), column (tap, channel).
  void gather(const float* x, float* columns) const;
  // dX = the sum over taps of dC's runs at the pixels they came from (zero where none).
  void scatter(const float* dColumns, float* dx) const;

  WindowGeometry geometry_;
  std::int64_t images_ = 0, channels_ = 0, height_ = 0, width_ = 0, outPixels_ = 0, taps_ = 0;
  std::unique_ptr<ConvGemm> gemm_;  // on C as a [N x P, taps x C, 1, 1] channels-last input
  // Scratchpad: [the GEMM's | C | dC], the forward pass using the first two.
  std::size_t columns_ = 0, forwardBytes_ = 0, dColumns_ = 0, backwardBytes_ = 0;
};

}  // namespace strata::cpu
