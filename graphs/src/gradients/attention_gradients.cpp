// The gradient rule of fused attention (Note [Fused attention], graphs/attention_fusion.h).

#include "strata/graphs/gradient_registry.h"

#include <vector>

namespace strata::gradients {

// ScaledDotProductAttention(Q, K, V, scale) -> Y, LSE: one ScaledDotProductAttentionGrad node gives dQ, dK and dV
// from dY (and dLSE when the log-sum-exp is read), the operands, Y and the rows' log-sum-exp, recomputing the
// probabilities block by block (Note [Attention in row blocks] in core/backend/cpu/attention_ops.cpp).
void registerAttentionGradients(GradientRegistry& registry) {
  registry.add("ScaledDotProductAttention",
               [](GradientBuilder& b) {
                 if (b.outputGrad(0) == kNoValue && b.outputGrad(1) == kNoValue) {
                   return std::vector<int>(4, kNoValue);
                 }
                 // A node built without the log-sum-exp output (the fusion pass always keeps it) runs once more to get
                 // it.
                 const int lse = b.output(1) != kNoValue
                                     ? b.output(1)
                                     : b.emit("ScaledDotProductAttention",
                                              {b.input(0), b.input(1), b.input(2), b.input(3)}, b.node().attrs, 2)[1];
                 // Without dY (only the log-sum-exp is read downstream) the kernel still needs one: zeros.
                 const int dy = b.outputGrad(0) != kNoValue
                                    ? b.outputGrad(0)
                                    : b.emit1("Mul", {b.output(0), b.scalarLike(0.0, b.output(0))});
                 std::vector<int> inputs{dy, b.input(0), b.input(1), b.input(2), b.output(0), lse, b.input(3)};
                 if (b.outputGrad(1) != kNoValue) {
                   inputs.push_back(b.outputGrad(1));
                 }
                 std::vector<int> grads = b.emit("ScaledDotProductAttentionGrad", inputs, b.node().attrs, 3);
                 grads.push_back(kNoValue);  // the scale
                 return grads;
               },
               {3});
}

}  // namespace strata::gradients
