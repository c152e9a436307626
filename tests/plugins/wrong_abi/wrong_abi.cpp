// A plugin built against a different SDK: its info record carries another ABI version. Its factory aborts, so a
// host that called anything after reading the info record would crash the test instead of reporting the mismatch.
#include <cstdlib>

#include "strata/sdk/strategy.h"

extern "C" __attribute__((visibility("default"))) const ::strata::StrategyInfo* strata_strategy_info() noexcept {
  static const ::strata::StrategyInfo info{"wrong_abi", "9.9.9", "built for another strategy ABI",
                                           ::strata::kStrategyAbiVersion + 41};
  return &info;
}

extern "C" __attribute__((visibility("default"))) ::strata::StrategyHandle* strata_create_strategy(
    char* /*error*/, std::size_t /*errorSize*/) noexcept {
  std::abort();
}

extern "C" __attribute__((visibility("default"))) void strata_destroy_strategy(
    ::strata::StrategyHandle* /*handle*/) noexcept {
  std::abort();
}
