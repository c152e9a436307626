// Resize's gradient rule: the adjoint of its sampling with respect to X, the ResizeGrad kernel
// (core/backend/cpu/resize_ops.cpp, Note [Separable resize]). roi, scales and sizes are plan-time constants and
// carry no gradient.

#include "strata/graphs/gradient_registry.h"

namespace strata::gradients {
namespace {

std::vector<int> resizeGradient(GradientBuilder& b) {
  std::vector<int> grads(b.node().inputs.size(), kNoValue);
  const int dy = b.outputGrad(0);
  if (dy == kNoValue || !b.needsInputGrad(0))
    return grads;
  // ResizeGrad reads the same attributes (mode, coordinates, nearest rounding, cubic coefficient, exclude_outside,
  // channels_last) and the same sampling operands; input_shape is X's shape as stored (channels-last if the node is).
  Attributes attrs = b.node().attrs;
  attrs.set("input_shape", b.meta(b.input(0)).shape);
  std::vector<int> inputs{dy};
  for (std::size_t i = 1; i < 4; ++i)
    inputs.push_back(b.input(i));
  while (inputs.back() == kNoValue)
    inputs.pop_back();
  grads[0] = b.emit1("ResizeGrad", inputs, std::move(attrs));
  return grads;
}

}  // namespace

void registerResizeGradients(GradientRegistry& registry) {
  registry.add("Resize", resizeGradient, {1, 2, 3});
}

}  // namespace strata::gradients
