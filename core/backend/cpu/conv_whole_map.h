#pragma once

// Note [Whole-map convolutions]: when every output pixel's window covers the whole input map (a 3x3 convolution
// with pads 1 on a 2x2 map: ResNet's layer3 at 32x32 input), each output pixel o meets each input pixel p through
// exactly one tap, tap(o, p) = p - (o * stride - pad) per dim. The convolution is then one dense GEMM over the batch
// with no wasted work: Y [N, K x O] = X' [N, P x C] W'^T, where X' is X channels-last (a copy: P x C values per
// image) and W' [K x O, P x C] holds W[k, c, tap(o, p)] at (k x O + o, p x C + c), and Y's plain NCHW bytes are that
// matrix as it lies. Note [Convolutions as one GEMM] runs it as a channels-last convolution whose kernel is the whole
// map and whose K x O filters are W' (one output pixel). Channels innermost, spreading W and folding dW back copy and
// add runs of C values (dW[k, c, t] sums dW' over the (o, p) pairs of tap t; dB[k] sums dB' over o). oneDNN ran
// these as direct convolutions at 1-3 ms per node (ResNet-50's layer3: 256 channels, batch 32). One group, no
// dilation; the weights are spread into the scratchpad on every run. Channels-last nodes (Note [CPU channels-last])
// read X as X' and a KRSC filter as its [taps, C] runs, order W's rows (o, k) so that Y [N, O x K] is Y's NHWC
// bytes, and write dX' as dX: no copy of an activation either way.

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "conv_gemm.h"
#include "conv_reshaped_gemm.h"
#include "dnnl_context.h"

namespace strata::cpu {

class WholeMapConv final : public ReshapedGemmConv {
 public:
  // The whole-map GEMM of a convolution of X (logical shape `x`) with W (`bias`: with a bias input), or nullptr
  // when some window misses part of the input, the convolution has one output pixel already (Note [Convolutions as
  // one GEMM] takes it as it is), groups or dilation, or W' would pass `maxBytes`. `channelsLast`: X, Y and their
  // gradients stored [N, spatial..., C], W and dW [K, spatial..., C].
  static std::unique_ptr<WholeMapConv> plan(const Shape& x, const Shape& w, std::int64_t group,
                                            const WindowGeometry& geometry, bool bias, bool channelsLast,
                                            std::size_t maxBytes = std::size_t{64} << 20);

  std::size_t forwardScratchBytes() const override { return forwardBytes_; }
  std::size_t backwardScratchBytes() const override { return backwardBytes_; }
  std::string implementation() const override;
  void forward(const float* x, const float* w, const float* b, float* y, char* scratch) const override;
  void backward(const float* dy, const float* x, const float* w, float* dx, float* dw, float* db,
                char* scratch) const override;

 private:
  WholeMapConv() = default;
  // Per image, [rows, columns] -> [columns, rows]: X [N, C, P] -> X' [N, P, C], and dX' back.
  void swapInnerAxes(const float* from, float* to, std::int64_t rows, std::int64_t columns) const;
  // W' from W, and B' [K x O] from B.
  void spreadWeights(const float* w, float* spread) const;
  void spreadBias(const float* b, float* spread) const;
  // dW from dW' (every element written, zero for taps no pair meets), dB from dB'.
  void foldWeightGradient(const float* spread, float* dw) const;
  void foldBiasGradient(const float* spread, float* db) const;
  // The row of W' (and column of Y) of filter k at output pixel o.
  std::int64_t rowOf(std::int64_t k, std::int64_t o) const {
    return channelsLast_ ? o * weight_[0] + k : k * outPixels_ + o;
  }

  Shape weight_;             // W [K, C, k...]
  WindowGeometry geometry_;  // W's window
  bool channelsLast_ = false;
  std::int64_t images_ = 0, channels_ = 0, outPixels_ = 0, inPixels_ = 0;
  std::vector<std::int64_t> taps_;  // the tap each (o, p) pair meets, at o x P + p
  // Note [Convolutions as one GEMM] with W' as the weights [K x O, C, in...] of a channels-last convolution whose
  // kernel is the whole map.
  std::unique_ptr<ConvGemm> gemm_;
  // Scratchpad: [the GEMM's | X' | W' | B' or dB' | dX' | dW'], the forward pass using the first four.
  std::size_t xLast_ = 0, spread_ = 0, bias_ = 0, forwardBytes_ = 0, dxLast_ = 0, spreadGrad_ = 0, backwardBytes_ = 0;
};

}  // namespace strata::cpu
