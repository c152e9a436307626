#!/usr/bin/env python3
"""The parameter server's bounded staleness (mode=ssp, staleness=K): no worker ever runs more than K pushes ahead.

Trains the bundled CNN on synthetic data with 3 workers, one of them 4x slow (--slow-rank), so the fast ones keep
running into the bound. Every server writes its log of versions (--strategy-opt trace=...): a "release" line each
time it answers a push, with the worker's clock (its pushes) and the slowest worker's. The check: at every release
clock - min_clock <= K, the bound was reached (the slow worker really held the others back), every server saw every
push, and summary.json reports the staleness the servers measured.
"""
import argparse
import glob
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import multirank  # noqa: E402  (tests/support/multirank.py)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--staleness", type=int, default=2)
    parser.add_argument("--servers", type=int, default=2)
    parser.add_argument("--master-port", type=int, help="of the job's store (default: a free port)")
    args = parser.parse_args()
    args.master_port = args.master_port or multirank.free_port()
    out = os.path.join(args.work_dir, f"ps-ssp-k{args.staleness}")
    os.makedirs(args.work_dir, exist_ok=True)
    for old in glob.glob(out + ".trace.*"):
        os.remove(old)
    steps = 36
    command = [args.strata, "train", "--master-port", str(args.master_port), "--data", "synthetic",
               "--synthetic-samples", "768", "--batch-size", "8",
               "--max-steps", str(steps), "--seed", "1", "--lr", "0.05", "--threads", "1", "--nproc", "3",
               "--slow-rank", "2:4", "--strategy", "ps", "--strategy-opt", "mode=ssp",
               "--strategy-opt", f"staleness={args.staleness}", "--strategy-opt", f"servers={args.servers}",
               "--strategy-opt", f"trace={out}.trace", "--out", out]
    result = subprocess.run(command, capture_output=True, text=True, timeout=600)
    if result.returncode != 0:
        print(result.stdout, result.stderr)
        return 1
    worst = -1
    for server in range(args.servers):
        lines = [json.loads(line) for line in open(f"{out}.trace.{server}.jsonl")]
        releases = [line for line in lines if line["event"] == "release"]
        pushes = [line for line in lines if line["event"] == "push"]
        if len(pushes) != 3 * steps or len(releases) != 3 * steps:
            print(f"server {server}: {len(pushes)} pushes and {len(releases)} answers, expected {3 * steps} each")
            return 1
        lead = max(line["clock"] - line["min_clock"] for line in releases)
        worst = max(worst, lead)
        print(f"server {server}: {len(pushes)} pushes, the most a worker was ahead when answered: {lead}")
    summary = json.load(open(os.path.join(out, "summary.json")))
    staleness = [rank.get("ps_staleness_sum", -1) / max(rank.get("ps_pushes", 1), 1) for rank in summary["ranks"]]
    print(f"mean staleness per worker (summary.json): {[round(s, 2) for s in staleness]}")
    if worst > args.staleness:
        print(f"FAILED: a worker was answered {worst} pushes ahead of the slowest (K = {args.staleness})")
        return 1
    if worst < args.staleness:
        print(f"FAILED: the bound K = {args.staleness} was never reached (lead {worst}): the test did not test it")
        return 1
    if min(staleness) < 0 or max(staleness) <= 0:
        print("FAILED: summary.json lacks the measured staleness")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
