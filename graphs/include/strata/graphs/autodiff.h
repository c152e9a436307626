#pragma once

#include <vector>

#include "strata/graphs/graph.h"

namespace strata {

struct AutodiffOptions {
  int loss = kNoValue;  // the scalar value to differentiate
};

// A training step as one graph: the forward nodes, the loss, then the backward nodes emitted by the per-op
// gradient rules in reverse order, each tagged with its phase (and, for backward nodes, the forward node it
// differentiates), so one static plan with liveness covers the whole step and activations are released as soon
// as backward no longer needs them.
struct TrainingGraph {
  Graph graph;
  int loss = kNoValue;
  // The constant the loss gradient starts from (1); a plan that scales the loss feeds it at run time instead.
  int lossGradSeed = kNoValue;
  // Trainable parameters: float initializers on differentiable edges, in first-use order.
  std::vector<int> parameters;
  // The final gradient of each parameter (same order). Each is produced by a node of its own, so it can be bound
  // to a view of a flat gradient buffer.
  std::vector<int> parameterGrads;
  // Per parameter: the node index (in graph.nodes) after which its gradient is final.
  std::vector<int> gradientReadyAfterNode;
  // Buffers updated by the step (batch-norm running statistics): (buffer value, its updated value).
  std::vector<std::pair<int, int>> bufferUpdates;
};

// Builds the backward graph of a specialised forward graph (specialised with training = true). Throws Error naming
// the node and op when an op on a differentiable path has no gradient rule.
TrainingGraph buildTrainingGraph(const Graph& forward, const AutodiffOptions& options);

}  // namespace strata
