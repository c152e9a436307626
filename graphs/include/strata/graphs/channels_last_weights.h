#pragma once

#include <vector>

#include "strata/graphs/graph.h"

namespace strata {

// Note [Channels-last weights]: the channels-last rewrite (channels_last.h) reads a convolution's weight as
// [K, R, S, C / group], so a plan that keeps the parameter channels-first transposes every weight in each forward
// pass and every weight gradient back in each backward pass (ResNet-50: 12.8 of 91 ms in nodes per step on the
// CPU). A channels-last training plan therefore stores such parameters channels-last: the weight is a new
// initializer W' holding [K, R, S, C / group], and the model's W becomes the result of Transpose(W') placed before
// its first reader. The rewrite then takes W' as W's channels-last form and drops the Transpose; autodiff gives W'
// its gradient straight from ConvGradWeight, and the optimizer's state follows the flat buffers it lives in. The
// layout is fixed by the graph alone (the same on every rank and host), so strategies see one consistent set of
// shapes. What crosses the plan's boundary goes back to [K, C / group, R, S]: exported models, `strata step`'s
// dumps, the evaluation plan's reads (through the same rewrite); checkpoints keep the stored layout and record
// which parameters are stored so (a resume with another layout is an error, not a silent reinterpretation).
//
// A weight qualifies when every reader is a Conv the rewrite converts (isChannelsLastConv) reading it as its
// weight, directly or through a Cast (mixed precision's) that only such Convs read.

// The 4-D floating initializers that qualify, in id order.
std::vector<int> channelsLastWeightCandidates(const Graph& graph);

// Each value of `weights` (initializers of `graph`) is computed by a Transpose from a new initializer that holds it
// channels-last, named as the weight was (the weight itself is renamed NAME/channels_first); the new value's
// constant is the weight's own, transposed, when it has one. Returns the new values' ids in `stored` (one per
// weight). Value ids keep their meaning; the result must be specialised again.
Graph storeWeightsChannelsLast(const Graph& graph, const std::vector<int>& weights, std::vector<int>* stored);

}  // namespace strata
