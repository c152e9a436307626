#include "strata/graphs/autocast.h"

#include <set>
#include <string>

#include "strata/error.h"
#include "strata/op_registry.h"

namespace strata {
namespace {

// Matrix products gain the most from 16-bit tensor cores and accumulate in float32 on every backend.
const std::set<std::string, std::less<>> kLowPrecisionOps = {"Conv", "ConvTranspose", "Gemm", "MatMul"};
// Ops that round nothing a float32 run would keep (max, sign tests, copies), add two 16-bit values, or normalise
// 16-bit data with float32 statistics (batch norm: its schema names the operands that take 16 bits).
const std::set<std::string, std::less<>> kFollowOps = {
    "Relu",      "MaxPool",  "Add",       "Reshape", "Flatten",           "Squeeze",
    "Unsqueeze", "Identity", "Transpose", "Concat",  "BatchNormalization"};

class Autocaster {
 public:
  Autocaster(const Graph& graph, DType low) : in_(graph), out_(graph), low_(low), forms_(graph.values.size()) {
    out_.nodes.clear();
    for (std::size_t v = 0; v < forms_.size(); ++v) {
      forms_[v].wide = static_cast<int>(v);
    }
  }

  Graph run() {
    for (const Node& node : in_.nodes) {
      rewrite(node);
    }
    for (int& output : out_.outputs) {
      output = wideForm(output, NodePhase::Forward);
    }
    for (Value& value : out_.values) {
      value.producer = kNoValue;
    }
    for (std::size_t n = 0; n < out_.nodes.size(); ++n) {
      for (int output : out_.nodes[n].outputs) {
        if (output != kNoValue) {
          out_.values[static_cast<std::size_t>(output)].producer = static_cast<int>(n);
        }
      }
    }
    return std::move(out_);
  }

 private:
  // Where a float32 value of the input graph lives: its own id (float32) and a 16-bit id, each kNoValue until
  // something produces it.
  struct Forms {
    int wide = kNoValue;
    int low = kNoValue;
    bool producedLow = false;  // its producer ran in 16 bits; the float32 form, if any, is a Cast of it
  };

  bool isFloat32(int v) const {
    return v != kNoValue && in_.values[static_cast<std::size_t>(v)].meta.dtype == DType::Float32;
  }

  bool isOtherFloat(int v) const {
    if (v == kNoValue) {
      return false;
    }
    const DType dtype = in_.values[static_cast<std::size_t>(v)].meta.dtype;
    return isFloatingPoint(dtype) && dtype != DType::Float32;
  }

  // The schema of a node that runs in 16 bits, or nullptr when it stays in float32: a LowPrecision op with a
  // float32 input, or a Follow op whose float32 data inputs all come from 16-bit producers.
  const OpSchema* lowPrecisionSchema(const Node& node) const {
    const AutocastClass cls = autocastClassOf(node.opType);
    const OpSchema* schema = OpRegistry::instance().schema(node.opType);
    if (cls == AutocastClass::Float32 || schema == nullptr || !schema->lowPrecision) {
      return nullptr;
    }
    bool anyFloat = false;
    for (std::size_t i = 0; i < node.inputs.size(); ++i) {
      const int v = node.inputs[i];
      if (isOtherFloat(v)) {
        return nullptr;  // float64 and 16-bit models keep their own precision
      }
      if (isFloat32(v) && isLowPrecisionSlot(schema->lowPrecisionInputs, i)) {
        anyFloat = true;
        if (cls == AutocastClass::Follow && !forms_[static_cast<std::size_t>(v)].producedLow) {
          return nullptr;  // a float32 operand: promote, as PyTorch does
        }
      }
    }
    return anyFloat ? schema : nullptr;
  }

  void rewrite(const Node& node) {
    const OpSchema* schema = lowPrecisionSchema(node);
    const bool low = schema != nullptr;
    Node copy = node;
    for (std::size_t i = 0; i < copy.inputs.size(); ++i) {
      int& input = copy.inputs[i];
      if (isFloat32(input)) {
        const bool takesLow = low && isLowPrecisionSlot(schema->lowPrecisionInputs, i);
        input = takesLow ? lowForm(input, node.phase) : wideForm(input, node.phase);
      }
    }
    if (low) {
      for (std::size_t o = 0; o < copy.outputs.size(); ++o) {
        int& output = copy.outputs[o];
        if (isFloat32(output) && isLowPrecisionSlot(schema->lowPrecisionOutputs, o)) {
          Forms& forms = forms_[static_cast<std::size_t>(output)];
          forms = Forms{.wide = kNoValue, .low = addLowValue(output), .producedLow = true};
          output = forms.low;
        }
      }
    }
    out_.nodes.push_back(std::move(copy));
  }

  int addLowValue(int v) {
    Value value = in_.values[static_cast<std::size_t>(v)];
    value.name += std::string("/") + std::string(dtypeName(low_));
    value.meta.dtype = low_;
    value.constant = Tensor();
    value.isInitializer = false;
    return out_.addValue(std::move(value));
  }

  int lowForm(int v, NodePhase phase) {
    Forms& forms = forms_[static_cast<std::size_t>(v)];
    if (forms.low == kNoValue) {
      forms.low = addLowValue(v);
      emitCast(v, v, forms.low, low_, phase);
    }
    return forms.low;
  }

  // The float32 form is the input graph's own id, so outputs, the loss and parameters keep their ids.
  int wideForm(int v, NodePhase phase) {
    Forms& forms = forms_[static_cast<std::size_t>(v)];
    if (forms.wide == kNoValue) {
      forms.wide = v;
      emitCast(v, forms.low, v, DType::Float32, phase);
    }
    return forms.wide;
  }

  // A Cast of value `original` (an id of the input graph) from one of its forms to the other.
  void emitCast(int original, int from, int to, DType dtype, NodePhase phase) {
    Node cast;
    cast.name = fmt::format("autocast/{}/to_{}", in_.values[static_cast<std::size_t>(original)].name, dtypeName(dtype));
    cast.opType = "Cast";
    cast.inputs = {from};
    cast.outputs = {to};
    cast.attrs.set("to", static_cast<std::int64_t>(dtypeToOnnx(dtype)));
    cast.phase = phase;
    out_.nodes.push_back(std::move(cast));
  }

  const Graph& in_;
  Graph out_;
  DType low_;
  std::vector<Forms> forms_;  // per value id of the input graph
};

}  // namespace

AutocastClass autocastClassOf(const std::string& opType) {
  if (kLowPrecisionOps.contains(opType)) {
    return AutocastClass::LowPrecision;
  }
  if (kFollowOps.contains(opType)) {
    return AutocastClass::Follow;
  }
  return AutocastClass::Float32;
}

Graph autocast(const Graph& graph, DType low) {
  STRATA_CHECK(low == DType::Float16 || low == DType::BFloat16, "autocast to {}: expected float16 or bfloat16",
               dtypeName(low));
  return Autocaster(graph, low).run();
}

}  // namespace strata
