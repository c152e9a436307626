#include "strata/optim/loss_scaler.h"

#include <cmath>

#include "strata/error.h"

namespace strata {

LossScaler::LossScaler(const LossScalerOptions& options) : options_(options), scale_(options.initialScale) {
  if (!(options.initialScale > 0) || !std::isfinite(options.initialScale)) {
    fail("loss scale {}: expected a positive finite number", options.initialScale);
  }
  if (options.dynamic && (!(options.growthFactor > 1) || !(options.backoffFactor > 0 && options.backoffFactor < 1) ||
                          options.growthInterval < 1)) {
    fail(
        "dynamic loss scaling needs growth factor > 1, backoff factor in (0, 1) and growth interval >= 1; got {}, "
        "{}, {}",
        options.growthFactor, options.backoffFactor, options.growthInterval);
  }
}

void LossScaler::restore(const LossScalerState& state) {
  if (!(state.scale > 0) || !std::isfinite(state.scale) || state.goodSteps < 0 || state.skipped < 0) {
    fail("loss scaler state: scale {}, {} good steps, {} skipped is not a scaler's state", state.scale, state.goodSteps,
         state.skipped);
  }
  scale_ = state.scale;
  goodSteps_ = state.goodSteps;
  skipped_ = state.skipped;
}

bool LossScaler::update(bool gradientsFinite) {
  if (!gradientsFinite) {
    ++skipped_;
    goodSteps_ = 0;
    if (options_.dynamic) {
      scale_ *= options_.backoffFactor;
    }
    return false;
  }
  if (options_.dynamic && ++goodSteps_ == options_.growthInterval) {
    goodSteps_ = 0;
    // Growing past float32's range would make the seed itself inf.
    if (std::isfinite(static_cast<float>(scale_ * options_.growthFactor))) {
      scale_ *= options_.growthFactor;
    }
  }
  return true;
}

}  // namespace strata
