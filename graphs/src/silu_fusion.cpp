#include "strata/graphs/silu_fusion.h"

#include <vector>

#include "strata/graphs/producers.h"

namespace strata {

Graph fuseSilu(const Graph& graph, int* fused) {
  std::vector<int> readerCount(graph.values.size(), 0);
  for (const Node& node : graph.nodes) {
    for (int input : node.inputs) {
      if (input != kNoValue)
        ++readerCount[static_cast<std::size_t>(input)];
    }
  }
  for (int output : graph.outputs)
    ++readerCount[static_cast<std::size_t>(output)];  // read from outside

  // The Sigmoid node writing `value` when it is x's sigmoid that only one node reads, or nullptr.
  const auto soleSigmoidOf = [&](int value, int x) -> const Node* {
    if (value == kNoValue || readerCount[static_cast<std::size_t>(value)] != 1)
      return nullptr;
    const int producer = graph.values[static_cast<std::size_t>(value)].producer;
    if (producer == kNoValue)
      return nullptr;
    const Node& node = graph.nodes[static_cast<std::size_t>(producer)];
    const bool isSigmoid = node.opType == "Sigmoid" && node.domain.empty() && node.inputs.size() == 1 &&
                           node.outputs.size() == 1 && node.inputs[0] == x;
    return isSigmoid ? &node : nullptr;
  };

  Graph out = graph;
  std::vector<bool> dropped(graph.nodes.size(), false);
  int count = 0;
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    Node& mul = out.nodes[n];
    if (mul.opType != "Mul" || !mul.domain.empty() || mul.inputs.size() != 2 || mul.outputs.size() != 1)
      continue;
    for (int side = 0; side < 2; ++side) {
      const int x = mul.inputs[static_cast<std::size_t>(side)];
      const Node* sigmoid = soleSigmoidOf(mul.inputs[static_cast<std::size_t>(1 - side)], x);
      if (x == kNoValue || sigmoid == nullptr)
        continue;
      dropped[static_cast<std::size_t>(sigmoid - graph.nodes.data())] = true;
      mul.opType = "Silu";
      mul.inputs = {x};
      mul.attrs = Attributes();
      ++count;
      break;
    }
  }
  dropNodes(out, dropped);
  if (fused != nullptr)
    *fused = count;
  return out;
}

}  // namespace strata
