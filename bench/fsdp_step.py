#!/usr/bin/env python3
"""FSDP step time and per-rank memory beside DDP and beside PyTorch, in one run: Strata's `fsdp` plugin (shard=full,
grad_op; Strata's default units, small modules joined to the unit before them, and one unit per module) against Strata's `ddp`, and each against PyTorch's
DistributedDataParallel and FSDP2 (torch.distributed.fsdp.fully_shard on every module, reshard_after_forward True for
full and False for grad_op), 2 ranks x 1 thread, gloo, same per-rank batch, Adam, rounds interleaved. Figures: medians of the per-step
times rank 0 logs after two warm-up steps; how much of the all-gather and reduce-scatter time was hidden behind
compute (1 - time blocked / time the collectives ran, Strata's `communication_s` and `collective_s`); rank 0's
training model-state peak (parameters, gradients, optimizer state) and training peak from summary.json.

The PyTorch peer (bench/torch_fsdp_peer.py) needs a current PyTorch: `eval "$(../shared/tools/peer-torch.sh)"`
sets $PEER_PY, which this script uses (--peer-python); without it the peer columns are empty.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile

import torch
import torchvision

CASES = {
    "resnet18": (lambda: torchvision.models.resnet18(num_classes=10), (16, 3, 32, 32)),
    # Stochastic depth off: random drop-path does not export to ONNX (the peer runs the same model).
    "convnext_tiny": (lambda: torchvision.models.convnext_tiny(num_classes=10, stochastic_depth_prob=0.0),
                      (8, 3, 32, 32)),
}
# label: (Strata options, the PyTorch peer's mode or None)
# The plain labels use Strata's default units: a module of fewer than 262144 parameters joins the unit before it
# (Note [Small modules]; no PyTorch counterpart here). "per module": one unit per module, the units the PyTorch peer
# shards (fully_shard on every module), so those rows are the like-for-like comparison with FSDP2.
PER_MODULE = ["--strategy-opt", "small_module_params=0"]
STRATEGIES = {"ddp": ([], "ddp"), "fsdp grad_op": (["--strategy-opt", "shard=grad_op"], None),
              "fsdp full": (["--strategy-opt", "shard=full"], None),
              "fsdp grad_op per module": (["--strategy-opt", "shard=grad_op"] + PER_MODULE, "grad_op"),
              "fsdp full per module": (["--strategy-opt", "shard=full"] + PER_MODULE, "full"),
              "fsdp full 1M": (["--strategy-opt", "shard=full", "--strategy-opt", "unit_params=1000000"], None),
              "fsdp grad_op 1M": (["--strategy-opt", "shard=grad_op", "--strategy-opt", "unit_params=1000000"], None)}


def strata_run(strata, model, shape, steps, work, port, strategy, options):
    out = os.path.join(work, "run")
    subprocess.run([strata, "train", model, "--data", "synthetic", "--synthetic-samples", str(2 * shape[0] * (steps + 2)),
                    "--batch-size", str(shape[0]), "--max-steps", str(steps + 2), "--nproc", "2", "--threads", "1",
                    "--master-port", str(port), "--optimizer", "adam", "--lr", "0.001", "--lr-schedule", "constant",
                    "--strategy", strategy.split()[0], "--out", out, "--log-every", "1"] + options,
                   check=True, capture_output=True)
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    os.remove(os.path.join(out, "metrics.jsonl"))
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        rank0 = json.load(f)["ranks"][0]
    breakdown = rank0["training_memory_breakdown"]
    state = breakdown["parameters"] + breakdown["gradients"] + breakdown["optimizer_state"]
    times = [r["step_time_ms"] for r in records if r["type"] == "step" and r["step"] > 2]
    collective = rank0.get("collective_s", 0.0)
    hidden = 1 - rank0.get("communication_s", 0.0) / collective if collective > 0 else float("nan")
    return statistics.median(times), state, rank0["training_peak_memory_bytes"], hidden


def peer_run(python, model, shape, steps, port, mode):
    """PyTorch's median step time (ms) in this mode, or None without a peer."""
    if not python:
        return None
    peer = os.path.join(os.path.dirname(os.path.abspath(__file__)), "torch_fsdp_peer.py")
    result = subprocess.run([python, peer, "--model", model, "--mode", mode, "--batch", str(shape[0]), "--steps",
                             str(steps), "--port", str(port)], check=True, capture_output=True, text=True)
    return json.loads(result.stdout.strip().splitlines()[-1])


def peer_version(python):
    if not python:
        return "no PyTorch peer (set $PEER_PY: eval \"$(../shared/tools/peer-torch.sh)\")"
    result = subprocess.run([python, "-c", "import torch; print(torch.__version__)"], capture_output=True, text=True)
    return f"PyTorch peer {result.stdout.strip()} ({python})"


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", default=os.path.join(os.path.dirname(__file__), "..", "build", "cli", "strata"))
    parser.add_argument("--models", default="resnet18,convnext_tiny")
    parser.add_argument("--strategies",
                        default="ddp,fsdp grad_op,fsdp full,fsdp grad_op per module,fsdp full per module")
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--peer-python", default=os.environ.get("PEER_PY", ""))
    args = parser.parse_args()
    labels = args.strategies.split(",")
    print(f"{peer_version(args.peer_python)}; Strata {args.strata}; 2 ranks x 1 thread, gloo, Adam, "
          f"{args.rounds} rounds x {args.steps} steps")
    print(f"{'model':<14}{'strategy':<28}{'strata ms':>10}{'vs ddp':>8}{'torch ms':>10}{'torch vs ddp':>13}"
          f"{'strata/torch':>13}{'hidden':>8}{'model state MiB':>17}{'train peak MiB':>16}")
    port = 29711
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            constructor, shape = CASES[name]
            torch.manual_seed(0)
            path = os.path.join(tmp, f"{name}.onnx")
            torch.onnx.export(constructor().train(), torch.randn(*shape), path, opset_version=17,
                              do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
            results = {label: [] for label in labels}
            peers = {label: [] for label in labels}
            for _ in range(args.rounds):
                for label in labels:
                    options, mode = STRATEGIES[label]
                    port += 1
                    results[label].append(strata_run(args.strata, path, shape, args.steps, tmp, port, label, options))
                    if mode is not None:
                        port += 1
                        peer = peer_run(args.peer_python, name, shape, args.steps, port, mode)
                        if peer is not None:
                            peers[label].append(peer["step_ms"])
            ddp_ms = statistics.median(r[0] for r in results["ddp"])
            torch_ddp_ms = statistics.median(peers["ddp"]) if peers.get("ddp") else None
            for label in labels:
                ms = statistics.median(r[0] for r in results[label])
                hidden = statistics.median(r[3] for r in results[label])
                state = results[label][-1][1] / 2**20
                peak = results[label][-1][2] / 2**20
                torch_ms = statistics.median(peers[label]) if peers[label] else None
                peer_cols = (f"{torch_ms:>10.1f}{torch_ms / torch_ddp_ms:>13.2f}{ms / torch_ms:>13.2f}"
                             if torch_ms and torch_ddp_ms else f"{'-':>10}{'-':>13}{'-':>13}")
                hidden_col = f"{100 * hidden:>7.0f}%" if hidden == hidden else f"{'-':>8}"
                print(f"{name:<14}{label:<28}{ms:>10.1f}{ms / ddp_ms:>8.2f}{peer_cols}{hidden_col}{state:>17.1f}"
                      f"{peak:>16.1f}", flush=True)


if __name__ == "__main__":
    main()
