#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "strata/optim/loss_scaler.h"
#include "strata/optim/parameter_store.h"
#include "strata/sdk/optimizer.h"

namespace strata {

// Lars and Lamb adapt each layer's step to the ratio of its weights' norm to its update's (Note [Layer-wise trust
// ratios] in src/optim/layer_adaptive.cpp).
enum class OptimizerKind { Sgd, Adam, AdamW, Lars, Lamb };

struct OptimizerOptions {
  OptimizerKind kind = OptimizerKind::Sgd;
  double momentum = 0.0;  // SGD
  double dampening = 0.0;
  bool nesterov = false;
  double weightDecay = 0.0;  // SGD and Adam: L2 added to the gradient; AdamW: decoupled
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double maxGradNorm = 0.0;         // > 0: clip gradients by their global L2 norm first
  double trustCoefficient = 0.001;  // LARS's eta
};

// One parameter inside a flat buffer, for the layer-wise optimizers: its elements and whether its update is
// adapted (two or more dimensions; biases and normalisation parameters are not, as the LARS and LAMB papers do).
struct LayerSpan {
  std::int64_t offset = 0;
  std::int64_t numel = 0;
  bool adapted = false;
};

OptimizerKind parseOptimizerKind(const std::string& name);

// How many state tensors the update rule keeps per slice (SGD: momentum or none; Adam: two moments).
std::size_t optimizerStatesPerSlice(const OptimizerOptions& options);

// Updates parameters from their gradients with one fused loop per slice (PyTorch's update rules): over a
// ParameterStore, the slices are its flat buffers; over any slices (a shard), its state covers those slices only.
class Optimizer final : public SliceOptimizer {
 public:
  Optimizer(ParameterStore& store, const OptimizerOptions& options);
  // Slices of equal-length parameter and gradient views, each pair of one dtype and device.
  Optimizer(std::vector<ParameterSlice> slices, const OptimizerOptions& options);
  // Over slices whose parameters are known: layers[s] lists the parameters of slice s (the layer-wise optimizers
  // need them and refuse slices without).
  Optimizer(std::vector<ParameterSlice> slices, std::vector<std::vector<LayerSpan>> layers,
            const OptimizerOptions& options);

  // One update with learning rate lr. Returns the L2 norm of the slices' gradients (before clipping, loss scale
  // divided out; 0 when neither clipping nor a scaler needs it). With a loss scaler, gradients that overflowed are
  // not applied: the step is skipped (steps() does not advance), the scaler backs off, and the norm returned is
  // not finite. Bumps the parameters' storage versions, so kernel caches see the update.
  double step(double lr) override;
  // The gradients are multiplied by scaler->scale() (TrainingPlan::setLossScale); nullptr: they are not.
  void setLossScaler(LossScaler* scaler) { scaler_ = scaler; }
  LossScaler* lossScaler() const { return scaler_; }
  // The norm for clipping and loss scaling from the sum of squares of every rank's slices: `sumOverRanks` takes
  // this optimizer's and returns the group's (Note [Sharded optimizers] in strata/sdk/optimizer.h).
  void setNormReduction(std::function<double(double)> sumOverRanks) { sumOverRanks_ = std::move(sumOverRanks); }
  bool lastStepSkipped() const { return lastStepSkipped_; }
  std::int64_t steps() const override { return steps_; }
  void setSteps(std::int64_t steps) override { steps_ = steps; }
  const OptimizerOptions& options() const { return options_; }
  const std::vector<ParameterSlice>& slices() const { return slices_; }

  // Momentum / moment buffers, category OptimizerState: SGD [momentum per slice]; Adam [m per slice, v per slice].
  std::vector<Tensor> state() const override { return state_; }
  const std::vector<Tensor>& stateBuffers() const { return state_; }

 private:
  double gradNorm() const;
  void update(std::size_t s, double lr, double gradScale);

  std::vector<ParameterSlice> slices_;
  std::vector<std::vector<LayerSpan>> layers_;
  OptimizerOptions options_;
  std::vector<Tensor> state_;
  std::int64_t steps_ = 0;
  LossScaler* scaler_ = nullptr;
  std::function<double(double)> sumOverRanks_;
  bool lastStepSkipped_ = false;
};

}  // namespace strata
