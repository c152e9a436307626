"""Writes a small ONNX model with Mish and SiLU spelled out as Mul(x, Tanh(Softplus(x))) and Mul(x, Sigmoid(x)),
as Strata's opset downgrade and PyTorch's exporter write them, then a BatchNormalization and a residual Add each read
only by a Relu, then a Conv, its BatchNormalization and a Relu (which `strata run` folds and fuses into the Conv), then a Conv and a
Clip(0, 6) (fused into it), for the cli.run_fuses_activation_chains test."""
import sys

import onnx
from onnx import TensorProto, helper

x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 2, 2])
z = helper.make_tensor_value_info("z", TensorProto.FLOAT, [2, 4, 2, 2])
norm = [helper.make_tensor(name, TensorProto.FLOAT, [4], values)
        for name, values in (("scale", [1.0, 0.5, 2.0, 1.5]), ("shift", [0.1, -0.2, 0.0, 0.3]),
                             ("mean", [0.0, 0.1, -0.1, 0.2]), ("var", [1.0, 2.0, 0.5, 1.0]))]
nodes = [
    helper.make_node("Softplus", ["x"], ["sp"]),
    helper.make_node("Tanh", ["sp"], ["t"]),
    helper.make_node("Mul", ["x", "t"], ["mish"]),
    helper.make_node("Sigmoid", ["mish"], ["s"]),
    helper.make_node("Mul", ["s", "mish"], ["y"]),
    helper.make_node("BatchNormalization", ["y", "scale", "shift", "mean", "var"], ["n"]),
    helper.make_node("Relu", ["n"], ["r"]),
    helper.make_node("Add", ["r", "x"], ["sum"]),
    helper.make_node("Relu", ["sum"], ["z0"]),
    helper.make_node("Conv", ["z0", "conv_w", "conv_b"], ["c"]),
    helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["cn"]),
    helper.make_node("Relu", ["cn"], ["z1"]),
    helper.make_node("Conv", ["z1", "conv_w"], ["c2"]),
    helper.make_node("Clip", ["c2", "zero", "six"], ["z"]),
]
conv = [helper.make_tensor("conv_w", TensorProto.FLOAT, [4, 4, 1, 1], [0.5 - 0.1 * i for i in range(16)]),
        helper.make_tensor("conv_b", TensorProto.FLOAT, [4], [0.1, -0.1, 0.2, 0.0]),
        helper.make_tensor("zero", TensorProto.FLOAT, [], [0.0]), helper.make_tensor("six", TensorProto.FLOAT, [], [6.0])]
graph = helper.make_graph(nodes, "activation_chains", [x], [z], initializer=norm + conv)
onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), sys.argv[1])
