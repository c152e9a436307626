"""Writes a small ONNX model with Mish and SiLU spelled out as Mul(x, Tanh(Softplus(x))) and Mul(x, Sigmoid(x)),
as Strata's opset downgrade and PyTorch's exporter write them (for the cli.run_fuses_activation_chains test)."""
import sys

import onnx
from onnx import TensorProto, helper

x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [4, 8])
y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [4, 8])
nodes = [
    helper.make_node("Softplus", ["x"], ["sp"]),
    helper.make_node("Tanh", ["sp"], ["t"]),
    helper.make_node("Mul", ["x", "t"], ["mish"]),
    helper.make_node("Sigmoid", ["mish"], ["s"]),
    helper.make_node("Mul", ["s", "mish"], ["y"]),
]
graph = helper.make_graph(nodes, "activation_chains", [x], [y])
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), sys.argv[1])
