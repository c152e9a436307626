#pragma once

#include "strata/graphs/graph.h"

namespace strata {

// Note [Gelu fusion]: ONNX has no GELU before opset 20, so PyTorch's exporter (and Strata's own downgrade of Gelu-20,
// Note [Opsets above 17]) spells nn.GELU() as five elementwise nodes,
//   Mul(Mul(x, Add(Erf(Div(x, sqrt 2)), 1)), 0.5)
// (operands of Add and Mul in either order, Div by sqrt 2 or Mul by 1 / sqrt 2), each writing and reading a full
// activation and each with its own gradient rule in backward. This pass replaces every such chain by one Gelu node
// (the exact, erf form), whose kernel and gradient rule do the same arithmetic in one pass each, when the
// intermediate values have no other reader and are not graph outputs. The constants must be folded scalars (not
// trainable initializers) within 1e-6 of 1/sqrt(2) (or sqrt 2), 1 and 0.5. Value ids keep their meaning; the result
// must be specialised again. Returns the number of chains fused through `fused`.
Graph fuseGelu(const Graph& graph, int* fused = nullptr);

}  // namespace strata
