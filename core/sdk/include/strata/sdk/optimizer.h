#pragma once

// Optimizers a strategy can ask for: the run's optimizer (SGD, Adam or AdamW as chosen by --optimizer) over all
// parameters, or the same update rule over any slices of the flat buffers (a shard), with state for those slices
// only.

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "strata/tensor.h"

namespace strata {

// Parameters and their gradients as 1-D views of equal length and dtype (slices of flat buffers, or a strategy's
// own shard buffers).
struct ParameterSlice {
  Tensor parameters;
  Tensor gradients;
};

class SliceOptimizer {
 public:
  virtual ~SliceOptimizer() = default;
  // One update with learning rate lr; returns the L2 norm of the gradients it saw (its slices only).
  virtual double step(double lr) = 0;
  // Updates applied so far (Adam's bias correction counts them); restored from checkpoints.
  virtual std::int64_t steps() const = 0;
  virtual void setSteps(std::int64_t steps) = 0;
  // The state tensors (momentum, Adam's moments), category OptimizerState, sized for the slices only.
  virtual std::vector<Tensor> state() const = 0;
};

class OptimizerFactory {
 public:
  virtual ~OptimizerFactory() = default;
  // The run's optimizer over every parameter, with gradient clipping and loss scaling as configured. Created on
  // first use: a strategy that never asks for it allocates no state for the full model.
  virtual SliceOptimizer& full() = 0;
  // The run's update rule over `slices` only. Gradient clipping needs the global norm, so a run with
  // --clip-grad-norm refuses sliced optimizers (the strategy must reduce the norm itself).
  virtual std::unique_ptr<SliceOptimizer> create(std::vector<ParameterSlice> slices) = 0;
  // Note [Sharded optimizers]: the run's update rule over `slices` when the slices of a group of ranks together hold
  // every gradient once (a sharding strategy's shards). Clipping and fp16 loss scaling need the norm over all
  // gradients: the optimizer passes the sum of squares of its own slices to `sumOverRanks`, which returns the sum
  // over the group (the strategy all-reduces it; inf and NaN carry an overflow to every rank), so every rank clips
  // alike and skips an overflowed step alike.
  virtual std::unique_ptr<SliceOptimizer> createSharded(std::vector<ParameterSlice> slices,
                                                        std::function<double(double)> sumOverRanks) {
    (void)sumOverRanks;
    return create(std::move(slices));
  }
};

}  // namespace strata
