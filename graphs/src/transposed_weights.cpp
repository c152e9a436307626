#include "strata/graphs/transposed_weights.h"

#include <algorithm>
#include <string>

#include "strata/graphs/producers.h"

namespace strata {
namespace {

bool isSwapOf2d(const Node& node, const Graph& graph) {
  if (node.opType != "Transpose" || node.inputs.size() != 1 || node.outputs.size() != 1)
    return false;
  const Value& in = graph.values[static_cast<std::size_t>(node.inputs[0])];
  const std::vector<std::int64_t> perm = node.attrs.getInts("perm", {1, 0});
  return in.meta.shape.size() == 2 && perm == std::vector<std::int64_t>{1, 0};
}

int addIntermediate(Graph& graph, std::string name, DType dtype) {
  Value value;
  value.name = std::move(name);
  value.meta = TensorMeta{dtype, {}};  // filled in when the graph is specialised again
  return graph.addValue(std::move(value));
}

Node makeNode(std::string name, std::string opType, std::vector<int> inputs, int output, const Node& from) {
  Node node;
  node.name = std::move(name);
  node.opType = std::move(opType);
  node.inputs = std::move(inputs);
  node.outputs = {output};
  node.phase = from.phase;
  node.gradientOf = from.gradientOf;
  return node;
}

}  // namespace

Graph foldTransposedWeights(const Graph& graph, int* rewritten) {
  Graph out = graph;
  out.nodes.clear();
  int count = 0;
  for (const Node& node : graph.nodes) {
    const bool candidate = node.opType == "MatMul" && node.inputs.size() == 2 && node.outputs.size() == 1 &&
                           node.inputs[1] != kNoValue && node.outputs[0] != kNoValue;
    const Value* b = candidate ? &graph.values[static_cast<std::size_t>(node.inputs[1])] : nullptr;
    const Node* transpose =
        b != nullptr && b->producer != kNoValue ? &graph.nodes[static_cast<std::size_t>(b->producer)] : nullptr;
    const Shape aShape = candidate ? graph.values[static_cast<std::size_t>(node.inputs[0])].meta.shape : Shape{};
    if (transpose == nullptr || !isSwapOf2d(*transpose, graph) || aShape.size() < 2) {
      out.nodes.push_back(node);
      continue;
    }
    const int w = transpose->inputs[0];
    const Shape& wShape = graph.values[static_cast<std::size_t>(w)].meta.shape;  // [N, K]
    const std::int64_t k = aShape.back();
    const std::int64_t rows = numElements(aShape) / std::max<std::int64_t>(k, 1);
    const DType dtype = graph.values[static_cast<std::size_t>(node.outputs[0])].meta.dtype;
    Attributes transB;
    transB.set("transB", std::int64_t{1});
    if (aShape.size() == 2) {
      Node gemm = makeNode(node.name, "Gemm", {node.inputs[0], w}, node.outputs[0], node);
      gemm.attrs = transB;
      out.nodes.push_back(std::move(gemm));
    } else {
      Shape yShape = aShape;
      yShape.back() = wShape[0];
      const int a2 = addIntermediate(out, node.name + "/rows", dtype);
      const int y2 = addIntermediate(out, node.name + "/gemm", dtype);
      out.nodes.push_back(makeNode(node.name + "/rows", "Reshape",
                                   {node.inputs[0], out.addInt64s({rows, k}, node.name + "/rows_shape")}, a2, node));
      Node gemm = makeNode(node.name + "/gemm", "Gemm", {a2, w}, y2, node);
      gemm.attrs = transB;
      out.nodes.push_back(std::move(gemm));
      out.nodes.push_back(
          makeNode(node.name, "Reshape", {y2, out.addInt64s(yShape, node.name + "/shape")}, node.outputs[0], node));
    }
    ++count;
  }
  // Transposes nothing reads any more (their weights are read directly now).
  std::vector<int> readers = readerCounts(out);
  std::vector<Node> kept;
  for (Node& node : out.nodes) {
    if (node.opType == "Transpose" && node.outputs.size() == 1 &&
        readers[static_cast<std::size_t>(node.outputs[0])] == 0)
      continue;
    kept.push_back(std::move(node));
  }
  out.nodes = std::move(kept);
  relinkProducers(out);
  if (rewritten != nullptr)
    *rewritten = count;
  return out;
}

}  // namespace strata
