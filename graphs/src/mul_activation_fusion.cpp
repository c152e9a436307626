#include "mul_activation_fusion.h"

#include "strata/graphs/producers.h"

namespace strata::detail {

Graph fuseMulOfActivation(const Graph& graph, const std::vector<std::string_view>& chain, const std::string& fused,
                          int* fusedCount) {
  const std::vector<int> readerCount = readerCounts(graph);

  // The one-input node of type `op` writing `value` when only one node reads `value`, or nullptr.
  const auto soleUnary = [&](int value, std::string_view op) -> const Node* {
    if (value == kNoValue || readerCount[static_cast<std::size_t>(value)] != 1)
      return nullptr;
    const int producer = graph.values[static_cast<std::size_t>(value)].producer;
    if (producer == kNoValue)
      return nullptr;
    const Node& node = graph.nodes[static_cast<std::size_t>(producer)];
    const bool matches =
        node.opType == op && node.domain.empty() && node.inputs.size() == 1 && node.outputs.size() == 1;
    return matches ? &node : nullptr;
  };
  // The chain's nodes, last link first, when `value` is chain(x); empty otherwise.
  const auto chainOf = [&](int value, int x) {
    std::vector<const Node*> links;
    for (auto op = chain.rbegin(); op != chain.rend(); ++op) {
      const Node* link = soleUnary(value, *op);
      if (link == nullptr)
        return std::vector<const Node*>{};
      links.push_back(link);
      value = link->inputs[0];
    }
    return value == x ? links : std::vector<const Node*>{};
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
      const std::vector<const Node*> links = chainOf(mul.inputs[static_cast<std::size_t>(1 - side)], x);
      if (x == kNoValue || links.empty())
        continue;
      for (const Node* link : links)
        dropped[static_cast<std::size_t>(link - graph.nodes.data())] = true;
      mul.opType = fused;
      mul.inputs = {x};
      mul.attrs = Attributes();
      ++count;
      break;
    }
  }
  dropNodes(out, dropped);
  if (fusedCount != nullptr)
    *fusedCount = count;
  return out;
}

}  // namespace strata::detail
