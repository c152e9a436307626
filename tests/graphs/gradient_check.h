#pragma once

// Checks an op's gradient rule (and the kernels it emits) against central finite differences.
#include <string>
#include <vector>

#include "strata/attributes.h"
#include "strata/tensor.h"

namespace strata::testing {

struct GradientCheckOptions {
  std::size_t outputCount = 1;  // the node's outputs; the loss projects every floating-point one
  // Inputs whose gradients are checked; empty: every floating-point input the rule does not declare
  // non-differentiable. Other inputs are plan-time constants.
  std::vector<std::size_t> wrt;
  double eps = 0;   // 0: 1e-6 for float64 inputs, 1e-2 for float32
  double rtol = 0;  // 0: 1e-5 for float64, 2e-2 for float32
  double atol = 0;  // 0: 1e-7 for float64, 1e-3 for float32
  bool training = true;
};

// Builds a one-node graph `opType(inputs)` whose checked inputs are parameters, appends the loss
// L = sum_k sum(R_k * Y_k) with fixed random R_k, differentiates it with Strata's autodiff, runs the training plan,
// and compares every checked input's gradient with (L(x + eps) - L(x - eps)) / 2eps computed with the forward
// kernel. Failures are reported with gtest (the input, the element, both values). Use float64 inputs for tight
// checks; keep inputs away from kinks (Relu at 0, max ties).
void expectGradientsMatchFiniteDifferences(const std::string& opType, const std::vector<Tensor>& inputs,
                                           const Attributes& attrs = {}, const GradientCheckOptions& options = {});

// The implementation() of the CPU kernel a training plan would create for `type` on these inputs (which kernel
// or path it takes), without running it.
std::string cpuKernelImplementation(const std::string& type, const std::vector<const Tensor*>& inputs,
                                    const Attributes& attrs, std::size_t outputCount);

// Runs a (gradient) kernel on float64 inputs and on the same values in float32 (other dtypes unchanged) and
// compares every output within rtol of the largest float64 magnitude of that output.
void expectFloat32MatchesFloat64(const std::string& opType, const std::vector<Tensor>& inputs64,
                                 const Attributes& attrs = {}, std::size_t outputCount = 1, double rtol = 1e-5);

// A convolution's gradient kernels in float32 against float64 (expectFloat32MatchesFloat64), on random X, W and dY
// drawn from `seed` onwards: ConvGrad with dX, dW and dB and with dX and dW, ConvGradInput, ConvGradWeight with dW
// and dB and with dW alone. Returns the float32 inputs and each kernel's attributes, to check the kernels chosen.
struct ConvGradientInputs {
  Tensor dy32, x32, w32;
  Attributes inputAttrs, weightAttrs;  // ConvGradInput's and ConvGradWeight's
};
ConvGradientInputs expectConvGradientsMatchFloat64(const Shape& x, const Shape& w, const Attributes& attrs,
                                                   unsigned seed);

// One of the CPU's convolution paths against the float64 kernels: Conv with and without a bias and with a fused ReLU
// (rtol 1e-5), every gradient kernel (expectConvGradientsMatchFloat64), and whether Conv, ConvGrad, ConvGradInput
// and ConvGradWeight name `marker` in their implementation exactly when `taken`. `x` and `w` are as stored
// (channels-last ones when `attrs` say channels_last = 1); seeds from `seed` onwards.
void expectConvolutionPathMatchesFloat64(const Shape& x, const Shape& w, const Attributes& attrs,
                                         const std::string& marker, bool taken, unsigned seed);

// A float64 tensor's values in float32.
Tensor toFloat32(const Tensor& t);

// Random tensors for gradient checks.
Tensor randomTensor(DType dtype, const Shape& shape, unsigned seed, double low = -1.0, double high = 1.0);

}  // namespace strata::testing
