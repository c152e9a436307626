#include "common/model_options.h"

#include <filesystem>
#include <sstream>
#include <thread>

#include <unistd.h>

#include "strata/error.h"
#include "strata/loaders/dataset.h"
#include "strata/thread_pool.h"

namespace strata::cli {
namespace {

Shape parseShape(const std::string& text) {
  Shape shape;
  std::stringstream stream(text);
  std::string item;
  while (std::getline(stream, item, ',')) {
    try {
      std::size_t used = 0;
      const std::int64_t dim = std::stoll(item, &used);
      if (used != item.size() || dim <= 0) {
        throw std::invalid_argument(item);
      }
      shape.push_back(dim);
    } catch (const std::exception&) {
      fail("--input-shape '{}': '{}' is not a positive integer dimension", text, item);
    }
  }
  return shape;
}

}  // namespace

void addModelOptions(CLI::App& command, ModelOptions& options) {
  command.add_option("--input-shape", options.inputShapes,
                     "static shape of each graph input, e.g. 32,3,32,32 (repeat for several inputs)");
  command.add_option("--threads", options.threads, "CPU threads (default: all cores)")->check(CLI::NonNegativeNumber);
}

void applyThreads(const ModelOptions& options) {
  const int threads = options.threads > 0 ? options.threads : static_cast<int>(std::thread::hardware_concurrency());
  ThreadPool::instance().setThreads(threads);
}

std::vector<TensorMeta> inputMetasFromOptions(const Graph& graph, const ModelOptions& options) {
  if (options.inputShapes.empty()) {
    return {};
  }
  if (options.inputShapes.size() != graph.inputs.size()) {
    fail("{}: the model has {} input(s) but --input-shape was given {} time(s)", graph.sourcePath, graph.inputs.size(),
         options.inputShapes.size());
  }
  std::vector<TensorMeta> metas;
  for (std::size_t i = 0; i < graph.inputs.size(); ++i) {
    metas.push_back(
        {graph.values[static_cast<std::size_t>(graph.inputs[i])].meta.dtype, parseShape(options.inputShapes[i])});
  }
  return metas;
}

namespace {

// A bundled model generated at build time (models/CMakeLists.txt), found beside the binary or where it is installed.
std::string bundledModelPath(const std::string& file, const std::string& target) {
  std::error_code ec;
  const std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  const std::filesystem::path dir = exe.parent_path();
  for (const auto& candidate :
       {dir / "models" / file, dir / ".." / "models" / file, dir / ".." / "share" / "strata" / "models" / file}) {
    if (std::filesystem::exists(candidate, ec)) {
      return std::filesystem::weakly_canonical(candidate).string();
    }
  }
  fail("the bundled default model {} was not found next to {} (build the '{}' target)", file, exe.string(), target);
}

}  // namespace

std::string defaultModelPath() {
  return bundledModelPath("default_cnn.onnx", "default_model");
}

std::string defaultLanguageModelPath() {
  return bundledModelPath("default_gpt.onnx", "default_language_model");
}

std::string defaultModelPathForData(const std::string& data) {
  return taskOfDataset(data) == Task::LanguageModel ? defaultLanguageModelPath() : defaultModelPath();
}

std::string defaultModelNameForData(const std::string& data) {
  return taskOfDataset(data) == Task::LanguageModel ? "default_gpt" : "default_cnn";
}

}  // namespace strata::cli
