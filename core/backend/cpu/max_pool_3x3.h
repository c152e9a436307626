#pragma once

// Note [3x3 max pooling loop]: float32 max pooling with 3x3 windows at stride 2 (any padding up to 2, floor or ceil
// mode, no dilation) on plain NCHW planes: the stem pooling of ResNets and the three pools of SqueezeNet. oneDNN pools
// plain NCHW with a reference loop on AVX2 (so Strata reordered X into 8-channel blocks and Y back), and its backward
// needs a forward_training workspace, so MaxPoolGrad ran oneDNN's pooling forward again before its backward:
// SqueezeNet 1.1's three pooling gradients took 11% of its training step natively and 13% under the AVX2 cap.
// The windows overlap, so each plane is pooled in two separable passes over a staged copy whose padding is -inf:
// along rows, each window's first maximum of its three columns (and which one); then down the columns, the first
// maximum of three row maxima. The first maximum in row-major window order is the first row's maximum that no later
// row's exceeds, taken at its first column, so the two passes pick what the direct loop picks, the first NaN
// included (Note [Pooling backward]). The gradient is added into a staged dX at the picked position, whose columns
// split into even (a window's first or third column) and odd ones (its middle), so no gathers or scatters are
// needed. A window whose maximum is -inf could pick a staged pad (also -inf) where the direct loop picks its first
// valid position: the gradient leaves such planes to the caller.

#include <cstdint>
#include <functional>

#include "dnnl_context.h"
#include "strata/shape.h"

namespace strata::cpu {

struct MaxPool3x3Shape {
  std::int64_t planes = 0, h = 0, w = 0, outH = 0, outW = 0, padTop = 0, padLeft = 0;
};

// Whether `geometry` over a 4-D input is 3x3 windows at stride 2 without dilation and with pads below the kernel.
bool isMaxPool3x3Stride2(const WindowGeometry& geometry, const Shape& x);

MaxPool3x3Shape maxPool3x3Shape(const WindowGeometry& geometry, const Shape& x);

// Y [planes, outH, outW] from X [planes, h, w]: each window's first maximum (or first NaN).
void maxPool3x3(const float* x, float* y, const MaxPool3x3Shape& shape);

// dX [planes, h, w] from dY and X: each gradient added where X is its window's first maximum (or first NaN). A plane
// with a window whose maximum is -inf is not written: `directPlane(plane)` is called for it instead (rare; from the
// worker threads, one call per such plane).
void maxPool3x3Grad(const float* dy, const float* x, float* dx, const MaxPool3x3Shape& shape,
                    const std::function<void(std::int64_t plane)>& directPlane);

}  // namespace strata::cpu
