#include "single_strategy.h"

#include "strata/error.h"

namespace strata::plugins {

void SingleStrategy::setup(StrategyContext& context) {
  // No options: a misspelt --strategy-opt must not pass silently.
  for (const auto& [key, value] : context.options()) {
    fail("strategy 'single' does not accept option '{}' (--strategy-opt {}={}): it takes no options", key, key, value);
  }
  context_ = &context;
}

void SingleStrategy::step(const StepInfo& /*at*/, double lr) {
  STRATA_CHECK(context_ != nullptr, "strategy 'single': step called before setup");
  context_->optimizers().full().step(lr);
}

}  // namespace strata::plugins

STRATA_EXPORT_STRATEGY(strata::plugins::SingleStrategy, "single", "0.1.0",
                       "single process: the optimizer steps on local gradients (the default)")
