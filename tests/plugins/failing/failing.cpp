// A plugin whose strategy constructor throws: the factory must report the message through its error buffer.
#include <stdexcept>

#include "strata/sdk/strategy.h"

namespace {

class FailingStrategy final : public strata::Strategy {
 public:
  FailingStrategy() { throw std::runtime_error("failing strategy: no accelerator named 'quantum0' is attached"); }
  void setup(strata::StrategyContext& /*context*/) override {}
  void step(const strata::StepInfo& /*at*/, double /*lr*/) override {}
};

}  // namespace

STRATA_EXPORT_STRATEGY(FailingStrategy, "failing", "0.0.1", "its factory always fails")
