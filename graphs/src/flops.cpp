#include "strata/graphs/flops.h"

#include <algorithm>

#include "strata/einsum_equation.h"
#include "strata/error.h"

namespace strata {
namespace {

// A multiply and an add per output element and per combination of the letters the output does not hold (what a
// product of two operands costs; longer chains cost about as much again per extra operand, counted once here).
std::int64_t einsumFlops(const Graph& graph, const Node& node, std::int64_t outElements) {
  std::vector<Shape> shapes;
  std::vector<std::size_t> ranks;
  for (int id : node.inputs) {
    if (id == kNoValue)
      return outElements;
    shapes.push_back(graph.values[static_cast<std::size_t>(id)].meta.shape);
    ranks.push_back(shapes.back().size());
  }
  try {
    const EinsumEquation equation = parseEinsum(node.attrs.getString("equation"), ranks);
    std::int64_t summed = 1;
    for (const auto& [letter, size] : einsumLetterSizes(equation, shapes)) {
      if (equation.output.find(letter) == std::string::npos)
        summed *= size;
    }
    return 2 * outElements * summed;
  } catch (const Error&) {
    return outElements;  // shape inference reports the equation's faults
  }
}

std::int64_t nodeFlops(const Graph& graph, const Node& node) {
  auto meta = [&](int id) -> const TensorMeta& { return graph.values[static_cast<std::size_t>(id)].meta; };
  if (node.outputs.empty() || node.outputs[0] == kNoValue) {
    return 0;
  }
  const TensorMeta& out = meta(node.outputs[0]);
  const std::int64_t outElements = out.numel();
  if (node.opType == "Conv" || node.opType == "ConvTranspose") {
    const Shape& w = meta(node.inputs[1]).shape;  // [Cout, Cin/group, k...] for Conv
    std::int64_t perOutput = 1;
    for (std::size_t d = 1; d < w.size(); ++d) {
      perOutput *= w[d];
    }
    if (node.opType == "ConvTranspose") {
      return 2 * meta(node.inputs[0]).numel() * perOutput;
    }
    return 2 * outElements * perOutput;
  }
  if (node.opType == "Gemm") {
    const Shape& a = meta(node.inputs[0]).shape;
    const std::int64_t k = node.attrs.getInt("transA", 0) != 0 ? a[0] : a[1];
    return 2 * outElements * k;
  }
  if (node.opType == "MatMul") {
    const Shape& a = meta(node.inputs[0]).shape;
    return 2 * outElements * (a.empty() ? 1 : a.back());
  }
  if (node.opType == "ScaledDotProductAttention") {
    // Q K^T and P V over the keys each query sees (half of them when causal), plus the softmax.
    const Shape& q = meta(node.inputs[0]).shape;
    const Shape& k = meta(node.inputs[1]).shape;
    const std::int64_t rows = out.numel() / std::max<std::int64_t>(out.shape.back(), 1);
    const std::int64_t keys = node.attrs.getInt("causal", 0) != 0 ? (k[k.size() - 2] + 1) / 2 : k[k.size() - 2];
    return rows * keys * (2 * q.back() + 2 * out.shape.back() + 1);
  }
  if (node.opType == "Einsum") {
    return einsumFlops(graph, node, outElements);
  }
  if (node.opType == "MaxPool" || node.opType == "AveragePool") {
    std::int64_t window = 1;
    for (std::int64_t k : node.attrs.getInts("kernel_shape", {})) {
      window *= k;
    }
    return outElements * window;
  }
  if (node.opType == "GlobalAveragePool" || node.opType == "GlobalMaxPool" || node.opType.rfind("Reduce", 0) == 0) {
    return meta(node.inputs[0]).numel();
  }
  static const char* const kDataMovement[] = {"Reshape", "Flatten", "Transpose", "Squeeze", "Unsqueeze", "Concat",
                                              "Split",   "Slice",   "Gather",    "Expand",  "Pad",       "Identity",
                                              "Shape",   "Cast",    "Constant",  "Dropout", "Tile"};
  for (const char* type : kDataMovement) {
    if (node.opType == type) {
      return 0;
    }
  }
  return outElements;  // elementwise and normalisation: about one op per output element
}

}  // namespace

std::int64_t estimateForwardFlops(const Graph& graph) {
  std::int64_t total = 0;
  for (const Node& node : graph.nodes) {
    total += nodeFlops(graph, node);
  }
  return total;
}

}  // namespace strata
