#pragma once

#include <string>
#include <utility>
#include <vector>

#include "strata/executor.h"
#include "strata/optim/parameter_store.h"

namespace strata {

struct StepResult {
  Tensor loss;                  // scalar, on the program's device
  std::vector<Tensor> outputs;  // the model's outputs, in graph-output order
};

// What the Trainer trains: a model with its loss and backward pass (graphs' TrainingPlan implements it, so core
// does not depend on graphs).
class TrainableProgram {
 public:
  virtual ~TrainableProgram() = default;
  // Forward and backward on one batch in training mode; gradients land in parameters()' gradient buffers
  // (overwritten, or added to them when the executor accumulates gradients).
  virtual StepResult step(const std::vector<Tensor>& inputs, const Tensor& labels) = 0;
  // Forward in evaluation mode with the current parameters.
  virtual std::vector<Tensor> evaluate(const std::vector<Tensor>& inputs) = 0;
  virtual ParameterStore& parameters() = 0;
  // Tensors updated in place that are not trained (batch-norm running statistics), by name.
  virtual const std::vector<std::pair<std::string, Tensor>>& buffers() const = 0;
  // The training step's executor: hooks, run count, gradient accumulation mode, synchronisation.
  virtual Executor& executor() = 0;
  // The loss gradient's seed is lossScale x gradientScale: fp16 loss scaling, and 1/K for K micro-batches.
  virtual void setLossScale(double scale) = 0;
  virtual void setGradientScale(double scale) = 0;
  // Parameters stored in another layout than the model's (convolution weights as [K, spatial..., C / group] in a
  // channels-last plan), by name: checkpoints record them, and a resume needs the same.
  virtual std::vector<std::string> channelsLastParameters() const { return {}; }
};

}  // namespace strata
