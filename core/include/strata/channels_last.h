#pragma once

// Note [Channels-last]: tensors have no strides, so a layout is a property of the node that reads it. A
// layout-aware op (isChannelsLastOp) with the attribute channels_last = 1 takes and returns every operand of rank 3
// or more in channels-last order: activations and their gradients as [N, spatial..., C], convolution weights and
// their gradients as [K, spatial..., C / group] (cuDNN's KRSC filter format). Per-channel operands (scale, bias,
// statistics) are unchanged. The shape attributes of gradient nodes (input_shape, weight_shape) are channels-last
// shapes too. graphs/channels_last.h rewrites a training graph into this form.
//
// Every backend runs such nodes: kernels that read the layout themselves declare it when they are registered
// (OpRegistry::addKernel's nativeChannelsLast); every other kernel is wrapped by channelsLastByTransposing, which
// transposes the operands to channels-first, runs the kernel and transposes the results back. Shape inference is
// wrapped the same way (channelsLastShapes), so each op's shape rules are written once, channels-first.

#include <string_view>

#include "strata/attributes.h"
#include "strata/op_registry.h"
#include "strata/shape.h"

namespace strata {

// Conv, its three gradients, BatchNormalization and its gradient, MaxPool, AveragePool, Resize and their gradients.
bool isChannelsLastOp(std::string_view opType);

// The channels_last attribute (absent: false); an error when it is neither 0 nor 1.
bool channelsLastOf(const Attributes& attrs);

// [N, C, spatial...] -> [N, spatial..., C] and back; shapes of rank below 3 are returned unchanged.
Shape toChannelsLast(const Shape& shape);
Shape toChannelsFirst(const Shape& shape);

// The same moves of a host tensor's elements, into a new host tensor of `category` (rank below 3: a copy). For
// parameters stored channels-last (Note [Channels-last weights]) at the plan's boundaries: export, checkpoint dumps.
Tensor toChannelsLast(const Tensor& tensor, MemoryCategory category = MemoryCategory::Other);
Tensor toChannelsFirst(const Tensor& tensor, MemoryCategory category = MemoryCategory::Other);

// The permutations of those two moves for a rank (Transpose's perm attribute).
std::vector<std::int64_t> channelsLastPerm(std::size_t rank);
std::vector<std::int64_t> channelsFirstPerm(std::size_t rank);

// Shape inference of a layout-aware op from its channels-first rules: channels-last inputs are viewed
// channels-first, and the results are turned back.
ShapeFn channelsLastShapes(ShapeFn channelsFirst);

// A kernel factory for `device` that runs channels_last = 1 nodes on `channelsFirst` kernels by transposing
// (nodes without the attribute get the channelsFirst kernel itself). `nativeWhen`, when set, names the
// channels-last nodes that `channelsFirst` runs itself.
KernelFactory channelsLastByTransposing(KernelFactory channelsFirst, DeviceType device,
                                        std::function<bool(const KernelInit&)> nativeWhen = nullptr);

}  // namespace strata
