#!/usr/bin/env python3
"""Two strata binaries on the same .onnx file, alternating, for A/B timing of a kernel change.

Each round runs `strata train --data synthetic` once with the old binary and once with the new one (same batch,
threads and steps) and takes each run's median `step_time_ms` after the warm-up steps; prints every round's ratio
new / old and their median. The host's slow phases move both binaries of a round alike, which is why the rounds
alternate and the ratio, not the times, is the figure. The old binary needs its plugins beside it as in a build tree
(copy build/cli and build/plugins before rebuilding).

  python3 bench/ab_step.py --old /tmp/old/cli/strata --new build/cli/strata model.onnx --batch-size 32 [--isa avx2]
  python3 bench/ab_step.py --old build/cli/strata --new build/cli/strata --new-args "--channels-last on" model.onnx
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile


def median_step_ms(binary, extra, model, args, env):
    with tempfile.TemporaryDirectory() as out:
        command = [binary, "train", model, "--data", "synthetic", "--synthetic-samples",
                   str(args.batch_size * args.steps), "--batch-size", str(args.batch_size), "--max-steps",
                   str(args.steps), "--threads", str(args.threads), "--out", out, "--log-every", "1"] + extra.split()
        result = subprocess.run(command, capture_output=True, text=True, env=env)
        if result.returncode != 0:
            sys.exit(f"{binary} failed ({result.returncode}):\n{result.stderr[-2000:]}")
        with open(os.path.join(out, "metrics.jsonl")) as f:
            records = [json.loads(line) for line in f]
    times = [r["step_time_ms"] for r in records if r.get("type") == "step" and r["step"] > args.warmup]
    if not times:
        sys.exit(f"{binary}: no step after the {args.warmup} warm-up steps")
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("model")
    parser.add_argument("--old", required=True, help="the strata binary before the change")
    parser.add_argument("--new", required=True, help="the strata binary after it")
    parser.add_argument("--old-args", default="", help="extra `strata train` options for the old side")
    parser.add_argument("--new-args", default="", help="extra `strata train` options for the new side")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=14)
    parser.add_argument("--warmup", type=int, default=2, help="steps left out of each run's median")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--isa", choices=["native", "avx2"], default="native",
                        help="avx2: both binaries under ONEDNN_MAX_CPU_ISA=AVX2")
    args = parser.parse_args()
    if args.steps <= args.warmup:
        parser.error("--steps must exceed --warmup")
    env = dict(os.environ)
    if args.isa == "avx2":
        env["ONEDNN_MAX_CPU_ISA"] = "AVX2"
    old, new = [], []
    for _ in range(args.rounds):
        old.append(median_step_ms(args.old, args.old_args, args.model, args, env))
        new.append(median_step_ms(args.new, args.new_args, args.model, args, env))
    ratios = [b / a for a, b in zip(old, new)]
    print(f"{os.path.basename(args.model)} {args.isa}: old {statistics.median(old):.1f} ms, new "
          f"{statistics.median(new):.1f} ms; rounds new/old " + " ".join(f"{r:.2f}" for r in ratios) +
          f"; median {statistics.median(ratios):.2f}")


if __name__ == "__main__":
    main()
