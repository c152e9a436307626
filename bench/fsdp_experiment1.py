#!/usr/bin/env python3
"""The study's Experiment 1 (DDP vs FSDP, Table II of ../shared/design/STUDY.md) at CPU scale: VGG16,
EfficientNetV2-S and ConvNeXt-Tiny (torchvision, 10 classes, 32x32 inputs, stochastic depth off), Strata's `ddp`
and `fsdp` (shard=full, module units) on 2 and 4 ranks x 1 thread, gloo, SGD with momentum, the same per-rank batch.
Per run: the median step time rank 0 logs after two warm-up steps, samples per second, and the largest per-rank
training peak and model state (parameters, gradients, optimizer state) from summary.json.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

import torch
import torchvision

def vgg16_32():
    """VGG16 for 32x32 inputs (the CIFAR-10 size of the study): the features end at 1x1, so the 7x7 adaptive pool
    (which does not export at this size) is dropped and the first classifier layer takes 512 features (33.6M
    parameters instead of 134M)."""
    model = torchvision.models.vgg16(num_classes=10)
    model.avgpool = torch.nn.Identity()
    model.classifier[0] = torch.nn.Linear(512, 4096)
    return model


MODELS = {
    "vgg16": vgg16_32,
    "efficientnet_v2_s": lambda: torchvision.models.efficientnet_v2_s(num_classes=10, stochastic_depth_prob=0.0),
    "convnext_tiny": lambda: torchvision.models.convnext_tiny(num_classes=10, stochastic_depth_prob=0.0),
}
STRATEGIES = {"ddp": ["--strategy", "ddp"], "fsdp": ["--strategy", "fsdp", "--strategy-opt", "shard=full"]}


def run(strata, model, batch, steps, nproc, strategy, out, port):
    start = time.time()
    subprocess.run([strata, "train", model, "--data", "synthetic", "--synthetic-samples",
                    str(nproc * batch * (steps + 2)), "--batch-size", str(batch), "--max-steps", str(steps + 2),
                    "--nproc", str(nproc), "--threads", "1", "--master-port", str(port), "--optimizer", "sgd",
                    "--momentum", "0.9", "--lr", "0.01", "--lr-schedule", "constant", "--out", out, "--log-every",
                    "1"] + STRATEGIES[strategy], check=True, capture_output=True)
    wall = time.time() - start
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        ranks = json.load(f)["ranks"]
    step_ms = statistics.median(r["step_time_ms"] for r in records if r["type"] == "step" and r["step"] > 2)
    state = max(sum(r["training_memory_breakdown"][k] for k in ("parameters", "gradients", "optimizer_state"))
                for r in ranks)
    peak = max(r["training_peak_memory_bytes"] for r in ranks)
    return step_ms, nproc * batch / step_ms * 1000, state, peak, wall


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", default=os.path.join(os.path.dirname(__file__), "..", "build", "cli", "strata"))
    parser.add_argument("--models", default="vgg16,efficientnet_v2_s,convnext_tiny")
    parser.add_argument("--nprocs", default="2,4")
    parser.add_argument("--batch", type=int, default=8, help="per rank")
    parser.add_argument("--steps", type=int, default=4)
    args = parser.parse_args()
    print(f"Strata {args.strata}; ranks x 1 thread, gloo, SGD momentum 0.9, batch {args.batch} per rank, "
          f"{args.steps} timed steps after 2 warm-up steps")
    print(f"{'model':<19}{'ranks':>6}{'strategy':>9}{'step ms':>10}{'samples/s':>11}{'fsdp/ddp':>9}"
          f"{'model state MiB':>17}{'peak MiB':>10}{'wall s':>8}")
    port = 29760
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            torch.manual_seed(0)
            path = os.path.join(tmp, f"{name}.onnx")
            torch.onnx.export(MODELS[name]().train(), torch.randn(args.batch, 3, 32, 32), path, opset_version=17,
                              do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
            for nproc in (int(n) for n in args.nprocs.split(",")):
                ddp_ms = None
                for strategy in STRATEGIES:
                    port += 1
                    ms, rate, state, peak, wall = run(args.strata, path, args.batch, args.steps, nproc, strategy,
                                                      os.path.join(tmp, f"{name}-{nproc}-{strategy}"), port)
                    ddp_ms = ms if strategy == "ddp" else ddp_ms
                    print(f"{name:<19}{nproc:>6}{strategy:>9}{ms:>10.0f}{rate:>11.1f}{ms / ddp_ms:>9.2f}"
                          f"{state / 2**20:>17.0f}{peak / 2**20:>10.0f}{wall:>8.0f}", flush=True)


if __name__ == "__main__":
    main()
