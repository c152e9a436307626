#include "strata/optim/run_optimizers.h"

#include <utility>

#include "strata/error.h"

namespace strata {

RunOptimizers::RunOptimizers(ParameterStore& store, const OptimizerOptions& options, LossScaler* scaler)
    : store_(store), options_(options), scaler_(scaler) {}

Optimizer& RunOptimizers::full() {
  if (!full_) {
    full_ = std::make_unique<Optimizer>(store_, options_);
    full_->setLossScaler(scaler_);
  }
  return *full_;
}

std::unique_ptr<SliceOptimizer> RunOptimizers::create(std::vector<ParameterSlice> slices) {
  STRATA_CHECK(options_.maxGradNorm <= 0,
               "this strategy asks for an optimizer over slices of the parameters, but gradient clipping "
               "(--clip-grad-norm {}) needs the norm over all gradients, which a slice optimizer does not see; run "
               "without clipping or with a strategy that uses the full optimizer",
               options_.maxGradNorm);
  STRATA_CHECK(scaler_ == nullptr,
               "this strategy asks for an optimizer over slices of the parameters, but float16 loss scaling must "
               "skip a step when any gradient overflowed, which a slice optimizer does not see; use bfloat16 or "
               "float32, or a strategy that uses the full optimizer");
  return std::make_unique<Optimizer>(std::move(slices), options_);
}

std::unique_ptr<SliceOptimizer> RunOptimizers::createSharded(std::vector<ParameterSlice> slices,
                                                             std::function<double(double)> sumOverRanks) {
  STRATA_CHECK(static_cast<bool>(sumOverRanks), "a sharded optimizer needs the sum over the ranks");
  auto optimizer = std::make_unique<Optimizer>(std::move(slices), options_);
  optimizer->setLossScaler(scaler_);
  optimizer->setNormReduction(std::move(sumOverRanks));
  return optimizer;
}

}  // namespace strata
