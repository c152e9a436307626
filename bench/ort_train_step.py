#!/usr/bin/env python3
"""ONNX Runtime Training's step time on one training-mode .onnx file: the peer half of bench/cpu_peers.py.

Runs in the venv of ../shared/tools/peer-ort.sh. Builds the training artifacts (cross-entropy loss, plain SGD: ORT's
SGD has no momentum; or AdamW), then times forward + backward + optimizer step + gradient reset on a fixed random batch
and prints one JSON line: {"ms": [per-step milliseconds, warm-up excluded]}. With --tokens VOCAB the model is a
language model (bench/gpt_step.py): int64 token ids [N, T] in, logits [N, T, VOCAB] out, flattened to [N*T, VOCAB]
by a Reshape appended to the graph so that ORT's cross-entropy (classes on axis 1) sees every position.
"""
import argparse
import json
import os
import tempfile
import time

import numpy as np
import onnx
import onnxruntime
from onnxruntime.training import artifacts
from onnxruntime.training.api import CheckpointState, Module, Optimizer


def flatten_positions(model, vocab):
    """The graph's output [N, T, V] becomes [N*T, V]: a Reshape appended, the output renamed to it."""
    output = model.graph.output[0]
    shape = onnx.numpy_helper.from_array(np.array([-1, vocab], dtype=np.int64), "bench_flat_shape")
    model.graph.initializer.append(shape)
    model.graph.node.append(onnx.helper.make_node("Reshape", [output.name, shape.name], ["bench_flat_logits"]))
    # ORT's LayerNormalization gradient reads the saved mean and inverse deviation: optional outputs PyTorch's
    # export leaves off (same values, named so the gradient builder finds them).
    for node in model.graph.node:
        if node.op_type == "LayerNormalization" and len(node.output) == 1:
            node.output.extend([f"{node.output[0]}_mean", f"{node.output[0]}_inv_std_dev"])
    del model.graph.output[:]
    model.graph.output.append(onnx.helper.make_tensor_value_info("bench_flat_logits", onnx.TensorProto.FLOAT,
                                                                 ["positions", vocab]))


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("model")
    parser.add_argument("--shape", required=True, help="input shape, e.g. 32,3,32,32")
    parser.add_argument("--classes", type=int, default=10)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=2)
    parser.add_argument("--tokens", type=int, help="a language model of this vocabulary: token ids in, [N, T, V] out")
    parser.add_argument("--optimizer", choices=("sgd", "adamw"), default="sgd")
    parser.add_argument("--per-pixel", action="store_true",
                        help="a segmentation model: [N, C, H, W] logits, a class per pixel [N, H, W]")
    args = parser.parse_args()
    shape = [int(d) for d in args.shape.split(",")]
    model = onnx.load(args.model)
    # Trainable: the float initializers a gradient can reach (weights and biases); BN running statistics are not.
    frozen_suffixes = ("running_mean", "running_var", "num_batches_tracked")
    trainable = [i.name for i in model.graph.initializer
                 if i.data_type == onnx.TensorProto.FLOAT and not i.name.endswith(frozen_suffixes)]
    frozen = [i.name for i in model.graph.initializer if i.name not in trainable]
    if args.tokens:
        flatten_positions(model, args.tokens)
    with tempfile.TemporaryDirectory() as tmp:
        artifacts.generate_artifacts(model, requires_grad=trainable, frozen_params=frozen,
                                     loss=artifacts.LossType.CrossEntropyLoss,
                                     optimizer=(artifacts.OptimType.AdamW if args.optimizer == "adamw"
                                                else artifacts.OptimType.SGD), artifact_directory=tmp)
        options = onnxruntime.SessionOptions()
        options.intra_op_num_threads = args.threads
        options.inter_op_num_threads = 1
        state = CheckpointState.load_checkpoint(os.path.join(tmp, "checkpoint"))
        module = Module(os.path.join(tmp, "training_model.onnx"), state, session_options=options)
        optimizer = Optimizer(os.path.join(tmp, "optimizer_model.onnx"), module)
        optimizer.set_learning_rate(0.01 if args.optimizer == "sgd" else 1e-3)
        module.train()
        rng = np.random.default_rng(0)
        if args.tokens:
            x = rng.integers(0, args.tokens, size=shape).astype(np.int64)
            y = rng.integers(0, args.tokens, size=(shape[0] * shape[1],)).astype(np.int64)
        else:
            x = rng.standard_normal(shape).astype(np.float32)
            label_shape = (shape[0], *shape[2:]) if args.per_pixel else (shape[0],)
            y = rng.integers(0, args.classes, size=label_shape).astype(np.int64)
        times = []
        for i in range(args.steps + args.warmup):
            start = time.perf_counter()
            module(x, y)
            optimizer.step()
            module.lazy_reset_grad()
            if i >= args.warmup:
                times.append((time.perf_counter() - start) * 1000.0)
    print(json.dumps({"ms": times}))


if __name__ == "__main__":
    main()
