#pragma once

// Note [Batch-norm loops]: float32 batch norm over Strata's plain NCHW activations as compiler-vectorised loops
// (the core library is built for x86-64-v3, so AVX2 and FMA on every host), two passes over the data in training
// (per-channel sums, then one multiply-add per element) and one in inference. oneDNN's JIT batch norm wants 8- or
// 16-channel blocks (its plain-layout kernel, ncsp_bnorm, is a reference-speed loop), and reordering in and out costs
// two more passes than the normalisation itself: ResNet-50's 53 batch norms took 5.1 ms per training forward that
// way (batch 32, 32x32 input, 2 threads). The sums are taken in float over at most kSumBlock elements and then in
// double, over x minus one of the channel's own values, so that the variance (E[x^2] - E[x]^2) does not cancel
// catastrophically when |mean| >> std. Tasks are blocks of channels, each walking every image, so no sum is split
// between threads and each image's block of the tensor is read contiguously.

#include <cstdint>
#include <vector>

#include "strata/shape.h"

namespace strata::cpu {

// X's extents as batch norm sees them: [batch, channels, inner] with inner = the spatial size.
struct ChannelLayout {
  std::int64_t batch = 0, channels = 0, inner = 0;
  std::int64_t count() const { return batch * inner; }  // elements per channel
};

// The layout of a batch-norm operand as stored: [N, C, spatial...] is [N, C, spatial]; channels-last
// [N, spatial..., C] (Note [CPU channels-last]) is [N x spatial, C, 1], which the loops vectorise across channels
// (Note [Row-major batch norm] in batch_norm_loops.cpp).
ChannelLayout channelLayoutOf(const Shape& stored, bool channelsLast);

// Per-channel sums of x - shift[c], its square and, when dy is given, of dy and dy * (x - shift[c]).
struct ChannelSums {
  std::vector<double> x, xx, dy, dyx;
};

// Note [Fused ReLU]: a batch norm whose only reader was a Relu runs as one node (graphs/relu_fusion.h).
// Its forward writes max(y, 0); its backward takes the fused output as a `gate` and counts dy only where the gate is
// positive (ReluGrad's rule, applied on the fly), so neither the Relu's output nor its gradient is a tensor of its own.

// Per-channel sums of x - shift[c], its square and, when dy is given, of dy and dy * (x - shift[c]) (dy gated).
ChannelSums channelSums(const ChannelLayout& layout, const float* x, const float* dy, const float* shift,
                        const float* gate = nullptr);

// y = a[c] * (x - mean[c]) + b[c] (then max(y, 0) with `relu`): the forward pass.
void normalize(const ChannelLayout& layout, const float* x, const float* mean, const float* a, const float* b, float* y,
               bool relu = false);

// dx = a[c] * dy + b[c] * (x - mean[c]) + c[c] (dy gated): the backward pass.
void normalizeGrad(const ChannelLayout& layout, const float* dy, const float* x, const float* mean, const float* a,
                   const float* b, const float* c, float* dx, const float* gate = nullptr);

}  // namespace strata::cpu
