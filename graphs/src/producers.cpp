#include "strata/graphs/producers.h"

namespace strata {

void relinkProducers(Graph& graph) {
  for (Value& value : graph.values)
    value.producer = kNoValue;
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    for (int output : graph.nodes[n].outputs) {
      if (output != kNoValue)
        graph.values[static_cast<std::size_t>(output)].producer = static_cast<int>(n);
    }
  }
}

std::vector<int> readerCounts(const Graph& graph) {
  std::vector<int> readers(graph.values.size(), 0);
  for (const Node& node : graph.nodes) {
    for (int input : node.inputs) {
      if (input != kNoValue)
        ++readers[static_cast<std::size_t>(input)];
    }
  }
  for (int output : graph.outputs)
    ++readers[static_cast<std::size_t>(output)];
  return readers;
}

int soleNodeReader(const std::vector<int>& readers, const std::vector<std::vector<int>>& consumers, int id) {
  const auto v = static_cast<std::size_t>(id);
  // readers counts graph outputs too: one reader that is a node
  return readers[v] == 1 && consumers[v].size() == 1 ? consumers[v][0] : kNoValue;
}

void dropNodes(Graph& graph, const std::vector<bool>& dropped) {
  std::vector<Node> kept;
  kept.reserve(graph.nodes.size());
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    if (!dropped.at(n))
      kept.push_back(std::move(graph.nodes[n]));
  }
  graph.nodes = std::move(kept);
  relinkProducers(graph);
}

}  // namespace strata
