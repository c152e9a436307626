#pragma once

#include <cstdint>

#include "strata/sdk/strategy.h"

namespace example {

// Local SGD: every rank steps its own optimizer and the ranks average their parameters every k steps
// (--strategy-opt k=4). Without a process group it is the single-process strategy.
class LocalSgdStrategy final : public strata::Strategy {
 public:
  void setup(strata::StrategyContext& context) override;
  void step(const strata::StepInfo& at, double lr) override;

 private:
  // All-reduces (Average) every flat parameter buffer in place.
  void averageParameters();

  strata::StrategyContext* context_ = nullptr;
  int k_ = 1;
};

}  // namespace example
