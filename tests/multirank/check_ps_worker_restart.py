#!/usr/bin/env python3
"""mode=sync with --max-restarts: a worker that dies is started again and rejoins; the run ends with the parameters
of an uninterrupted one, bit for bit (Note [Rejoining workers]).

Trains the bundled CNN with --strategy ps (2 workers, 2 servers, SGD with momentum, --save) undisturbed, then:
- A: worker 1 exits after sending its push of step 10 to server 0 only (STRATA_TEST_PS_WORKER_EXIT=1:10:1), so
  server 0 completes that round and server 1 waits for it: the restarted worker recomputes step 10 from server 0's
  values before the update and server 1's current ones;
- C: worker 1 is killed with SIGKILL after the first epoch (checkpoint and evaluation behind it);
- B: worker 1 exits after pushing step 3 to both servers while worker 0 is slow (--slow-rank 0:300), so its push
  still waits in the rounds when it rejoins (the servers log "waiting in the round").
Each run must finish, the launcher must name the restart, summary.json must count it on rank 1, and every exported
parameter must equal the undisturbed run's. Then the errors: rank 0 is never restarted (it serves the job's store),
no --max-restarts means no restart, and strategies that cannot take a worker back refuse the flag.
"""
import argparse
import os
import signal
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import multirank  # noqa: E402  (tests/support/multirank.py)


def command(strata, out, port, steps, extra):
    return [strata, "train", "--data", "synthetic", "--synthetic-samples", "512", "--batch-size", "8", "--max-steps",
            str(steps), "--seed", "1", "--lr", "0.05", "--momentum", "0.9", "--lr-schedule", "constant", "--nproc",
            "2", "--threads", "1", "--log-every", "7", "--strategy", "ps", "--strategy-opt", "servers=2",
            "--strategy-opt", f"trace={out}.trace", "--master-port", str(port), "--out", out, "--export",
            out + ".onnx", *extra]


def clean(out):
    for suffix in (".trace.0.jsonl", ".trace.1.jsonl", ".onnx"):
        if os.path.exists(out + suffix):
            os.remove(out + suffix)


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


def run(strata, out, port, steps, extra, env=None, kill_after=None):
    """One job; with kill_after, SIGKILL of rank 1 once server 0 has applied that many updates."""
    clean(out)
    job = subprocess.Popen(command(strata, out, port, steps, extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, env=dict(os.environ, **(env or {})))
    killed = kill_after is None
    deadline = time.time() + 120
    while not killed and time.time() < deadline and job.poll() is None:
        try:
            updates = sum(1 for _ in open(out + ".trace.0.jsonl"))
        except OSError:
            updates = 0
        if updates >= kill_after:
            pid = rank_pid(out, 1)
            if pid is not None:
                os.kill(pid, signal.SIGKILL)
                killed = True
                print(f"killed rank 1 (pid {pid}) after {updates} updates")
        time.sleep(0.01)
    output, _ = job.communicate(timeout=600)
    if not killed:
        output += "\n(the test could not kill rank 1 in time)"
    return job.returncode if killed else -1, output


def compare(name, reference, out):
    a = multirank.weights(reference)
    b = multirank.weights(out + ".onnx")
    worst = max(float(np.abs(b[k] - v).max()) for k, v in a.items())
    print(f"{name}: largest difference from the undisturbed run {worst:.3g}")
    return [] if worst == 0 else [f"{name}: the parameters differ from the undisturbed run's by up to {worst:.3g}"]


def check_restarted(name, code, output, out, reference, expect=()):
    import json
    if code != 0:
        return [f"{name}: the job exited with {code}:\n{output}"]
    problems = []
    for text in ("rank 1 ", "restarting it (", "rejoins at step", *expect):
        if text not in output:
            problems.append(f"{name}: the output does not say '{text}'")
    ranks = json.load(open(os.path.join(out, "summary.json")))["ranks"]
    if ranks[1].get("restarts") != 1 or "restarts" in ranks[0]:
        problems.append(f"{name}: summary.json does not count rank 1's restart: {ranks}")
    if problems:
        print(output)
        return problems
    return compare(name, reference, out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--master-port", type=int, help="of the jobs' store (default: a free port)")
    args = parser.parse_args()
    args.master_port = args.master_port or multirank.free_port()
    os.makedirs(args.work_dir, exist_ok=True)
    base = os.path.join(args.work_dir, "ps-worker-restart")
    port = args.master_port
    problems = []

    code, output = run(args.strata, base + "-quiet", port, 60, ["--save"])
    if code != 0:
        print(output)
        print("FAILED: the undisturbed run")
        return 1
    restart = ["--save", "--max-restarts", "1"]
    code, output = run(args.strata, base + "-a", port, 60, restart, env={"STRATA_TEST_PS_WORKER_EXIT": "1:10:1"})
    problems += check_restarted("A (one server has the push)", code, output, base + "-a", base + "-quiet.onnx",
                                ["worker 1 rejoins (restarted): its last push 12 (11 pushes), at version 11",
                                 "worker 1 rejoins (restarted): its last push 11 (10 pushes), at version 10",
                                 "rejoins at step 10"])
    code, output = run(args.strata, base + "-c", port, 60, restart, kill_after=36)
    problems += check_restarted("C (SIGKILL in epoch 2)", code, output, base + "-c", base + "-quiet.onnx",
                                ["rank 1 was killed by signal 9 (SIGKILL); restarting it"])

    code, output = run(args.strata, base + "-quiet8", port, 8, [])
    if code != 0:
        print(output)
        print("FAILED: the undisturbed 8-step run")
        return 1
    code, output = run(args.strata, base + "-b", port, 8, ["--max-restarts", "1", "--slow-rank", "0:300"],
                       env={"STRATA_TEST_PS_WORKER_EXIT": "1:3:2"})
    problems += check_restarted("B (the push waits in the round)", code, output, base + "-b", base + "-quiet8.onnx",
                                ["waiting in the round", "rejoins at step 3"])

    # Rank 0 serves the store: never restarted. Without --max-restarts nothing is.
    for name, extra, hook, expected in [
            ("rank 0", ["--max-restarts", "2"], "0:3:2", "rank 0 exited with status 3; stopped the other ranks"),
            ("no --max-restarts", [], "1:3:2", "rank 1 exited with status 3; stopped the other ranks")]:
        code, output = run(args.strata, base + "-fail", port, 8, extra, env={"STRATA_TEST_PS_WORKER_EXIT": hook})
        if code == 0 or expected not in output or "restarting it" in output:
            problems.append(f"{name}: expected the job to fail saying '{expected}', got {code}:\n{output}")
        else:
            print(f"{name}: {expected}")
    for strategy, expected in [
            (["--strategy", "ddp"], "--max-restarts 1: strategy 'ddp' cannot take a restarted rank back"),
            (["--strategy", "ps", "--strategy-opt", "mode=async"],
             "--max-restarts 1: strategy 'ps' (mode=async) cannot take a restarted rank back")]:
        result = subprocess.run([args.strata, "train", "--nproc", "2", "--max-restarts", "1", *strategy],
                                capture_output=True, text=True, timeout=60)
        if result.returncode == 0 or expected not in result.stderr:
            problems.append(f"expected the error '{expected}', got {result.returncode}: {result.stderr}")
        else:
            print(f"refused: {expected}")
    for p in problems:
        print("FAILED:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
