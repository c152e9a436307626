#include "strata/graphs/relu_fusion.h"

#include <limits>
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

namespace {

// A Clip bound: absent (the type's limit), or a constant float32 scalar; false when it is computed.
bool constantBound(const Graph& graph, const Node& clip, std::size_t input, float fallback, float& bound) {
  bound = fallback;
  if (input >= clip.inputs.size() || clip.inputs[input] == kNoValue)
    return true;
  const Tensor& value = graph.values[static_cast<std::size_t>(clip.inputs[input])].constant;
  if (!value.defined() || value.dtype() != DType::Float32 || value.numel() != 1)
    return false;
  bound = *value.data<float>();
  return true;
}

}  // namespace

Graph fuseClipIntoConv(const Graph& graph, int* fused) {
  const std::vector<int> readers = readerCounts(graph);
  const std::vector<std::vector<int>> consumers = graph.consumers();
  Graph out = graph;
  std::vector<bool> dropped(graph.nodes.size(), false);
  int count = 0;
  for (std::size_t n = 0; n < graph.nodes.size(); ++n) {
    Node& conv = out.nodes[n];
    if (conv.opType != "Conv" || !conv.domain.empty() || conv.outputs.size() != 1 ||
        conv.attrs.getInt("fused_relu", 0) != 0 || conv.attrs.getInt("fused_clip", 0) != 0)
      continue;
    const int reader = soleNodeReader(readers, consumers, conv.outputs[0]);
    if (reader == kNoValue || graph.values[static_cast<std::size_t>(conv.outputs[0])].meta.dtype != DType::Float32)
      continue;
    const Node& clip = graph.nodes[static_cast<std::size_t>(reader)];
    if (clip.opType != "Clip" || !clip.domain.empty() || clip.outputs.size() != 1 || clip.inputs[0] != conv.outputs[0])
      continue;
    float lo = 0.0f, hi = 0.0f;
    const float attrLo = clip.attrs.getFloat("min", std::numeric_limits<float>::lowest());  // before opset 11
    const float attrHi = clip.attrs.getFloat("max", std::numeric_limits<float>::max());
    // min > max has no agreed meaning across oneDNN's clip and ONNX's min(max(x, lo), hi): the Clip stays.
    if (!constantBound(graph, clip, 1, attrLo, lo) || !constantBound(graph, clip, 2, attrHi, hi) || lo > hi)
      continue;
    conv.attrs.set("fused_clip", std::int64_t{1});
    conv.attrs.set("clip_min", lo);
    conv.attrs.set("clip_max", hi);
    conv.outputs[0] = clip.outputs[0];
    dropped[static_cast<std::size_t>(reader)] = true;
    ++count;
  }
  dropNodes(out, dropped);
  if (fused != nullptr)
    *fused = count;
  return out;
}

}  // namespace strata
