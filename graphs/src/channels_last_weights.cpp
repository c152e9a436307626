#include "strata/graphs/channels_last_weights.h"

#include <algorithm>
#include <string>

#include <fmt/format.h>

#include "strata/channels_last.h"
#include "strata/error.h"
#include "strata/graphs/channels_last.h"
#include "strata/graphs/producers.h"

namespace strata {
namespace {

bool isGraphOutput(const Graph& graph, int v) {
  return std::find(graph.outputs.begin(), graph.outputs.end(), v) != graph.outputs.end();
}

// Node n reads v only as the weight of a Conv the channels-last rewrite converts.
bool readsAsChannelsLastWeight(const Graph& graph, int n, int v) {
  const Node& node = graph.nodes[static_cast<std::size_t>(n)];
  return isChannelsLastConv(graph, node) && node.inputs[1] == v && node.inputs[0] != v &&
         (node.inputs.size() < 3 || node.inputs[2] != v);
}

bool qualifies(const Graph& graph, const std::vector<std::vector<int>>& consumers, int v) {
  const Value& value = graph.values[static_cast<std::size_t>(v)];
  if (!value.isInitializer || !isFloatingPoint(value.meta.dtype) || value.meta.shape.size() != 4 ||
      consumers[static_cast<std::size_t>(v)].empty() || isGraphOutput(graph, v))
    return false;
  return std::all_of(consumers[static_cast<std::size_t>(v)].begin(), consumers[static_cast<std::size_t>(v)].end(),
                     [&](int n) {
                       if (readsAsChannelsLastWeight(graph, n, v))
                         return true;
                       const Node& cast = graph.nodes[static_cast<std::size_t>(n)];
                       if (cast.opType != "Cast" || cast.outputs.size() != 1 || cast.outputs[0] == kNoValue)
                         return false;
                       const int low = cast.outputs[0];
                       const std::vector<int>& readers = consumers[static_cast<std::size_t>(low)];
                       return !readers.empty() && !isGraphOutput(graph, low) &&
                              std::all_of(readers.begin(), readers.end(),
                                          [&](int r) { return readsAsChannelsLastWeight(graph, r, low); });
                     });
}

}  // namespace

std::vector<int> channelsLastWeightCandidates(const Graph& graph) {
  const std::vector<std::vector<int>> consumers = graph.consumers();
  std::vector<int> weights;
  for (std::size_t v = 0; v < graph.values.size(); ++v) {
    if (qualifies(graph, consumers, static_cast<int>(v)))
      weights.push_back(static_cast<int>(v));
  }
  return weights;
}

Graph storeWeightsChannelsLast(const Graph& graph, const std::vector<int>& weights, std::vector<int>* stored) {
  Graph out = graph;
  const std::vector<std::vector<int>> consumers = graph.consumers();
  // Each Transpose goes right before the weight's first reader, so first-use order (the parameter order strategies
  // bucket and shard by) is the model's.
  std::vector<std::vector<Node>> before(graph.nodes.size() + 1);
  std::vector<int> ids;
  for (int w : weights) {
    Value& weight = out.values[static_cast<std::size_t>(w)];
    STRATA_CHECK(weight.isInitializer && weight.meta.shape.size() == 4,
                 "channels-last weights: value '{}' ({}) is not a 4-D initializer", weight.name,
                 weight.meta.toString());
    Value storedValue;
    storedValue.name = weight.name;
    storedValue.meta = TensorMeta{weight.meta.dtype, toChannelsLast(weight.meta.shape)};
    storedValue.isInitializer = true;
    if (weight.constant.defined())
      storedValue.constant = toChannelsLast(weight.constant, MemoryCategory::Parameters);
    weight.name += "/channels_first";
    weight.isInitializer = false;
    weight.constant = Tensor();
    const std::string name = storedValue.name;
    const int id = out.addValue(std::move(storedValue));
    ids.push_back(id);

    const std::vector<int>& readers = consumers[static_cast<std::size_t>(w)];
    const int first =
        readers.empty() ? static_cast<int>(graph.nodes.size()) : *std::min_element(readers.begin(), readers.end());
    Node transpose;
    transpose.name = fmt::format("channels_last/{}/stored", name);
    transpose.opType = "Transpose";
    transpose.inputs = {id};
    transpose.outputs = {w};
    transpose.attrs.set("perm", channelsFirstPerm(4));
    transpose.phase = first < static_cast<int>(graph.nodes.size()) ? graph.nodes[static_cast<std::size_t>(first)].phase
                                                                   : NodePhase::Forward;
    before[static_cast<std::size_t>(first)].push_back(std::move(transpose));
  }
  out.nodes.clear();
  for (std::size_t n = 0; n <= graph.nodes.size(); ++n) {
    for (Node& transpose : before[n])
      out.nodes.push_back(std::move(transpose));
    if (n < graph.nodes.size())
      out.nodes.push_back(graph.nodes[n]);
  }
  relinkProducers(out);
  if (stored != nullptr)
    *stored = std::move(ids);
  return out;
}

}  // namespace strata
