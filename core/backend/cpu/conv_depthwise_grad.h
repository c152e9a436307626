#pragma once

// Note [Depthwise weight gradient]: oneDNN's depthwise kernel (jit_dw) computes the weight gradient of a 3x3
// depthwise convolution only on maps of some size; on EfficientNetV2-S's 2x2 maps at 32x32 input (stages 4 and 5,
// 512 and 960 channels) it falls back to "x64:gemm:jit", one GEMM per image and channel with an inner dimension of
// four pixels: 14 convolutions took 22 of a 138 ms training step natively and 48 of 136 ms under the AVX2 cap
// (batch 16, 2 threads, Zen 4). A depthwise weight gradient is small work (one kernel per channel, each tap a dot
// product of dY's plane with a shifted X plane), so when oneDNN picks a GEMM for it the kernel runs this loop
// instead: for each output channel and tap, the dot products over the batch of the rows the tap meets, in float
// along a row and in double across rows (NCHW), or vectorised across a block of channels, summed in float over an
// image and in double across images (NHWC). 2-D, one input channel per group (any channel multiplier).

#include <cstdint>
#include <optional>

#include "dnnl_context.h"

namespace strata::cpu {

class DepthwiseWeightGradient {
 public:
  // The loop for a convolution of logical shapes x [N, C, H, W] and w [O, 1, kh, kw] with `group` == C groups and
  // window `geometry` (after Note [Pruned taps]), or nothing when it is not such a convolution. With `channelsLast`
  // (Note [CPU channels-last]) X and dY are stored [N, H, W, C] and dW KRSC, [O, kh, kw, 1]: the same bytes.
  static std::optional<DepthwiseWeightGradient> plan(const Shape& x, const Shape& w, std::int64_t group,
                                                     const WindowGeometry& geometry, bool channelsLast);

  // dW [O, 1, kh, kw] (when not null) and dB [O] (when not null) from dY [N, O, outH, outW] and X.
  void run(const float* dy, const float* x, float* dw, float* db) const;

 private:
  // The output positions [begin, end) along one dimension whose input position for tap `tap` lies in the map.
  struct Span {
    std::int64_t begin = 0, end = 0;
  };
  Span span(std::size_t dim, std::int64_t tap) const;
  void runPlanes(const float* dy, const float* x, float* dw, float* db) const;
  void runChannelsLast(const float* dy, const float* x, float* dw, float* db) const;

  bool channelsLast_ = false;

  std::int64_t images_ = 0, channels_ = 0, outChannels_ = 0;
  std::int64_t in_[2] = {0, 0}, out_[2] = {0, 0}, kernel_[2] = {0, 0};
  std::int64_t stride_[2] = {1, 1}, dilation_[2] = {1, 1}, padBegin_[2] = {0, 0};
};

}  // namespace strata::cpu
