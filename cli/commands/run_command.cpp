#include <algorithm>
#include <chrono>
#include <filesystem>
#include <map>
#include <memory>
#include <random>

#include <fmt/format.h>

#include "commands/commands.h"
#include "common/device_selection.h"
#include "common/inference_plan.h"
#include "common/model_options.h"
#include "run/op_profiler.h"
#include "strata/executor.h"
#include "strata/graphs/specialize.h"
#include "strata/loaders/onnx_importer.h"
#include "strata/loaders/tensor_proto_io.h"

namespace strata::cli {
namespace {

struct RunOptions {
  ModelOptions model;
  std::vector<std::string> inputFiles;
  std::string outputDir;
  std::uint64_t seed = 0;
  int repeat = 1;
  bool profile = false;
  int profileTop = 0;
  DeviceOptions device;
};

std::vector<TensorMeta> metasOf(const std::vector<Tensor>& tensors) {
  std::vector<TensorMeta> metas;
  for (const Tensor& t : tensors)
    metas.push_back(t.meta());
  return metas;
}

Tensor randomTensor(const TensorMeta& meta, std::mt19937_64& rng) {
  Tensor t = Tensor::empty(meta, MemoryCategory::Other);
  visitDType(meta.dtype, [&](auto tag) {
    using T = decltype(tag);
    T* data = t.data<T>();
    for (std::int64_t i = 0; i < t.numel(); ++i) {
      if constexpr (std::is_same_v<T, float> || std::is_same_v<T, double>) {
        data[i] = static_cast<T>(std::normal_distribution<double>(0.0, 1.0)(rng));
      } else if constexpr (std::is_same_v<T, bool>) {
        data[i] = (rng() & 1u) != 0;
      } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16Bits>) {
        data[i].bits = 0;
      } else {
        data[i] = static_cast<T>(rng() % 10);
      }
    }
  });
  return t;
}

void run(const RunOptions& options) {
  applyThreads(options.model);
  const std::string path = options.model.modelPath.empty() ? defaultModelPath() : options.model.modelPath;
  const Graph graph = importOnnx(path);

  std::vector<Tensor> inputs;
  SpecializeOptions specializeOptions;
  if (!options.inputFiles.empty()) {
    if (options.inputFiles.size() != graph.inputs.size()) {
      fail("{}: the model has {} input(s) but {} --input file(s) were given", path, graph.inputs.size(),
           options.inputFiles.size());
    }
    for (const std::string& file : options.inputFiles) {
      inputs.push_back(readTensorProto(file).tensor);
    }
  } else {
    specializeOptions.inputMetas = inputMetasFromOptions(graph, options.model);
  }
  const Graph specialised = inputs.empty() ? specialize(graph, specializeOptions) : specializeForInputs(graph, inputs);
  if (inputs.empty()) {
    std::mt19937_64 rng(options.seed);
    for (int id : specialised.inputs) {
      inputs.push_back(randomTensor(specialised.values[static_cast<std::size_t>(id)].meta, rng));
    }
    fmt::print("inputs: random (seed {})\n", options.seed);
  }

  requireFullPrecision(options.device, "run");
  const Device device = selectDevice(options.device);
  if (device.type != DeviceType::CPU) {
    fmt::print("device: {}\n", describe(device));
    for (Tensor& t : inputs) {
      t = t.to(device);
    }
  }
  const std::unique_ptr<Executor> plan =
      buildInferenceExecutor(specialised, metasOf(inputs), device, options.device, /*verbose=*/true);
  Executor& executor = *plan;
  std::vector<Tensor> outputs;
  std::unique_ptr<OpProfiler> profiler;
  if (options.profile) {
    outputs = executor.run(inputs);  // warm-up: kernels finish lazy setup on their first run
    profiler = std::make_unique<OpProfiler>(executor);
  }
  std::vector<double> millis;
  for (int r = 0; r < std::max(options.repeat, 1); ++r) {
    const auto start = std::chrono::steady_clock::now();
    outputs = executor.run(inputs);
    millis.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count());
  }
  std::sort(millis.begin(), millis.end());
  fmt::print("forward: {:.3f} ms (median of {})\n", millis[millis.size() / 2], millis.size());
  if (profiler) {
    profiler->print(options.profileTop);
  }

  if (!options.outputDir.empty()) {
    std::filesystem::create_directories(options.outputDir);
  }
  for (std::size_t i = 0; i < outputs.size(); ++i) {
    const std::string& name = specialised.values[static_cast<std::size_t>(specialised.outputs[i])].name;
    fmt::print("output {}: {} {}\n", i, name, outputs[i].meta().toString());
    if (!options.outputDir.empty()) {
      const auto file = std::filesystem::path(options.outputDir) / fmt::format("output_{}.pb", i);
      writeTensorProto(file, outputs[i], name);
      fmt::print("  written to {}\n", file.string());
    }
  }
}

}  // namespace

void addRunCommand(CLI::App& app) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* command = app.add_subcommand("run", "run one forward pass and write the outputs as TensorProto files");
  command->add_option("model", options->model.modelPath, "the .onnx file (default: the bundled CNN)");
  command->add_option("--input", options->inputFiles,
                      "TensorProto .pb file per graph input, in order (default: random inputs)");
  command->add_option("--output-dir", options->outputDir, "where to write output_0.pb, output_1.pb, ...");
  command->add_option("--seed", options->seed, "seed of the random inputs");
  command->add_option("--repeat", options->repeat, "run the forward pass this many times and report the median");
  command->add_flag("--profile", options->profile, "print the time spent per op type and the kernel each node runs");
  command->add_option("--profile-top", options->profileTop, "with --profile: also list the N slowest nodes");
  addModelOptions(*command, options->model);
  addDeviceOptions(*command, options->device);
  addChannelsLastOption(*command, options->device);
  command->callback([options] { run(*options); });
}

}  // namespace strata::cli
