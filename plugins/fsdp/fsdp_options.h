#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "strata/sdk/strategy.h"

namespace strata::plugins::fsdp {

// How much is sharded (ZeRO's stages by PyTorch FSDP's names).
enum class ShardLevel {
  Full,    // ZeRO-3: parameters, gradients and optimizer state; a unit is gathered for its forward and again for
           // its backward
  GradOp,  // ZeRO-2: gradients and optimizer state; a unit stays gathered from its forward to its backward
  None,    // DDP semantics through the same code: everything replicated, gradients all-reduced per unit
};

// Where micro-batch gradients add up under --grad-accum K > 1.
enum class AccumulateIn {
  Local,    // in the unit's full gradient buffer (the plan adds in place); one reduce-scatter on the last
            // micro-batch. Costs every unit's full gradients during the step.
  Sharded,  // a reduce-scatter per micro-batch, added into the shard; a unit's gradient buffer lives only until
            // its reduce-scatter. Costs K times the communication. CPU only.
};

// Where shards and optimizer state live between uses (offload=). Note [Offload on the CPU]: on the CPU backend the
// training device is host memory already, so offloading moves nothing: the plugin says so (a log line and the figure
// fsdp_offload_noop in summary.json) instead of pretending.
// Note [Offload to the host] (a GPU, as ZeRO-Offload): the master parameter shard, its gradient shard and the
// optimizer state live in host memory and the sharded optimizer steps there (the CPU's update rule); each
// reduce-scatter lands in a device buffer that is copied to the host shard. offload=optimizer keeps a device copy of
// the parameter shard (refreshed after each step) for the all-gathers; offload=params keeps none and copies the host
// shard in per gather, so the device holds only gathered units and transient buffers. Not with shard=hybrid yet.
enum class Offload { None, Optimizer, Params };

struct FsdpOptions {
  ShardLevel level = ShardLevel::Full;
  // shard=hybrid: level Full within each node (the collectives of a unit stay on the node), replicated across nodes
  // (each shard's reduced gradients all-reduced with the same shard on the other nodes). Needs --nnodes > 1.
  bool hybrid = false;
  AccumulateIn accumulate = AccumulateIn::Local;
  // Units by module path (the default; small modules joined, below), or of consecutive parameters of at least
  // unitParams elements.
  // Note [FSDP unit size]: per-module units of ResNet-18 are 41 collectives each way whose latency dominates (2 ranks:
  // 1.47x DDP's step); units of >= 1M elements (7) take 1.03x, but they straddle blocks, so in backward a unit that
  // spans a residual branch stays gathered while others are used, and shard=full exceeded the memory bound of 2 x the
  // largest unit (140 vs 128 MiB) until the gather budget (Note [Gather budget] in fsdp_strategy.cpp): 122.4 MiB
  // since (2026-11-27, 2 ranks).
  bool unitsByModule = true;
  std::int64_t unitParams = 0;
  // Module units: a module of fewer parameters joins the unit before it (Note [Small modules] in
  // graphs/src/unit_partition.cpp); 0: one unit per module, as PyTorch FSDP2's fully_shard on every module.
  // Measured 2026-11-27 (bench/fsdp_step.py, 2 ranks x 1 thread, Adam; ResNet-18 batch 16, 32x32): one unit per
  // module is 41 units, full at 1.62x DDP's step and grad_op at 1.28x; 262144 (1 MiB of float32) is 9 units, full at
  // 1.22x and grad_op at 0.97x, for 9% more model state under full (122 vs 112 MiB). Since the gather budget (Note
  // [Gather budget] in fsdp_strategy.cpp) bounds what is gathered by the largest unit rather than by a count of
  // units, the larger units keep shard=full's memory bound, so they are the default.
  std::int64_t smallModuleParams = 262144;
  Offload offload = Offload::None;
  // reduce_dtype=bf16|fp16: units gathered and gradients reduced in 16 bits, the shards (master weights, gradients,
  // optimizer state) staying float32. Note [16-bit collectives] in fsdp_strategy.cpp. nullopt: the shards' dtype.
  std::optional<DType> reduceType;
  int maxInflight = 2;                   // all-gathers in flight at once (prefetch depth)
  std::chrono::milliseconds timeout{0};  // 0: the run's --timeout
};

// Parses --strategy-opt pairs; throws Error naming the bad key or value and listing the known ones.
FsdpOptions parseFsdpOptions(const std::map<std::string, std::string>& options);
const char* levelName(ShardLevel level);
const char* offloadName(Offload offload);

}  // namespace strata::plugins::fsdp
