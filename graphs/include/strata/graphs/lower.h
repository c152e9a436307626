#pragma once

#include "strata/device.h"
#include "strata/graphs/graph.h"
#include "strata/program.h"

namespace strata {

struct LowerOptions {
  Device device = Device::cpu();
  bool training = false;
};

// Turns a specialised graph into a static Program: creates each node's kernel and computes liveness (which
// intermediate buffers to release after each step) and the plan's peak activation bytes.
Program lowerToProgram(const Graph& graph, const LowerOptions& options);

}  // namespace strata
