#pragma once

// Note [CPU channels-last]: the CPU kernels of the layout-aware ops (strata/channels_last.h) run channels_last = 1
// nodes themselves when they are float32: oneDNN describes a tensor by its logical dims plus strides, so an
// [N, spatial..., C] activation is the logical [N, C, spatial...] with C innermost, and a [K, spatial..., C / group]
// weight the logical [K, C / group, spatial...] (grouped: [G, K / G, C / G, spatial...]) with C / group innermost.
// oneDNN's convolutions pick channels-last layouts for their activations anyway (brgconv), so a network whose
// activations stay channels-last between layers runs its convolutions, pooling and batch norm without reordering
// any activation, where plain NCHW tensors are reordered in and out of every convolution. The kernels work on the
// logical dims and take the descriptors from here.

#include <cstdint>
#include <vector>

#include "dnnl_context.h"
#include "strata/channels_last.h"

namespace strata::cpu {

// A node operand's logical [N, C, spatial...] shape (weights: [K, C / group, spatial...]).
inline Shape logicalShape(const Shape& shape, bool channelsLast) {
  return channelsLast ? toChannelsFirst(shape) : shape;
}

// Strides of a tensor of logical `dims` stored row-major with dim `innermost` moved last (-1: as given).
std::vector<std::int64_t> stridesWithInnermost(const std::vector<std::int64_t>& dims, int innermost);

// The descriptor of a tensor of logical `dims` stored with dim `innermost` last (-1: plain row-major).
dnnl::memory::desc descWithInnermost(const std::vector<std::int64_t>& dims, int innermost,
                                     dnnl::memory::data_type type = dnnl::memory::data_type::f32);

// An activation [N, C, spatial...] in Strata's layout: plain, or channels-last (C innermost).
inline dnnl::memory::desc activationDesc(const std::vector<std::int64_t>& logical, bool channelsLast) {
  return descWithInnermost(logical, channelsLast ? 1 : -1);
}

// Which dim of a convolution's oneDNN weight dims ([O, I, k...], or [G, O / G, I / G, k...] when grouped) is
// innermost in Strata's layout: none (OIHW) or the input channels (KRSC).
inline int weightInnermost(bool channelsLast, bool grouped) {
  return channelsLast ? (grouped ? 2 : 1) : -1;
}

}  // namespace strata::cpu
