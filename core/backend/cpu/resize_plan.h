#pragma once

// Resize's attributes and sampling, shared by the Resize and ResizeGrad kernels (resize_ops.cpp): the output shape
// from scales or sizes, and for every resized axis the input positions and weights that make each output position
// (its taps). Host code only.
//
// Note [Separable resize]: every mode ONNX's Resize has (nearest, n-linear, cubic; exclude_outside renormalises per
// axis; tf_crop_and_resize extrapolates per axis) is a product of one-dimensional resamplings, so Resize runs as one
// pass per resized axis: out[o, r, i] = sum_t w[r][t] * in[o, idx[r][t], i], with o the axes before it and i the
// axes after it (i runs contiguously and vectorises). Its gradient with respect to X is the adjoint: the same passes
// transposed, in reverse order, each one a scatter-add of the same weights. The adjoint passes are written as
// gathers over the transposed tables (every input position owns the list of output positions that read it), so
// each destination element is written by one task, in a fixed order: the result does not depend on the thread
// count. Axes whose pass would copy (scale 1 where the taps land on their own positions) are skipped.

#include <cstdint>
#include <string>
#include <vector>

#include "strata/attributes.h"
#include "strata/shape.h"
#include "strata/tensor.h"

namespace strata::cpu::resize {

enum class Mode { Nearest, Linear, Cubic };
enum class Coordinates {
  HalfPixel,
  HalfPixelSymmetric,
  PytorchHalfPixel,
  AlignCorners,
  Asymmetric,
  TfHalfPixelForNn,
  TfCropAndResize
};
enum class NearestRounding { RoundPreferFloor, RoundPreferCeil, Floor, Ceil };

struct Options {
  Mode mode = Mode::Nearest;
  Coordinates coordinates = Coordinates::HalfPixel;
  NearestRounding nearest = NearestRounding::RoundPreferFloor;
  double cubicA = -0.75;
  bool excludeOutside = false;
  double extrapolation = 0.0;  // tf_crop_and_resize's value outside the crop
};

// The node's attributes; fails (the message says "is not supported") for the options Strata refuses: antialias,
// a keep_aspect_ratio_policy other than stretch, an axes attribute.
Options readOptions(const Attributes& attrs);

// The operands that fix the sampling (plan-time constants): roi (tf_crop_and_resize only), scales or sizes.
struct Operands {
  const Tensor* roi = nullptr;
  const Tensor* scales = nullptr;  // nullptr or empty when sizes are given
  const Tensor* sizes = nullptr;
};

// One axis's sampling: output position r reads input positions index[t * outSize + r] with weights
// weight[t * outSize + r] for t < taps (indices clamped into the input, weights 0 where a tap adds nothing).
struct AxisTaps {
  std::int64_t axis = 0;  // in the tensor as stored (channels-last nodes: [N, spatial..., C])
  std::int64_t inSize = 0;
  std::int64_t outSize = 0;
  int taps = 1;
  std::vector<std::int32_t> index;
  std::vector<double> weight;
  // tf_crop_and_resize: the output positions outside the crop, which take the extrapolation value.
  std::vector<std::int64_t> extrapolated;
};

// The adjoint of one axis's taps: input position j collects output positions source[k] with weights weight[k] for
// k in [first[j], first[j + 1]), in increasing output position (compressed rows).
struct AxisAdjoint {
  std::vector<std::int64_t> first;
  std::vector<std::int32_t> source;
  std::vector<double> weight;
};
AxisAdjoint adjointOf(const AxisTaps& taps);

struct Plan {
  Options options;
  Shape inShape, outShape;  // as stored
  // The axes that change, in the order the forward passes apply them (Note [Separable resize]).
  std::vector<AxisTaps> passes;
};

// The output shape of resizing a channels-first `inShape` (Resize's shape inference).
Shape outputShape(const Options& options, const Shape& inShape, const Operands& operands);

// The plan for an input of `storedShape` (channels-last when `channelsLast`; scales, sizes and roi are always in
// the channels-first order of the ONNX node). Fails with the reason (the caller names the node).
Plan makePlan(const Options& options, const Shape& storedShape, bool channelsLast, const Operands& operands);

// The operand names of a Resize / ResizeGrad node's inputs 1..3, for messages.
inline constexpr const char* kOperandNames[] = {"X", "roi", "scales", "sizes"};

}  // namespace strata::cpu::resize
