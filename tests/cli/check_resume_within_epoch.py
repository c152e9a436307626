#!/usr/bin/env python3
"""A run checkpointed inside an epoch (--save-every) and resumed ends with the weights of an uninterrupted run.

Language-model training is often one long epoch, so checkpoints at epoch ends are not enough (Note [Checkpoints
within an epoch]). A small GPT (models/make_gpt.py) trains on a token file for --steps steps with AdamW in one go;
then the same job runs --stop-at steps with --save-every (and is resumed with --resume to --steps), and every
parameter of the two exports must be equal (the same batches in the same order, the optimizer state restored).
With --nproc 2 the job runs DDP on two ranks.
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models"))


def run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stdout[-3000:], result.stderr[-3000:])
        raise SystemExit(f"{' '.join(command)} failed with status {result.returncode}")
    return result.stdout


def weights(path):
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--nproc", type=int, default=1)
    parser.add_argument("--steps", type=int, default=12)
    parser.add_argument("--stop-at", type=int, default=7)
    parser.add_argument("--save-every", type=int, default=5)
    args = parser.parse_args()
    work = os.path.join(args.work_dir, f"resume-within-epoch-n{args.nproc}")
    os.makedirs(work, exist_ok=True)
    import torch
    import make_gpt
    torch.manual_seed(0)
    model = os.path.join(work, "gpt.onnx")
    make_gpt.export(make_gpt.Gpt(layers=2, width=32, heads=4, vocab=256, seq_len=16), model, 16)
    tokens = os.path.join(work, "tokens.bin")
    np.random.default_rng(1).integers(0, 256, 200 * 16 + 1).astype("<u2").tofile(tokens)
    common = [args.strata, "train", model, "--data", f"tokens:{tokens}", "--batch-size", "4", "--optimizer", "adamw",
              "--lr", "3e-3", "--lr-schedule", "constant", "--seed", "3", "--threads", "1", "--log-every", "2",
              "--sample-every", "0"]
    if args.nproc > 1:
        common += ["--nproc", str(args.nproc), "--strategy", "ddp"]
    whole = os.path.join(work, "whole")
    run(common + ["--max-steps", str(args.steps), "--out", whole, "--export", whole + ".onnx"])
    parts = os.path.join(work, "parts")
    run(common + ["--max-steps", str(args.stop_at), "--save-every", str(args.save_every), "--out", parts])
    out = run(common + ["--max-steps", str(args.steps), "--resume", parts, "--export", parts + ".onnx"])
    failures = []
    if f"inside epoch 0 (step {args.stop_at})" not in out:
        failures.append(f"the resume did not continue inside the epoch at step {args.stop_at}: {out[-500:]}")
    a, b = weights(whole + ".onnx"), weights(parts + ".onnx")
    worst = max(float(np.max(np.abs(a[k] - b[k]))) for k in a)
    print(f"{args.nproc} rank(s): {args.steps} steps in one go against {args.stop_at} + {args.steps - args.stop_at} "
          f"resumed inside the epoch: largest difference {worst:.3g}")
    if worst != 0.0:
        failures.append(f"the resumed run's weights differ from the uninterrupted run's by up to {worst}")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
