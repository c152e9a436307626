#include "strata/graphs/mish_fusion.h"

#include <string_view>
#include <vector>

#include "strata/graphs/producers.h"

namespace strata {

Graph fuseMish(const Graph& graph, int* fused) {
  std::vector<int> readerCount(graph.values.size(), 0);
  for (const Node& node : graph.nodes) {
    for (int input : node.inputs) {
      if (input != kNoValue)
        ++readerCount[static_cast<std::size_t>(input)];
    }
  }
  for (int output : graph.outputs)
    ++readerCount[static_cast<std::size_t>(output)];  // read from outside

  // The node of type `op` writing `value` from `input` when only one node reads `value`, or nullptr.
  const auto soleUnary = [&](int value, std::string_view op, int input) -> const Node* {
    if (value == kNoValue || readerCount[static_cast<std::size_t>(value)] != 1)
      return nullptr;
    const int producer = graph.values[static_cast<std::size_t>(value)].producer;
    if (producer == kNoValue)
      return nullptr;
    const Node& node = graph.nodes[static_cast<std::size_t>(producer)];
    const bool matches = node.opType == op && node.domain.empty() && node.inputs.size() == 1 &&
                         node.outputs.size() == 1 && (input == kNoValue || node.inputs[0] == input);
    return matches ? &node : nullptr;
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
      const Node* tanh = soleUnary(mul.inputs[static_cast<std::size_t>(1 - side)], "Tanh", kNoValue);
      const Node* softplus = tanh == nullptr ? nullptr : soleUnary(tanh->inputs[0], "Softplus", x);
      if (x == kNoValue || softplus == nullptr)
        continue;
      dropped[static_cast<std::size_t>(tanh - graph.nodes.data())] = true;
      dropped[static_cast<std::size_t>(softplus - graph.nodes.data())] = true;
      mul.opType = "Mish";
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
