#include "strata/graphs/relu_fusion.h"

#include <vector>

#include "strata/graphs/producers.h"

namespace strata {

Graph fuseRelu(const Graph& graph, int* fused) {
  std::vector<std::vector<int>> readers(graph.values.size());
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    for (int input : graph.nodes[n].inputs) {
      if (input != kNoValue)
        readers[static_cast<std::size_t>(input)].push_back(static_cast<int>(n));
    }
  }
  std::vector<bool> isOutput(graph.values.size(), false);
  for (int output : graph.outputs)
    isOutput[static_cast<std::size_t>(output)] = true;

  Graph out = graph;
  std::vector<bool> dropped(graph.nodes.size(), false);
  int count = 0;
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    Node& first = out.nodes[n];
    const bool fusable = first.opType == "BatchNormalization" ||
                         ((first.opType == "Add" || first.opType == "Conv") && first.outputs.size() == 1);
    if (!fusable || !first.domain.empty() || first.outputs.empty() || first.attrs.getInt("fused_relu", 0) != 0)
      continue;
    const auto y = static_cast<std::size_t>(first.outputs[0]);
    if (isOutput[y] || readers[y].size() != 1)
      continue;
    const Node& relu = graph.nodes[static_cast<std::size_t>(readers[y][0])];
    if (relu.opType != "Relu" || !relu.domain.empty() || relu.inputs.size() != 1 || relu.outputs.size() != 1)
      continue;
    first.attrs.set("fused_relu", std::int64_t{1});
    first.outputs[0] = relu.outputs[0];
    dropped[static_cast<std::size_t>(readers[y][0])] = true;
    ++count;
  }
  dropNodes(out, dropped);
  if (fused != nullptr)
    *fused = count;
  return out;
}

}  // namespace strata
