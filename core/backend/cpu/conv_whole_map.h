#pragma once

// Note [Whole-map convolutions]: when every output pixel's window covers the whole input map (a 3x3 convolution
// with pads 1 on a 2x2 map: ResNet's layer3 at 32x32 input), each output pixel o meets each input pixel p through
// exactly one tap, tap(o, p) = p - (o * stride - pad) per dim. The convolution is then one dense GEMM over the batch
// with no wasted work: Y [N, K x O] = X' [N, P x C] W'^T, where X' is X channels-last (a copy: P x C values per
// image) and W' [K x O, P x C] holds W[k, c, tap(o, p)] at (k x O + o, p x C + c), and Y's plain NCHW bytes are that
// matrix as it lies. Note [Convolutions as one GEMM] runs it as a channels-last convolution whose kernel is the whole
// map and whose K x O filters are W' (one output pixel). Channels innermost, spreading W and folding dW back copy and
// add runs of C values (dW[k, c, t] sums dW' over the (o, p) pairs of tap t; dB[k] sums dB' over o). oneDNN ran
// these as direct convolutions at 1-3 ms per node (ResNet-50's layer3: 256 channels, batch 32). Channels-first
// nodes, one group, no dilation; the weights are spread into the scratchpad on every run.

#include <cstdint>
#include <optional>

#include "dnnl_context.h"

namespace strata::cpu {

struct WholeMapConv {
  Shape weight;                   // W [K, C, k...]
  Shape spreadWeight;             // W' as a channels-last convolution's logical weights: [K x O, C, in...]
  WindowGeometry geometry;        // the original window
  WindowGeometry spreadGeometry;  // kernel = the input map, stride 1, no padding, one output pixel
  std::int64_t images = 0, channels = 0, outPixels = 0, inPixels = 0;

  // The whole-map form of a convolution of X (logical shape `x`) with W, or nothing when some window misses part
  // of the input, the convolution has one output pixel already, groups or dilation, or W' would pass `maxBytes`.
  static std::optional<WholeMapConv> plan(const Shape& x, const Shape& w, std::int64_t group,
                                          const WindowGeometry& geometry, bool channelsLast,
                                          std::size_t maxBytes = std::size_t{64} << 20);

  std::size_t spreadBytes() const { return static_cast<std::size_t>(numElements(spreadWeight)) * sizeof(float); }
  // X's bytes (and X' 's).
  std::size_t inputBytes() const { return static_cast<std::size_t>(images * channels * inPixels) * sizeof(float); }
  // X [N, C, P] -> X' [N, P, C], and dX' back.
  void toChannelsLast(const float* x, float* xLast) const;
  void toChannelsFirst(const float* xLast, float* x) const;
  // W' from W, and B' [K x O] from B.
  void spreadWeights(const float* w, float* spread) const;
  void spreadBias(const float* b, float* spread) const;
  // dW from dW' (every element written, zero for taps no pair meets), dB from dB'.
  void foldWeightGradient(const float* spread, float* dw) const;
  void foldBiasGradient(const float* spread, float* db) const;
};

}  // namespace strata::cpu
