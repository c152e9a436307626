#pragma once

// Predicted per-rank memory of the fsdp plugin (plugins/fsdp) before anything runs: the plugin's schedule (Note
// [FSDP schedule] in plugins/fsdp/fsdp_strategy.h) replayed over a static training plan, counting what it allocates
// and frees the way the allocator counts (requested bytes, by category). Used by `strata inspect --strategy fsdp`;
// a plan of its own (`strata plan`) can call it the same way.

#include <array>
#include <cstdint>
#include <map>
#include <string>

#include "strata/memory_category.h"
#include "strata/program.h"
#include "strata/sdk/parameters.h"

namespace strata {

enum class FsdpLevel { Full, GradOp, None };

const char* fsdpLevelName(FsdpLevel level);

struct FsdpMemoryOptions {
  FsdpLevel level = FsdpLevel::Full;
  int ranks = 1;
  int maxInflight = 2;              // the plugin's max_inflight
  int microBatches = 1;             // --grad-accum
  bool accumulateSharded = false;   // accumulate=sharded
  std::size_t optimizerStates = 2;  // state tensors per parameter element (optimizerStatesPerSlice: Adam 2, SGD 0/1)
  // Bytes of an element in the collectives' buffers: the parameters' own (0), or 2 with reduce_dtype=bf16|fp16.
  std::size_t collectiveElementBytes = 0;
};

// The plugin options that change its memory (shard, max_inflight, accumulate, reduce_dtype), read from the
// --strategy-opt pairs; the plugin itself has already rejected bad ones (its requirements()).
FsdpMemoryOptions fsdpMemoryOptions(const std::map<std::string, std::string>& strategyOptions,
                                    FsdpMemoryOptions defaults);

struct FsdpMemoryPrediction {
  // Per category, the peak over a training step after setup (what summary.json's training_memory_breakdown
  // reports): Parameters, Gradients, OptimizerState, Activations and Communication are predicted; Workspace (kernel
  // scratch and oneDNN's reordered weights) and Other are not and stay 0.
  std::array<std::int64_t, kMemoryCategoryCount> peak{};
  std::int64_t totalPeak = 0;  // the most bytes alive at once over the predicted categories
  std::array<std::int64_t, kMemoryCategoryCount> atTotalPeak{};  // each category's bytes at that moment
  std::int64_t units = 0;
  std::int64_t largestUnitElements = 0;
  std::int64_t paddingElements = 0;

  std::int64_t peakOf(MemoryCategory category) const { return peak[static_cast<std::size_t>(category)]; }
  // Parameters + gradients + optimizer state, each at its own peak (an upper bound of their peak together, the
  // figure the memory bound of issue 14 is about).
  std::int64_t modelState() const;
};

// Replays `options.microBatches` micro-batches of one optimizer step of `program` (the training plan's static
// program) with the parameters grouped into units as `groups` holds them (one group per unit).
FsdpMemoryPrediction predictFsdpMemory(const Program& program, const ParameterGroups& groups,
                                       const FsdpMemoryOptions& options);

}  // namespace strata
