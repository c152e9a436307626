// A plugin that reaches past the SDK into the executor. Plugin targets get core/sdk/include as their only Strata
// include path, so this must not compile: the ctest plugin_outside_sdk_does_not_compile builds it and expects the
// compiler to report the missing header.
#include "strata/executor.h"
#include "strata/sdk/strategy.h"

namespace {

class OutsideSdkStrategy final : public strata::Strategy {
 public:
  void setup(strata::StrategyContext& /*context*/) override {}
  void step(const strata::StepInfo& /*at*/, double /*lr*/) override {}
};

}  // namespace

STRATA_EXPORT_STRATEGY(OutsideSdkStrategy, "outside_sdk", "0.0.1", "includes a header outside the SDK")
