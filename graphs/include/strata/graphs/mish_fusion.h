#pragma once

#include "strata/graphs/graph.h"

namespace strata {

// Note [Mish fusion]: ONNX's Mish (opset 18) is a function that Strata's opset downgrade spells as
// Mul(x, Tanh(Softplus(x))) for its ONNX library (opset 17), and older exporters write it so too: three passes over
// the activation (16M floats, one thread: 83 ms, where PyTorch's one kernel takes 98 and the fused node 19). This
// pass replaces each such chain by one Mish node (its MishGrad is one pass too) when the Softplus and Tanh outputs
// have no other reader and are not graph outputs. The node's float32 tanh(softplus(x)) is one exponential
// (tanhSoftplusFloat), within 3e-7 of the three nodes' two approximations. Applied where the Silu fusion is (CPU plans
// without mixed precision, `strata run` on the CPU). Value ids keep their meaning; the result must be specialised
// again. Returns the number of chains fused through `fused`.
Graph fuseMish(const Graph& graph, int* fused = nullptr);

}  // namespace strata
