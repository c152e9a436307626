#!/usr/bin/env python3
"""Checks Strata's optimizers against torch.optim on the bundled CNN: three updates on one batch.

For each configuration, `strata step --updates 3` and the same PyTorch model (built from the ONNX file's
initializers) must end with parameters within --tolerance (relative error per parameter).
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
import torch
import torch.nn.functional as F
from onnx import numpy_helper

CONFIGS = [
    ("sgd", dict(lr=0.1, momentum=0.0, weight_decay=0.0), {}),
    ("sgd", dict(lr=0.1, momentum=0.9, weight_decay=1e-3), {}),
    ("sgd", dict(lr=0.1, momentum=0.9, weight_decay=0.0, nesterov=True), {"--nesterov": None}),
    ("adam", dict(lr=1e-3, weight_decay=1e-2), {}),
    ("adamw", dict(lr=1e-3, weight_decay=1e-2), {}),
]


def forward(params, x):
    h = F.max_pool2d(F.relu(F.conv2d(x, params["conv1.weight"], params["conv1.bias"], padding=1)), 2)
    h = F.max_pool2d(F.relu(F.conv2d(h, params["conv2.weight"], params["conv2.bias"], padding=1)), 2)
    h = F.relu(F.linear(h.flatten(1), params["fc1.weight"], params["fc1.bias"]))
    return F.linear(h, params["fc2.weight"], params["fc2.bias"])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--model", required=True, help="the bundled default_cnn.onnx")
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    args = parser.parse_args()
    torch.set_num_threads(2)
    os.makedirs(args.work_dir, exist_ok=True)
    initial = {i.name: numpy_helper.to_array(i) for i in onnx.load(args.model).graph.initializer}
    torch.manual_seed(0)
    x = torch.randn(16, 1, 28, 28)
    y = torch.randint(0, 10, (16,))
    x_path, y_path = os.path.join(args.work_dir, "x.pb"), os.path.join(args.work_dir, "y.pb")
    with open(x_path, "wb") as f:
        f.write(numpy_helper.from_array(x.numpy(), "input").SerializeToString())
    with open(y_path, "wb") as f:
        f.write(numpy_helper.from_array(y.numpy().astype(np.int64), "labels").SerializeToString())

    failed = False
    for index, (name, hyper, flags) in enumerate(CONFIGS):
        out = os.path.join(args.work_dir, f"config{index}")
        command = [args.strata, "step", args.model, "--input", x_path, "--labels", y_path, "--dump-dir", out,
                   "--updates", "3", "--optimizer", name, "--lr", str(hyper["lr"]),
                   "--weight-decay", str(hyper["weight_decay"])]
        if "momentum" in hyper:
            command += ["--momentum", str(hyper["momentum"])]
        for flag in flags:
            command.append(flag)
        subprocess.run(command, check=True, capture_output=True)
        params = {k: torch.tensor(v, requires_grad=True) for k, v in initial.items()}
        optimizer = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam, "adamw": torch.optim.AdamW}[name](
            params.values(), **hyper)
        for _ in range(3):
            optimizer.zero_grad()
            F.cross_entropy(forward(params, x), y).backward()
            optimizer.step()
        worst = max((float(np.linalg.norm(numpy_helper.to_array(onnx.load_tensor(os.path.join(out, "params", k + ".pb")))
                                          - p.detach().numpy()) / np.linalg.norm(p.detach().numpy())), k)
                    for k, p in params.items())
        ok = worst[0] <= args.tolerance
        failed = failed or not ok
        print(f"{name} {hyper}: worst parameter {worst[1]} relative error {worst[0]:.2e} {'ok' if ok else 'FAIL'}")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
