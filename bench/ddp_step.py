#!/usr/bin/env python3
"""DDP step time of Strata beside PyTorch DDP on CPU: 2 ranks x 1 thread, Gloo, same per-rank batch, one run.

Strata: `strata train --nproc 2 --strategy ddp --threads 1 --data synthetic` on the model exported for training;
the median per-step time logged by rank 0 after two warm-up steps, the time rank 0 spent blocked waiting for
gradient all-reduces (communication not hidden behind backward), and the share of the all-reduces' own time that
overlapped with backward ("hidden": 1 - blocked / all-reduce time). PyTorch: torch.distributed (gloo) with
DistributedDataParallel, two processes with one thread each, forward + cross-entropy + backward + SGD step.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from forward_latency import FashionCnn  # noqa: E402

CASES = {
    "fashion_cnn": (FashionCnn, (32, 1, 28, 28)),
    "resnet18": (lambda: torchvision.models.resnet18(num_classes=10), (16, 3, 32, 32)),
}


def torch_worker(rank, name, steps, port, queue):
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    constructor, shape = CASES[name]
    torch.manual_seed(0)
    model = torch.nn.parallel.DistributedDataParallel(constructor().train())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x = torch.randn(*shape)
    y = torch.randint(0, 10, (shape[0],))
    times = []
    for i in range(steps + 2):
        start = time.perf_counter()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if i >= 2:
            times.append((time.perf_counter() - start) * 1000.0)
    if rank == 0:
        queue.put(statistics.median(times))
    dist.destroy_process_group()


def torch_ms(name, steps, port):
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    mp.start_processes(torch_worker, args=(name, steps, port, queue), nprocs=2, start_method="spawn")
    return queue.get()


def strata_ms(strata, model_path, shape, steps, work, port):
    out = os.path.join(work, "run")
    subprocess.run([strata, "train", model_path, "--data", "synthetic", "--synthetic-samples",
                    str(2 * shape[0] * (steps + 2)), "--batch-size", str(shape[0]), "--max-steps", str(steps + 2),
                    "--nproc", "2", "--strategy", "ddp", "--threads", "1", "--master-port", str(port),
                    "--lr", "0.01", "--lr-schedule", "constant", "--out", out, "--log-every", "1"],
                   check=True, capture_output=True)
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    os.remove(os.path.join(out, "metrics.jsonl"))
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    times = [r["step_time_ms"] for r in records if r["type"] == "step" and r["step"] > 2]
    rank0 = summary["ranks"][0]
    blocked_ms = 1000.0 * rank0["communication_s"] / summary["steps"]
    hidden = 1.0 - rank0["communication_s"] / rank0["collective_s"] if rank0["collective_s"] > 0 else 0.0
    return statistics.median(times), blocked_ms, max(0.0, hidden)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", default=os.path.join(os.path.dirname(__file__), "..", "build", "cli", "strata"))
    parser.add_argument("--models", default="fashion_cnn,resnet18")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    print(f"torch {torch.__version__}, 2 ranks x 1 thread, gloo, {args.rounds} rounds x {args.steps} steps")
    print(f"{'model':<13}{'batch/rank':<16}{'strata ms':>10}{'torch ms':>10}{'ratio':>8}{'strata blocked ms':>19}"
          f"{'hidden':>8}")
    port = 29611
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            constructor, shape = CASES[name]
            torch.manual_seed(0)
            model = constructor().train()
            path = os.path.join(tmp, f"{name}.onnx")
            kwargs = dict(opset_version=17, do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
            try:  # the current PyTorch exports with dynamo (onnxscript) unless told not to
                torch.onnx.export(model, torch.randn(*shape), path, dynamo=False, **kwargs)
            except TypeError:  # Debian's PyTorch 1.13 has no dynamo argument
                torch.onnx.export(model, torch.randn(*shape), path, **kwargs)
            s_times, t_times, blocked, hidden = [], [], [], []
            for _ in range(args.rounds):
                port += 1
                ms, b, h = strata_ms(args.strata, path, shape, args.steps, tmp, port)
                s_times.append(ms)
                blocked.append(b)
                hidden.append(h)
                port += 1
                t_times.append(torch_ms(name, args.steps, port))
            s, t = statistics.median(s_times), statistics.median(t_times)
            print(f"{name:<13}{'x'.join(map(str, shape)):<16}{s:>10.1f}{t:>10.1f}{s / t:>8.2f}"
                  f"{statistics.median(blocked):>19.2f}{100 * statistics.median(hidden):>7.0f}%")


if __name__ == "__main__":
    main()
