#pragma once

#include <vector>

#include "strata/graphs/graph.h"

namespace strata {

struct SpecializeOptions {
  // One meta per graph input; shapes must be static. Empty: use the graph's own input shapes, with a dynamic
  // leading (batch) dimension set to defaultBatch.
  std::vector<TensorMeta> inputMetas{};
  std::int64_t defaultBatch = 1;
  // Values known when the plan is built, per graph input (undefined: supplied at run time). A bound input acts as
  // a constant, so shape-like inputs (a Reshape's target shape fed as a graph input) fold into the static plan;
  // the executor still expects the same values at run time.
  std::vector<Tensor> boundInputs{};
  bool training = false;
  // Plans whose weights never change (`strata run`): parameters fold like any constant, so that a rewrite's
  // Transposes of weights (channels-last) are done once, when the plan is built.
  bool foldParameters = false;
};

// Fixes every value's shape for the given input metas and folds shape arithmetic (any foldable node whose inputs
// are all non-parameter constants is evaluated now and removed). Throws Error naming the file, node and why when
// a shape cannot be inferred or a dimension cannot be specialised.
Graph specialize(const Graph& graph, const SpecializeOptions& options);

// Specialises for these concrete inputs. When a shape-like operand is fed as a graph input (a Reshape's target
// shape, Slice's bounds), the given values are bound as plan-time constants; the plan is then valid for them only.
Graph specializeForInputs(const Graph& graph, const std::vector<Tensor>& inputs, bool training = false);

// The input metas specialize() would use by default; throws Error naming a dynamic dimension it cannot fix.
std::vector<TensorMeta> defaultInputMetas(const Graph& graph, std::int64_t batch);

}  // namespace strata
