#!/usr/bin/env python3
"""A parameter server killed with SIGKILL mid-run is restarted and the run ends as if nothing had happened.

Trains the bundled CNN with --strategy ps (mode=sync, 2 workers, 2 servers, checkpoint_every=3) twice: once
undisturbed, once with `kill -9` of ps-server 0 after it has applied some updates. The launcher restarts the
server, which reloads its last checkpoint; the workers reconnect and resend the pushes it lost (Note [PS recovery]).
Checks: the killed run finishes, its log names the restart, summary.json counts the restart and the pushes
replayed (and its servers' figures show the restart), and every exported parameter equals the undisturbed run's
(sync mode: the same updates in the same order; float32 sums of the two workers' gradients may add in either order,
hence a 1e-6 relative tolerance).
"""
import argparse
import glob
import json
import os
import signal
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import multirank  # noqa: E402  (tests/support/multirank.py)


def command(strata, out, trace, port):
    return [strata, "train", "--master-port", str(port), "--data", "synthetic", "--synthetic-samples", "1024",
            "--batch-size", "8", "--max-steps", "40", "--seed", "1", "--lr", "0.05", "--momentum", "0.9",
            "--lr-schedule", "constant", "--nproc", "2", "--threads", "1", "--strategy", "ps", "--strategy-opt",
            "servers=2", "--strategy-opt", "checkpoint_every=3", "--strategy-opt", f"trace={trace}", "--out", out,
            "--export", out + ".onnx"]


def server_pid(index, port):
    """This job's ps-server `index` (its store port tells it from another job's)."""
    result = subprocess.run(["pgrep", "-f", f"role ps-server --index {index} "], capture_output=True, text=True)
    for pid in result.stdout.split():
        try:
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if f"MASTER_PORT={port}".encode() in environ:
            return int(pid)
    return None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--master-port", type=int, help="of the job's store (default: a free port)")
    args = parser.parse_args()
    args.master_port = args.master_port or multirank.free_port()
    os.makedirs(args.work_dir, exist_ok=True)
    base = os.path.join(args.work_dir, "ps-recovery")
    for old in glob.glob(base + "*trace*"):
        os.remove(old)
    quiet = subprocess.run(command(args.strata, base + "-quiet", base + "-quiet.trace", args.master_port),
                           capture_output=True, text=True, timeout=600)
    if quiet.returncode != 0:
        print(quiet.stdout, quiet.stderr)
        return 1
    trace = base + "-killed.trace"
    job = subprocess.Popen(command(args.strata, base + "-killed", trace, args.master_port),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed = False
    deadline = time.time() + 120
    while time.time() < deadline and job.poll() is None:
        try:
            updates = sum(1 for _ in open(trace + ".0.jsonl"))
        except OSError:
            updates = 0
        if updates >= 10:
            pid = server_pid(0, args.master_port)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                killed = True
                print(f"killed ps-server 0 (pid {pid}) after {updates} updates")
                break
        time.sleep(0.05)
    output, _ = job.communicate(timeout=600)
    if not killed:
        print(output)
        print("FAILED: the server could not be killed mid-run (the run ended first?)")
        return 1
    if job.returncode != 0:
        print(output)
        print("FAILED: the run with a killed server did not finish")
        return 1
    if "restarting it" not in output or "reloaded" not in output:
        print(output)
        print("FAILED: the log does not name the restart")
        return 1
    summary = json.load(open(os.path.join(base + "-killed", "summary.json")))
    ranks = summary["ranks"]
    # The restarted server's figures (Note [PS server memory]) say so and still hold its key ranges, the
    # undisturbed one's are unchanged.
    servers = summary.get("servers", [])
    print(f"servers' figures: {[(s.get('restarts'), s.get('memory_breakdown')) for s in servers]}")
    if ([s.get("restarts") for s in servers] != [1, 0] or
            any(s["memory_breakdown"]["parameters"] != s["key_range_bytes"] for s in servers)):
        print("FAILED: summary.json's servers do not show ps-server 0's restart with its key ranges")
        return 1
    restarts = [r.get("ps_server_restarts_seen", 0) for r in ranks]
    replayed = [r.get("ps_pushes_replayed", 0) for r in ranks]
    print(f"restarts seen per worker {restarts}, pushes replayed per worker {replayed}")
    if min(restarts) < 1 or min(replayed) < 1:
        print("FAILED: summary.json does not report the restart and the replayed pushes")
        return 1
    a = multirank.weights(base + "-quiet.onnx")
    b = multirank.weights(base + "-killed.onnx")
    worst = max((float(np.linalg.norm(b[k] - v) / np.linalg.norm(v)), k) for k, v in a.items())
    print(f"killed vs undisturbed run: worst relative error {worst[0]:.2e} ({worst[1]})")
    return 0 if worst[0] <= 1e-6 else 1


if __name__ == "__main__":
    sys.exit(main())
