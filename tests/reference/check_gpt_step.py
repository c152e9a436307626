#!/usr/bin/env python3
"""Checks one training step of a GPT-2-architecture model exported from PyTorch against PyTorch.

The model is models/make_gpt.py's (pre-LayerNorm blocks, causal self-attention, GELU MLP, learned positions, output
projection tied to the token embedding), exported for training. On the same token ids and next-token targets,
`strata step --class-axis last` is compared with PyTorch (cross-entropy over every position): the loss and logits,
every parameter gradient (the tied embedding's included: its gradient sums the lookup's and the projection's), and the
parameters after three SGD updates with momentum. float64 runs are held to --tolerance (1e-9 by default); float32
runs are judged by PyTorch in float64, within PyTorch float32's own error (Note [float32 judged by float64] in
check_step.py).
"""
import argparse
import copy
import os
import subprocess
import sys

import numpy as np
import onnx
import torch

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, here)
sys.path.insert(0, os.path.join(here, "..", "..", "models"))
import make_gpt  # noqa: E402
from check_step import LR, MOMENTUM, compare  # noqa: E402
from torchvision_models import load_tensor, safe_name  # noqa: E402
from onnx import numpy_helper  # noqa: E402


def torch_steps(model, x, targets, updates, names):
    """PyTorch's side: loss, logits and gradients of the first step, the parameters after `updates` SGD updates."""
    params = dict(model.named_parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    run = {}
    for update in range(max(updates, 1)):
        optimizer.zero_grad()
        logits = model(x)
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        loss.backward()
        if update == 0:
            run["loss"] = loss.detach().numpy().copy()
            run["output"] = logits.detach().numpy().copy()
            run["grads"] = {n: params[n].grad.numpy().copy() for n in names}
        optimizer.step()
    run["params"] = {n: params[n].detach().numpy().copy() for n in names}
    return run


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float64")
    parser.add_argument("--batch", type=int, default=3)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--width", type=int, default=32)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--vocab", type=int, default=61)
    parser.add_argument("--seq-len", type=int, default=24)
    parser.add_argument("--tolerance", type=float, default=None, help="default: 1e-9 (float64), 1e-4 (float32)")
    parser.add_argument("--updates", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    tolerance = args.tolerance or (1e-9 if args.dtype == "float64" else 1e-4)
    torch.set_num_threads(args.threads)
    work = os.path.join(args.work_dir, f"gpt-step-{args.dtype}")
    os.makedirs(work, exist_ok=True)

    torch.manual_seed(1)
    model = make_gpt.Gpt(args.layers, args.width, args.heads, args.vocab, args.seq_len)
    # Larger than GPT-2's initialisation, so that every layer matters to the loss and the gradients are not tiny.
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.05 * torch.randn_like(p))
    dtype = torch.float64 if args.dtype == "float64" else torch.float32
    model_path = os.path.join(work, "gpt.onnx")
    make_gpt.export(copy.deepcopy(model), model_path, args.seq_len, dtype=dtype)
    model = model.to(dtype)
    generator = torch.Generator().manual_seed(2)
    x = torch.randint(0, args.vocab, (args.batch, args.seq_len), generator=generator)
    targets = torch.randint(0, args.vocab, (args.batch, args.seq_len), generator=generator)
    x_file, y_file = os.path.join(work, "x.pb"), os.path.join(work, "y.pb")
    with open(x_file, "wb") as f:
        f.write(numpy_helper.from_array(x.numpy(), "input").SerializeToString())
    with open(y_file, "wb") as f:
        f.write(numpy_helper.from_array(targets.numpy(), "labels").SerializeToString())

    out_dir = os.path.join(work, "strata")
    subprocess.run([args.strata, "step", model_path, "--input", x_file, "--labels", y_file, "--class-axis", "last",
                    "--dump-dir", out_dir, "--threads", str(args.threads), "--updates", str(args.updates),
                    "--optimizer", "sgd", "--lr", str(LR), "--momentum", str(MOMENTUM), "--device", "cpu"],
                   check=True)
    initializers = {i.name for i in onnx.load(model_path, load_external_data=False).graph.initializer}
    names = [name for name, _ in model.named_parameters()]
    failures = [f"parameter {n} is not an initializer of the exported model" for n in names if n not in initializers]
    names = [n for n in names if n in initializers]
    strata_run = {
        "loss": load_tensor(os.path.join(out_dir, "loss.pb")),
        "output": load_tensor(os.path.join(out_dir, "output_0.pb")),
        "grads": {n: load_tensor(os.path.join(out_dir, "grads", safe_name(n) + ".pb")) for n in names},
        "params": {n: load_tensor(os.path.join(out_dir, "params", safe_name(n) + ".pb")) for n in names},
    }
    judge = None
    if args.dtype == "float32":
        judge = torch_steps(copy.deepcopy(model).double(), x, targets, args.updates, names)
    torch_run = torch_steps(model, x, targets, args.updates, names)
    print(f"GPT ({args.layers} layers, width {args.width}, {args.heads} heads, vocabulary {args.vocab}, sequence "
          f"{args.seq_len}; {args.dtype}, batch {args.batch}" + (", judged by float64" if judge else "") + "):")
    failures += compare(strata_run, torch_run, judge, tolerance, tolerance if judge is None else 1e-3, args.updates)
    for failure in failures[:20]:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
