#include "strata/graphs/channels_last.h"

#include <algorithm>
#include <set>
#include <string>

#include <fmt/format.h>

#include "strata/channels_last.h"
#include "strata/graphs/producers.h"

namespace strata {
namespace {

// Elementwise ops that keep their operands' layout: unary ones (Clip's bounds are scalars) and broadcasting ones.
const std::set<std::string, std::less<>> kElementwiseOps = {
    "Relu", "Sigmoid",  "Tanh", "LeakyRelu", "HardSigmoid", "HardSwish", "Gelu",     "Elu",  "Selu",
    "Celu", "Softplus", "Mish", "Abs",       "Neg",         "Erf",       "Identity", "Cast", "Clip",
    "Add",  "Sub",      "Mul",  "Div",       "Sum",         "Max",       "Min",      "Mean", "Silu"};

const std::vector<std::int64_t> kToLast{0, 2, 3, 1};
const std::vector<std::int64_t> kToFirst{0, 3, 1, 2};

// Explicit pads that are the same at both ends of each spatial dim: the windows cuDNN runs without a padded copy.
bool hasSymmetricPads(const Attributes& attrs) {
  const std::string autoPad = attrs.getString("auto_pad", "NOTSET");
  if (autoPad == "VALID")
    return true;
  if (autoPad != "NOTSET")
    return false;
  const std::vector<std::int64_t> pads = attrs.getInts("pads", {0, 0, 0, 0});
  return pads.size() == 4 && pads[0] == pads[2] && pads[1] == pads[3];
}

class ChannelsLastRewriter {
 public:
  explicit ChannelsLastRewriter(const Graph& graph) : in_(graph), out_(graph), forms_(graph.values.size()) {
    out_.nodes.clear();
    for (std::size_t v = 0; v < forms_.size(); ++v) {
      forms_[v].first = static_cast<int>(v);
    }
    for (const auto& users : graph.consumers()) {
      used_.push_back(!users.empty());
    }
    for (int output : graph.outputs) {
      used_[static_cast<std::size_t>(output)] = true;
    }
  }

  Graph run(ChannelsLastReport& report) {
    for (const Node& node : in_.nodes) {
      rewrite(node);
    }
    for (int& output : out_.outputs) {
      const int form = firstForm(output, NodePhase::Forward);
      if (form != output) {  // an alias (a model's own Transpose met a channels-last value): copy it under its id
        emit("Identity", {form}, output, fmt::format("channels_last/{}/identity", name(output)), NodePhase::Forward);
      }
    }
    removeUnusedTransposes();
    for (Value& value : out_.values) {
      value.producer = kNoValue;
    }
    for (std::size_t n = 0; n < out_.nodes.size(); ++n) {
      const Node& node = out_.nodes[n];
      for (int output : node.outputs) {
        if (output != kNoValue)
          out_.values[static_cast<std::size_t>(output)].producer = static_cast<int>(n);
      }
      if (node.opType == "Transpose")
        ++report_.transposes;
    }
    report = report_;
    return std::move(out_);
  }

 private:
  // Where a value of the input graph lives: `first` holds its own contents (its own id, or an alias) and `last`
  // its channels-last form; each kNoValue until something produces it.
  struct Forms {
    int first = kNoValue;
    int last = kNoValue;
  };

  const TensorMeta& meta(int v) const { return out_.values[static_cast<std::size_t>(v)].meta; }
  const std::string& name(int v) const { return out_.values[static_cast<std::size_t>(v)].name; }
  std::size_t rank(int v) const { return meta(v).shape.size(); }
  bool hasLast(int v) const { return v != kNoValue && forms_[static_cast<std::size_t>(v)].last != kNoValue; }

  void rewrite(const Node& node) {
    if (isChannelsLastConv(in_, node)) {
      convertLayoutNode(node, {0, 1});
    } else if ((node.opType == "MaxPool" || node.opType == "AveragePool") && hasLast(node.inputs[0]) &&
               convertible(node) && hasSymmetricPads(node.attrs) && !usesOutput(node, 1)) {
      convertLayoutNode(node, {0});
    } else if (node.opType == "BatchNormalization" && hasLast(node.inputs[0]) && convertible(node)) {
      convertLayoutNode(node, {0});
    } else if (node.opType == "Resize" && hasLast(node.inputs[0]) && convertible(node)) {
      convertLayoutNode(node, {0});  // its roi, scales and sizes stay in the node's own (channels-first) order
    } else if (node.opType == "GlobalAveragePool" && hasLast(node.inputs[0]) && convertible(node)) {
      convertGlobalAveragePool(node);
    } else if (kElementwiseOps.contains(node.opType) && followsLayout(node)) {
      convertElementwise(node);
    } else if (node.opType == "Concat" && concatFollowsLayout(node)) {
      convertConcat(node);
    } else {
      keepChannelsFirst(node);
    }
  }

  // A 4-D floating first input and output.
  bool convertible(const Node& node) const {
    const int x = node.inputs.empty() ? kNoValue : node.inputs[0];
    const int y = node.outputs.empty() ? kNoValue : node.outputs[0];
    return x != kNoValue && y != kNoValue && rank(x) == 4 && rank(y) == 4 && isFloatingPoint(meta(x).dtype);
  }

  bool usesOutput(const Node& node, std::size_t i) const {
    return i < node.outputs.size() && node.outputs[i] != kNoValue && used_[static_cast<std::size_t>(node.outputs[i])];
  }

  // An elementwise node follows a channels-last operand when every other operand can take that layout too:
  // scalars as they are, other operands of rank 4 or less transposed (lower ranks broadcast as 4-D).
  bool followsLayout(const Node& node) const {
    if (node.outputs.size() != 1 || node.outputs[0] == kNoValue || rank(node.outputs[0]) != 4)
      return false;
    bool anyLast = false;
    for (int input : node.inputs) {
      if (input == kNoValue)
        continue;
      anyLast = anyLast || hasLast(input);
      if (rank(input) > 4)
        return false;
    }
    return anyLast;
  }

  // A Concat of 4-D values, one of them channels-last (DenseNet's and SqueezeNet's joins along the channels).
  bool concatFollowsLayout(const Node& node) const {
    if (node.outputs.size() != 1 || node.outputs[0] == kNoValue || rank(node.outputs[0]) != 4)
      return false;
    bool anyLast = false;
    for (int input : node.inputs) {
      if (input == kNoValue || rank(input) != 4)
        return false;
      anyLast = anyLast || hasLast(input);
    }
    return anyLast;
  }

  // The same Concat on the channels-last forms, along the axis's place in [N, H, W, C].
  void convertConcat(const Node& node) {
    Node copy = node;
    for (int& input : copy.inputs)
      input = lastForm(input, node.phase);
    std::int64_t axis = node.attrs.getInt("axis", 1);
    axis = axis < 0 ? axis + 4 : axis;
    const auto position = std::find(kToLast.begin(), kToLast.end(), axis) - kToLast.begin();
    copy.attrs.set("axis", static_cast<std::int64_t>(position));
    copy.outputs[0] = addLastValue(node.outputs[0]);
    out_.nodes.push_back(std::move(copy));
    ++report_.elementwiseNodes;
  }

  void convertLayoutNode(const Node& node, std::initializer_list<std::size_t> layoutInputs) {
    Node copy = node;
    for (std::size_t i = 0; i < copy.inputs.size(); ++i) {
      if (copy.inputs[i] == kNoValue)
        continue;
      const bool layout = std::find(layoutInputs.begin(), layoutInputs.end(), i) != layoutInputs.end();
      copy.inputs[i] = layout ? lastForm(copy.inputs[i], node.phase) : firstForm(copy.inputs[i], node.phase);
    }
    if (copy.opType == "MaxPool")
      copy.outputs.resize(1);  // Indices would count channels-first positions; nothing reads them
    copy.outputs[0] = addLastValue(node.outputs[0]);
    copy.attrs.set("channels_last", std::int64_t{1});
    out_.nodes.push_back(std::move(copy));
    ++report_.layoutNodes;
  }

  void convertGlobalAveragePool(const Node& node) {
    Node mean;
    mean.name = node.name;
    mean.opType = "ReduceMean";
    mean.inputs = {lastForm(node.inputs[0], node.phase), out_.addInt64s({1, 2}, node.name + "/axes")};
    mean.outputs = {addLastValue(node.outputs[0])};
    mean.attrs.set("keepdims", std::int64_t{1});
    mean.phase = node.phase;
    out_.nodes.push_back(std::move(mean));
    ++report_.layoutNodes;
  }

  void convertElementwise(const Node& node) {
    Node copy = node;
    for (int& input : copy.inputs) {
      if (input == kNoValue)
        continue;
      input = meta(input).numel() == 1 ? firstForm(input, node.phase) : lastForm(input, node.phase);
    }
    copy.outputs[0] = addLastValue(node.outputs[0]);
    out_.nodes.push_back(std::move(copy));
    ++report_.elementwiseNodes;
  }

  void keepChannelsFirst(const Node& node) {
    // A model's own move to channels-last (ConvNeXt's permute before LayerNorm) of a value whose channels-last form
    // exists is that form; its move back to channels-first gives the channels-last form of its result.
    const bool transpose4d =
        node.opType == "Transpose" && node.inputs.size() == 1 && node.outputs.size() == 1 && rank(node.inputs[0]) == 4;
    const std::vector<std::int64_t> perm = transpose4d ? node.attrs.getInts("perm", {}) : std::vector<std::int64_t>{};
    if (transpose4d && perm == kToLast && hasLast(node.inputs[0])) {
      forms_[static_cast<std::size_t>(node.outputs[0])].first = forms_[static_cast<std::size_t>(node.inputs[0])].last;
      return;
    }
    Node copy = node;
    for (int& input : copy.inputs) {
      if (input != kNoValue)
        input = firstForm(input, node.phase);
    }
    if (transpose4d && perm == kToFirst)
      forms_[static_cast<std::size_t>(node.outputs[0])].last = copy.inputs[0];
    out_.nodes.push_back(std::move(copy));
  }

  // A new value for the channels-last form of `v`, which its producer now makes; the channels-first form is made
  // from it when something asks for it.
  int addLastValue(int v) {
    const int id = addValueLike(v, "/channels_last", toChannelsLast(meta(v).shape));
    forms_[static_cast<std::size_t>(v)] = Forms{.first = kNoValue, .last = id};
    return id;
  }

  // A new computed value named after value `v`, of its dtype and the given shape.
  int addValueLike(int v, const char* suffix, Shape shape) {
    Value value;
    value.name = name(v) + suffix;
    value.meta = TensorMeta{meta(v).dtype, std::move(shape)};
    return out_.addValue(std::move(value));
  }

  int lastForm(int v, NodePhase phase) {
    Forms& forms = forms_[static_cast<std::size_t>(v)];
    if (forms.last != kNoValue)
      return forms.last;
    int source = firstForm(v, phase);
    Shape shape = meta(v).shape;
    if (shape.size() < 4) {  // a broadcast operand: its 4-D view first
      shape.insert(shape.begin(), 4 - shape.size(), 1);
      const int viewId = addValueLike(v, "/4d", shape);
      Node reshape;
      reshape.name = fmt::format("channels_last/{}/4d", name(v));
      reshape.opType = "Reshape";
      reshape.inputs = {source, out_.addInt64s(shape, reshape.name + "/shape")};
      reshape.outputs = {viewId};
      reshape.phase = phase;
      out_.nodes.push_back(std::move(reshape));
      source = viewId;
    }
    const int lastId = addValueLike(v, "/channels_last", toChannelsLast(shape));
    forms_[static_cast<std::size_t>(v)].last = lastId;
    emitTranspose(source, lastId, kToLast, fmt::format("channels_last/{}/to_nhwc", name(v)), phase);
    return lastId;
  }

  // The channels-first form keeps the input graph's id, so outputs, the loss and parameters keep their ids.
  int firstForm(int v, NodePhase phase) {
    Forms& forms = forms_[static_cast<std::size_t>(v)];
    if (forms.first == kNoValue) {
      forms.first = v;
      emitTranspose(forms.last, v, kToFirst, fmt::format("channels_last/{}/to_nchw", name(v)), phase);
    }
    return forms.first;
  }

  void emitTranspose(int from, int to, const std::vector<std::int64_t>& perm, std::string nodeName, NodePhase phase) {
    Node transpose;
    transpose.name = std::move(nodeName);
    transpose.opType = "Transpose";
    transpose.inputs = {from};
    transpose.outputs = {to};
    transpose.attrs.set("perm", perm);
    transpose.phase = phase;
    out_.nodes.push_back(std::move(transpose));
  }

  void emit(const char* opType, std::vector<int> inputs, int output, std::string nodeName, NodePhase phase) {
    Node node;
    node.name = std::move(nodeName);
    node.opType = opType;
    node.inputs = std::move(inputs);
    node.outputs = {output};
    node.phase = phase;
    out_.nodes.push_back(std::move(node));
  }

  // The model's own Transposes whose result now comes from the other form, and moves nothing needed.
  void removeUnusedTransposes() {
    std::vector<int> readers = readerCounts(out_);
    std::vector<Node> kept;
    for (auto it = out_.nodes.rbegin(); it != out_.nodes.rend(); ++it) {
      if (it->opType == "Transpose" && readers[static_cast<std::size_t>(it->outputs[0])] == 0) {
        --readers[static_cast<std::size_t>(it->inputs[0])];
        continue;
      }
      kept.push_back(std::move(*it));
    }
    std::reverse(kept.begin(), kept.end());
    out_.nodes = std::move(kept);
  }

  const Graph& in_;
  Graph out_;
  std::vector<Forms> forms_;  // per value id of the input graph
  std::vector<bool> used_;    // per value id of the input graph: read by a node or a graph output
  ChannelsLastReport report_;
};

}  // namespace

bool isChannelsLastConv(const Graph& graph, const Node& node) {
  if (node.opType != "Conv" || node.inputs.size() < 2 || node.outputs.empty() || !hasSymmetricPads(node.attrs))
    return false;
  for (int v : {node.inputs[0], node.inputs[1], node.outputs[0]}) {
    if (v == kNoValue)
      return false;
    const TensorMeta& meta = graph.values[static_cast<std::size_t>(v)].meta;
    if (meta.shape.size() != 4 || !isFloatingPoint(meta.dtype))
      return false;
  }
  return true;
}

Graph channelsLast(const Graph& graph, ChannelsLastReport* report) {
  ChannelsLastReport local;
  Graph result = ChannelsLastRewriter(graph).run(local);
  if (report != nullptr)
    *report = local;
  return result;
}

}  // namespace strata
