#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "strata/graphs/graph.h"

namespace strata::cli {

// Options every command that loads a model shares.
struct ModelOptions {
  std::string modelPath;
  std::vector<std::string> inputShapes;  // "N,C,H,W", one per graph input, in order
  int threads = 0;                       // 0: all cores
};

void addModelOptions(CLI::App& command, ModelOptions& options);
// Applies --threads to the CPU backend.
void applyThreads(const ModelOptions& options);
// Input metas from --input-shape (empty when none was given).
std::vector<TensorMeta> inputMetasFromOptions(const Graph& graph, const ModelOptions& options);
// The bundled default model (built next to the binary, or installed beside it).
// The bundled default language model (models/make_gpt.py: a 4-layer GPT over bytes, sequence 128), the model of
// `strata train --data text|tokens:...` without a model argument.
std::string defaultLanguageModelPath();
std::string defaultModelPath();
// The model of `strata train --data DATA` without a model argument: the default language model for token and text
// data, the bundled CNN otherwise; and its name ("default_gpt", "default_cnn"), without looking for the file.
std::string defaultModelPathForData(const std::string& data);
std::string defaultModelNameForData(const std::string& data);

}  // namespace strata::cli
