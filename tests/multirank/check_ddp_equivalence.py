#!/usr/bin/env python3
"""DDP or FSDP with N ranks (processes) gives the same parameters as one process on the concatenated batch.

Trains the bundled CNN on synthetic data for 5 SGD steps with momentum: once in one process with batch N*B*K, once
with `--nproc N --strategy ddp` and batch B per rank and K micro-batches (--grad-accum K). The data loader gives
rank r the samples r, r+N, r+2N, ... of each epoch's permutation, so every step both runs see the same samples.
Every parameter of the two exported models must agree within --tolerance (relative error).
With --device cuda both runs train on the GPU (fp32, TF32 off); the N ranks then share this machine's GPU(s) and,
when there are fewer GPUs than ranks, reduce through Gloo with host staging. Exit code 77 (ctest: skipped) when
the machine has no usable GPU.
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper


def train(strata, out, batch, extra, lr="0.05"):
    command = [strata, "train", "--data", "synthetic", "--synthetic-samples", "512", "--batch-size", str(batch),
               "--max-steps", "5", "--seed", "1", "--lr", lr, "--momentum", "0.9", "--lr-schedule", "constant",
               "--out", out, "--export", out + ".onnx"] + extra
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stdout, result.stderr)
        raise SystemExit(f"{' '.join(command)} failed")
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(out + ".onnx").graph.initializer}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--batch", type=int, default=8, help="per rank and micro-batch")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--strategy", default="ddp",
                        help="ddp, fsdp:LEVEL (shard=LEVEL) or ps:SERVERS (the parameter server, mode=sync)")
    parser.add_argument("--optimizer", default="sgd")
    args = parser.parse_args()
    device = ["--device", args.device, "--precision", "fp32"]
    if args.device != "cpu":
        probe = subprocess.run([args.strata, "run", "--device", args.device], capture_output=True, text=True)
        if probe.returncode != 0 and any(why in probe.stderr for why in ("cannot use CUDA", "without the CUDA backend")):
            print(f"skipped: {probe.stderr.strip().splitlines()[-1]}")
            return 77
    os.makedirs(args.work_dir, exist_ok=True)
    strategy = args.strategy.replace(":", "-")
    tag = f"{strategy}-{args.optimizer}-n{args.nproc}k{args.grad_accum}-{args.device}"
    # Adam divides by the gradients' running RMS, which amplifies float32 reduction-order differences at a high lr.
    device += ["--optimizer", args.optimizer]
    lr = "0.05" if args.optimizer == "sgd" else "0.002"
    if args.strategy == "ddp":
        options = ["--strategy", "ddp", "--strategy-opt", "first_bucket_mb=0.01", "--strategy-opt", "bucket_mb=0.5"]
    elif args.strategy.startswith("ps:"):
        options = ["--strategy", "ps", "--strategy-opt", "mode=sync", "--strategy-opt",
                   f"servers={args.strategy.split(':')[1]}"]
    else:
        name, level = args.strategy.split(":")
        # Units of >= 20000 elements: the bundled CNN (421642 parameters) in several units, some padded.
        options = ["--strategy", name, "--strategy-opt", f"shard={level}", "--strategy-opt", "unit_params=20000"]
    single = train(args.strata, os.path.join(args.work_dir, f"single-{tag}"),
                   args.batch * args.nproc * args.grad_accum, ["--threads", "1"] + device, lr)
    ranks = train(args.strata, os.path.join(args.work_dir, f"ranks-{tag}"), args.batch,
                  ["--nproc", str(args.nproc), "--grad-accum", str(args.grad_accum), "--threads", "1"] + options
                  + device, lr)
    worst = max((float(np.linalg.norm(ranks[k] - v) / np.linalg.norm(v)), k) for k, v in single.items())
    print(f"{args.strategy} with {args.optimizer}, {args.nproc} ranks x {args.grad_accum} micro-batches vs one "
          f"process: worst relative error {worst[0]:.2e} ({worst[1]})")
    return 0 if worst[0] <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
