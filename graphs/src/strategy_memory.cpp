#include "strata/graphs/strategy_memory.h"

namespace strata {

// Note [Replicated strategies replay as shard=none]: FSDP's shard=none keeps every unit's full parameters and
// gradients, all-reduces gradients in place and runs optimizers().full(), allocating exactly what DDP allocates (its
// units are views of the same flat buffers that DDP's buckets slice), so DDP's prediction is that replay; a PS worker
// is the same without the optimizer. Both are checked against real runs by multirank.plan_memory.

FsdpMemoryPrediction predictDdpMemory(const Program& program, const ParameterGroups& groups,
                                      const ReplicatedMemoryOptions& options) {
  FsdpMemoryOptions replay;
  replay.level = FsdpLevel::None;
  replay.ranks = options.ranks;
  replay.microBatches = options.microBatches;
  replay.optimizerStates = options.optimizerStates;
  return predictFsdpMemory(program, groups, replay);
}

FsdpMemoryPrediction predictPsWorkerMemory(const Program& program, const ParameterGroups& groups,
                                           const ReplicatedMemoryOptions& options) {
  ReplicatedMemoryOptions worker = options;
  worker.optimizerStates = 0;
  return predictDdpMemory(program, groups, worker);
}

}  // namespace strata
