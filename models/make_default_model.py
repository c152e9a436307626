#!/usr/bin/env python3
"""Writes Strata's built-in default model: a small CNN for 28x28 grayscale images (Fashion-MNIST), 10 classes.

conv 3x3 (1->32) - relu - maxpool 2 - conv 3x3 (32->64) - relu - maxpool 2 - flatten - gemm (3136->128) - relu -
gemm (128->10). Weights use PyTorch's default initialisation (uniform in +-1/sqrt(fan_in)), seeded, so the file is
reproducible. The batch dimension is symbolic ("N"); Strata specialises it at load time.
"""
import argparse

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper


def uniform(rng, shape, fan_in):
    bound = 1.0 / np.sqrt(fan_in)
    return rng.uniform(-bound, bound, size=shape).astype(np.float32)


def build(seed: int) -> onnx.ModelProto:
    rng = np.random.default_rng(seed)
    inits = []

    def param(name, shape, fan_in):
        inits.append(numpy_helper.from_array(uniform(rng, shape, fan_in), name))
        return name

    nodes = [
        helper.make_node("Conv", ["input", param("conv1.weight", (32, 1, 3, 3), 9), param("conv1.bias", (32,), 9)],
                         ["c1"], name="conv1", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c1"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], name="pool1", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", param("conv2.weight", (64, 32, 3, 3), 288), param("conv2.bias", (64,), 288)],
                         ["c2"], name="conv2", kernel_shape=[3, 3], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c2"], ["r2"], name="relu2"),
        helper.make_node("MaxPool", ["r2"], ["p2"], name="pool2", kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Flatten", ["p2"], ["f"], name="flatten", axis=1),
        helper.make_node("Gemm", ["f", param("fc1.weight", (128, 3136), 3136), param("fc1.bias", (128,), 3136)],
                         ["h"], name="fc1", transB=1),
        helper.make_node("Relu", ["h"], ["hr"], name="relu3"),
        helper.make_node("Gemm", ["hr", param("fc2.weight", (10, 128), 128), param("fc2.bias", (10,), 128)],
                         ["logits"], name="fc2", transB=1),
    ]
    graph = helper.make_graph(
        nodes, "strata_default_cnn",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 1, 28, 28])],
        [helper.make_tensor_value_info("logits", TensorProto.FLOAT, ["N", 10])],
        initializer=inits)
    model = helper.make_model(graph, producer_name="strata", opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.checker.check_model(model)
    return model


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("output")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    onnx.save(build(args.seed), args.output)


if __name__ == "__main__":
    main()
