#pragma once

// Note [Depthwise weight gradient]: oneDNN's depthwise kernel (jit_dw) computes the weight gradient of a 3x3 depthwise
// convolution only on maps of some size; on EfficientNetV2-S's 2x2 maps at 32x32 input (stages 4 and 5, 512 and 960
// channels) it falls back to "x64:gemm:jit", one GEMM per image and channel with an inner dimension of four pixels: 14
// convolutions took 22 of a 138 ms training step natively and 48 of 136 ms under the AVX2 cap (batch 16, 2 threads, Zen
// 4); ConvNeXt's 7x7 depthwise convolutions go the same way on every map tried (2x2 to 56x56). A depthwise weight
// gradient is small work (one kernel per channel, each tap a dot product of dY with a shifted X), so when oneDNN picks
// a GEMM for it the kernel runs this loop instead, on NHWC data: for each block of 64 channels, image, output pixel and
// tap, one vector multiply-add across the block, summed in float over an image and in double across images. NCHW
// tensors are transposed into the scratchpad first: a loop over NCHW planes (one channel and tap at a time, along rows)
// ran its rows of 2 to 56 elements as call and loop overhead, 3.5-6x slower than the copies plus this loop (ConvGrad
// nodes, data gradient included: 0.71 -> 0.22 ms for 960 channels on 2x2 maps, 4.8 -> 0.8 ms for a 7x7 on 192 channels
// of 8x8, 27 -> 7.3 ms on 96 channels of 56x56; batch 16, 16 and 4, Zen 4). 2-D, one input channel per group (any
// channel multiplier).
//
// Note [Small-group weight gradient]: grouped convolutions with 2, 4 or 8 input and as many output channels per
// group (ResNeXt-50 32x4d's layer1: 3x3 on 128 channels in 32 groups) get the same treatment: oneDNN's weight gradient
// for them is a GEMM per image and group of 4 x 36 x 64 (8x8 maps at 32x32 input), 0.63 ms a node natively on Zen 4.
// The loop runs eight channels across the lanes of a vector, each lane's X picked from its own group's inputs by a
// permute, so every multiply-add is useful work (runSmallGroups in the .cpp).

#include <cstdint>
#include <optional>
#include <string>

#include "conv_small_groups.h"
#include "dnnl_context.h"

namespace strata::cpu {

class DepthwiseWeightGradient {
 public:
  // The loop for a convolution of logical shapes x [N, C, H, W] and w [O, 1, kh, kw] with `group` == C groups, or
  // w [C, C / group, kh, kw] with 2, 4 or 8 channels per group and C a multiple of 8 (Note [Small-group weight
  // gradient]), and window `geometry` (after Note [Pruned taps]); nothing when it is not such a convolution. With
  // `channelsLast` (Note [CPU channels-last]) X and dY are stored [N, H, W, C] and dW KRSC, [O, kh, kw, C / group].
  static std::optional<DepthwiseWeightGradient> plan(const Shape& x, const Shape& w, std::int64_t group,
                                                     const WindowGeometry& geometry, bool channelsLast);

  // What the profile names: "depthwise loop" or "small-group loop (N channels per group)".
  std::string name() const;

  // Scratchpad bytes run() needs: NHWC copies of an NCHW X and dY, or 0.
  std::size_t scratchBytes() const;

  // dW [O, C / group, kh, kw] (when not null) and dB [O] (when not null) from dY [N, O, outH, outW] and X; `scratch`
  // holds scratchBytes() bytes.
  void run(const float* dy, const float* x, float* dw, float* db, char* scratch) const;

 private:
  Shape xShape() const { return {images_, channels_, window_.in[0], window_.in[1]}; }
  Shape dyShape() const { return {images_, outChannels_, window_.out[0], window_.out[1]}; }
  // dW and dB from NHWC dY and X.
  void runChannelsLast(const float* dy, const float* x, float* dw, float* db) const;
  // Note [Small-group weight gradient].
  template <int PerGroup>
  void runSmallGroups(const float* dy, const float* x, float* dw, float* db) const;

  bool channelsLast_ = false;
  std::int64_t perGroup_ = 1;  // input (and, above 1, output) channels per group

  std::int64_t images_ = 0, channels_ = 0, outChannels_ = 0;
  PlaneWindow window_;
};

}  // namespace strata::cpu
