#!/usr/bin/env python3
"""Forward latency of Strata's CPU executor beside PyTorch CPU: same model, same batch, same threads, one run.

For each model the script builds it in PyTorch, exports it to ONNX (eval mode), then alternates rounds of
`strata run --repeat R` and PyTorch's forward (R timed calls after warm-up) and prints the medians and the ratio
Strata/PyTorch (below 1.0 means Strata is faster).
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time

import torch
import torchvision

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))


class FashionCnn(torch.nn.Module):
    """The same architecture as models/make_default_model.py."""

    def __init__(self):
        super().__init__()
        self.features = torch.nn.Sequential(
            torch.nn.Conv2d(1, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
            torch.nn.Conv2d(32, 64, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2))
        self.classifier = torch.nn.Sequential(
            torch.nn.Flatten(), torch.nn.Linear(3136, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10))

    def forward(self, x):
        return self.classifier(self.features(x))


CASES = {
    "fashion_cnn": (FashionCnn, (64, 1, 28, 28)),
    "resnet18": (lambda: torchvision.models.resnet18(num_classes=10), (32, 3, 32, 32)),
    "resnet50": (lambda: torchvision.models.resnet50(num_classes=10), (32, 3, 32, 32)),
}


def strata_ms(strata, model_path, shape, threads, repeat):
    out = subprocess.run([strata, "run", model_path, "--input-shape", ",".join(map(str, shape)),
                          "--threads", str(threads), "--repeat", str(repeat)],
                         check=True, capture_output=True, text=True).stdout
    return float(re.search(r"forward: ([0-9.]+) ms", out).group(1))


def torch_ms(model, x, repeat):
    with torch.no_grad():
        for _ in range(3):
            model(x)
        times = []
        for _ in range(repeat):
            start = time.perf_counter()
            model(x)
            times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", default=os.path.join(os.path.dirname(__file__), "..", "build", "cli", "strata"))
    parser.add_argument("--models", default="fashion_cnn,resnet50")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    print(f"torch {torch.__version__}, threads {args.threads}, {args.rounds} rounds x {args.repeat} runs")
    print(f"{'model':<14}{'batch shape':<18}{'strata ms':>10}{'torch ms':>10}{'ratio':>8}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            constructor, shape = CASES[name]
            torch.manual_seed(0)
            model = constructor().eval()
            x = torch.randn(*shape)
            path = os.path.join(tmp, f"{name}.onnx")
            torch.onnx.export(model, x, path, opset_version=17, do_constant_folding=False,
                              training=torch.onnx.TrainingMode.EVAL)
            strata_times, torch_times = [], []
            for _ in range(args.rounds):
                strata_times.append(strata_ms(args.strata, path, shape, args.threads, args.repeat))
                torch_times.append(torch_ms(model, x, args.repeat))
            s, t = statistics.median(strata_times), statistics.median(torch_times)
            print(f"{name:<14}{'x'.join(map(str, shape)):<18}{s:>10.2f}{t:>10.2f}{s / t:>8.2f}")


if __name__ == "__main__":
    main()
