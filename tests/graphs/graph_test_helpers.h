#pragma once
// Small helpers the graph-pass tests share: count a graph's nodes of one type, run a graph forward on the CPU.

#include <string>

#include "strata/executor.h"
#include "strata/graphs/graph.h"
#include "strata/graphs/lower.h"

namespace strata::testing {

inline int countOps(const Graph& graph, const std::string& type) {
  int count = 0;
  for (const Node& node : graph.nodes)
    count += node.opType == type ? 1 : 0;
  return count;
}

// The graph's first output for one input, lowered for the CPU.
inline Tensor forwardOutput(const Graph& graph, const Tensor& x) {
  Executor executor(lowerToProgram(graph, LowerOptions{}));
  return executor.run({x}).at(0);
}

// The mean of (y - target)^2 over float32 tensors, in double: what a training plan's Mse loss should come to.
inline double meanSquaredError(const Tensor& y, const Tensor& target) {
  double mse = 0;
  for (std::int64_t i = 0; i < y.numel(); ++i) {
    const double d = static_cast<double>(y.data<float>()[i]) - target.data<float>()[i];
    mse += d * d / static_cast<double>(y.numel());
  }
  return mse;
}

}  // namespace strata::testing
