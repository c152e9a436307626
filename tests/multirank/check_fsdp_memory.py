#!/usr/bin/env python3
"""FSDP's per-rank memory, from the allocator's exact figures in summary.json.

ResNet-18 (11.2M parameters, exported by torchvision; --model picks another) trains 3 Adam steps on N ranks with fsdp shard=full, grad_op
and none. For each rank, the model state (the training peaks of parameters, gradients and optimizer state, summed:
an upper bound of their peak together) must satisfy
  full:    <= 1.05 x 16 Psi / N + 2 x 8 x (largest unit's elements) + 16 x padding elements   (Adam, float32)
and full < grad_op < none. Psi: the parameter count.

Before the runs, `strata inspect --strategy fsdp --world-size N` predicts each level's per-rank memory from the
static plan (graphs/fsdp_memory.h); every rank's model state, each of its three categories, its activations and
its communication buffers must be within --prediction-tolerance (5%) of the prediction. Workspace (oneDNN's
reordered weights) is not predicted, so neither is the total peak.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

import torch
import torchvision


def run(strata, model, out, nproc, level, options):
    command = [strata, "train", model, "--data", "synthetic", "--synthetic-samples", str(8 * nproc * 4),
               "--batch-size", "8", "--max-steps", "3", "--nproc", str(nproc), "--threads", "1", "--optimizer",
               "adam", "--lr", "0.001", "--strategy", "fsdp", "--strategy-opt", f"shard={level}", "--out", out]
    for option in options:
        command += ["--strategy-opt", option]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stdout, result.stderr)
        raise SystemExit(f"{' '.join(command)} failed")
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        return json.load(f)


def predict(strata, model, nproc, tmp, options):
    path = os.path.join(tmp, "prediction.json")
    command = [strata, "inspect", model, "--input-shape", "8,3,32,32", "--strategy", "fsdp", "--world-size",
               str(nproc), "--optimizer", "adam", "--prediction-json", path]
    for option in options:
        command += ["--strategy-opt", option]
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stdout, result.stderr)
        raise SystemExit(f"{' '.join(command)} failed")
    print(result.stdout[result.stdout.find("fsdp on"):])
    with open(path, encoding="utf-8") as f:
        return json.load(f)["levels"]


def check_prediction(level, predicted, rank, tolerance):
    """Whether the rank's training peaks are within tolerance of the prediction (model state and its parts)."""
    ok = True
    measured = rank["training_memory_breakdown"]
    pairs = [(k, predicted["peak_bytes"][k], measured[k]) for k in ("parameters", "gradients", "optimizer_state")]
    pairs.append(("model state", predicted["model_state_bytes"], model_state(rank)))
    # Small categories (communication is 0 under shard=none) are compared against at least 1 MiB.
    pairs += [(k, predicted["peak_bytes"][k], measured[k]) for k in ("activations", "communication")]
    for name, p, m in pairs:
        error = abs(m - p) / max(p, 2**20 if name in ("activations", "communication") else 1)
        ok &= error <= tolerance
        print(f"{level}, rank {rank['rank']}: {name} predicted {p / 2**20:.2f} MiB, measured {m / 2**20:.2f} MiB "
              f"({100 * error:.2f}%)")
    print(f"{level}, rank {rank['rank']}: not predicted: workspace {measured['workspace'] / 2**20:.1f} MiB; peak "
          f"predicted without it {predicted['total_peak_bytes'] / 2**20:.1f} MiB, measured with it "
          f"{rank['training_peak_memory_bytes'] / 2**20:.1f} MiB")
    return ok


def model_state(rank):
    b = rank["training_memory_breakdown"]
    return b["parameters"] + b["gradients"] + b["optimizer_state"]


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--prediction-tolerance", type=float, default=0.05)
    parser.add_argument("--model", default="resnet18", help="a torchvision model (resnet18, convnext_tiny)")
    parser.add_argument("--strategy-opt", action="append", default=[], help="passed to every run and prediction")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        model = os.path.join(tmp, f"{args.model}.onnx")
        torch.manual_seed(0)
        # ConvNeXt's stochastic depth off: random drop-path does not export (and Strata has none).
        extra = {"stochastic_depth_prob": 0.0} if args.model.startswith("convnext") else {}
        torch.onnx.export(getattr(torchvision.models, args.model)(num_classes=10, **extra).train(),
                          torch.randn(8, 3, 32, 32), model, opset_version=17, do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
        predicted = predict(args.strata, model, args.nproc, tmp, args.strategy_opt)
        states = {}
        ok = True
        for level in ("full", "grad_op", "none"):
            summary = run(args.strata, model, os.path.join(tmp, level), args.nproc, level, args.strategy_opt)
            psi = summary["params"]
            states[level] = max(model_state(r) for r in summary["ranks"])
            for rank in summary["ranks"]:
                ok &= check_prediction(level, predicted[level], rank, args.prediction_tolerance)
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
