#pragma once

#include <memory>
#include <vector>

#include "common/device_selection.h"
#include "strata/executor.h"
#include "strata/graphs/graph.h"

namespace strata::cli {

// A forward-only plan of a specialised model, as `strata run` and `strata generate` run it: batch norm folded into
// convolutions, GELU (and on the CPU SiLU, Mish, ReLU, Clip and MatMul biases) fused, channels-last where
// --channels-last picks it. `verbose` prints what was folded.
std::unique_ptr<Executor> buildInferenceExecutor(const Graph& specialised, const std::vector<TensorMeta>& inputs,
                                                 Device device, const DeviceOptions& options, bool verbose);

}  // namespace strata::cli
