#pragma once

// LARS and LAMB: the update rules that scale each layer's step by a trust ratio (Note [Layer-wise trust ratios]).

#include <cstdint>
#include <vector>

#include "strata/optim/optimizer.h"

namespace strata {

inline bool layerAdaptive(OptimizerKind kind) {
  return kind == OptimizerKind::Lars || kind == OptimizerKind::Lamb;
}

// One update of a host slice whose parameters `layers` lists. `first` is LARS's momentum buffer (undefined without
// momentum) or LAMB's first moment, `second` LAMB's second moment; `step` counts this update (from 1).
void layerAdaptiveUpdate(const ParameterSlice& slice, const std::vector<LayerSpan>& layers,
                         const OptimizerOptions& options, const Tensor& first, const Tensor& second, double lr,
                         double gradScale, std::int64_t step);

}  // namespace strata
