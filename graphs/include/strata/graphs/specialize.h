#pragma once

#include <vector>

#include "strata/graphs/graph.h"

namespace strata {

struct SpecializeOptions {
  // One meta per graph input; shapes must be static. Empty: use the graph's own input shapes, with a dynamic
  // leading (batch) dimension set to defaultBatch.
  std::vector<TensorMeta> inputMetas;
  std::int64_t defaultBatch = 1;
  bool training = false;
};

// Fixes every value's shape for the given input metas and folds shape arithmetic (any foldable node whose inputs
// are all non-parameter constants is evaluated now and removed). Throws Error naming the file, node and why when
// a shape cannot be inferred or a dimension cannot be specialised.
Graph specialize(const Graph& graph, const SpecializeOptions& options);

// The input metas specialize() would use by default; throws Error naming a dynamic dimension it cannot fix.
std::vector<TensorMeta> defaultInputMetas(const Graph& graph, std::int64_t batch);

}  // namespace strata
