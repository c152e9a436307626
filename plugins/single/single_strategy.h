#pragma once

#include "strata/sdk/strategy.h"

namespace strata::plugins {

// One process, no communication: the optimizer steps on the local gradients. The default strategy.
class SingleStrategy final : public Strategy {
 public:
  void setup(StrategyContext& context) override;
  void step(const StepInfo& at, double lr) override;

 private:
  StrategyContext* context_ = nullptr;
};

}  // namespace strata::plugins
