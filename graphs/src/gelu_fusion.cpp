#include "strata/graphs/gelu_fusion.h"

#include <cmath>
#include <optional>
#include <vector>

#include "strata/graphs/producers.h"

namespace strata {
namespace {

// The value of a folded scalar constant (not a trainable initializer), or nullopt. A CastLike of one counts too:
// Strata's downgrade of Gelu-20 writes its constants as CastLike(constant, x) (Note [Opsets above 17]).
std::optional<double> scalarConstant(const Graph& graph, int id) {
  if (id == kNoValue)
    return std::nullopt;
  const Value& value = graph.values[static_cast<std::size_t>(id)];
  if (!value.constant.defined() && value.producer != kNoValue) {
    const Node& producer = graph.nodes[static_cast<std::size_t>(value.producer)];
    return producer.opType == "CastLike" && !producer.inputs.empty() ? scalarConstant(graph, producer.inputs[0])
                                                                     : std::nullopt;
  }
  const Tensor& t = value.constant;
  if (value.isInitializer || !t.defined() || t.numel() != 1 || t.device().type != DeviceType::CPU)
    return std::nullopt;
  if (t.dtype() == DType::Float32)
    return static_cast<double>(*t.data<float>());
  if (t.dtype() == DType::Float64)
    return *t.data<double>();
  return std::nullopt;
}

bool near(std::optional<double> value, double expected) {
  return value.has_value() && std::abs(*value - expected) <= 1e-6 * std::abs(expected);
}

// The operand of a binary node other than the scalar constant `expected`, or kNoValue when neither operand is it.
int otherThanConstant(const Graph& graph, const Node& node, double expected) {
  if (node.inputs.size() != 2)
    return kNoValue;
  if (near(scalarConstant(graph, node.inputs[1]), expected))
    return node.inputs[0];
  if (near(scalarConstant(graph, node.inputs[0]), expected))
    return node.inputs[1];
  return kNoValue;
}

struct Chain {
  int x = kNoValue;
  std::vector<int> nodes;  // Div (or Mul), Erf, Add, Mul, Mul
};

class Matcher {
 public:
  explicit Matcher(const Graph& graph) : graph_(graph), readers_(graph.values.size()) {
    for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
      for (int input : graph.nodes[n].inputs) {
        if (input != kNoValue)
          readers_[static_cast<std::size_t>(input)].push_back(static_cast<int>(n));
      }
    }
    for (int output : graph.outputs)
      readers_[static_cast<std::size_t>(output)].push_back(kNoValue);  // a graph output is read from outside
  }

  // The chain whose Erf is node `erf`, if it is one.
  std::optional<Chain> match(int erf) const {
    const Node& erfNode = graph_.nodes[static_cast<std::size_t>(erf)];
    if (erfNode.opType != "Erf" || erfNode.inputs.size() != 1 || erfNode.outputs.size() != 1)
      return std::nullopt;
    const Node* scale = soleProducer(erfNode.inputs[0]);
    if (scale == nullptr)
      return std::nullopt;
    int x = kNoValue;
    if (scale->opType == "Div" && scale->inputs.size() == 2 && near(scalarConstant(graph_, scale->inputs[1]), M_SQRT2))
      x = scale->inputs[0];
    else if (scale->opType == "Mul")
      x = otherThanConstant(graph_, *scale, M_SQRT1_2);
    const Node* add = soleReader(erfNode.outputs[0], "Add");
    if (x == kNoValue || add == nullptr || otherThanConstant(graph_, *add, 1.0) != erfNode.outputs[0])
      return std::nullopt;
    const Node* times = soleReader(add->outputs[0], "Mul");
    if (times == nullptr || times->inputs.size() != 2)
      return std::nullopt;
    const int other = times->inputs[0] == add->outputs[0] ? times->inputs[1] : times->inputs[0];
    if (other != x)
      return std::nullopt;
    const Node* half = soleReader(times->outputs[0], "Mul");
    if (half == nullptr || otherThanConstant(graph_, *half, 0.5) != times->outputs[0])
      return std::nullopt;
    return Chain{x, {indexOf(*scale), erf, indexOf(*add), indexOf(*times), indexOf(*half)}};
  }

 private:
  // The node producing `value` when that node's only output is read by nothing but the chain's next node.
  const Node* soleProducer(int value) const {
    const Value& v = graph_.values[static_cast<std::size_t>(value)];
    if (v.producer == kNoValue || readers_[static_cast<std::size_t>(value)].size() != 1)
      return nullptr;
    const Node& node = graph_.nodes[static_cast<std::size_t>(v.producer)];
    return node.outputs.size() == 1 ? &node : nullptr;
  }
  // The one node reading `value`, of type `opType` with one output, or nullptr.
  const Node* soleReader(int value, const char* opType) const {
    const std::vector<int>& readers = readers_[static_cast<std::size_t>(value)];
    if (readers.size() != 1 || readers[0] == kNoValue)
      return nullptr;
    const Node& node = graph_.nodes[static_cast<std::size_t>(readers[0])];
    return node.opType == opType && node.outputs.size() == 1 ? &node : nullptr;
  }
  int indexOf(const Node& node) const { return static_cast<int>(&node - graph_.nodes.data()); }

  const Graph& graph_;
  std::vector<std::vector<int>> readers_;
};

}  // namespace

Graph fuseGelu(const Graph& graph, int* fused) {
  const Matcher matcher(graph);
  // The node that becomes the Gelu (the chain's last Mul) and the nodes dropped.
  std::vector<int> geluInput(graph.nodes.size(), kNoValue);
  std::vector<bool> dropped(graph.nodes.size(), false);
  int count = 0;
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    const std::optional<Chain> chain = matcher.match(static_cast<int>(n));
    if (!chain)
      continue;
    for (std::size_t k = 0; k + 1 < chain->nodes.size(); ++k)
      dropped[static_cast<std::size_t>(chain->nodes[k])] = true;
    geluInput[static_cast<std::size_t>(chain->nodes.back())] = chain->x;
    ++count;
  }
  Graph out = graph;
  out.nodes.clear();
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    if (dropped[n])
      continue;
    Node node = graph.nodes[n];
    if (geluInput[n] != kNoValue) {
      node.opType = "Gelu";
      node.domain.clear();
      node.inputs = {geluInput[n]};
      node.attrs = Attributes();
    }
    out.nodes.push_back(std::move(node));
  }
  relinkProducers(out);
  if (fused != nullptr)
    *fused = count;
  return out;
}

}  // namespace strata
