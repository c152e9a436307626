#!/usr/bin/env python3
"""DDP over a real network: two nodes in two network namespaces joined by a veth pair (issue 17, "Real networks").

scripts/netns.sh makes the namespaces PREFIX-0 and PREFIX-1 (10.231.0.1 and 10.231.0.2). Node i runs in namespace i:
  strata train --nnodes 2 --node-rank i --nproc 1 --master-addr 10.231.0.1 ...
so rank 1 reaches the store and rank 0 over the veth link, and Gloo's TCP pairs cross it. The parameters it exports
must equal, bit for bit, those of the same job run on one node (--nproc 2 over loopback in this namespace): same
world size, same data shards, same reduction order (the one-node run also runs in namespace 0, on its loopback,
so neither run can meet a port in use on this machine). Prints the time of each run.

--netem "delay 5ms loss 1%" applies that netem qdisc to both ends of the link before the two-node run; the run must
still complete with the same parameters. Exits 77 (ctest's skip) with the reason where namespaces cannot be made or
the kernel has no netem qdisc. --loss 1 drops 1% of the packets leaving each end with nftables instead (loss
without delay, where netem is missing) and fails unless some packet was dropped. The namespaces are removed at exit, also after a failure or a signal.
"""
import argparse
import os
import shlex
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import onnx
from onnx import numpy_helper

SKIP = 77


def initializers(path):
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--netns-script", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--prefix", default="strata")
    parser.add_argument("--master-port", default="29740")
    parser.add_argument("--netem", default="", help='netem arguments for the link, e.g. "delay 5ms loss 1%%"')
    parser.add_argument("--loss", default="", help="percent of packets nftables drops on the link (no delay)")
    parser.add_argument("--timeout", type=float, default=240, help="seconds each run may take")
    parser.add_argument("--strategy-args", default="--strategy ddp",
                        help="the strategy flags of both runs; {key} is a CURVE secret made with `strata ps-keygen`")
    parser.add_argument("--two-node-args", default="", help="flags of the two-node run only (e.g. server_nodes=)")
    args = parser.parse_args()

    env = dict(os.environ, NETNS_PREFIX=args.prefix)
    netns = ["bash", args.netns_script]
    check = subprocess.run(netns + ["check"], env=env, capture_output=True, text=True)
    if check.returncode != 0:
        print(f"SKIP: network namespaces cannot be made here: {check.stdout.strip()} {check.stderr.strip()}")
        return SKIP

    work = os.path.join(args.work_dir, f"netns-{args.prefix}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    key = os.path.join(work, "job.key")
    if "{key}" in args.strategy_args:
        subprocess.run([args.strata, "ps-keygen", key], check=True)
    common = ["train", "--data", "synthetic", "--synthetic-samples", "512", "--batch-size", "16", "--epochs", "2",
              "--seed", "1", "--lr", "0.05", "--momentum", "0.9", "--threads", "1", "--timeout", "60",
              "--master-port", args.master_port] + shlex.split(args.strategy_args.replace("{key}", key))

    def run(command, what):
        start = time.monotonic()
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=args.timeout)
        took = time.monotonic() - start
        if result.returncode != 0:
            print(result.stdout, result.stderr)
            raise SystemExit(f"{what} failed with status {result.returncode}: {' '.join(command)}")
        return took

    def down(*_):
        subprocess.run(netns + ["down"], env=env)

    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # ctest's timeout: the finally below still runs
    up = subprocess.run(netns + ["up"], env=env, capture_output=True, text=True)
    if up.returncode != 0:
        down()
        print(f"SKIP: scripts/netns.sh up failed: {up.stdout.strip()} {up.stderr.strip()}")
        return SKIP
    try:
        # The reference: one node, two ranks, over the loopback of namespace 0 (its own ports: no clash with
        # anything running on this machine).
        single = os.path.join(work, "single")
        took = run(netns + ["exec", "0", args.strata] + common + ["--nproc", "2", "--out", single, "--export",
                                                                  single + ".onnx"], "one node")
        print(f"one node, 2 ranks over loopback: {took:.1f} s")
        expected = initializers(single + ".onnx")
        if args.netem:
            netem = subprocess.run(netns + ["netem"] + args.netem.split(), env=env, capture_output=True, text=True)
            if netem.returncode != 0:
                print(f"SKIP: {netem.stderr.strip()}")
                return SKIP
        if args.loss:
            loss = subprocess.run(netns + ["loss", args.loss], env=env, capture_output=True, text=True)
            if loss.returncode != 0:
                print(f"SKIP: {loss.stderr.strip()}")
                return SKIP
        master = subprocess.run(netns + ["addr", "0"], env=env, capture_output=True, text=True).stdout.strip()
        link = "veth link" + (f" with netem {args.netem}" if args.netem else "") + (
            f" dropping {args.loss}% of packets (nftables)" if args.loss else "")
        nodes = []
        start = time.monotonic()
        for rank in (0, 1):
            out = os.path.join(work, f"node{rank}")
            command = netns + ["exec", str(rank), args.strata] + common + [
                "--nnodes", "2", "--node-rank", str(rank), "--nproc", "1", "--master-addr", master, "--out", out
            ] + shlex.split(args.two_node_args)
            if rank == 0:
                command += ["--export", out + ".onnx"]
            log = open(os.path.join(work, f"node{rank}.log"), "w")
            nodes.append((subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT), log, command))
        failed = []
        for rank, (proc, log, command) in enumerate(nodes):
            try:
                status = proc.wait(timeout=max(1.0, args.timeout - (time.monotonic() - start)))
            except subprocess.TimeoutExpired:
                status = "timeout"
            if status != 0:
                failed.append((rank, status, command))
        took = time.monotonic() - start
        for proc, log, _ in nodes:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
            log.close()
        if failed:
            for rank in (0, 1):
                print(f"--- node {rank} ---")
                print(open(os.path.join(work, f"node{rank}.log")).read())
            for rank, status, command in failed:
                print(f"node {rank} ended with {status}: {' '.join(command)}")
            return 1
        print(f"two nodes in two namespaces, 1 rank each, over a {link}: {took:.1f} s")
        if args.loss:
            dropped = int(subprocess.run(netns + ["dropped"], env=env, capture_output=True, text=True).stdout or 0)
            print(f"packets dropped on the link: {dropped}")
            if dropped == 0:
                print("the loss rule dropped no packet: the run did not meet any loss")
                return 1
    finally:
        down()

    got = initializers(os.path.join(work, "node0.onnx"))
    assert got.keys() == expected.keys(), (sorted(got), sorted(expected))
    differ = [name for name in expected if not np.array_equal(got[name], expected[name])]
    if differ:
        for name in differ:
            print(f"{name}: max difference {np.max(np.abs(got[name] - expected[name])):g}")
        print(f"{len(differ)} of {len(expected)} parameters differ from the one-node run")
        return 1
    print(f"all {len(expected)} parameters equal the one-node run's, bit for bit")
    return 0


if __name__ == "__main__":
    sys.exit(main())
