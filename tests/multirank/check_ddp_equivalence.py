#!/usr/bin/env python3
"""DDP or FSDP with N ranks (processes) gives the same parameters as one process on the concatenated batch.

Trains the bundled CNN on synthetic data for 5 SGD steps with momentum: once in one process with batch N*B*K, once
with `--nproc N --strategy ddp` and batch B per rank and K micro-batches (--grad-accum K). The data loader gives
rank r the samples r, r+N, r+2N, ... of each epoch's permutation, so every step both runs see the same samples.
Every parameter of the two exported models must agree within --tolerance (relative error).
With --nnodes K the ranks are K launcher processes of --nproc ranks each on this machine (--nnodes K --node-rank i
--master-addr 127.0.0.1), as K nodes would run them. With --precision bf16|fp16 both runs train in mixed precision.
With --device cuda both runs train on the GPU (fp32, TF32 off); the N ranks then share this machine's GPU(s) and,
when there are fewer GPUs than ranks, reduce through Gloo with host staging. Exit code 77 (ctest: skipped) when
the machine has no usable GPU. With --model resnet18 both runs train torchvision's ResNet-18 at 32x32 (exported
here) instead: a batch-norm network, whose batch statistics differ between one process's batch and each rank's,
so it is compared with --reference ddp (the same ranks under DDP). With --model gpt both train a small GPT-2-style
language model (models/make_gpt.py) on a token file of random bytes (--data tokens:FILE), windows of 16.
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import multirank  # noqa: E402  (tests/support/multirank.py)


def export_torchvision(name, work_dir, dtype):
    """torchvision's `name` with 10 classes for 32x32 inputs in `dtype`, exported once into work_dir; its path."""
    path = os.path.join(work_dir, f"{name}_32_{dtype}.onnx")
    if not os.path.exists(path):
        import torch
        import torchvision
        torch.manual_seed(0)
        model = getattr(torchvision.models, name)(num_classes=10).to(getattr(torch, dtype)).train()
        torch.onnx.export(model, torch.randn(8, 3, 32, 32, dtype=getattr(torch, dtype)),
                          f"{path}.{os.getpid()}.part", opset_version=17, do_constant_folding=False,
                          training=torch.onnx.TrainingMode.TRAINING)
        os.replace(f"{path}.{os.getpid()}.part", path)  # whole or absent, whichever test exports it first
    return path


def export_gpt(work_dir, dtype):
    """A small GPT over bytes (models/make_gpt.py) and a token file of random bytes for it: (model, data flags)."""
    path = os.path.join(work_dir, f"gpt_{dtype}.onnx")
    tokens = os.path.join(work_dir, "gpt_tokens.bin")
    if not os.path.exists(path):
        import torch
        sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models"))
        import make_gpt
        torch.manual_seed(0)
        model = make_gpt.Gpt(layers=2, width=32, heads=4, vocab=256, seq_len=16)
        make_gpt.export(model, f"{path}.{os.getpid()}.part", 16, dtype=getattr(torch, dtype))
        os.replace(f"{path}.{os.getpid()}.part", path)
    if not os.path.exists(tokens):
        # nanoGPT's layout: raw uint16 ids; 512 windows of 16 and the next token.
        np.random.default_rng(3).integers(0, 256, 512 * 16 + 1).astype("<u2").tofile(f"{tokens}.{os.getpid()}")
        os.replace(f"{tokens}.{os.getpid()}", tokens)
    return path, ["--data", f"tokens:{tokens}"]


def train(strata, out, batch, extra, lr="0.05", nodes=None, port=None, model=None, data=None):
    """One job; with nodes=K, K launcher processes (nodes) on this machine (node 0 exports); port: the store's."""
    data = data or ["--data", "synthetic", "--synthetic-samples", "512"]
    command = [strata, "train"] + ([model] if model else []) + data + ["--batch-size", str(batch),
               "--max-steps", "5", "--seed", "1", "--lr", lr, "--momentum", "0.9", "--lr-schedule", "constant",
               "--out", out, "--export", out + ".onnx"] + extra
    others = []
    if port is not None and nodes is None and "--nproc" in command:
        command += ["--master-port", str(port)]
    if nodes is not None:
        nnodes = nodes
        cluster = ["--nnodes", str(nnodes), "--master-addr", "127.0.0.1", "--master-port", str(port or multirank.free_port())]
        for node in range(1, nnodes):
            other = [a if a != out else f"{out}-node{node}" for a in command] + cluster + ["--node-rank", str(node)]
            others.append((other, subprocess.Popen(other, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                                   text=True)))
        command = command + cluster + ["--node-rank", "0"]
    result = subprocess.run(command, capture_output=True, text=True)
    failed = result.returncode != 0
    for other, process in others:
        output, _ = process.communicate(timeout=300)
        if process.returncode != 0:
            print(output)
            failed = True
    if failed:
        print(result.stdout, result.stderr)
        raise SystemExit(f"{' '.join(command)} failed")
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(out + ".onnx").graph.initializer}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--grad-accum", type=int, default=1)
    parser.add_argument("--batch", type=int, default=8, help="per rank and micro-batch")
    parser.add_argument("--tolerance", type=float, default=1e-5)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--strategy", default="ddp",
                        help="ddp, fsdp:LEVEL (shard=LEVEL) or ps:SERVERS (the parameter server, mode=sync)")
    parser.add_argument("--optimizer", default="sgd")
    parser.add_argument("--precision", default="fp32", help="of both runs: fp32, or bf16/fp16 (mixed precision)")
    parser.add_argument("--strategy-opt", action="append", default=[], help="more fsdp options (key=value)")
    parser.add_argument("--nnodes", type=int, default=1,
                        help="run the ranks as this many launcher processes (nodes) of --nproc ranks each")
    parser.add_argument("--master-port", type=int, help="of the ranks' store (default: the launcher's)")
    parser.add_argument("--loss-scale", help="--loss-scale of both runs (fp16), e.g. dynamic:300000 to skip steps")
    parser.add_argument("--model", help="a torchvision model to train instead of the bundled CNN (resnet18), or gpt: "
                                        "a small GPT (models/make_gpt.py) on a token file")
    parser.add_argument("--model-dtype", default="float32", choices=["float32", "float64"],
                        help="of --model's weights: float64 where batch norm at small batches amplifies float32's "
                             "reduction-order rounding (4 ranks' sums in another order, as DDP with other buckets)")
    parser.add_argument("--reference", choices=["single", "ddp"], default="single",
                        help="compare with one process on the concatenated batch, or with DDP on the same ranks")
    args = parser.parse_args()
    device = ["--device", args.device, "--precision", args.precision]
    if args.loss_scale:
        device += ["--loss-scale", args.loss_scale]
    if args.device != "cpu":
        probe = subprocess.run([args.strata, "run", "--device", args.device], capture_output=True, text=True)
        if probe.returncode != 0 and any(why in probe.stderr for why in ("cannot use CUDA", "without the CUDA backend")):
            print(f"skipped: {probe.stderr.strip().splitlines()[-1]}")
            return 77
    os.makedirs(args.work_dir, exist_ok=True)
    strategy = args.strategy.replace(":", "-")
    tag = (f"{strategy}-{args.optimizer}-n{args.nproc}x{args.nnodes}k{args.grad_accum}-{args.device}-{args.precision}"
           + "".join(f"-{o.replace('=', '')}" for o in args.strategy_opt))
    # Adam divides by the gradients' running RMS, which amplifies float32 reduction-order differences at a high lr.
    device += ["--optimizer", args.optimizer]
    data = None
    if args.model == "gpt":
        model, data = export_gpt(args.work_dir, args.model_dtype)
    else:
        model = export_torchvision(args.model, args.work_dir, args.model_dtype) if args.model else None
    if args.model:
        tag += f"-{args.model}-{args.model_dtype}"
    lr = "0.05" if args.optimizer == "sgd" else "0.002"
    if args.strategy == "ddp":
        options = ["--strategy", "ddp", "--strategy-opt", "first_bucket_mb=0.01", "--strategy-opt", "bucket_mb=0.5"]
    elif args.strategy.startswith("ps:"):
        options = ["--strategy", "ps", "--strategy-opt", "mode=sync", "--strategy-opt",
                   f"servers={args.strategy.split(':')[1]}"]
    else:
        name, level = args.strategy.split(":")
        # Units of >= 20000 elements: the bundled CNN (421642 parameters) in several units, some padded.
        options = ["--strategy", name, "--strategy-opt", f"shard={level}", "--strategy-opt", "unit_params=20000"]
        for extra in args.strategy_opt:
            options += ["--strategy-opt", extra]
    tag += f"-{args.loss_scale}" if args.loss_scale else ""
    if args.reference == "single":
        single = train(args.strata, os.path.join(args.work_dir, f"single-{tag}"),
                       args.batch * args.nproc * args.nnodes * args.grad_accum, ["--threads", "1"] + device, lr, model=model,
                       data=data)
    else:
        single = train(args.strata, os.path.join(args.work_dir, f"ddp-reference-{tag}"), args.batch,
                       ["--nproc", str(args.nproc), "--grad-accum", str(args.grad_accum), "--threads", "1",
                        "--strategy", "ddp"] + device, lr, port=args.master_port, model=model, data=data)
    ranks = train(args.strata, os.path.join(args.work_dir, f"ranks-{tag}"), args.batch,
                  ["--nproc", str(args.nproc), "--grad-accum", str(args.grad_accum), "--threads", "1"] + options
                  + device, lr, args.nnodes if args.nnodes > 1 else None, args.master_port, model, data)
    worst = max((float(np.linalg.norm(ranks[k] - v) / np.linalg.norm(v)), k) for k, v in single.items())
    print(f"{args.strategy} {' '.join(args.strategy_opt)} with {args.optimizer}, {args.nnodes} node(s) x "
          f"{args.nproc} ranks x {args.grad_accum} micro-batches, {args.precision}, vs "
          f"{'one process' if args.reference == 'single' else 'DDP'}: worst relative error {worst[0]:.2e} ({worst[1]})")
    return 0 if worst[0] <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
