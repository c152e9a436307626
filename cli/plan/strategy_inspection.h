#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "strata/graphs/graph.h"

namespace strata::cli {

// `strata inspect --strategy fsdp --world-size N`: the flags that describe the run whose memory is predicted.
struct StrategyInspection {
  std::string strategy;  // empty: no prediction
  int worldSize = 0;
  int nnodes = 1;
  std::vector<std::string> strategyOptions;
  std::vector<std::string> pluginDirs;
  std::string optimizer = "sgd";
  double momentum = 0.9;
  int gradAccum = 1;
  std::string precision = "fp32";
  std::string channelsLast = "auto";
  std::string jsonPath;  // also write the prediction as JSON here
};

void addStrategyInspectionOptions(CLI::App& command, StrategyInspection& options);
// Refuses bad flags (an unknown strategy option, a strategy without a prediction) before the model is loaded.
void checkStrategyInspection(const StrategyInspection& options);
// Builds the training plan with the strategy's unit partition and prints the predicted per-rank memory of every
// sharding level (strata/graphs/fsdp_memory.h).
void printStrategyMemory(const StrategyInspection& options, Graph model, const std::vector<TensorMeta>& inputMetas);

}  // namespace strata::cli
