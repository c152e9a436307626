#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "strata/optim/loss_scaler.h"
#include "strata/optim/parameter_store.h"

namespace strata {

enum class OptimizerKind { Sgd, Adam, AdamW };

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::Sgd;
  double momentum = 0.0;  // SGD
  double dampening = 0.0;
  bool nesterov = false;
  double weightDecay = 0.0;  // SGD and Adam: L2 added to the gradient; AdamW: decoupled
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double maxGradNorm = 0.0;  // > 0: clip gradients by their global L2 norm first
};

OptimizerKind parseOptimizerKind(const std::string& name);

// Updates a ParameterStore from its gradients with one fused loop per flat buffer (PyTorch's update rules).
class Optimizer {
 public:
  Optimizer(ParameterStore& store, const OptimizerOptions& options);

  // One update with learning rate lr. Returns the gradients' global L2 norm (before clipping, loss scale divided
  // out). With a loss scaler, gradients that overflowed are not applied: the step is skipped (steps() does not
  // advance), the scaler backs off, and the norm returned is not finite.
  double step(double lr);
  // The gradients are multiplied by scaler->scale() (TrainingPlan::setLossScale); nullptr: they are not.
  void setLossScaler(LossScaler* scaler) { scaler_ = scaler; }
  LossScaler* lossScaler() const { return scaler_; }
  bool lastStepSkipped() const { return lastStepSkipped_; }
  std::int64_t steps() const { return steps_; }
  const OptimizerOptions& options() const { return options_; }

  // Optimizer state for checkpoints: momentum / moment buffers per group (category OptimizerState).
  const std::vector<Tensor>& stateBuffers() const { return state_; }
  void setSteps(std::int64_t steps) { steps_ = steps; }

 private:
  double globalGradNorm() const;

  ParameterStore& store_;
  OptimizerOptions options_;
  std::vector<Tensor> state_;  // SGD: [momentum per group]; Adam: [m per group, v per group]
  std::int64_t steps_ = 0;
  LossScaler* scaler_ = nullptr;
  bool lastStepSkipped_ = false;
};

}  // namespace strata
