#include "strata/optim/lr_schedule.h"

#include <cmath>
#include <numbers>

#include "strata/error.h"

namespace strata {

LrScheduleKind parseLrScheduleKind(const std::string& name) {
  if (name == "constant")
    return LrScheduleKind::Constant;
  if (name == "step")
    return LrScheduleKind::Step;
  if (name == "cosine")
    return LrScheduleKind::Cosine;
  fail("unknown learning-rate schedule '{}' (choose constant, step or cosine)", name);
}

double learningRateAt(const LrScheduleOptions& o, std::int64_t step) {
  if (step < o.warmupSteps) {
    return o.baseLr * static_cast<double>(step + 1) / static_cast<double>(o.warmupSteps);
  }
  const std::int64_t t = step - o.warmupSteps;
  switch (o.kind) {
    case LrScheduleKind::Constant:
      return o.baseLr;
    case LrScheduleKind::Step:
      return o.stepSize > 0 ? o.baseLr * std::pow(o.gamma, static_cast<double>(t / o.stepSize)) : o.baseLr;
    case LrScheduleKind::Cosine: {
      const std::int64_t span = std::max<std::int64_t>(1, o.totalSteps - o.warmupSteps);
      const double progress = std::min(1.0, static_cast<double>(t) / static_cast<double>(span));
      return o.minLr + 0.5 * (o.baseLr - o.minLr) * (1.0 + std::cos(std::numbers::pi * progress));
    }
  }
  return o.baseLr;
}

}  // namespace strata
