#pragma once

#include <cstdint>

namespace strata {

// Dynamic loss scaling for float16 training (PyTorch's GradScaler rule). The loss gradient is multiplied by
// scale() so small float16 gradients do not flush to zero; the optimizer divides it out again. A step whose
// gradients overflowed (inf or NaN anywhere) is skipped and the scale multiplied by backoffFactor; after
// growthInterval good steps in a row the scale is multiplied by growthFactor.
struct LossScalerOptions {
  double initialScale = 65536.0;
  double growthFactor = 2.0;
  double backoffFactor = 0.5;
  std::int64_t growthInterval = 2000;
  bool dynamic = true;  // false: the scale stays initialScale and overflowing steps are still skipped
};

// What a checkpoint keeps of a scaler, so a resumed run scales and skips exactly as an uninterrupted one.
struct LossScalerState {
  double scale = 65536.0;
  std::int64_t goodSteps = 0;  // good steps since the last change of scale
  std::int64_t skipped = 0;
};

class LossScaler {
 public:
  explicit LossScaler(const LossScalerOptions& options = {});

  double scale() const { return scale_; }
  // Records one step's outcome; returns whether the optimizer may apply it (the gradients were finite).
  bool update(bool gradientsFinite);
  std::int64_t skippedSteps() const { return skipped_; }
  LossScalerState state() const { return {scale_, goodSteps_, skipped_}; }
  // Throws when the state could not have come from a scaler (a non-positive scale, negative counts).
  void restore(const LossScalerState& state);
  const LossScalerOptions& options() const { return options_; }

 private:
  LossScalerOptions options_;
  double scale_;
  std::int64_t goodSteps_ = 0;
  std::int64_t skipped_ = 0;
};

}  // namespace strata
