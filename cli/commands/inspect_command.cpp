#include <map>
#include <set>

#include <fmt/format.h>

#include "commands/commands.h"
#include "common/format.h"
#include "common/model_options.h"
#include "plan/strategy_inspection.h"
#include "strata/graphs/flops.h"
#include "strata/graphs/lower.h"
#include "strata/graphs/specialize.h"
#include "strata/graphs/training_plan.h"
#include "strata/loaders/onnx_importer.h"
#include "strata/op_registry.h"

namespace strata::cli {
namespace {

// The training step's plan on the CPU as `strata train` builds it (a language model's loss over every position when
// the input is token ids and the scores [N, T, V]): its peak activation memory, forward and backward, and how many
// attention chains run fused (Note [Fused attention]: no [T, T] matrix kept).
void printTrainingPlan(const Graph& graph, const std::vector<TensorMeta>& inputs) {
  TrainingPlanOptions options;
  options.inputMetas = inputs;
  options.classAxisLast = takesTokensForScoresClassLast(graph, inputs);
  try {
    TrainingPlan plan(graph, options);
    const Graph& step = plan.trainingGraph().graph;
    int fused = 0;
    int written = 0;
    for (const Node& node : step.nodes) {
      fused += node.opType == "ScaledDotProductAttention" ? 1 : 0;
      written += node.opType == "Softmax" && node.phase == NodePhase::Forward ? 1 : 0;
    }
    const std::int64_t peak = plan.executor().program().peakActivationBytes;
    fmt::print("training step: peak activation memory {} ({} bytes), forward and backward", humanBytes(peak), peak);
    if (fused > 0) {
      options.fuseAttention = false;
      TrainingPlan writtenOut(graph, options);
      const std::int64_t unfused = writtenOut.executor().program().peakActivationBytes;
      fmt::print("; attention fused in {} of {} softmax chains (no [T, T] matrix kept; written out: {})", fused,
                 fused + written, humanBytes(unfused));
    }
    fmt::print("\n");
  } catch (const Error& e) {
    fmt::print("training step: no plan ({})\n", e.what());
  }
}

void inspect(const ModelOptions& options, const StrategyInspection& strategy) {
  checkStrategyInspection(strategy);
  applyThreads(options);
  const std::string path = options.modelPath.empty() ? defaultModelPath() : options.modelPath;
  const Graph graph = importOnnx(path, ImportOptions{.runChecker = true, .requireSupportedOps = false});

  if (graph.fileOpsetVersion != 0 && graph.fileOpsetVersion != graph.opsetVersion) {
    fmt::print("model: {} (opset {}, read as {})\n", path, graph.fileOpsetVersion, graph.opsetVersion);
  } else {
    fmt::print("model: {} (opset {})\n", path, graph.opsetVersion);
  }
  for (int id : graph.inputs) {
    const Value& v = graph.values[static_cast<std::size_t>(id)];
    fmt::print("input: {} {}\n", v.name, v.meta.toString());
  }

  // Batch-norm running statistics are float initializers too, but buffers, not trainable parameters.
  std::set<int> buffers;
  for (const Node& node : graph.nodes) {
    if (node.opType == "BatchNormalization" && node.inputs.size() >= 5) {
      buffers.insert(node.inputs[3]);
      buffers.insert(node.inputs[4]);
    }
  }
  std::int64_t paramCount = 0;
  std::int64_t paramBytes = 0;
  std::int64_t bufferBytes = 0;
  int paramTensors = 0;
  for (std::size_t id = 0; id < graph.values.size(); ++id) {
    const Value& v = graph.values[id];
    if (!v.isInitializer || !isFloatingPoint(v.meta.dtype)) {
      continue;
    }
    if (buffers.count(static_cast<int>(id)) != 0) {
      bufferBytes += static_cast<std::int64_t>(v.meta.bytes());
      continue;
    }
    paramCount += v.meta.numel();
    paramBytes += static_cast<std::int64_t>(v.meta.bytes());
    ++paramTensors;
  }
  fmt::print("parameters: {} ({}) in {} tensors; buffers (batch-norm statistics): {}\n", paramCount,
             humanBytes(paramBytes), paramTensors, humanBytes(bufferBytes));

  std::map<std::string, int> opCounts;
  std::map<std::string, int> unsupported;
  for (const Node& node : graph.nodes) {
    const std::string type =
        node.domain.empty() || node.domain == "ai.onnx" ? node.opType : node.domain + ":" + node.opType;
    ++opCounts[type];
    if (type != node.opType || !OpRegistry::instance().supports(node.opType, DeviceType::CPU)) {
      ++unsupported[type];
    }
  }
  fmt::print("ops ({} nodes, {} types):\n", graph.nodes.size(), opCounts.size());
  for (const auto& [type, count] : opCounts) {
    fmt::print("  {:<28} {:>6}  {}\n", type, count, unsupported.count(type) != 0 ? "UNSUPPORTED" : "supported");
  }
  if (!unsupported.empty()) {
    fmt::print("unsupported ops: {} type(s); the model cannot run until they are implemented\n", unsupported.size());
    return;
  }
  fmt::print("unsupported ops: none\n");

  SpecializeOptions specializeOptions;
  specializeOptions.inputMetas = inputMetasFromOptions(graph, options);
  const Graph specialised = specialize(graph, specializeOptions);
  for (int id : specialised.inputs) {
    const Value& v = specialised.values[static_cast<std::size_t>(id)];
    fmt::print("specialised input: {} {}\n", v.name, v.meta.toString());
  }
  for (int id : specialised.outputs) {
    const Value& v = specialised.values[static_cast<std::size_t>(id)];
    fmt::print("output: {} {}\n", v.name, v.meta.toString());
  }
  fmt::print("forward FLOPs: {} ({})\n", estimateForwardFlops(specialised),
             humanCount(static_cast<double>(estimateForwardFlops(specialised))));
  const Program program = lowerToProgram(specialised, LowerOptions{});
  fmt::print("plan: {} steps ({} nodes folded at load), peak activation memory {} ({} bytes)\n", program.steps.size(),
             graph.nodes.size() - specialised.nodes.size(), humanBytes(program.peakActivationBytes),
             program.peakActivationBytes);
  printTrainingPlan(graph, specializeOptions.inputMetas);
  printStrategyMemory(strategy, graph, specializeOptions.inputMetas);
}

}  // namespace

void addInspectCommand(CLI::App& app) {
  auto options = std::make_shared<ModelOptions>();
  auto strategy = std::make_shared<StrategyInspection>();
  CLI::App* command = app.add_subcommand(
      "inspect",
      "show a model's ops, parameters, FLOPs and plan memory; with --strategy fsdp --world-size N, the "
      "predicted per-rank memory of each sharding level");
  command->add_option("model", options->modelPath, "the .onnx file (default: the bundled CNN)");
  addModelOptions(*command, *options);
  addStrategyInspectionOptions(*command, *strategy);
  command->callback([options, strategy] { inspect(*options, *strategy); });
}

}  // namespace strata::cli
