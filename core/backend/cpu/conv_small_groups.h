#pragma once

// Note [Small-group convolutions]: a grouped convolution with 2, 4 or 8 input and as many output channels per group
// (ResNeXt-50 32x4d's layer1: 3x3 on 128 channels in 32 groups of 4) is a few multiply-adds per output, which oneDNN
// runs where it has no direct kernel for the group size (its forward and data gradient under the AVX2 cap) as a GEMM
// per image and group of 4 x 36 x 64 at 8x8 maps: about 0.5 ms a node on Zen 4 for 9.4 MFLOP. Here eight channels
// (8 / perGroup whole groups) share a vector on NHWC data: for each output pixel and tap, a vector of X's eight
// channels is permuted so that each lane holds input c' of its own group, and multiplied by the weights of (lane,
// c', tap), so every multiply-add is useful work. The data gradient is the same sum with dY's channels and the
// weights transposed within each group, gathered over the output pixels that read each input pixel. NCHW tensors are
// transposed into the scratchpad around the loop (as the depthwise weight gradient's, Note [Depthwise weight
// gradient]). Taken where oneDNN picked its GEMM for the pass; the weight gradient is Note [Small-group weight
// gradient].

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

#include "dnnl_context.h"

namespace strata::cpu {

// A 2-D convolution's window as the NHWC loops read it (here and Note [Depthwise weight gradient]'s).
struct PlaneWindow {
  std::int64_t in[2] = {0, 0}, out[2] = {0, 0}, kernel[2] = {0, 0};
  std::int64_t stride[2] = {1, 1}, dilation[2] = {1, 1}, padBegin[2] = {0, 0};
  // From x [N, C, H, W], w [O, I, kh, kw] and the resolved window.
  static PlaneWindow of(const Shape& x, const Shape& w, const WindowGeometry& geometry);

  // The input coordinate along `dim` that output coordinate `o` reads at tap `k`, or -1 where that is padding.
  std::int64_t inputAt(int dim, std::int64_t o, std::int64_t k) const {
    const std::int64_t i = o * stride[dim] + k * dilation[dim] - padBegin[dim];
    return i >= 0 && i < in[dim] ? i : -1;
  }
  // The output coordinate along `dim` whose tap `k` reads input coordinate `i`, or -1 where none does.
  std::int64_t outputAt(int dim, std::int64_t i, std::int64_t k) const {
    const std::int64_t shifted = i + padBegin[dim] - k * dilation[dim];
    if (shifted < 0 || shifted % stride[dim] != 0)
      return -1;
    const std::int64_t o = shifted / stride[dim];
    return o < out[dim] ? o : -1;
  }
};

// Where W[o, i, tap] of a grouped convolution with `perGroup` inputs per group and `taps` taps lies: OIHW, or OHWI for
// channels-last weights (Note [CPU channels-last]).
inline std::int64_t groupedWeightAt(std::int64_t o, std::int64_t i, std::int64_t tap, std::int64_t taps,
                                    std::int64_t perGroup, bool channelsLast) {
  return channelsLast ? (o * taps + tap) * perGroup + i : (o * perGroup + i) * taps + tap;
}

// Channels per group (2, 4 or 8) of a 4-D convolution x [N, C, H, W], w [C, C / group, kh, kw] with C a multiple of
// 8 that the small-group loops take, or 0.
std::int64_t smallGroupSize(const Shape& x, const Shape& w, std::int64_t group);

class SmallGroupConv {
 public:
  // The loop for a 2-D convolution of logical shapes x [N, C, H, W] and w [C, C / group, kh, kw] with 2, 4 or 8
  // channels per group and C a multiple of 8, and window `geometry`, or nothing. With `channelsLast` activations are
  // NHWC and W is OHWI ([C, kh, kw, C / group]).
  static std::optional<SmallGroupConv> plan(const Shape& x, const Shape& w, std::int64_t group,
                                            const WindowGeometry& geometry, bool channelsLast);

  std::string implementation() const;
  std::size_t scratchBytes() const;

  // Y [N, C, outH, outW] = conv(X, W) + bias (bias may be null).
  void forward(const float* x, const float* w, const float* bias, float* y, char* scratch) const;
  // dX [N, C, H, W] from dY and W.
  void dataGradient(const float* dy, const float* w, float* dx, char* scratch) const;

 private:
  enum class Pass { Forward, Data };
  template <int PerGroup>
  void run(Pass pass, const float* source, const float* packed, const float* bias, float* target) const;
  // The weights as the loop reads them: [tap][c'][channel] (lane `channel` multiplies input c' of its group); for
  // the data pass the group's transpose, [tap][k'][input channel].
  void pack(Pass pass, const float* w, float* packed) const;
  void runPass(Pass pass, const float* source, const float* w, const float* bias, float* target, char* scratch) const;

  bool channelsLast_ = false;
  std::int64_t images_ = 0, channels_ = 0, perGroup_ = 0;
  PlaneWindow window_;
};

}  // namespace strata::cpu
