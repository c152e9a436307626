#pragma once

// Predicted per-rank memory of the replicated strategies (plugins/ddp, and a worker of plugins/ps) before anything
// runs, from the same replay of the static plan as FSDP's (strata/graphs/fsdp_memory.h): `strata plan` predicts
// every strategy through these and predictFsdpMemory.

#include <cstddef>

#include "strata/graphs/fsdp_memory.h"

namespace strata {

struct ReplicatedMemoryOptions {
  int ranks = 1;
  int microBatches = 1;             // --grad-accum
  std::size_t optimizerStates = 0;  // optimizerStatesPerSlice of the run's optimizer
};

// DDP: full parameters and gradients, the full optimizer's state (created on the first step), the plan's
// activations. Buckets are slices of the flat gradient buffer, all-reduced in place (Note [Buckets are flat-buffer
// slices] in plugins/ddp), so they add nothing.
FsdpMemoryPrediction predictDdpMemory(const Program& program, const ParameterGroups& groups,
                                      const ReplicatedMemoryOptions& options);

// A parameter-server worker: full parameters and gradients and the plan's activations; the optimizer and its state
// live on the servers (Note [PS keys] in plugins/ps), and pushes and pulls are ZeroMQ frames over the flat buffers
// themselves (Note [PS zero copy]), so a worker holds no optimizer state and no communication buffers.
// options.optimizerStates is ignored.
FsdpMemoryPrediction predictPsWorkerMemory(const Program& program, const ParameterGroups& groups,
                                           const ReplicatedMemoryOptions& options);

}  // namespace strata
