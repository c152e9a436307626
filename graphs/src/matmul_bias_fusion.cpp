#include "strata/graphs/matmul_bias_fusion.h"

#include <vector>

#include "strata/graphs/producers.h"

namespace strata {

namespace {

// Whether `bias` is a float32 constant of `columns` elements that broadcasts along the last axis of a product of rank
// `rank` without growing it: shape [N] or [1, ..., 1, N].
bool isBiasVector(const Tensor& c, std::int64_t columns, std::size_t rank) {
  return c.defined() && c.dtype() == DType::Float32 && !c.shape().empty() && c.shape().size() <= rank &&
         c.shape().back() == columns && c.numel() == columns;
}

// The constant behind value `id`: itself, or the input of the Identity that produces it (PyTorch's exporter shares
// equal initializers, such as freshly initialised biases, through Identity nodes); kNoValue when it is computed.
int constantBehind(const Graph& graph, int id) {
  const Value& value = graph.values[static_cast<std::size_t>(id)];
  if (value.constant.defined())
    return id;
  if (value.producer == kNoValue)
    return kNoValue;
  const Node& producer = graph.nodes[static_cast<std::size_t>(value.producer)];
  if (producer.opType != "Identity" || !producer.domain.empty() || producer.inputs.size() != 1 ||
      !graph.values[static_cast<std::size_t>(producer.inputs[0])].constant.defined())
    return kNoValue;
  return producer.inputs[0];
}

}  // namespace

Graph fuseBiasIntoMatMul(const Graph& graph, int* fused) {
  const std::vector<int> readers = readerCounts(graph);
  const std::vector<std::vector<int>> consumers = graph.consumers();
  Graph out = graph;
  std::vector<bool> dropped(graph.nodes.size(), false);
  int count = 0;
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    Node& matmul = out.nodes[n];
    if (matmul.opType != "MatMul" || !matmul.domain.empty() || matmul.inputs.size() != 2 || matmul.outputs.size() != 1)
      continue;
    const auto y = static_cast<std::size_t>(matmul.outputs[0]);
    const TensorMeta& product = graph.values[y].meta;
    const Value& b = graph.values[static_cast<std::size_t>(matmul.inputs[1])];
    if (product.dtype != DType::Float32 || product.shape.size() < 2 || !b.constant.defined() ||
        b.constant.shape().size() != 2 || b.constant.numel() == 0)
      continue;
    const int reader = soleNodeReader(readers, consumers, matmul.outputs[0]);
    if (reader == kNoValue)
      continue;
    const Node& add = graph.nodes[static_cast<std::size_t>(reader)];
    if (add.opType != "Add" || !add.domain.empty() || add.inputs.size() != 2 || add.outputs.size() != 1 ||
        add.inputs[0] == add.inputs[1])
      continue;
    const int biasId = constantBehind(graph, add.inputs[0] == matmul.outputs[0] ? add.inputs[1] : add.inputs[0]);
    if (biasId == kNoValue || !isBiasVector(graph.values[static_cast<std::size_t>(biasId)].constant,
                                            b.constant.shape()[1], product.shape.size()))
      continue;
    matmul.inputs.push_back(biasId);
    matmul.outputs[0] = add.outputs[0];
    dropped[static_cast<std::size_t>(reader)] = true;
    ++count;
  }
  dropNodes(out, dropped);
  if (fused != nullptr)
    *fused = count;
  return out;
}

}  // namespace strata
