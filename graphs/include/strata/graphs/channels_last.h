#pragma once

#include "strata/graphs/graph.h"

namespace strata {

// What the channels-last rewrite did, for the run summary.
struct ChannelsLastReport {
  int layoutNodes = 0;       // Conv, BatchNormalization, pooling and Resize nodes now channels_last = 1
  int elementwiseNodes = 0;  // elementwise and Concat nodes that now run on channels-last values
  int transposes = 0;        // Transpose nodes left between the layouts (weights included)
};

// Channels-last as a graph rewrite of a specialised forward graph (loss included, after autocast), before autodiff,
// so that the gradient rules emit channels-last gradient nodes and the Transposes differentiate like any node
// (Note [Channels-last] in strata/channels_last.h):
// - 4-D Conv (explicit symmetric pads), BatchNormalization, MaxPool (without Indices) and AveragePool nodes get
//   channels_last = 1; their data operands become [N, H, W, C] values and Conv weights [K, R, S, C / group] ones.
//   So does a Resize of a channels-last value (a decoder's upsampling), whose scales and sizes keep the model's
//   channels-first order.
// - Elementwise nodes with a channels-last operand follow it (broadcast operands are transposed too), so does a
//   Concat of 4-D values (along its axis's new place), and a GlobalAveragePool of a channels-last value becomes a
//   ReduceMean over H and W.
// - Transpose nodes are inserted where a value crosses between the layouts, at most once per value and direction;
//   a model's own NCHW <-> NHWC Transposes (ConvNeXt's) meet the rewritten values without a copy.
// Every value id of the input graph keeps its channels-first meaning (outputs, loss, parameters). The result must
// be specialised again.
Graph channelsLast(const Graph& graph, ChannelsLastReport* report = nullptr);

// Whether channelsLast() gives this node channels_last = 1 when it is a Conv: 4-D floating input, weight and output,
// explicit symmetric pads.
bool isChannelsLastConv(const Graph& graph, const Node& node);

}  // namespace strata
