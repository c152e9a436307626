#pragma once

#include "strata/device.h"
#include "strata/graphs/graph.h"
#include "strata/program.h"

namespace strata {

struct LowerOptions {
  Device device = Device::cpu();
  bool training = false;
  // Values written into external storage instead of plan-allocated buffers (graph value id, tensor of the same
  // meta): parameter gradients into views of a flat gradient buffer, running statistics in place.
  std::vector<std::pair<int, Tensor>> bindings;
  // Per parameter index: the graph node after which its gradient is final (TrainingGraph::gradientReadyAfterNode).
  std::vector<int> gradientReadyAfterNode;
};

// Turns a specialised graph into a static Program: creates each node's kernel and computes liveness (which
// intermediate buffers to release after each step) and the plan's peak activation bytes.
Program lowerToProgram(const Graph& graph, const LowerOptions& options);

}  // namespace strata
