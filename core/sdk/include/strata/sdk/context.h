#pragma once

// What the trainer hands a strategy. The strategy never builds its own process group or store (Gloo's rule: keep
// context, store and transport apart).

#include <chrono>
#include <map>
#include <string>
#include <vector>

#include "strata/comm/process_group.h"
#include "strata/comm/store.h"
#include "strata/sdk/hooks.h"
#include "strata/sdk/optimizer.h"
#include "strata/sdk/parameters.h"

namespace strata {

class StrategyContext {
 public:
  virtual ~StrategyContext() = default;
  virtual int rank() const = 0;
  virtual int worldSize() const = 0;
  virtual int localRank() const = 0;
  virtual int nodes() const = 0;  // --nnodes
  virtual ParameterGroups& parameters() = 0;
  // Tensors that are not trained but must agree across ranks (batch-norm running statistics), updated in place.
  virtual std::vector<Tensor> buffers() = 0;
  virtual Hooks& hooks() = 0;
  virtual OptimizerFactory& optimizers() = 0;
  // The job's collectives; nullptr in a single-process run.
  virtual ProcessGroup* processGroup() = 0;
  // The job's rendezvous store (role endpoints, a strategy's own bookkeeping); nullptr in a single-process run.
  virtual Store* store() = 0;
  // --strategy-opt key=value pairs; a strategy rejects keys it does not know.
  virtual const std::map<std::string, std::string>& options() const = 0;
  // Micro-batches per optimizer step (--grad-accum).
  virtual int gradAccumulation() const = 0;
  // --timeout: how long a collective or a peer may take before the job ends.
  virtual std::chrono::milliseconds timeout() const = 0;
  // Adds to a per-rank figure reported in summary.json ("communication_s", "collective_s", or the strategy's own).
  // Safe to call from any thread (a communication thread included).
  virtual void addFigure(const std::string& key, double value) = 0;
  // Note [Subgroups]: collectives over some of the job's ranks (global ranks, ascending, this rank among them),
  // e.g. within a node and across nodes for fsdp shard=hybrid. Every member asks for the same set, and members ask
  // for their sets in the same order, before any collective on them. The context builds each set once and owns the
  // group. nullptr where it cannot build one (a single-process run).
  virtual ProcessGroup* subgroup(const std::vector<int>& ranks) {
    (void)ranks;
    return nullptr;
  }
};

}  // namespace strata
