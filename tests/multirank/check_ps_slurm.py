#!/usr/bin/env python3
"""--strategy ps under srun: the first S tasks are the servers, the others the workers (Note [Slurm roles]).

Starts every task of a job by hand with the variables srun gives its tasks (SLURM_PROCID, SLURM_NTASKS,
SLURM_LOCALID, SLURM_NODEID, SLURM_STEP_TASKS_PER_NODE, SLURM_STEP_NODELIST, SLURM_GTIDS, SLURM_DISTRIBUTION), all
running the same `strata train` command, on this machine; the fake nodes' names either resolve to this machine
(localhost) or to nothing, so the store is only found on the node that really holds worker 0. Layouts:
- one node, 2 servers + 2 workers, SLURM_GTIDS given, the CURVE key from key_file=;
- 2 nodes, cyclic distribution: a server and a worker on each node;
- 3 nodes, block distribution, 1,1,3 tasks ("strata-fake[08-09],localhost"): the servers alone on the first two,
  the 3 workers on the third, local ranks 0-2, no SLURM_GTIDS.
Checks: every task exits 0 by itself (the servers stop when the job is done: srun waits for them), each worker says
its rank and local rank, summary.json has the workers as ranks and the servers' figures, and the exported
parameters equal those of the same job under strata's own launcher (--nproc W). Then the errors: too few tasks for
the servers and a worker, server_nodes= under srun, a distribution that does not say where tasks run.
"""
import argparse
import os
import json
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import multirank  # noqa: E402  (tests/support/multirank.py)

COMMON = ["--data", "synthetic", "--synthetic-samples", "256", "--batch-size", "16", "--max-steps", "6", "--seed", "1",
          "--lr", "0.05", "--momentum", "0.9", "--threads", "1", "--timeout", "60", "--strategy", "ps",
          "--strategy-opt", "servers=2"]


def worst_error(a, b):
    return max(float(np.linalg.norm(b[k] - v) / max(np.linalg.norm(v), 1e-30)) for k, v in a.items())


def slurm_job(strata, out, port, nodes, per_node, distribution, extra, gtids):
    """Starts srun's tasks: `nodes` lists each task's node; returns [(returncode, output)] per task."""
    tasks = len(nodes)
    env_base = {k: v for k, v in os.environ.items() if not k.startswith(("SLURM_", "MASTER_", "RANK", "WORLD_SIZE",
                                                                         "LOCAL_RANK", "STRATA_JOB"))}
    procs = []
    for task, node in enumerate(nodes):
        env = dict(env_base, SLURM_PROCID=str(task), SLURM_NTASKS=str(tasks), SLURM_NODEID=str(node),
                   SLURM_LOCALID=str(sum(1 for t in range(task) if nodes[t] == node)),
                   SLURM_STEP_TASKS_PER_NODE=per_node, SLURM_STEP_NODELIST=NODELISTS[len(set(nodes))],
                   MASTER_PORT=str(port))
        if distribution:
            env["SLURM_DISTRIBUTION"] = distribution
        if gtids:
            env["SLURM_GTIDS"] = ",".join(str(t) for t in range(tasks) if nodes[t] == node)
        command = [strata, "train", *COMMON, "--out", out, "--export", out + ".onnx", *extra]
        procs.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    results = []
    for p in procs:
        try:
            output, _ = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            output, _ = p.communicate()
            results.append((None, output))
            continue
        results.append((p.returncode, output))
    return results


# The step's node list per number of nodes: only the node that holds worker 0 resolves, so the store is found only
# where Strata's layout puts it.
NODELISTS = {1: "localhost", 2: "localhost,strata-fake-b", 3: "strata-fake[08-09],localhost"}


def check_layout(name, strata, work, port, nodes, per_node, distribution, gtids, extra, reference, servers,
                 local_ranks):
    out = os.path.join(work, f"ps-slurm-{name}")
    results = slurm_job(strata, out, port, nodes, per_node, distribution, extra, gtids)
    problems = []
    for task, (code, output) in enumerate(results):
        if code != 0:
            problems.append(f"{name}: task {task} exited with {code}:\n{output}")
    if problems:
        return problems
    for task in range(servers):
        if f"ps-server {task} of {servers}: serving {len(nodes) - servers} workers" not in results[task][1]:
            problems.append(f"{name}: task {task} did not run ps-server {task}:\n{results[task][1]}")
    workers = len(nodes) - servers
    for rank, local in enumerate(local_ranks):
        said = f"rank {rank} of {workers}: strategy ps set up"
        output = results[servers + rank][1]
        if said not in output:
            problems.append(f"{name}: task {servers + rank} is not worker rank {rank}:\n{output}")
        lines = [line for line in output.splitlines() if said in line]
        if lines and f"(local rank {local} of" not in lines[0]:
            problems.append(f"{name}: worker {rank} should be local rank {local}: {lines[0]}")
    summary = json.load(open(os.path.join(out, "summary.json")))
    if summary["world_size"] != workers or [r["rank"] for r in summary["ranks"]] != list(range(workers)):
        problems.append(f"{name}: summary.json's ranks are not the {workers} workers: {summary['ranks']}")
    if [(s["index"], s.get("reported", True)) for s in summary.get("servers", [])] != [(i, True) for i in
                                                                                       range(servers)]:
        problems.append(f"{name}: summary.json's servers: {summary.get('servers')}")
    error = worst_error(multirank.weights(reference), multirank.weights(out + ".onnx"))
    print(f"{name}: {len(nodes)} tasks, every one exited 0; parameters vs strata's launcher: worst relative error "
          f"{error:.2e}")
    if error > 1e-6:
        problems.append(f"{name}: the parameters differ from the launcher's run by {error:.2e}")
    return problems


def expect_error(strata, work, port, nodes, per_node, distribution, extra, expected, label):
    out = os.path.join(work, "ps-slurm-error")
    results = slurm_job(strata, out, port, nodes, per_node, distribution, extra, gtids=False)
    code, output = results[0]
    if code in (0, None) or expected not in output:
        return [f"{label}: expected an error saying '{expected}', got exit {code}:\n{output}"]
    print(f"{label}: {output.strip().splitlines()[-1]}")
    return []


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--master-port", type=int, help="the first of 6 consecutive ports (default: free ones)")
    args = parser.parse_args()
    args.master_port = args.master_port or multirank.free_ports(6)
    os.makedirs(args.work_dir, exist_ok=True)
    work = args.work_dir
    key = os.path.join(work, "ps-slurm.key")
    if os.path.exists(key):
        os.remove(key)
    subprocess.run([args.strata, "ps-keygen", key], check=True, capture_output=True)
    references = {}
    for workers in (2, 3):
        out = os.path.join(work, f"ps-slurm-reference-{workers}")
        run = subprocess.run([args.strata, "train", *COMMON, "--nproc", str(workers), "--master-port",
                              str(args.master_port), "--out", out, "--export", out + ".onnx"],
                             capture_output=True, text=True, timeout=300)
        if run.returncode != 0:
            print(run.stdout, run.stderr)
            print(f"FAILED: the reference run with {workers} workers")
            return 1
        references[workers] = out + ".onnx"
    problems = []
    problems += check_layout("one-node", args.strata, work, args.master_port + 1, [0, 0, 0, 0], "4", "cyclic", True,
                             ["--strategy-opt", f"key_file={key}"], references[2], 2, [0, 1])
    problems += check_layout("cyclic", args.strata, work, args.master_port + 2, [0, 1, 0, 1], "2(x2)", "cyclic", False,
                             ["--strategy-opt", "auth=off"], references[2], 2, [0, 0])
    problems += check_layout("block", args.strata, work, args.master_port + 3, [0, 1, 2, 2, 2], "1,1,3", None, False,
                             ["--strategy-opt", "auth=off"], references[3], 2, [0, 1, 2])
    problems += expect_error(args.strata, work, args.master_port + 4, [0, 0], "2", None, ["--strategy-opt", "auth=off"],
                             "srun started 2 task(s) (SLURM_NTASKS), but the strategy's roles take the first 2",
                             "too few tasks")
    problems += expect_error(args.strata, work, args.master_port + 4, [0, 0, 0], "3", None,
                             ["--strategy-opt", "auth=off", "--strategy-opt", "server_nodes=0,0"],
                             "under srun the first 2 task(s) run the roles", "server_nodes under srun")
    problems += expect_error(args.strata, work, args.master_port + 4, [0, 0, 0], "3", "plane=2",
                             ["--strategy-opt", "auth=off"], "srun's distribution 'plane=2' (SLURM_DISTRIBUTION) "
                             "does not say which tasks share a node", "plane distribution")
    for p in problems:
        print("FAILED:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
