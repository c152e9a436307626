#pragma once

#include "strata/device.h"
#include "strata/graphs/graph.h"
#include "strata/program.h"

namespace strata {

struct LowerOptions {
  Device device = Device::cpu();
  bool training = false;
  // Values written into external storage instead of plan-allocated buffers (graph value id, tensor of the same
  // meta): running statistics updated in place.
  std::vector<std::pair<int, Tensor>> bindings{};
  // Like bindings, for parameter gradients (views of a flat gradient buffer): an executor in accumulate mode adds
  // into these instead of overwriting them.
  std::vector<std::pair<int, Tensor>> gradientBindings{};
  // The trainable parameters' graph value ids, by parameter index: each step records which it reads
  // (ProgramStep::parametersRead).
  std::vector<int> parameters{};
  // Per parameter index: the graph node after which its gradient is final (TrainingGraph::gradientReadyAfterNode).
  std::vector<int> gradientReadyAfterNode{};
};

// Turns a specialised graph into a static Program: creates each node's kernel and computes liveness (which
// intermediate buffers to release after each step) and the plan's peak activation bytes.
Program lowerToProgram(const Graph& graph, const LowerOptions& options);

}  // namespace strata
