#pragma once

#include <cstdint>
#include <string>

namespace strata {

enum class LrScheduleKind { Constant, Step, Cosine };

struct LrScheduleOptions {
  LrScheduleKind kind = LrScheduleKind::Constant;
  double baseLr = 0.01;
  std::int64_t warmupSteps = 0;  // linear warm-up from 0 to baseLr over these steps
  std::int64_t stepSize = 0;     // Step: multiply by gamma every stepSize steps
  double gamma = 0.1;
  std::int64_t totalSteps = 0;  // Cosine: decays to minLr at totalSteps
  double minLr = 0.0;
};

LrScheduleKind parseLrScheduleKind(const std::string& name);

// The learning rate for a (0-based) step.
double learningRateAt(const LrScheduleOptions& options, std::int64_t step);

}  // namespace strata
