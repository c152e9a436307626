#include "strata/graphs/specialize.h"

#include <algorithm>

#include "strata/error.h"
#include "strata/op_registry.h"

namespace strata {
namespace {

std::string where(const Graph& graph) {
  return graph.sourcePath.empty() ? graph.name : graph.sourcePath;
}

// Parameters (float initializers) must stay inputs of the plan: folding through them would bake trained weights
// into constants and cut their gradients.
bool isParameter(const Value& value) {
  return value.isInitializer && isFloatingPoint(value.meta.dtype);
}

// Shape and Size only need their input's static shape, not its data.
bool foldShapeQuery(const Node& node, const std::vector<InputInfo>& inputs, Value& output) {
  if ((node.opType != "Shape" && node.opType != "Size") || inputs.empty() || !inputs[0].present) {
    return false;
  }
  const Shape& shape = inputs[0].meta.shape;
  if (node.opType == "Size") {
    output.constant = Tensor::scalar<std::int64_t>(numElements(shape));
  } else {
    const auto rank = static_cast<std::int64_t>(shape.size());
    auto clampAxis = [rank](std::int64_t axis) {
      return std::clamp(axis < 0 ? axis + rank : axis, std::int64_t{0}, rank);
    };
    const std::int64_t start = clampAxis(node.attrs.getInt("start", 0));
    const std::int64_t end = clampAxis(node.attrs.getInt("end", rank));
    const std::int64_t count = std::max<std::int64_t>(0, end - start);
    output.constant = Tensor::empty(DType::Int64, {count});
    std::copy_n(shape.begin() + start, count, output.constant.data<std::int64_t>());
  }
  output.meta = output.constant.meta();
  return true;
}

}  // namespace

std::vector<TensorMeta> defaultInputMetas(const Graph& graph, std::int64_t batch) {
  std::vector<TensorMeta> metas;
  for (int id : graph.inputs) {
    TensorMeta meta = graph.values[static_cast<std::size_t>(id)].meta;
    for (std::size_t d = 0; d < meta.shape.size(); ++d) {
      if (meta.shape[d] >= 0) {
        continue;
      }
      if (d != 0) {
        fail(
            "{}: input '{}' has a dynamic dimension {} in {} that cannot be specialised; give the input shape "
            "explicitly (--input-shape)",
            where(graph), graph.values[static_cast<std::size_t>(id)].name, d, shapeToString(meta.shape));
      }
      meta.shape[d] = batch;
    }
    metas.push_back(std::move(meta));
  }
  return metas;
}

Graph specialize(const Graph& graph, const SpecializeOptions& options) {
  Graph out = graph;
  const std::vector<TensorMeta> metas =
      options.inputMetas.empty() ? defaultInputMetas(graph, options.defaultBatch) : options.inputMetas;
  if (metas.size() != graph.inputs.size()) {
    fail("{}: the model has {} input(s) but {} shape(s) were given", where(graph), graph.inputs.size(), metas.size());
  }
  for (std::size_t i = 0; i < metas.size(); ++i) {
    Value& input = out.values[static_cast<std::size_t>(graph.inputs[i])];
    const Shape& declared = input.meta.shape;
    bool matches =
        metas[i].dtype == input.meta.dtype && metas[i].shape.size() == declared.size() && isStatic(metas[i].shape);
    for (std::size_t d = 0; matches && d < declared.size(); ++d) {
      matches = declared[d] < 0 || declared[d] == metas[i].shape[d];
    }
    if (!matches) {
      fail("{}: input '{}' is declared as {} but was given {}", where(graph), input.name, input.meta.toString(),
           metas[i].toString());
    }
    input.meta = metas[i];
    if (i < options.boundInputs.size() && options.boundInputs[i].defined()) {
      if (options.boundInputs[i].meta() != metas[i]) {
        fail("{}: the value bound to input '{}' is {} but its meta is {}", where(graph), input.name,
             options.boundInputs[i].meta().toString(), metas[i].toString());
      }
      input.constant = options.boundInputs[i];
    }
  }

  const OpRegistry& registry = OpRegistry::instance();
  std::vector<bool> folded(out.nodes.size(), false);
  for (std::size_t n = 0; n < out.nodes.size(); ++n) {
    const Node& node = out.nodes[n];
    const OpSchema* schema = registry.schema(node.opType);
    if (schema == nullptr) {
      fail("{}: node '{}': operator {} is not supported", where(graph), node.name, node.opType);
    }
    std::vector<InputInfo> inputs;
    bool allLiteral = true;
    for (int v : node.inputs) {
      if (v == kNoValue) {
        inputs.emplace_back();
        continue;
      }
      const Value& value = out.values[static_cast<std::size_t>(v)];
      inputs.push_back(InputInfo{true, value.meta, value.constant.defined() ? &value.constant : nullptr});
      allLiteral = allLiteral && value.constant.defined() && (options.foldParameters || !isParameter(value));
    }

    if (node.outputs.size() == 1 && node.outputs[0] != kNoValue &&
        foldShapeQuery(node, inputs, out.values[static_cast<std::size_t>(node.outputs[0])])) {
      folded[n] = true;
      continue;
    }

    std::vector<TensorMeta> outputMetas;
    try {
      outputMetas = schema->inferShapes(ShapeContext{inputs, node.attrs, node.outputs.size(), node.name, node.opType});
      if (outputMetas.size() < node.outputs.size()) {
        fail("node '{}' ({}): shape inference gave {} outputs for {} declared", node.name, node.opType,
             outputMetas.size(), node.outputs.size());
      }
      for (const TensorMeta& meta : outputMetas) {
        if (!isStatic(meta.shape)) {
          fail("node '{}' ({}): output shape {} is not static", node.name, node.opType, shapeToString(meta.shape));
        }
      }
      for (std::size_t o = 0; o < node.outputs.size(); ++o) {
        if (node.outputs[o] != kNoValue) {
          out.values[static_cast<std::size_t>(node.outputs[o])].meta = outputMetas[o];
        }
      }
      if (schema->foldable && allLiteral && !node.inputs.empty()) {
        std::vector<const Tensor*> constants;
        for (const InputInfo& info : inputs) {
          constants.push_back(info.constant);
        }
        std::vector<Tensor> values = runOpEagerly(node.opType, constants, node.attrs, node.outputs.size(), false);
        for (std::size_t o = 0; o < node.outputs.size(); ++o) {
          if (node.outputs[o] != kNoValue) {
            out.values[static_cast<std::size_t>(node.outputs[o])].constant = values[o];
          }
        }
        folded[n] = true;
      } else if (node.inputs.empty() && schema->foldable) {  // Constant, and ConstantOfShape without input
        std::vector<Tensor> values = runOpEagerly(node.opType, {}, node.attrs, node.outputs.size(), false);
        for (std::size_t o = 0; o < node.outputs.size(); ++o) {
          if (node.outputs[o] != kNoValue) {
            out.values[static_cast<std::size_t>(node.outputs[o])].constant = values[o];
          }
        }
        folded[n] = true;
      }
    } catch (const Error& e) {
      fail("{}: {}", where(graph), e.what());
    }
  }

  std::vector<Node> kept;
  for (std::size_t n = 0; n < out.nodes.size(); ++n) {
    if (!folded[n]) {
      kept.push_back(std::move(out.nodes[n]));
    }
  }
  out.nodes = std::move(kept);
  for (std::size_t n = 0; n < out.nodes.size(); ++n) {
    for (int v : out.nodes[n].outputs) {
      if (v != kNoValue) {
        out.values[static_cast<std::size_t>(v)].producer = static_cast<int>(n);
      }
    }
  }
  for (Value& value : out.values) {
    if (value.constant.defined() && !value.isInitializer) {
      value.producer = kNoValue;
    }
  }
  return out;
}

Graph specializeForInputs(const Graph& graph, const std::vector<Tensor>& inputs, bool training) {
  SpecializeOptions options;
  options.training = training;
  for (const Tensor& input : inputs) {
    options.inputMetas.push_back(input.meta());
  }
  try {
    return specialize(graph, options);
  } catch (const Error& e) {
    if (std::string_view(e.what()).find("must be known when the plan is built") == std::string_view::npos) {
      throw;
    }
  }
  options.boundInputs = inputs;
  return specialize(graph, options);
}

}  // namespace strata
