#!/usr/bin/env python3
"""FSDP step time and per-rank memory beside DDP: Strata's `fsdp` plugin (shard=full, grad_op) against Strata's `ddp`,
2 ranks x 1 thread, Gloo, same per-rank batch, Adam, rounds interleaved; medians of the per-step times rank 0 logs
after two warm-up steps, and rank 0's training-time model-state peaks (parameters, gradients, optimizer state) from
summary.json.

PyTorch FSDP2 (torch.distributed.fsdp.fully_shard) is the peer this benchmark should also run; it needs the current
PyTorch (../shared/tools/peer-torch.sh). Without it (Debian's torch 1.13 has no fully_shard) the peer row says so.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

import torch
import torchvision

CASES = {
    "resnet18": (lambda: torchvision.models.resnet18(num_classes=10), (16, 3, 32, 32)),
    "convnext_tiny": (lambda: torchvision.models.convnext_tiny(num_classes=10), (8, 3, 32, 32)),
}
STRATEGIES = [("ddp", []), ("fsdp grad_op", ["--strategy-opt", "shard=grad_op"]),
              ("fsdp full", ["--strategy-opt", "shard=full"]),
              ("fsdp full 1M", ["--strategy-opt", "shard=full", "--strategy-opt", "unit_params=1000000"]),
              ("fsdp grad_op 1M", ["--strategy-opt", "shard=grad_op", "--strategy-opt", "unit_params=1000000"])]


def strata_run(strata, model, shape, steps, work, port, strategy, options):
    out = os.path.join(work, "run")
    subprocess.run([strata, "train", model, "--data", "synthetic", "--synthetic-samples", str(2 * shape[0] * (steps + 2)),
                    "--batch-size", str(shape[0]), "--max-steps", str(steps + 2), "--nproc", "2", "--threads", "1",
                    "--master-port", str(port), "--optimizer", "adam", "--lr", "0.001", "--lr-schedule", "constant",
                    "--strategy", strategy.split()[0], "--out", out, "--log-every", "1"] + options,
                   check=True, capture_output=True)
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    os.remove(os.path.join(out, "metrics.jsonl"))
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        rank0 = json.load(f)["ranks"][0]
    breakdown = rank0["training_memory_breakdown"]
    state = breakdown["parameters"] + breakdown["gradients"] + breakdown["optimizer_state"]
    times = [r["step_time_ms"] for r in records if r["type"] == "step" and r["step"] > 2]
    return statistics.median(times), state, rank0["training_peak_memory_bytes"], rank0.get("communication_s", 0.0)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", default=os.path.join(os.path.dirname(__file__), "..", "build", "cli", "strata"))
    parser.add_argument("--models", default="resnet18,convnext_tiny")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    has_fsdp2 = hasattr(torch.distributed, "fsdp") and hasattr(torch.distributed.fsdp, "fully_shard")
    print(f"torch {torch.__version__} (FSDP2 peer: {'available' if has_fsdp2 else 'not installed: run peer-torch.sh'})"
          f", 2 ranks x 1 thread, gloo, Adam, {args.rounds} rounds x {args.steps} steps")
    print(f"{'model':<14}{'strategy':<17}{'step ms':>9}{'vs ddp':>8}{'model state MiB':>17}{'train peak MiB':>16}")
    port = 29711
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            constructor, shape = CASES[name]
            torch.manual_seed(0)
            path = os.path.join(tmp, f"{name}.onnx")
            torch.onnx.export(constructor().train(), torch.randn(*shape), path, opset_version=17,
                              do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
            results = {label: [] for label, _ in STRATEGIES}
            for _ in range(args.rounds):
                for label, options in STRATEGIES:
                    port += 1
                    results[label].append(strata_run(args.strata, path, shape, args.steps, tmp, port, label, options))
            ddp_ms = statistics.median(r[0] for r in results["ddp"])
            for label, _ in STRATEGIES:
                ms = statistics.median(r[0] for r in results[label])
                state = results[label][-1][1] / 2**20
                peak = results[label][-1][2] / 2**20
                print(f"{name:<14}{label:<17}{ms:>9.1f}{ms / ddp_ms:>8.2f}{state:>17.1f}{peak:>16.1f}")


if __name__ == "__main__":
    main()
