#include "strata/graphs/lower.h"

#include <algorithm>
#include <unordered_map>

#include "strata/error.h"
#include "strata/op_registry.h"

namespace strata {
namespace {

// Maps graph value ids to program value ids, adding each value the first time it is used.
class ValueTable {
 public:
  ValueTable(const Graph& graph, Program& program, Device device) : graph_(graph), program_(program), device_(device) {}

  int operator()(int graphId) {
    if (graphId == kNoValue) {
      return -1;
    }
    auto [it, inserted] = ids_.try_emplace(graphId, static_cast<int>(program_.values.size()));
    if (inserted) {
      const Value& value = graph_.values[static_cast<std::size_t>(graphId)];
      program_.values.push_back(
          ProgramValue{value.name, value.meta, onDevice(value.constant), Tensor(), false, false, -1});
    }
    return it->second;
  }

 private:
  // Kernels read constants where they run: a plan for a GPU gets device copies (parameters that already live
  // there, as views of a device flat buffer, are used as they are).
  Tensor onDevice(const Tensor& constant) const {
    if (!constant.defined() || constant.device() == device_) {
      return constant;
    }
    const bool weights = isFloatingPoint(constant.dtype());
    return constant.to(device_, weights ? MemoryCategory::Parameters : MemoryCategory::Other);
  }

  const Graph& graph_;
  Program& program_;
  Device device_;
  std::unordered_map<int, int> ids_;
};

}  // namespace

Program lowerToProgram(const Graph& graph, const LowerOptions& options) {
  Program program;
  program.training = options.training;
  ValueTable table(graph, program, options.device);
  const OpRegistry& registry = OpRegistry::instance();
  const std::vector<std::vector<int>> consumers = graph.consumers();
  std::vector<bool> isGraphOutput(graph.values.size(), false);
  for (int id : graph.outputs) {
    isGraphOutput[static_cast<std::size_t>(id)] = true;
  }

  std::vector<bool> isBound(graph.values.size(), false);
  for (const auto* list : {&options.bindings, &options.gradientBindings}) {
    for (const auto& binding : *list) {
      isBound.at(static_cast<std::size_t>(binding.first)) = true;
    }
  }
  std::unordered_map<int, int> parameterIndex;  // graph value id -> parameter index
  for (std::size_t p = 0; p < options.parameters.size(); ++p) {
    parameterIndex.emplace(options.parameters[p], static_cast<int>(p));
  }

  for (int id : graph.inputs) {
    const int pid = table(id);
    program.values[static_cast<std::size_t>(pid)].isInput = true;
    program.inputs.push_back(pid);
  }

  for (const Node& node : graph.nodes) {
    const KernelFactory* factory = registry.kernel(node.opType, options.device.type);
    if (factory == nullptr) {
      fail("{}: node '{}': operator {} has no kernel for {}", graph.sourcePath, node.name, node.opType,
           options.device.toString());
    }
    ProgramStep step;
    step.nodeName = node.name;
    step.opType = node.opType;
    step.phase = node.phase;
    step.sourceNode = node.phase == NodePhase::Backward ? node.gradientOf : static_cast<int>(program.steps.size());
    std::vector<InputInfo> inputInfos;
    for (int v : node.inputs) {
      step.inputs.push_back(table(v));
      const auto parameter = parameterIndex.find(v);
      if (parameter != parameterIndex.end() && std::find(step.parametersRead.begin(), step.parametersRead.end(),
                                                         parameter->second) == step.parametersRead.end()) {
        step.parametersRead.push_back(parameter->second);
      }
      if (v == kNoValue) {
        inputInfos.emplace_back();
      } else {
        const Value& value = graph.values[static_cast<std::size_t>(v)];
        inputInfos.push_back(InputInfo{true, value.meta, value.constant.defined() ? &value.constant : nullptr});
      }
    }
    std::vector<TensorMeta> outputMetas;
    for (std::size_t o = 0; o < node.outputs.size(); ++o) {
      const int v = node.outputs[o];
      // Output 0 is always materialised; optional extra outputs only when something reads them.
      const bool used =
          v != kNoValue && (o == 0 || !consumers[static_cast<std::size_t>(v)].empty() ||
                            isGraphOutput[static_cast<std::size_t>(v)] || isBound[static_cast<std::size_t>(v)]);
      step.outputs.push_back(used ? table(v) : -1);
      outputMetas.push_back(v == kNoValue ? TensorMeta{} : graph.values[static_cast<std::size_t>(v)].meta);
    }
    try {
      step.kernel = (*factory)(KernelInit{inputInfos, outputMetas, node.attrs, node.name, options.training});
    } catch (const Error& e) {
      fail("{}: node '{}' ({}): {}", graph.sourcePath, node.name, node.opType, e.what());
    }
    program.steps.push_back(std::move(step));
  }
  for (int id : graph.outputs) {
    program.outputs.push_back(table(id));
  }
  auto bind = [&](int valueId, const Tensor& tensor) -> ProgramValue& {
    ProgramValue& value = program.values[static_cast<std::size_t>(table(valueId))];
    if (tensor.meta() != value.meta) {
      fail("{}: value '{}' is {} but was bound to a tensor of {}", graph.sourcePath, value.name, value.meta.toString(),
           tensor.meta().toString());
    }
    value.bound = tensor;
    return value;
  };
  for (const auto& [valueId, tensor] : options.bindings) {
    bind(valueId, tensor);
  }
  for (const auto& [valueId, tensor] : options.gradientBindings) {
    bind(valueId, tensor).gradient = true;
  }
  for (std::size_t p = 0; p < options.gradientReadyAfterNode.size(); ++p) {
    const int node = options.gradientReadyAfterNode[p];
    if (node >= 0) {
      program.steps[static_cast<std::size_t>(node)].gradientsReady.push_back(static_cast<int>(p));
    }
  }

  // Note [Views without copies]: a Reshape, Flatten, Squeeze or Unsqueeze of an activation on the CPU hands on a view
  // of its input's storage instead of copying it (these ops only rename the dims of contiguous bytes; the copies
  // were a few percent of a language model's step). Only activations a step produced and no bound output (a flat
  // gradient view is written, not aliased); a CUDA plan keeps its copies (its recorded replays fix addresses).
  const auto root = [&](int v) {
    while (program.values[static_cast<std::size_t>(v)].viewOf >= 0) {
      v = program.values[static_cast<std::size_t>(v)].viewOf;
    }
    return v;
  };
  {
    std::vector<bool> produced(program.values.size(), false);
    for (ProgramStep& step : program.steps) {
      static const char* const kViews[] = {"Reshape", "Flatten", "Squeeze", "Unsqueeze"};
      const bool viewOp =
          std::any_of(std::begin(kViews), std::end(kViews), [&](const char* type) { return step.opType == type; });
      if (viewOp && options.device.type == DeviceType::CPU && !step.inputs.empty() && step.inputs[0] >= 0 &&
          step.outputs.size() == 1 && step.outputs[0] >= 0 && produced[static_cast<std::size_t>(step.inputs[0])]) {
        ProgramValue& out = program.values[static_cast<std::size_t>(step.outputs[0])];
        const ProgramValue& in = program.values[static_cast<std::size_t>(step.inputs[0])];
        const auto known = [](const Shape& shape) {
          return std::all_of(shape.begin(), shape.end(), [](std::int64_t d) { return d >= 0; });
        };
        if (!out.bound.defined() && !in.bound.defined() && !in.isInput && !in.constant.defined() &&
            known(in.meta.shape) && known(out.meta.shape) && out.meta.bytes() == in.meta.bytes()) {
          out.viewOf = root(step.inputs[0]);
          step.viewsInput = true;
        }
      }
      for (int v : step.outputs) {
        if (v >= 0) {
          produced[static_cast<std::size_t>(v)] = true;
        }
      }
    }
  }

  // Liveness: an intermediate value (produced by a step, not a graph output) is released after its last reader; a
  // storage shared by views after the last reader of any of them (each view is released there too).
  std::vector<int> lastUse(program.values.size(), -1);
  std::vector<int> producedAt(program.values.size(), -1);
  for (std::size_t s = 0; s < program.steps.size(); ++s) {
    for (int v : program.steps[s].inputs) {
      if (v >= 0) {
        lastUse[static_cast<std::size_t>(v)] = static_cast<int>(s);
      }
    }
    for (int v : program.steps[s].outputs) {
      if (v >= 0) {
        producedAt[static_cast<std::size_t>(v)] = static_cast<int>(s);
      }
    }
  }
  std::vector<bool> keep(program.values.size(), false);
  for (int v : program.outputs) {
    keep[static_cast<std::size_t>(v)] = true;
  }
  std::vector<int> groupRelease(program.values.size(), -1);
  std::vector<bool> groupKept(program.values.size(), false);
  for (std::size_t v = 0; v < program.values.size(); ++v) {
    if (producedAt[v] < 0 || program.values[v].bound.defined()) {
      continue;
    }
    const auto r = static_cast<std::size_t>(root(static_cast<int>(v)));
    groupRelease[r] = std::max(groupRelease[r], std::max(lastUse[v], producedAt[v]));
    groupKept[r] = groupKept[r] || keep[v];
  }
  for (std::size_t v = 0; v < program.values.size(); ++v) {
    if (producedAt[v] < 0 || keep[v] || program.values[v].bound.defined()) {
      continue;
    }
    const auto r = static_cast<std::size_t>(root(static_cast<int>(v)));
    if (groupKept[r] && r == v) {
      continue;  // a view of it is a graph output: the storage outlives the run
    }
    program.steps[static_cast<std::size_t>(groupRelease[r])].releaseAfter.push_back(static_cast<int>(v));
  }

  std::int64_t live = 0;
  for (const ProgramStep& step : program.steps) {
    for (int v : step.outputs) {
      if (v >= 0 && !program.values[static_cast<std::size_t>(v)].bound.defined()) {
        live += storageBytes(program.values[static_cast<std::size_t>(v)]);
      }
    }
    program.peakActivationBytes = std::max(program.peakActivationBytes, live);
    for (int v : step.releaseAfter) {
      live -= storageBytes(program.values[static_cast<std::size_t>(v)]);
    }
  }
  return program;
}

}  // namespace strata
