// FLOP estimates of graphs/flops.cpp (strata inspect): the Einsum rule.

#include "strata/graphs/flops.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace strata {
namespace flops_test {

// A graph of one Einsum node over inputs of these shapes.
Graph einsumGraph(const std::string& equation, const std::vector<Shape>& inputs, const Shape& output) {
  Graph graph;
  Node node;
  node.name = "einsum";
  node.opType = "Einsum";
  node.attrs.set("equation", equation);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    Value value;
    value.name = "x";
    value.name += std::to_string(i);
    value.meta = TensorMeta{DType::Float32, inputs[i]};
    node.inputs.push_back(graph.addValue(value));
  }
  Value out;
  out.name = "y";
  out.meta = TensorMeta{DType::Float32, output};
  out.producer = 0;
  node.outputs.push_back(graph.addValue(out));
  graph.nodes.push_back(node);
  return graph;
}

TEST(FlopsTest, EinsumCountsAMultiplyAndAnAddPerSummedTerm) {
  // [b, i, k] = sum_j: 2 * (2 * 3 * 5) * 4.
  EXPECT_EQ(estimateForwardFlops(einsumGraph("bij,bjk->bik", {{2, 3, 4}, {2, 4, 5}}, {2, 3, 5})), 2 * 30 * 4);
  // A transpose sums nothing: 2 per output element.
  EXPECT_EQ(estimateForwardFlops(einsumGraph("ij->ji", {{3, 4}}, {4, 3})), 2 * 12);
  // An equation that does not parse falls back to one per output element (shape inference reports it).
  EXPECT_EQ(estimateForwardFlops(einsumGraph("ij,jk->ik", {{3, 4}}, {3, 5})), 15);
}

}  // namespace flops_test
}  // namespace strata
