#include "strata/graphs/batch_norm_folding.h"

#include <string>
#include <utility>
#include <vector>

#include "strata/graphs/producers.h"

namespace strata {
namespace {

// A constant of one float type (float32 or float64): a parameter, or a value folded from parameters.
bool isFloatConstant(const Graph& graph, int id, DType dtype) {
  if (id == kNoValue)
    return false;
  const Value& value = graph.values[static_cast<std::size_t>(id)];
  return value.constant.defined() && value.constant.dtype() == dtype;
}

// The Conv whose output only `bn` reads, where the pair folds; -1 otherwise.
int foldableConv(const Graph& graph, const Node& bn, const std::vector<int>& readers) {
  if (bn.opType != "BatchNormalization" || !bn.domain.empty() || bn.attrs.getInt("training_mode", 0) != 0 ||
      bn.inputs.size() != 5 || bn.outputs.empty() || bn.outputs[0] == kNoValue)
    return -1;
  for (std::size_t o = 1; o < bn.outputs.size(); ++o) {
    if (bn.outputs[o] != kNoValue)
      return -1;
  }
  const Value& x = graph.values[static_cast<std::size_t>(bn.inputs[0])];
  if (x.producer == kNoValue || readers[static_cast<std::size_t>(bn.inputs[0])] != 1)
    return -1;
  const Node& conv = graph.nodes[static_cast<std::size_t>(x.producer)];
  if (conv.opType != "Conv" || !conv.domain.empty() || conv.outputs.size() != 1 || conv.inputs.size() < 2 ||
      conv.attrs.getInt("fused_relu", 0) != 0)
    return -1;
  const DType dtype = x.meta.dtype;
  if (dtype != DType::Float32 && dtype != DType::Float64)
    return -1;
  const bool hasBias = conv.inputs.size() > 2 && conv.inputs[2] != kNoValue;
  if (!isFloatConstant(graph, conv.inputs[1], dtype) || (hasBias && !isFloatConstant(graph, conv.inputs[2], dtype)))
    return -1;
  for (std::size_t i = 1; i < 5; ++i) {
    if (!isFloatConstant(graph, bn.inputs[i], dtype))
      return -1;
  }
  return x.producer;
}

class Folder {
 public:
  explicit Folder(Graph& graph) : graph_(graph) {}

  // Appends to `nodes` what computes the folded weights and bias of `conv` followed by `bn`, then the Conv itself
  // writing the batch norm's output.
  void fold(const Node& conv, const Node& bn, std::vector<Node>& nodes) {
    prefix_ = bn.name + "/folded";
    const int w = conv.inputs[1];
    const DType dtype = graph_.values[static_cast<std::size_t>(w)].constant.dtype();
    const auto rank = graph_.values[static_cast<std::size_t>(w)].constant.rank();
    const int scale = bn.inputs[1], shift = bn.inputs[2], mean = bn.inputs[3], var = bn.inputs[4];

    const int epsilon = scalar(dtype, bn.attrs.getFloat("epsilon", 1e-5f));
    const int deviation = emit(nodes, "Sqrt", {emit(nodes, "Add", {var, epsilon}, dtype)}, dtype);
    const int factor = emit(nodes, "Div", {scale, deviation}, dtype);
    std::vector<std::int64_t> perChannel(rank, 1);
    perChannel[0] = -1;
    const int column = emit(nodes, "Reshape", {factor, graph_.addInt64s(perChannel, prefix_ + "/shape")}, dtype);
    const int weights = emit(nodes, "Mul", {w, column}, dtype);
    const int shiftedMean = emit(nodes, "Mul", {mean, factor}, dtype);
    int bias = emit(nodes, "Sub", {shift, shiftedMean}, dtype);
    if (conv.inputs.size() > 2 && conv.inputs[2] != kNoValue)
      bias = emit(nodes, "Add", {emit(nodes, "Mul", {conv.inputs[2], factor}, dtype), bias}, dtype);

    Node folded = conv;
    folded.inputs = {conv.inputs[0], weights, bias};
    folded.outputs = {bn.outputs[0]};
    nodes.push_back(std::move(folded));
  }

 private:
  int scalar(DType dtype, float number) {
    Tensor t = Tensor::empty(dtype, {});
    if (dtype == DType::Float64)
      *t.data<double>() = number;
    else
      *t.data<float>() = number;
    Value value;
    value.name = prefix_ + "/epsilon";
    value.meta = t.meta();
    value.constant = std::move(t);
    return graph_.addValue(std::move(value));
  }

  int emit(std::vector<Node>& nodes, const std::string& opType, std::vector<int> inputs, DType dtype) {
    Value value;
    value.name = prefix_ + "/" + std::to_string(step_++) + "_" + opType;
    value.meta = TensorMeta{dtype, {}};  // filled in when the graph is specialised again
    const int id = graph_.addValue(std::move(value));
    Node node;
    node.name = graph_.values[static_cast<std::size_t>(id)].name;
    node.opType = opType;
    node.inputs = std::move(inputs);
    node.outputs = {id};
    nodes.push_back(std::move(node));
    return id;
  }

  Graph& graph_;
  std::string prefix_;
  int step_ = 0;
};

}  // namespace

Graph foldBatchNormIntoConv(const Graph& graph, int* folded) {
  const std::vector<int> readers = readerCounts(graph);
  std::vector<int> batchNormOf(graph.nodes.size(), -1);  // per Conv: the batch norm folded into it
  std::vector<bool> dropped(graph.nodes.size(), false);
  int count = 0;
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    const int conv = foldableConv(graph, graph.nodes[n], readers);
    if (conv < 0)
      continue;
    batchNormOf[static_cast<std::size_t>(conv)] = static_cast<int>(n);
    dropped[n] = true;
    ++count;
  }
  if (folded != nullptr)
    *folded = count;
  if (count == 0)
    return graph;

  Graph out = graph;
  Folder folder(out);
  std::vector<Node> nodes;
  nodes.reserve(graph.nodes.size() + 10 * static_cast<std::size_t>(count));
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    if (dropped[n])
      continue;
    if (batchNormOf[n] >= 0)
      folder.fold(graph.nodes[n], graph.nodes[static_cast<std::size_t>(batchNormOf[n])], nodes);
    else
      nodes.push_back(graph.nodes[n]);
  }
  out.nodes = std::move(nodes);
  relinkProducers(out);
  return out;
}

}  // namespace strata
