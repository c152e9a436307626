#!/usr/bin/env python3
"""A parameter-server run stopped after an epoch and resumed from its checkpoint ends with the weights of an
uninterrupted run (Note [PS checkpoints]): the checkpoint carries the servers' optimizer state, so the momentum
(SGD) or the moments and step count (Adam) go on where they were.

Trains the bundled CNN with --strategy ps (mode=sync, 2 workers, 2 servers) for 2 epochs twice: once straight, once
with --stop-after-epoch 1 and then --resume. Every exported parameter must equal the straight run's (sync mode: the
same updates in the same order; the two workers' float32 gradients may add in either order: 1e-6 relative). The
same checkpoint resumed with one server instead of two cannot hand the state over: the run warns and must end
measurably elsewhere (which shows the comparison would catch lost state).
"""
import argparse
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import multirank  # noqa: E402  (tests/support/multirank.py)


def run(args, extra, servers=2):
    result = subprocess.run([args.strata, "train", "--data", "synthetic", "--synthetic-samples", "256",
                             "--batch-size", "16", "--epochs", "2", "--seed", "1",
                             "--lr-schedule", "constant", "--nproc", "2", "--threads", "1", "--strategy", "ps",
                             "--strategy-opt", f"servers={servers}", "--master-port", str(args.port), "--save"]
                            + args.optimizer + extra, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        print(result.stdout, result.stderr)
        sys.exit(1)
    return result.stdout + result.stderr


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--port", type=int, help="of the jobs' store (default: a free port)")
    parser.add_argument("--train-args", required=True, help="the optimizer's flags, e.g. '--optimizer sgd'")
    args = parser.parse_args()
    args.port = args.port or multirank.free_port()
    args.optimizer = args.train_args.split()
    work = os.path.join(args.work_dir, "ps-resume-" + "-".join(a.strip("-") for a in args.optimizer))
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    straight, resumed = os.path.join(work, "straight"), os.path.join(work, "resumed")
    run(args, ["--out", straight, "--export", straight + ".onnx"])
    run(args, ["--out", resumed, "--stop-after-epoch", "1"])
    other = os.path.join(work, "one-server")
    shutil.copytree(resumed, other)
    log = run(args, ["--resume", resumed, "--export", resumed + ".onnx"])
    if "optimizer state restored" not in log:
        print(log)
        print("the servers did not say they restored their optimizer state")
        return 1
    a, b = multirank.weights(straight + ".onnx"), multirank.weights(resumed + ".onnx")
    worst = 0.0
    for name, value in a.items():
        if not np.allclose(b[name], value, rtol=1e-6, atol=1e-7):
            print(f"{name}: resumed differs from the straight run by up to {np.abs(b[name] - value).max():.3g}")
            return 1
        worst = max(worst, float(np.abs(b[name] - value).max()))
    print(f"resumed run equals the straight one ({len(a)} tensors, largest difference {worst:.3g}): "
          f"{' '.join(args.optimizer)}")
    log = run(args, ["--resume", other, "--export", other + ".onnx"], servers=1)
    if "momentum and moments start again from zero" not in log:
        print(log)
        print("resuming with another server count did not warn that the optimizer state was dropped")
        return 1
    c = multirank.weights(other + ".onnx")
    lost = max(float(np.abs(c[name] - value).max()) for name, value in a.items())
    if lost <= 1e-4:
        print(f"the run that lost its optimizer state ends within {lost:.3g} of the straight one: the check is blind")
        return 1
    print(f"with the optimizer state dropped (1 server): up to {lost:.3g} away, as it should be")
    return 0


if __name__ == "__main__":
    sys.exit(main())
