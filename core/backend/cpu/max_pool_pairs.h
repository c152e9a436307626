#pragma once

// Note [2x2 max pooling loop]: float32 max pooling with 2x2 windows at stride 2 (no padding, no dilation), the
// pooling of VGG and of most small CNNs, as compiler-vectorised loops over Strata's plain NCHW planes. oneDNN pools
// plain NCHW with a reference loop on AVX2 (so Strata went through 8-channel blocks, a reorder of X in and of Y out),
// and its backward needs the workspace of a forward_training run, so MaxPoolGrad ran oneDNN's pooling forward again
// before its backward: on the bundled CNN (batch 64, 2 threads) the two pooling gradients took 4.6 ms of a 25 ms
// training step under the AVX2 cap and 2.9 of 17 natively. Windows that do not overlap let the gradient be written
// in one pass: each input element belongs to at most one window, so dX is written once (the gradient where the
// element is its window's first maximum, zero elsewhere) with no zero fill and no scatter, reading X and dY once.
// Both passes pick the window's first maximum in row-major order, or its first NaN (Note [Pooling backward]), so the
// forward's output is the value whose position the gradient goes to.

#include <cstdint>

#include "dnnl_context.h"
#include "strata/shape.h"

namespace strata::cpu {

// Whether `geometry` over a 4-D input is 2x2 windows at stride 2 with no padding or dilation (the output's size the
// floor of half the input's: ceil_mode's extra windows would be partial).
bool isMaxPool2x2(const WindowGeometry& geometry, const Shape& x);

// Y [planes, h / 2, w / 2] from X [planes, h, w]: each window's first maximum (or first NaN).
void maxPool2x2(const float* x, float* y, std::int64_t planes, std::int64_t h, std::int64_t w);

// dX [planes, h, w] from dY [planes, h / 2, w / 2] and X: dY where X is its window's first maximum (or first NaN),
// zero elsewhere, rows and columns outside every window included.
void maxPool2x2Grad(const float* dy, const float* x, float* dx, std::int64_t planes, std::int64_t h, std::int64_t w);

// The same on channels-last X [n, h, w, c] and Y [n, h / 2, w / 2, c] (Note [CPU channels-last]): a window's four
// pixels are four runs of c values, so the loops go eight channels at a time with no shuffles. oneDNN's channels-last
// backward ran its pooling forward again for the workspace (the bundled CNN's two gradients 1.2-1.4 ms against the
// plain loops' 0.9, batch 64, 2 threads).
void maxPool2x2ChannelsLast(const float* x, float* y, std::int64_t n, std::int64_t h, std::int64_t w, std::int64_t c);
void maxPool2x2GradChannelsLast(const float* dy, const float* x, float* dx, std::int64_t n, std::int64_t h,
                                std::int64_t w, std::int64_t c);

}  // namespace strata::cpu
