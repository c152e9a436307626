#!/usr/bin/env python3
"""FSDP's per-rank memory, from the allocator's exact figures in summary.json.

ResNet-18 (11.2M parameters, exported by torchvision) trains 3 Adam steps on N ranks with fsdp shard=full, grad_op
and none. For each rank, the model state (the training peaks of parameters, gradients and optimizer state, summed:
an upper bound of their peak together) must satisfy
  full:    <= 1.05 x 16 Psi / N + 2 x 8 x (largest unit's elements) + 16 x padding elements   (Adam, float32)
and full < grad_op < none. Psi: the parameter count.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
import torchvision


def run(strata, model, out, nproc, level):
    command = [strata, "train", model, "--data", "synthetic", "--synthetic-samples", str(8 * nproc * 4),
               "--batch-size", "8", "--max-steps", "3", "--nproc", str(nproc), "--threads", "1", "--optimizer",
               "adam", "--lr", "0.001", "--strategy", "fsdp", "--strategy-opt", f"shard={level}", "--out", out]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stdout, result.stderr)
        raise SystemExit(f"{' '.join(command)} failed")
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        return json.load(f)


def model_state(rank):
    b = rank["training_memory_breakdown"]
    return b["parameters"] + b["gradients"] + b["optimizer_state"]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--nproc", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, "resnet18.onnx")
        torch.manual_seed(0)
        torch.onnx.export(torchvision.models.resnet18(num_classes=10).train(), torch.randn(8, 3, 32, 32), model,
                          opset_version=17, do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
        states = {}
        ok = True
        for level in ("full", "grad_op", "none"):
            summary = run(args.strata, model, os.path.join(tmp, level), args.nproc, level)
            psi = summary["params"]
            states[level] = max(model_state(r) for r in summary["ranks"])
            if level != "full":
                continue
            for rank in summary["ranks"]:
                bound = (1.05 * 16 * psi / args.nproc + 2 * 8 * rank["fsdp_largest_unit_elements"]
                         + 16 * rank["fsdp_padding_elements"])
                state = model_state(rank)
                print(f"full, rank {rank['rank']} of {args.nproc}: model state {state / 2**20:.1f} MiB, bound "
                      f"{bound / 2**20:.1f} MiB ({psi} parameters, largest unit "
                      f"{int(rank['fsdp_largest_unit_elements'])} elements)")
                ok &= state <= bound
        print("model state per rank: " + ", ".join(f"{k} {v / 2**20:.1f} MiB" for k, v in states.items()))
        ok &= states["full"] < states["grad_op"] < states["none"]
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
