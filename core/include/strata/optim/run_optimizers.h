#pragma once

#include <memory>
#include <vector>

#include "strata/optim/optimizer.h"

namespace strata {

// The run's OptimizerFactory (strata/sdk/optimizer.h): the optimizer chosen on the command line, over every
// parameter or over the slices a strategy owns.
class RunOptimizers final : public OptimizerFactory {
 public:
  // `store` and `scaler` (nullptr: no loss scaling) must outlive this factory and the optimizers it creates.
  RunOptimizers(ParameterStore& store, const OptimizerOptions& options, LossScaler* scaler = nullptr);

  // Created on first use, with clipping and the loss scaler, over the store's flat buffers.
  Optimizer& full() override;
  bool fullCreated() const { return full_ != nullptr; }
  // Refuses runs with gradient clipping or loss scaling: both need a verdict over all gradients (the global norm,
  // an overflow anywhere) that a slice cannot give; the strategy would have to reduce it across its slices.
  std::unique_ptr<SliceOptimizer> create(std::vector<ParameterSlice> slices) override;
  // With clipping and the loss scaler, the norm summed over the ranks by `sumOverRanks` (Note [Sharded optimizers]).
  std::unique_ptr<SliceOptimizer> createSharded(std::vector<ParameterSlice> slices,
                                                std::function<double(double)> sumOverRanks) override;
  const OptimizerOptions& options() const { return options_; }

 private:
  ParameterStore& store_;
  OptimizerOptions options_;
  LossScaler* scaler_;
  std::unique_ptr<Optimizer> full_;
};

}  // namespace strata
