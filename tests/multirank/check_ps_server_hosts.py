#!/usr/bin/env python3
"""--strategy-opt server_hosts=...: each parameter server runs on the node of the host name given for it (Note
[Placing roles by host]).

Two launcher processes on this machine are the two nodes of a job (--nnodes 2), each told another host name through
STRATA_TEST_HOST_NAME ("alpha" and "beta.example.org"). Checks:
- server_hosts=beta,alpha: ps-server 0 runs under node 1's launcher (matched by its short name), ps-server 1 under
  node 0's, both jobs exit 0, and the exported parameters equal the same job on one node (--nproc 2);
- server_hosts=beta,gamma: both launchers refuse the job, naming 'gamma' and the job's hosts, before any server
  starts and before any training step.
"""
import argparse
import os
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import multirank  # noqa: E402  (tests/support/multirank.py)

COMMON = ["--data", "synthetic", "--synthetic-samples", "256", "--batch-size", "16", "--max-steps", "6", "--seed", "1",
          "--lr", "0.05", "--momentum", "0.9", "--threads", "1", "--timeout", "60", "--strategy", "ps",
          "--strategy-opt", "servers=2"]
HOSTS = ["alpha", "beta.example.org"]


def two_nodes(strata, out, port, extra):
    """Both nodes' launchers at once; returns [(returncode, output)] by node rank."""
    procs = []
    for node, host in enumerate(HOSTS):
        env = dict(os.environ, STRATA_TEST_HOST_NAME=host)
        command = [strata, "train", *COMMON, "--nproc", "1", "--nnodes", "2", "--node-rank", str(node),
                   "--master-addr", "127.0.0.1", "--master-port", str(port), "--out", out, *extra]
        if node == 0:
            command += ["--export", out + ".onnx"]
        procs.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True))
    results = []
    for p in procs:
        try:
            output, _ = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            output, _ = p.communicate()
        results.append((p.returncode, output))
    return results


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--master-port", type=int, help="the first of 3 consecutive ports (default: free ones)")
    args = parser.parse_args()
    args.master_port = args.master_port or multirank.free_ports(3)
    os.makedirs(args.work_dir, exist_ok=True)
    work = args.work_dir
    key = os.path.join(work, "ps-hosts.key")
    if os.path.exists(key):
        os.remove(key)
    subprocess.run([args.strata, "ps-keygen", key], check=True, capture_output=True)
    keyed = ["--strategy-opt", f"key_file={key}"]

    reference = os.path.join(work, "ps-hosts-reference")
    run = subprocess.run([args.strata, "train", *COMMON, *keyed, "--nproc", "2", "--master-port", str(args.master_port),
                          "--out", reference, "--export", reference + ".onnx"], capture_output=True, text=True,
                         timeout=300)
    if run.returncode != 0:
        print(run.stdout, run.stderr)
        print("FAILED: the one-node reference run")
        return 1

    problems = []
    out = os.path.join(work, "ps-hosts-placed")
    results = two_nodes(args.strata, out, args.master_port + 1, keyed + ["--strategy-opt", "server_hosts=beta,alpha"])
    for node, (code, output) in enumerate(results):
        if code != 0:
            problems.append(f"node {node} ({HOSTS[node]}) exited with {code}:\n{output}")
    if not problems:
        placed = {node: sorted({s for s in (0, 1) if f"[ps-server {s}] ps-server {s} of 2: serving" in output})
                  for node, (_, output) in enumerate(results)}
        print(f"servers started per node: {placed}")
        if placed != {0: [1], 1: [0]}:
            problems.append(f"servers ran on the wrong nodes: {placed} (expected node 0: [1], node 1: [0])")
        a = multirank.weights(reference + ".onnx")
        b = multirank.weights(out + ".onnx")
        worst = max(float(np.linalg.norm(b[k] - v) / max(np.linalg.norm(v), 1e-30)) for k, v in a.items())
        print(f"placed by host vs one node: worst relative error {worst:.2e}")
        if worst > 1e-6:
            problems.append(f"the parameters differ from the one-node run by {worst:.2e}")

    start = time.time()
    results = two_nodes(args.strata, os.path.join(work, "ps-hosts-unknown"), args.master_port + 2,
                        keyed + ["--strategy-opt", "server_hosts=beta,gamma"])
    elapsed = time.time() - start
    expected = ("role 'ps-server' process 1 is placed on host 'gamma', but no node of the job has that host name; "
                "the job's nodes: node 0 'alpha', node 1 'beta.example.org'")
    for node, (code, output) in enumerate(results):
        if code in (0, None) or expected not in output:
            problems.append(f"unknown host: node {node} exited with {code} without saying '{expected}':\n{output}")
        elif "ps-server" in output.replace("role 'ps-server'", "") or " step " in output:
            problems.append(f"unknown host: node {node} started a server or trained before refusing:\n{output}")
    print(f"unknown host refused by both launchers in {elapsed:.1f} s")
    for p in problems:
        print("FAILED:", p)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
