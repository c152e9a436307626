#include <algorithm>
#include <filesystem>

#include <fmt/format.h>

#include "commands/commands.h"
#include "common/device_selection.h"
#include "common/model_options.h"
#include "strata/graphs/training_plan.h"
#include "strata/loaders/onnx_importer.h"
#include "strata/loaders/tensor_proto_io.h"
#include "strata/optim/optimizer.h"

namespace strata::cli {
namespace {

struct StepOptions {
  ModelOptions model;
  std::vector<std::string> inputFiles;
  std::string labelsFile;
  std::string dumpDir;
  std::string loss = "cross-entropy";
  std::string classAxis = "1";
  int updates = 0;
  std::string optimizer = "sgd";
  double lr = 0.01;
  double momentum = 0.0;
  double weightDecay = 0.0;
  bool nesterov = false;
  DeviceOptions device;
};

void dump(const std::filesystem::path& dir, const std::string& name, const Tensor& tensor) {
  std::filesystem::create_directories(dir);
  // Initializer names may contain '/' or ':'; file names must not.
  std::string file = name;
  std::replace_if(
      file.begin(), file.end(), [](char c) { return c == '/' || c == ':' || c == '\\'; }, '_');
  writeTensorProto(dir / (file + ".pb"), tensor, name);
}

void step(const StepOptions& options) {
  applyThreads(options.model);
  Graph graph = importOnnx(options.model.modelPath);
  std::vector<Tensor> inputs;
  for (const std::string& file : options.inputFiles) {
    inputs.push_back(readTensorProto(file).tensor);
  }
  const Tensor labels = readTensorProto(options.labelsFile).tensor;
  TrainingPlanOptions planOptions;
  for (const Tensor& t : inputs) {
    planOptions.inputMetas.push_back(t.meta());
  }
  planOptions.loss = parseLossKind(options.loss);
  if (options.classAxis != "1" && options.classAxis != "last") {
    fail("--class-axis {}: expected 1 ([N, C, ...] scores) or last ([N, T, vocabulary], a language model's)",
         options.classAxis);
  }
  planOptions.classAxisLast = options.classAxis == "last";
  planOptions.device = selectDevice(options.device);
  planOptions.mixedPrecision = mixedPrecisionOf(options.device);  // one step: gradients unscaled, as computed
  planOptions.channelsLast = channelsLastOf(options.device, planOptions.device, hasFloat32Inputs(graph));
  std::vector<std::string> outputNames;
  for (int id : graph.outputs) {
    outputNames.push_back(graph.values[static_cast<std::size_t>(id)].name);
  }
  TrainingPlan plan(std::move(graph), planOptions);
  if (labels.meta() != plan.labelMeta()) {
    fail("{}: labels are {} but the loss expects {}{}", options.labelsFile, labels.meta().toString(),
         plan.labelMeta().toString(),
         planOptions.classAxisLast ? "" : " (a language model's [N, T] targets need --class-axis last)");
  }

  if (planOptions.channelsLast) {
    const ChannelsLastReport& layout = plan.channelsLastReport();
    fmt::print("channels-last: {} layout nodes, {} elementwise nodes, {} transposes\n", layout.layoutNodes,
               layout.elementwiseNodes, layout.transposes);
  }
  const std::filesystem::path dir(options.dumpDir);
  StepResult result = plan.step(inputs, labels);
  const Tensor loss = result.loss.to(Device::cpu());  // the plan may run on a GPU
  fmt::print("loss: {}\n", loss.dtype() == DType::Float64 ? *loss.data<double>() : *loss.data<float>());
  dump(dir, "loss", result.loss);
  for (std::size_t i = 0; i < result.outputs.size(); ++i) {
    writeTensorProto(dir / fmt::format("output_{}.pb", i), result.outputs[i], outputNames.at(i));
  }
  for (std::size_t i = 0; i < plan.parameters().size(); ++i) {
    dump(dir / "grads", plan.parameterNames()[i], plan.channelsFirstGradient(i));  // in the model's layout
  }
  fmt::print("wrote loss, {} output(s) and {} gradient(s) to {}\n", result.outputs.size(), plan.parameters().size(),
             dir.string());

  if (options.updates > 0) {
    OptimizerOptions optimizerOptions;
    optimizerOptions.kind = parseOptimizerKind(options.optimizer);
    optimizerOptions.momentum = options.momentum;
    optimizerOptions.weightDecay = options.weightDecay;
    optimizerOptions.nesterov = options.nesterov;
    Optimizer optimizer(plan.parameters(), optimizerOptions);
    for (int k = 0; k < options.updates; ++k) {
      if (k > 0) {
        plan.step(inputs, labels);
      }
      optimizer.step(options.lr);
    }
    for (std::size_t i = 0; i < plan.parameters().size(); ++i) {
      dump(dir / "params", plan.parameterNames()[i], plan.channelsFirstParameter(i));
    }
    fmt::print("after {} {} update(s) on this batch, wrote the parameters to {}\n", options.updates, options.optimizer,
               (dir / "params").string());
  }
}

}  // namespace

void addStepCommand(CLI::App& app) {
  auto options = std::make_shared<StepOptions>();
  CLI::App* command = app.add_subcommand(
      "step", "one forward and backward in training mode; writes the loss, outputs and every parameter gradient");
  command->add_option("model", options->model.modelPath, "the .onnx file")->required();
  command->add_option("--input", options->inputFiles, "TensorProto .pb file per model input, in order")->required();
  command->add_option("--labels", options->labelsFile, "TensorProto .pb file with the labels")->required();
  command->add_option("--dump-dir", options->dumpDir, "where to write loss.pb, output_*.pb and grads/*.pb")->required();
  command->add_option("--loss", options->loss, "cross-entropy (default) or mse, when the graph has no loss");
  command->add_option("--class-axis", options->classAxis,
                      "the scores' class axis for cross-entropy: 1 (default, [N, C, ...]) or last ([N, T, vocabulary], "
                      "language models)");
  command->add_option("--updates", options->updates,
                      "also apply this many optimizer updates on the same batch and write params/*.pb");
  command->add_option("--optimizer", options->optimizer, "sgd, adam or adamw (with --updates)");
  command->add_option("--lr", options->lr, "learning rate (with --updates)");
  command->add_option("--momentum", options->momentum, "SGD momentum (with --updates)");
  command->add_option("--weight-decay", options->weightDecay, "weight decay (with --updates)");
  command->add_flag("--nesterov", options->nesterov, "Nesterov momentum (with --updates)");
  command->add_option("--threads", options->model.threads, "CPU threads (default: all cores)");
  addDeviceOptions(*command, options->device);
  addChannelsLastOption(*command, options->device);
  command->callback([options] { step(*options); });
}

}  // namespace strata::cli
