#include "opset_downgrade.h"

#include <algorithm>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "onnx_tensor.h"
#include "strata/error.h"

namespace strata {
namespace {

// What changed in an op's version `since` (18..23), Note [Opsets above 17].
enum class Change {
  TypesOnly,        // new tensor types only: the node is the same at 17
  ReduceAxesInput,  // Reduce*-18: axes an input instead of an attribute, noop_with_empty_axes added
  PoolDilations,    // AveragePool-19, LpPool-18: dilations (and LpPool's ceil_mode) added
  CastSaturate,     // Cast-19, CastLike-19: saturate added (it only matters for 8-bit floats)
  PadAxes,          // Pad-18: an axes input; Pad-19: mode "wrap"
  ResizeOptions,    // Resize-18/19: antialias, axes, keep_aspect_ratio_policy, half_pixel_symmetric
  SplitOutputs,     // Split-18: num_outputs
  ScatterMinMax,    // ScatterElements-18, ScatterND-18: reduction "max" and "min"
  Gelu,             // new in 20: x * Phi(x), exact or tanh-approximated
  Mish,             // new in 18: x * tanh(softplus(x))
  NoForm,           // a new op, or a change opset 17 cannot express
};

struct OpChange {
  std::string_view op;
  std::int64_t since;
  Change change;
};

// From ONNX's operator changelog (opsets 18 to 23). Ops not listed did not change after 17.
constexpr OpChange kChanges[] = {
    {"Acos", 22, Change::TypesOnly},
    {"Acosh", 22, Change::TypesOnly},
    {"AffineGrid", 20, Change::NoForm},
    {"Asin", 22, Change::TypesOnly},
    {"Asinh", 22, Change::TypesOnly},
    {"Atan", 22, Change::TypesOnly},
    {"Atanh", 22, Change::TypesOnly},
    {"Attention", 23, Change::NoForm},
    {"AveragePool", 19, Change::PoolDilations},
    {"AveragePool", 22, Change::TypesOnly},
    {"Bernoulli", 22, Change::TypesOnly},
    {"BitwiseAnd", 18, Change::NoForm},
    {"BitwiseNot", 18, Change::NoForm},
    {"BitwiseOr", 18, Change::NoForm},
    {"BitwiseXor", 18, Change::NoForm},
    {"Cast", 19, Change::CastSaturate},
    {"Cast", 21, Change::TypesOnly},
    {"Cast", 23, Change::TypesOnly},
    {"CastLike", 19, Change::CastSaturate},
    {"CastLike", 21, Change::TypesOnly},
    {"CastLike", 23, Change::TypesOnly},
    {"CenterCropPad", 18, Change::NoForm},
    {"Col2Im", 18, Change::NoForm},
    {"Constant", 19, Change::TypesOnly},
    {"Constant", 21, Change::TypesOnly},
    {"Constant", 23, Change::TypesOnly},
    {"ConstantOfShape", 20, Change::TypesOnly},
    {"ConstantOfShape", 21, Change::TypesOnly},
    {"ConstantOfShape", 23, Change::TypesOnly},
    {"Conv", 22, Change::TypesOnly},
    {"ConvTranspose", 22, Change::TypesOnly},
    {"Cos", 22, Change::TypesOnly},
    {"Cosh", 22, Change::TypesOnly},
    {"DFT", 20, Change::NoForm},
    {"DeformConv", 19, Change::NoForm},
    {"DequantizeLinear", 19, Change::NoForm},
    {"Det", 22, Change::TypesOnly},
    {"Dropout", 22, Change::TypesOnly},
    {"Elu", 22, Change::TypesOnly},
    {"Equal", 19, Change::TypesOnly},
    {"EyeLike", 22, Change::TypesOnly},
    {"Flatten", 21, Change::TypesOnly},
    {"Flatten", 23, Change::TypesOnly},
    {"GRU", 22, Change::TypesOnly},
    {"Gelu", 20, Change::Gelu},
    {"GlobalAveragePool", 22, Change::TypesOnly},
    {"GlobalLpPool", 22, Change::TypesOnly},
    {"GlobalMaxPool", 22, Change::TypesOnly},
    {"GridSample", 20, Change::NoForm},
    {"GroupNormalization", 18, Change::NoForm},
    {"HardSigmoid", 22, Change::TypesOnly},
    {"HardSwish", 22, Change::TypesOnly},
    {"Identity", 19, Change::TypesOnly},
    {"Identity", 21, Change::TypesOnly},
    {"Identity", 23, Change::TypesOnly},
    {"If", 19, Change::TypesOnly},
    {"If", 21, Change::TypesOnly},
    {"If", 23, Change::TypesOnly},
    {"ImageDecoder", 20, Change::NoForm},
    {"InstanceNormalization", 22, Change::TypesOnly},
    {"IsInf", 20, Change::TypesOnly},
    {"IsNaN", 20, Change::TypesOnly},
    {"LSTM", 22, Change::TypesOnly},
    {"Loop", 19, Change::TypesOnly},
    {"Loop", 21, Change::TypesOnly},
    {"Loop", 23, Change::TypesOnly},
    {"LpNormalization", 22, Change::TypesOnly},
    {"LpPool", 18, Change::PoolDilations},
    {"LpPool", 22, Change::TypesOnly},
    {"MaxPool", 22, Change::TypesOnly},
    {"MaxRoiPool", 22, Change::TypesOnly},
    {"MaxUnpool", 22, Change::TypesOnly},
    {"Mish", 18, Change::Mish},
    {"Mish", 22, Change::TypesOnly},
    {"Multinomial", 22, Change::TypesOnly},
    {"NegativeLogLikelihoodLoss", 22, Change::TypesOnly},
    {"OptionalGetElement", 18, Change::NoForm},
    {"OptionalHasElement", 18, Change::NoForm},
    {"Pad", 18, Change::PadAxes},
    {"Pad", 19, Change::PadAxes},
    {"Pad", 21, Change::TypesOnly},
    {"Pad", 23, Change::TypesOnly},
    {"QLinearMatMul", 21, Change::NoForm},
    {"QuantizeLinear", 19, Change::NoForm},
    {"RMSNormalization", 23, Change::NoForm},
    {"RNN", 22, Change::TypesOnly},
    {"RandomNormal", 22, Change::TypesOnly},
    {"RandomNormalLike", 22, Change::TypesOnly},
    {"RandomUniform", 22, Change::TypesOnly},
    {"RandomUniformLike", 22, Change::TypesOnly},
    {"ReduceL1", 18, Change::ReduceAxesInput},
    {"ReduceL2", 18, Change::ReduceAxesInput},
    {"ReduceLogSum", 18, Change::ReduceAxesInput},
    {"ReduceLogSumExp", 18, Change::ReduceAxesInput},
    {"ReduceMax", 18, Change::ReduceAxesInput},
    {"ReduceMax", 20, Change::TypesOnly},
    {"ReduceMean", 18, Change::ReduceAxesInput},
    {"ReduceMin", 18, Change::ReduceAxesInput},
    {"ReduceMin", 20, Change::TypesOnly},
    {"ReduceProd", 18, Change::ReduceAxesInput},
    {"ReduceSumSquare", 18, Change::ReduceAxesInput},
    {"RegexFullMatch", 20, Change::NoForm},
    {"Reshape", 19, Change::TypesOnly},
    {"Reshape", 21, Change::TypesOnly},
    {"Reshape", 23, Change::TypesOnly},
    {"Resize", 18, Change::ResizeOptions},
    {"Resize", 19, Change::ResizeOptions},
    {"RoiAlign", 22, Change::TypesOnly},
    {"RotaryEmbedding", 23, Change::NoForm},
    {"Round", 22, Change::TypesOnly},
    {"Scan", 19, Change::TypesOnly},
    {"Scan", 21, Change::TypesOnly},
    {"Scan", 23, Change::TypesOnly},
    {"ScatterElements", 18, Change::ScatterMinMax},
    {"ScatterND", 18, Change::ScatterMinMax},
    {"Selu", 22, Change::TypesOnly},
    {"Shape", 19, Change::TypesOnly},
    {"Shape", 21, Change::TypesOnly},
    {"Shape", 23, Change::TypesOnly},
    {"Sin", 22, Change::TypesOnly},
    {"Sinh", 22, Change::TypesOnly},
    {"Size", 19, Change::TypesOnly},
    {"Size", 21, Change::TypesOnly},
    {"Size", 23, Change::TypesOnly},
    {"Softplus", 22, Change::TypesOnly},
    {"Softsign", 22, Change::TypesOnly},
    {"Split", 18, Change::SplitOutputs},
    {"Squeeze", 21, Change::TypesOnly},
    {"Squeeze", 23, Change::TypesOnly},
    {"StringConcat", 20, Change::NoForm},
    {"StringSplit", 20, Change::NoForm},
    {"Tan", 22, Change::TypesOnly},
    {"ThresholdedRelu", 22, Change::TypesOnly},
    {"Transpose", 21, Change::TypesOnly},
    {"Transpose", 23, Change::TypesOnly},
    {"Unsqueeze", 21, Change::TypesOnly},
    {"Unsqueeze", 23, Change::TypesOnly},
};

const onnx::AttributeProto* findAttribute(const onnx::NodeProto& node, std::string_view name) {
  for (const auto& attribute : node.attribute()) {
    if (attribute.name() == name) {
      return &attribute;
    }
  }
  return nullptr;
}

void removeAttribute(onnx::NodeProto& node, std::string_view name) {
  auto* attributes = node.mutable_attribute();
  for (int i = 0; i < attributes->size(); ++i) {
    if (attributes->Get(i).name() == name) {
      attributes->DeleteSubrange(i, 1);
      return;
    }
  }
}

std::int64_t intAttribute(const onnx::NodeProto& node, std::string_view name, std::int64_t otherwise) {
  const onnx::AttributeProto* attribute = findAttribute(node, name);
  return attribute != nullptr ? attribute->i() : otherwise;
}

std::string stringAttribute(const onnx::NodeProto& node, std::string_view name, const std::string& otherwise) {
  const onnx::AttributeProto* attribute = findAttribute(node, name);
  return attribute != nullptr ? attribute->s() : otherwise;
}

void keepFirstInput(onnx::NodeProto& node) {
  if (node.input_size() > 1) {
    node.mutable_input()->DeleteSubrange(1, node.input_size() - 1);
  }
}

// The node's name for errors and derived names: its own, else its first output's (a fuzzed node may have neither).
std::string nodeLabel(const onnx::NodeProto& node) {
  if (!node.name().empty()) {
    return node.name();
  }
  return node.output_size() > 0 ? node.output(0) : node.op_type();
}

bool hasInput(const onnx::NodeProto& node, int index) {
  return node.input_size() > index && !node.input(index).empty();
}

class Downgrade {
 public:
  Downgrade(onnx::ModelProto& model, const std::filesystem::path& file, std::int64_t opset)
      : model_(model), file_(file), opset_(opset) {
    for (const auto& initializer : model.graph().initializer()) {
      constants_[initializer.name()] = &initializer;
    }
    for (const auto& node : model.graph().node()) {
      if (node.op_type() == "Constant" && node.output_size() == 1) {
        if (const onnx::AttributeProto* value = findAttribute(node, "value"); value != nullptr && value->has_t()) {
          constants_[node.output(0)] = &value->t();
        }
      }
    }
  }

  void run() {
    google::protobuf::RepeatedPtrField<onnx::NodeProto> rewritten;
    for (const auto& original : model_.graph().node()) {
      onnx::NodeProto node = original;
      bool replaced = false;
      const bool defaultDomain = node.domain().empty() || node.domain() == "ai.onnx";
      for (const OpChange& change : kChanges) {
        if (defaultDomain && change.op == node.op_type() && change.since <= opset_) {
          replaced = apply(change, node, rewritten) || replaced;
        }
      }
      if (!replaced) {
        *rewritten.Add() = std::move(node);
      }
    }
    model_.mutable_graph()->mutable_node()->Swap(&rewritten);
    for (auto& import : *model_.mutable_opset_import()) {
      if (import.domain().empty() || import.domain() == "ai.onnx") {
        import.set_version(17);
      }
    }
  }

 private:
  // Rewrites `node` in place for `change`; returns true when it emitted the node's replacement into `out` itself.
  bool apply(const OpChange& change, onnx::NodeProto& node, google::protobuf::RepeatedPtrField<onnx::NodeProto>& out) {
    switch (change.change) {
      case Change::TypesOnly:
        return false;
      case Change::ReduceAxesInput:
        reduceAxesToAttribute(node);
        return false;
      case Change::PoolDilations:
        if (const onnx::AttributeProto* dilations = findAttribute(node, "dilations"); dilations != nullptr) {
          if (std::any_of(dilations->ints().begin(), dilations->ints().end(), [](std::int64_t d) { return d != 1; })) {
            noForm(node, change, "dilations other than 1");
          }
          removeAttribute(node, "dilations");
        }
        if (node.op_type() == "LpPool") {
          if (intAttribute(node, "ceil_mode", 0) != 0) {
            noForm(node, change, "ceil_mode=1");
          }
          removeAttribute(node, "ceil_mode");
        }
        return false;
      case Change::CastSaturate:
        removeAttribute(node, "saturate");
        return false;
      case Change::PadAxes:
        if (hasInput(node, 3)) {
          noForm(node, change, "an axes input");
        }
        if (stringAttribute(node, "mode", "constant") == "wrap") {
          noForm(node, change, "mode \"wrap\"");
        }
        return false;
      case Change::ResizeOptions:
        if (intAttribute(node, "antialias", 0) != 0) {
          noForm(node, change, "antialias=1");
        }
        if (findAttribute(node, "axes") != nullptr) {
          noForm(node, change, "an axes attribute");
        }
        if (stringAttribute(node, "keep_aspect_ratio_policy", "stretch") != "stretch") {
          noForm(node, change, "a keep_aspect_ratio_policy other than \"stretch\"");
        }
        if (stringAttribute(node, "coordinate_transformation_mode", "half_pixel") == "half_pixel_symmetric") {
          noForm(node, change, "coordinate_transformation_mode \"half_pixel_symmetric\"");
        }
        for (const char* name : {"antialias", "keep_aspect_ratio_policy"}) {
          removeAttribute(node, name);
        }
        return false;
      case Change::SplitOutputs:
        if (findAttribute(node, "num_outputs") != nullptr) {
          noForm(node, change, "num_outputs (opset 17 needs the sizes as a 'split' input)");
        }
        return false;
      case Change::ScatterMinMax: {
        const std::string reduction = stringAttribute(node, "reduction", "none");
        if (reduction == "max" || reduction == "min") {
          noForm(node, change, "reduction \"" + reduction + "\"");
        }
        return false;
      }
      case Change::Gelu:
      case Change::Mish:
        if (!hasInput(node, 0) || node.output_size() != 1 || node.output(0).empty()) {
          noForm(node, change, "other than one input and one output");
        }
        change.change == Change::Gelu ? spellGelu(node, out) : spellMish(node, out);
        return true;
      case Change::NoForm:
        noForm(node, change, "an op opset 17 does not have");
    }
    return false;
  }

  [[noreturn]] void noForm(const onnx::NodeProto& node, const OpChange& change, const std::string& what) const {
    fail(
        "{}: node '{}' ({} of opset {}) uses {}, which opset 17 cannot express (Strata rewrites opsets 18..{} as 17 "
        "for its ONNX library, 1.12); export at opset 17: PyTorch's torch.onnx.export(..., opset_version=17, "
        "dynamo=False)",
        file_.string(), nodeLabel(node), node.op_type(), change.since, what, kNewestDowngradableOpset);
  }

  void reduceAxesToAttribute(onnx::NodeProto& node) {
    const bool noopWithEmptyAxes = intAttribute(node, "noop_with_empty_axes", 0) != 0;
    removeAttribute(node, "noop_with_empty_axes");
    if (!hasInput(node, 1)) {
      if (noopWithEmptyAxes) {  // no axes and "do nothing": the identity
        node.set_op_type("Identity");
        node.clear_attribute();
      }
      keepFirstInput(node);
      return;
    }
    auto it = constants_.find(node.input(1));
    if (it == constants_.end()) {
      noForm(node, OpChange{node.op_type(), 18, Change::ReduceAxesInput},
             "an axes input '" + node.input(1) + "' that is computed, not a constant");
    }
    const Tensor axes = detail::tensorFromProto(
        *it->second, file_.string() + ": axes of node '" + nodeLabel(node) + "'", file_.parent_path());
    if (axes.dtype() != DType::Int64) {
      noForm(node, OpChange{node.op_type(), 18, Change::ReduceAxesInput}, "axes that are not int64");
    }
    keepFirstInput(node);
    if (axes.numel() == 0) {
      if (noopWithEmptyAxes) {
        node.set_op_type("Identity");
        node.clear_attribute();
      }
      return;  // empty axes without noop: every axis, as opset 17's default
    }
    auto* attribute = node.add_attribute();
    attribute->set_name("axes");
    attribute->set_type(onnx::AttributeProto::INTS);
    for (std::int64_t i = 0; i < axes.numel(); ++i) {
      attribute->add_ints(axes.data<std::int64_t>()[i]);
    }
  }

  // A fresh value name derived from `base`.
  std::string fresh(const std::string& base, std::string_view what) {
    return base + "/opset17_" + std::string(what) + "_" + std::to_string(counter_++);
  }

  onnx::NodeProto& emit(google::protobuf::RepeatedPtrField<onnx::NodeProto>& out, const std::string& op,
                        std::vector<std::string> inputs, const std::string& output, const std::string& name) {
    onnx::NodeProto& node = *out.Add();
    node.set_op_type(op);
    node.set_name(name);
    for (auto& input : inputs) {
      node.add_input(std::move(input));
    }
    node.add_output(output);
    return node;
  }

  // A float scalar constant cast like `like` (float16, bfloat16, float or double alike).
  std::string scalarLike(google::protobuf::RepeatedPtrField<onnx::NodeProto>& out, const std::string& like, float value,
                         const std::string& base) {
    const std::string raw = fresh(base, "constant");
    onnx::NodeProto& constant = emit(out, "Constant", {}, raw, raw);
    auto* attribute = constant.add_attribute();
    attribute->set_name("value");
    attribute->set_type(onnx::AttributeProto::TENSOR);
    attribute->mutable_t()->set_data_type(onnx::TensorProto::FLOAT);
    attribute->mutable_t()->add_float_data(value);
    const std::string cast = fresh(base, "cast");
    emit(out, "CastLike", {raw, like}, cast, cast);
    return cast;
  }

  // Gelu-20: approximate "none": 0.5 x (1 + erf(x / sqrt 2)); "tanh": 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715
  // x^3))).
  void spellGelu(const onnx::NodeProto& node, google::protobuf::RepeatedPtrField<onnx::NodeProto>& out) {
    const std::string approximate = stringAttribute(node, "approximate", "none");
    if (approximate != "none" && approximate != "tanh") {
      noForm(node, OpChange{"Gelu", 20, Change::Gelu}, "approximate \"" + approximate + "\"");
    }
    const std::string& x = node.input(0);
    const std::string base = nodeLabel(node);
    auto step = [&](const std::string& op, std::vector<std::string> inputs) {
      const std::string value = fresh(base, op);
      emit(out, op, std::move(inputs), value, value);
      return value;
    };
    std::string phi;  // 1 + erf(...) or 1 + tanh(...)
    if (approximate == "none") {
      const std::string scaled = step("Mul", {x, scalarLike(out, x, 0.70710678118654752f, base)});
      phi = step("Add", {step("Erf", {scaled}), scalarLike(out, x, 1.0f, base)});
    } else {
      const std::string cube = step("Mul", {step("Mul", {x, x}), x});
      const std::string inner = step("Add", {x, step("Mul", {cube, scalarLike(out, x, 0.044715f, base)})});
      const std::string scaled = step("Mul", {inner, scalarLike(out, x, 0.79788456080286536f, base)});
      phi = step("Add", {step("Tanh", {scaled}), scalarLike(out, x, 1.0f, base)});
    }
    // (x * phi) * 0.5, the order PyTorch's exporter writes, so Note [Gelu fusion] runs the erf form as one Gelu
    // (halving is exact, so the order does not change a bit).
    const std::string product = step("Mul", {x, phi});
    emit(out, "Mul", {product, scalarLike(out, x, 0.5f, base)}, node.output(0), base);
  }

  // Mish-18: x tanh(softplus(x)).
  void spellMish(const onnx::NodeProto& node, google::protobuf::RepeatedPtrField<onnx::NodeProto>& out) {
    const std::string base = nodeLabel(node);
    const std::string softplus = fresh(base, "Softplus");
    emit(out, "Softplus", {node.input(0)}, softplus, softplus);
    const std::string tanh = fresh(base, "Tanh");
    emit(out, "Tanh", {softplus}, tanh, tanh);
    emit(out, "Mul", {node.input(0), tanh}, node.output(0), base);
  }

  onnx::ModelProto& model_;
  const std::filesystem::path& file_;
  std::int64_t opset_;
  std::map<std::string, const onnx::TensorProto*> constants_;
  int counter_ = 0;
};

}  // namespace

void downgradeToOpset17(onnx::ModelProto& model, const std::filesystem::path& file, std::int64_t opset) {
  STRATA_CHECK(opset > 17 && opset <= kNewestDowngradableOpset, "downgradeToOpset17: {} has opset {}, not 18..{}",
               file.string(), opset, kNewestDowngradableOpset);
  Downgrade(model, file, opset).run();
}

}  // namespace strata
