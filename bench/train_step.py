#!/usr/bin/env python3
"""Training step time of Strata beside PyTorch CPU: same model, same batch, same threads, one run.

Each model is built in PyTorch and exported for training (opset 17, training mode, no constant folding). Strata
trains the exported file on synthetic data (`strata train --data synthetic`, SGD with momentum, forward +
backward + update per step); PyTorch runs the same step (forward, cross-entropy, backward, SGD step) on a fixed
random batch. Rounds alternate between the two; the table gives median ms per step and the ratio Strata/PyTorch
(below 1.0 means Strata is faster).
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
import torchvision

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from forward_latency import FashionCnn  # noqa: E402

CASES = {
    "fashion_cnn": (FashionCnn, (64, 1, 28, 28)),
    "resnet18": (lambda: torchvision.models.resnet18(num_classes=10), (32, 3, 32, 32)),
    "resnet50": (lambda: torchvision.models.resnet50(num_classes=10), (32, 3, 32, 32)),
    "densenet121": (lambda: torchvision.models.densenet121(num_classes=10), (16, 3, 32, 32)),
}


def strata_ms(strata, model_path, shape, threads, steps, work):
    out = os.path.join(work, "run")
    subprocess.run([strata, "train", model_path, "--data", "synthetic", "--synthetic-samples",
                    str(shape[0] * (steps + 2)), "--batch-size", str(shape[0]), "--max-steps", str(steps + 2),
                    "--threads", str(threads), "--lr", "0.01", "--lr-schedule", "constant", "--out", out,
                    "--log-every", "1"], check=True, capture_output=True)
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    os.remove(os.path.join(out, "metrics.jsonl"))
    # Steps after the first two (kernels finish lazy set-up on their first run), as for PyTorch below.
    times = [r["step_time_ms"] for r in records if r["type"] == "step" and r["step"] > 2]
    return statistics.median(times), summary["ranks"][0]["peak_memory_bytes"]


def torch_ms(model, x, y, steps):
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    times = []
    for i in range(steps + 2):
        start = time.perf_counter()
        optimizer.zero_grad()
        torch.nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
        if i >= 2:
            times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", default=os.path.join(os.path.dirname(__file__), "..", "build", "cli", "strata"))
    parser.add_argument("--models", default="fashion_cnn,resnet18,resnet50,densenet121")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    print(f"torch {torch.__version__}, threads {args.threads}, {args.rounds} rounds x {args.steps} steps")
    print(f"{'model':<13}{'batch shape':<16}{'strata ms':>10}{'torch ms':>10}{'ratio':>8}{'strata peak MiB':>17}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            constructor, shape = CASES[name]
            torch.manual_seed(0)
            model = constructor().train()
            x = torch.randn(*shape)
            y = torch.randint(0, 10, (shape[0],))
            path = os.path.join(tmp, f"{name}.onnx")
            state = {k: v.clone() for k, v in model.state_dict().items()}
            torch.onnx.export(model, x, path, opset_version=17, do_constant_folding=False,
                              training=torch.onnx.TrainingMode.TRAINING)
            model.load_state_dict(state)
            s_times, t_times, peak = [], [], 0
            for _ in range(args.rounds):
                ms, peak = strata_ms(args.strata, path, shape, args.threads, args.steps, tmp)
                s_times.append(ms)
                t_times.append(torch_ms(model, x, y, args.steps))
            s, t = statistics.median(s_times), statistics.median(t_times)
            print(f"{name:<13}{'x'.join(map(str, shape)):<16}{s:>10.1f}{t:>10.1f}{s / t:>8.2f}{peak / 2**20:>17.1f}")


if __name__ == "__main__":
    main()
