#!/usr/bin/env python3
"""mode=async: a worker killed with SIGKILL mid-run is dropped and the job finishes with the others.

Trains the bundled CNN with --strategy ps mode=async on 3 workers and kills rank 2 once the server has applied
some of its pushes. Checks: the job exits 0, the launcher and the server name the departure, summary.json lists
rank 2 as departed with the signal, and the two others went on pushing after it died (Note [Departed ranks]).
"""
import argparse
import json
import os
import signal
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import multirank  # noqa: E402  (tests/support/multirank.py)


def rank_pid(marker, rank):
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            cmdline = open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0")
            environ = open(f"/proc/{pid}/environ", "rb").read().split(b"\0")
        except OSError:
            continue
        if marker.encode() in cmdline and f"RANK={rank}".encode() in environ:
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
    out = os.path.join(args.work_dir, "ps-worker-killed")
    trace = out + ".trace"
    if os.path.exists(trace + ".0.jsonl"):
        os.remove(trace + ".0.jsonl")
    command = [args.strata, "train", "--master-port", str(args.master_port), "--data", "synthetic",
               "--synthetic-samples", "1536", "--batch-size", "8",
               "--epochs", "2", "--seed", "1", "--lr", "0.05", "--nproc", "3", "--threads", "1", "--strategy", "ps",
               "--strategy-opt", "mode=async", "--strategy-opt", f"trace={trace}", "--out", out]
    job = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    killed_after = None
    deadline = time.time() + 120
    while time.time() < deadline and job.poll() is None and killed_after is None:
        try:
            pushes = sum(1 for line in open(trace + ".0.jsonl") if '"push"' in line)
        except OSError:
            pushes = 0
        if pushes >= 30:
            pid = rank_pid(out, 2)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                killed_after = pushes
                print(f"killed rank 2 (pid {pid}) after {pushes} pushes")
        time.sleep(0.05)
    output, _ = job.communicate(timeout=600)
    if killed_after is None:
        print(output)
        print("FAILED: rank 2 could not be killed mid-run")
        return 1
    if job.returncode != 0:
        print(output)
        print(f"FAILED: the job exited with {job.returncode} after losing a worker")
        return 1
    for expected in ("rank 2 was killed by signal 9", "worker 2 departed"):
        if expected not in output:
            print(output)
            print(f"FAILED: the output does not say '{expected}'")
            return 1
    ranks = json.load(open(os.path.join(out, "summary.json")))["ranks"]
    if "SIGKILL" not in ranks[2].get("departed", ""):
        print(f"FAILED: summary.json does not list rank 2 as departed: {ranks[2]}")
        return 1
    lines = [json.loads(line) for line in open(trace + ".0.jsonl")]
    after = [line for line in lines[killed_after:] if line["event"] == "push"]
    workers_after = sorted({line["worker"] for line in after if line["worker"] != 2})
    print(f"pushes after the kill: {len(after)}, from workers {workers_after}")
    return 0 if workers_after == [0, 1] else 1


if __name__ == "__main__":
    sys.exit(main())
