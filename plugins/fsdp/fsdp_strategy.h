#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "fsdp_options.h"
#include "strata/sdk/strategy.h"

namespace strata::plugins::fsdp {

// One unit: a flat parameter group, sharded evenly over the ranks. Rank r holds elements [r * shard, (r + 1) *
// shard) of the group padded with zeros to ranks x shard elements.
struct Unit {
  std::size_t group = 0;
  std::int64_t elements = 0;  // the group's elements
  std::int64_t shard = 0;     // elements per rank: ceil(elements / ranks)
  Tensor shardParameters;     // [shard], category Parameters
  Tensor shardGradients;      // [shard], category Gradients: the reduced (mean) gradient of this rank's part
  Tensor deviceShard;         // offload=optimizer on a GPU: the device's copy of shardParameters (host memory)
  // Nodes that read the unit's parameters (-1: none), by phase.
  int firstForward = -1, lastForward = -1, firstBackward = -1, lastBackward = -1;
  int gradientWriters = 0;      // parameters whose gradient a node writes
  int pending = 0;              // of those, not final yet in this micro-batch
  bool reduceLaunched = false;  // this micro-batch's reduction has started (it may be finished already)
  bool gathered = false;        // the flat parameters hold the current weights
  WorkHandle gather;
  Tensor gatherSource;  // reduce_dtype: the shard in 16 bits
  Tensor gatherBuffer;  // destination when elements is not a multiple of the ranks (padded) or in 16 bits
  WorkHandle reduce;
  Tensor reduceInput;   // padded or 16-bit source, likewise
  Tensor reduceOutput;  // this micro-batch's reduced shard when it is added (sharded accumulation) or in 16 bits
};

// Fully sharded data parallel (ZeRO-3 / ZeRO-2 / DDP semantics by `shard=`). Note [FSDP schedule]:
// - forward: before a node that reads a unit's parameters the unit is gathered (all-gather of the shards into the
//   flat buffer), and the next units in forward order are prefetched, at most max_inflight gathers at once and,
//   under shard=full, at most 2 x the largest unit gathered (Note [Gather budget]); with
//   shard=full a unit is released after its last forward node and gathered again before its first backward node.
// - backward: a unit's gradient buffer is materialised (zeroed) before the node that writes its first gradient; when
//   all of a unit's gradients are final (on the last micro-batch) its reduce-scatter starts, overlapping the rest
//   of backward; afterBackward waits for them, keeps each rank's mean-gradient shard and releases the buffers.
// - step: a sliced optimizer updates the local shards only; the flat parameters stay released until the next
//   forward gathers them.
// Every rank runs the same static plan, so the hooks issue collectives in the same order everywhere.
class FsdpStrategy final : public Strategy {
 public:
  ~FsdpStrategy() override { teardown(); }

  StrategyRequirements requirements(const StrategyQuery& query) override;
  void setup(StrategyContext& context) override;
  void beforeForward(const StepInfo& at) override;
  void afterBackward(const StepInfo& at) override;
  void step(const StepInfo& at, double lr) override;
  void beforeEvaluate() override;
  void afterEvaluate() override;
  void saveState(StrategyContext& context, StateWriter& writer) override;
  void loadState(StrategyContext& context, StateReader& reader) override;
  void teardown() override;

 private:
  bool sharded() const { return options_.level != ShardLevel::None && ranks_ > 1; }
  void checkOffload();
  bool offloadsToHost() const;
  void refreshDeviceShards();
  void joinHybridGroups();
  void broadcastInitialState();
  void planUnits();
  void createShards();
  void beforeNode(const NodeInfo& node);
  void afterNode(const NodeInfo& node);
  void onGradientReady(int parameter);
  void launchGather(Unit& unit);
  void finishGather(Unit& unit);
  void ensureGathered(Unit& unit);
  void prefetchAfter(const Unit& unit, bool backward);
  void releaseParameters(Unit& unit);
  void ensureGradientBuffer(Unit& unit);
  void makeRoomForGradients(const Unit& unit);
  void launchReduce(Unit& unit);
  void finishReduce(Unit& unit);
  // Finishes reductions that are done and, beyond max_inflight, the oldest ones: a unit's gradient buffer is freed
  // as soon as its reduce-scatter has read it.
  void retireReductions(bool all);
  Unit& unitOfParameter(int parameter);
  double seconds(std::chrono::steady_clock::duration d) const;

  StrategyContext* context_ = nullptr;
  ProcessGroup* world_ = nullptr;     // every rank: the initial broadcast
  ProcessGroup* group_ = nullptr;     // the ranks the units are sharded over: the world, or this node (hybrid)
  ProcessGroup* replicas_ = nullptr;  // hybrid: the ranks holding the same shard on the other nodes
  int replica_ = 0;                   // hybrid: this rank's node
  bool evaluating_ = false;           // between beforeEvaluate and afterEvaluate: gathers in full precision
  FsdpOptions options_;
  std::chrono::milliseconds timeout_{std::chrono::minutes(5)};
  int rank_ = 0;   // within group_
  int ranks_ = 1;  // group_'s size
  StepInfo at_;
  std::vector<Unit> units_;
  std::vector<std::size_t> unitOfGroup_;
  std::vector<std::size_t> forwardOrder_;   // units by their first forward node
  std::vector<std::size_t> backwardOrder_;  // units by their first backward use (last forward node first)
  std::vector<std::size_t> reducing_;       // units whose reduction is in flight, in launch order
  std::int64_t largestUnit_ = 0;            // elements; Note [Gather budget]
  std::unique_ptr<SliceOptimizer> shardOptimizer_;
  std::vector<HookHandle> hooks_;
  double gatherWaitS_ = 0;  // host time blocked on all-gathers (not hidden behind compute)
  double reduceWaitS_ = 0;
};

}  // namespace strata::plugins::fsdp
