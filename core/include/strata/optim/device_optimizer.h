#pragma once

#include "strata/device.h"
#include "strata/tensor.h"

namespace strata {

// The scalars of one SGD update of a flat buffer, as the CPU loop in optimizer.cpp uses them: a device kernel casts
// each to the parameter's arithmetic type and applies the same rule in the same order.
struct SgdStepScalars {
  double lr = 0.0;
  double gradScale = 1.0;  // gradient clipping factor, applied to the gradient first
  double weightDecay = 0.0;
  double momentum = 0.0;
  double dampening = 0.0;
  bool nesterov = false;
  bool firstStep = false;  // the momentum buffer starts as the first update itself
};

// The scalars of one Adam / AdamW update. The bias corrections are computed on the host, in double, exactly as the
// CPU loop does: correction1 = 1 - beta1^step, correction2 = 1 - beta2^step.
struct AdamStepScalars {
  double lr = 0.0;
  double gradScale = 1.0;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double epsilon = 1e-8;
  double weightDecay = 0.0;
  double correction1 = 1.0;
  double correction2 = 1.0;
  bool decoupled = false;  // AdamW: decay the parameter instead of adding weight decay to the gradient
};

// The fused update loops for flat buffers that live on a device. A backend registers them so the Optimizer (in
// strata_core, which never links a device runtime) can update parameters where they live. Every tensor is a
// contiguous flat buffer on the same device; state buffers have the parameter's dtype and size. Updates are
// enqueued on the device's compute stream, ordered after the kernels that produced the gradients.
class DeviceOptimizerKernels {
 public:
  virtual ~DeviceOptimizerKernels() = default;
  // The sum of the squares of the elements, accumulated in double. Blocks the host until the value is known.
  virtual double sumOfSquares(const Tensor& flat) = 0;
  // momentum is undefined when the optimizer keeps no momentum buffer.
  virtual void sgd(const Tensor& param, const Tensor& grad, const Tensor& momentum, const SgdStepScalars& step) = 0;
  virtual void adam(const Tensor& param, const Tensor& grad, const Tensor& m, const Tensor& v,
                    const AdamStepScalars& step) = 0;
};

// nullptr when no backend registered kernels for that device type.
DeviceOptimizerKernels* deviceOptimizerKernels(DeviceType type);
void registerDeviceOptimizerKernels(DeviceType type, DeviceOptimizerKernels* kernels);

}  // namespace strata
