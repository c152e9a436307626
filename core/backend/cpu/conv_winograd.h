#pragma once

// Note [Winograd convolutions]: a 3x3 convolution with stride 1 spends its time in the multiply-adds of its GEMMs, and
// oneDNN's direct kernels already run those at the host's sgemm peak (VGG16 at 64x64: 430-440 GFLOP/s on 2 Zen 5
// cores), so only less arithmetic makes it faster. Winograd's minimal filtering F(4x4, 3x3) (Lavin and Gray, 2016)
// computes each 4x4 block of outputs from a 6x6 block of inputs with 36 multiplications per input and output channel
// pair instead of 144: the inputs' 6x6 tiles and the 3x3 filters are transformed (V = B^T d B, U = G g G^T), the 36
// transformed points are 36 independent GEMMs over the channels (one batched oneDNN matmul), and their results are
// transformed back (Y = A^T M A). The transforms are a few adds per element, so the saving is real where the GEMMs
// are large: many channels and many tiles. oneDNN 2.6's own Winograd convolution could not create its weight
// reorder on the Zen 5 host, hence this one.
// The data gradient of a stride-1 3x3 convolution is itself one (of dY with the filters flipped and transposed,
// padded by 2 - pad), so the backward's data pass runs the same code. The weight gradient stays on oneDNN.
// Accuracy: F(4x4, 3x3)'s transforms have coefficients up to 8 and 1/24, so float32 results differ from a direct
// convolution by a few ulps of the larger intermediate sums (measured: about 2e-5 of the outputs' largest magnitude
// with 4608-term sums); float64 convolutions never take this path.

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "dnnl_context.h"

namespace strata::cpu {

class ConvWinograd {
 public:
  // What the planned convolution computes, given the forward convolution's X, W and window.
  enum class Role {
    Forward,       // Y = conv(X, W) (+ bias)
    DataGradient,  // dX = conv(dY, W flipped and transposed), with the forward's pads mirrored
  };

  // Plans `role` for the forward convolution of X (logical shape `x`, [N, C, H, W]) with W (logical [O, C, 3, 3]),
  // or returns nullptr where Winograd does not apply (not 2-D, groups, strides, dilations, another kernel size,
  // pads above 2) or does not pay (too few channels or pixels; see the .cpp). The environment variable
  // STRATA_CPU_WINOGRAD=0 turns it off, =1 takes it wherever it applies (for tests and A/B timing).
  // With `channelsLast` (Note [CPU channels-last]) activations are NHWC and W is KRSC.
  static std::unique_ptr<ConvWinograd> plan(Role role, const Shape& x, const Shape& w, std::int64_t group,
                                            const WindowGeometry& geometry, bool channelsLast);

  // Scratchpad bytes run() needs (64-byte aligned): the transformed inputs, products and filters.
  std::size_t scratchBytes() const { return scratchBytes_; }
  // "Winograd F(4x4, 3x3), 36 GEMMs on oneDNN brg:avx512_core".
  std::string implementation() const;

  // Y = conv(input, W) (+ bias when not null): for Forward, `input` is X and `output` is Y; for DataGradient,
  // `input` is dY and `output` is dX. `w` is the forward convolution's W as stored. With `clamp` = (lo, hi) the
  // output is min(max(Y, lo), hi) (Note [Fused ReLU]: a fused Relu is (0, +inf)).
  void run(const float* input, const float* w, const float* bias, float* output, char* scratch,
           std::optional<std::pair<float, float>> clamp = std::nullopt);

 private:
  ConvWinograd() = default;
  struct TilePosition {
    std::int64_t image, row, column;  // the tile's image and its place among the image's tiles
  };
  TilePosition tileAt(std::int64_t tile) const;
  void transformFilters(const float* w, float* u) const;
  void transformInputs(const float* input, float* v) const;
  void transformOutputs(const float* m, const float* bias, float* output, std::pair<float, float> clamp) const;

  Role role_ = Role::Forward;
  bool channelsLast_ = false;
  std::int64_t n_ = 0, c_ = 0, o_ = 0;  // images, this convolution's input and output channels
  std::int64_t h_ = 0, w_ = 0;          // input spatial size
  std::int64_t oh_ = 0, ow_ = 0;        // output spatial size
  std::int64_t padTop_ = 0, padLeft_ = 0;
  std::int64_t tilesH_ = 0, tilesW_ = 0, tiles_ = 0;  // 4x4 output tiles per column, per row, in all
  std::size_t vOffset_ = 0, mOffset_ = 0, uOffset_ = 0, matmulScratchOffset_ = 0, matmulScratchBytes_ = 0;
  std::size_t inputCopyOffset_ = 0, outputCopyOffset_ = 0;  // channels-last copies of channels-first tensors
  std::size_t scratchBytes_ = 0;
  dnnl::matmul matmul_;
  dnnl::memory src_, weights_, dst_;  // the matmul's operands, bound at run time
  dnnl::reorder toLast_, toFirst_;    // channels-first input to channels-last, and the output back
  dnnl::memory inputFirst_, inputLast_, outputFirst_, outputLast_;
  std::string implementation_;
};

}  // namespace strata::cpu
