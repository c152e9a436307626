#pragma once

// Note [Departed ranks]: with a strategy whose workers may die without ending the job (an asynchronous parameter
// server, StrategyRequirements::toleratesWorkerLoss), the launcher writes `job/departed/<rank>` into the job's
// store when a rank other than 0 dies. Whoever collects one figure per rank (the trainer's sums, the summary)
// waits for each rank's key or its departure, so a dead worker costs its share and never a hang.

#include <chrono>
#include <optional>
#include <string>

#include "strata/comm/store.h"

namespace strata {

inline std::string departedKey(int rank) {
  return departedRankKey(rank);
}

// The value at `key` once it exists, or nullopt once `rank` has departed; throws Error naming the key and the rank
// after `timeout`.
std::optional<std::string> getUnlessDeparted(Store& store, const std::string& key, int rank,
                                             std::chrono::milliseconds timeout);

}  // namespace strata
