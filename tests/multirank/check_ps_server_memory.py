#!/usr/bin/env python3
"""The parameter servers' own memory in summary.json (Note [PS server memory], Note [Role figures]).

Trains the bundled CNN with --strategy ps in three configurations and checks the "servers" list of summary.json
against what each server must hold, figures that come from three independent places (the run's parameter count,
the key ranges each server reports, and Strata's allocator in the server process):
- one entry per server, role ps-server, index 0..S-1, reported;
- each server's parameter bytes equal the bytes of its key ranges exactly, and the key ranges of all servers add up
  to the model's parameters (float32: 4 bytes each) exactly;
- its gradient sum is as large as its parameters; its optimizer state is k times its parameters (SGD without
  momentum k=0, with momentum k=1, Adam k=2);
- its communication buffers hold at least one whole push (a 64-byte header and the range's gradients) and, in
  async mode, also the copy of the range it answers with (one per worker at most, and one more), and no more;
- its total peak lies between its largest category and the sum of all, and its peak resident set is above it.
"""
import argparse
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import multirank  # noqa: E402  (tests/support/multirank.py)

CONFIGURATIONS = [
    # (name, servers, train arguments, optimizer states per parameter, async answers are copies)
    ("sync-adam", 2, ["--optimizer", "adam", "--lr", "0.001"], 2, False),
    ("async-momentum", 1, ["--optimizer", "sgd", "--momentum", "0.9", "--strategy-opt", "mode=async"], 1, True),
    ("sync-sgd", 3, ["--optimizer", "sgd", "--momentum", "0"], 0, False),
]
HEADER_BYTES = 64
SLACK = 1024  # a message's routing id, an Init's layout frame
WORKERS = 2


def check_run(name, summary, servers, states, copies):
    problems = []
    entries = summary.get("servers")
    if not isinstance(entries, list) or len(entries) != servers:
        return [f"{name}: expected {servers} entries under 'servers', got {entries!r}"]
    key_bytes_total = 0
    for i, s in enumerate(entries):
        where = f"{name} server {i}"
        if s.get("role") != "ps-server" or s.get("index") != i or s.get("reported") is False:
            problems.append(f"{where}: not a reported ps-server entry: {s}")
            continue
        memory = s["memory_breakdown"]
        key_bytes = s["key_range_bytes"]
        key_bytes_total += key_bytes
        if key_bytes <= 0 or s["key_ranges"] < 1:
            problems.append(f"{where}: holds no key range: {s}")
        if memory["parameters"] != key_bytes:
            problems.append(f"{where}: parameters {memory['parameters']} != its key ranges' {key_bytes} bytes")
        if memory["gradients"] != key_bytes:
            problems.append(f"{where}: gradient sum {memory['gradients']} != its key ranges' {key_bytes} bytes")
        if memory["optimizer_state"] != states * key_bytes:
            problems.append(f"{where}: optimizer state {memory['optimizer_state']} != {states} x {key_bytes}")
        # Server 0 also holds the buffers (batch-norm statistics), which travel in its pushes and answers.
        # In async mode the answers are copies, one per worker at a time (W+1: ZeroMQ frees a sent copy on its own
        # thread, possibly after the worker's next push arrived).
        buffers = memory["other"]
        low = HEADER_BYTES + key_bytes + (key_bytes if copies else 0)
        high = HEADER_BYTES + key_bytes + buffers + ((WORKERS + 1) * (key_bytes + buffers) if copies else 0) + SLACK
        if not low <= memory["communication"] <= high:
            problems.append(f"{where}: communication {memory['communication']} not in [{low}, {high}]")
        total = s["peak_memory_bytes"]
        if not max(memory.values()) <= total <= sum(memory.values()):
            problems.append(f"{where}: peak {total} is not between its largest category and their sum: {memory}")
        if s["resident_peak_bytes"] < total:
            problems.append(f"{where}: peak resident set {s['resident_peak_bytes']} is below its peak {total}")
        if s["restarts"] != 0:
            problems.append(f"{where}: {s['restarts']} restarts in an undisturbed run")
    if key_bytes_total != 4 * summary["params"]:
        problems.append(f"{name}: the key ranges hold {key_bytes_total} bytes, the model {summary['params']} x 4")
    return problems


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--master-port", type=int, help="of the jobs' store (default: a free port)")
    args = parser.parse_args()
    args.master_port = args.master_port or multirank.free_port()
    os.makedirs(args.work_dir, exist_ok=True)
    problems = []
    for name, servers, train_args, states, copies in CONFIGURATIONS:
        out = os.path.join(args.work_dir, f"ps-server-memory-{name}")
        command = [args.strata, "train", "--data", "synthetic", "--synthetic-samples", "256", "--batch-size", "16",
                   "--max-steps", "6", "--seed", "1", "--nproc", str(WORKERS), "--threads", "1", "--strategy", "ps",
                   "--strategy-opt", f"servers={servers}", "--master-port", str(args.master_port), "--out", out,
                   *train_args]
        run = subprocess.run(command, capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            print(run.stdout, run.stderr)
            print(f"FAILED: {name} exited with {run.returncode}")
            return 1
        summary = json.load(open(os.path.join(out, "summary.json")))
        found = check_run(name, summary, servers, states, copies)
        for s in summary["servers"]:
            print(f"{name} server {s.get('index')}: {json.dumps(s.get('memory_breakdown'))}, "
                  f"resident peak {s.get('resident_peak_bytes')}")
        problems += found
    for p in problems:
        print("FAILED:", p)
    if not problems:
        print("the servers' memory figures agree with their key ranges and optimizers")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
