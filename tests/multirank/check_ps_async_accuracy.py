#!/usr/bin/env python3
"""Asynchronous parameter-server training keeps sync's accuracy with a straggler (issue 15's accuracy test).

The bundled CNN trains 2 epochs of Fashion-MNIST on 2 workers and 1 server, worker 1 twice as slow (--slow-rank 1:2),
SGD with momentum, in two modes: sync and async with the staleness-aware learning rate (lr_staleness=on: each
gradient's step divided by its staleness); with --report-plain also plain async. Async with lr_staleness must end
within --max-gap (1.5) points of sync's test accuracy; plain async's gap is printed, not checked (the issue asks for
it to be reported). CI leaves plain async out for time (a 2-epoch run, 60 s on 2 cores); the straggler comparison
in docs/performance.md (`strata compare --spec docs/compare/ps_straggler_3_epochs.json`) reports it.
Async runs must also have been stale (the servers measured a mean staleness above 0.5 for the fast worker), or the
comparison says nothing about stale gradients.
"""
import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import multirank  # noqa: E402  (tests/support/multirank.py)


def train(args, name, options):
    out = os.path.join(args.work_dir, f"ps-accuracy-{name}")
    command = [args.strata, "train", "--master-port", str(args.master_port), "--data", "fashion-mnist", "--epochs",
               str(args.epochs), "--batch-size", "32", "--optimizer", "sgd", "--lr", "0.01", "--momentum", "0.9",
               "--threads", "1", "--seed", "1", "--log-every", "100000", "--nproc", "2", "--slow-rank", "1:2",
               "--strategy", "ps", "--out", out]
    for option in options:
        command += ["--strategy-opt", option]
    start = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True, timeout=1200)
    if result.returncode != 0:
        print(result.stdout[-4000:], result.stderr[-4000:])
        raise SystemExit(f"{' '.join(command)} failed with status {result.returncode}")
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    staleness = [r["ps_staleness_sum"] / max(r["ps_pushes"], 1) for r in summary["ranks"]]
    print(f"{name}: test accuracy {100 * summary['test_accuracy']:.2f}%, {summary['samples_per_s']:.0f} samples/s, "
          f"mean staleness per worker {[round(s, 2) for s in staleness]}, {time.monotonic() - start:.0f} s",
          flush=True)
    return summary["test_accuracy"], staleness


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--epochs", type=int, default=2,
                        help="2 in CI (about 150 s for both runs; 3 took 240 s): sync ends near 88.5%%")
    parser.add_argument("--max-gap", type=float, default=1.5, help="points of test accuracy")
    parser.add_argument("--master-port", type=int, help="of the jobs' store (default: a free port)")
    parser.add_argument("--report-plain", action="store_true", help="also train plain async and print its gap")
    args = parser.parse_args()
    args.master_port = args.master_port or multirank.free_port()
    os.makedirs(args.work_dir, exist_ok=True)
    sync, _ = train(args, "sync", ["mode=sync"])
    corrected, corrected_staleness = train(args, "async-lr-staleness", ["mode=async", "lr_staleness=on"])
    gap = 100 * (sync - corrected)
    print(f"accuracy lost to async with lr_staleness=on: {gap:+.2f} points (at most {args.max_gap})")
    if args.report_plain:
        plain, _ = train(args, "async", ["mode=async"])
        print(f"plain async: {100 * (sync - plain):+.2f} points (reported, not checked)")
    ok = True
    if gap > args.max_gap:
        print(f"FAILED: async with lr_staleness=on ends {gap:.2f} points below sync")
        ok = False
    if max(corrected_staleness) <= 0.5:
        print(f"FAILED: the async run was hardly stale (mean staleness {corrected_staleness}): nothing was tested")
        ok = False
    if sync < 0.85:
        print(f"FAILED: sync itself reached only {100 * sync:.2f}%: the baseline is broken")
        ok = False
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
