#!/usr/bin/env python3
"""Checks Strata's Resize and Einsum against PyTorch in float64: the forward output and the input gradients.

Each case is a small module whose first operand is the batch plus a parameter `p` of the batch's shape, so the
gradient of p is the op's input gradient (Einsum's other operands are parameters too). Its output, flattened per
sample, is the logits of `strata step`'s cross-entropy, so output_0 is the op's own output. The module is exported
as the study exports models (torch.onnx, opset 17, training mode), `strata step` runs it, and the loss, the output
and every parameter gradient must match PyTorch's within --tolerance (relative error ||a - b|| / ||b||).

Resize cases are torch.nn.functional.interpolate (nearest, bilinear, bicubic; align_corners True and False; scale
factors and sizes, up and down); with --channels-last on a convolution runs first, so that Strata's layout pass
makes the Resize channels-last. Einsum cases are torch.einsum equations.
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from torchvision_models import export, load_tensor, write_batch  # noqa: E402

BATCH = 2


class Interpolate(torch.nn.Module):
    def __init__(self, shape, conv, **kwargs):
        super().__init__()
        self.conv = torch.nn.Conv2d(shape[0], shape[0], 3, padding=1, bias=False) if conv else None
        self.p = torch.nn.Parameter(torch.randn(BATCH, *shape) * 0.5)
        self.kwargs = kwargs

    def forward(self, x):
        z = x + self.p
        if self.conv is not None:
            z = self.conv(z)
        return torch.flatten(F.interpolate(z, **self.kwargs), 1)


class Einsum(torch.nn.Module):
    def __init__(self, equation, shapes):
        super().__init__()
        self.equation = equation
        self.p = torch.nn.Parameter(torch.randn(BATCH, *shapes[0]))
        self.others = torch.nn.ParameterList([torch.nn.Parameter(torch.randn(*s)) for s in shapes[1:]])

    def forward(self, x):
        return torch.flatten(torch.einsum(self.equation, x + self.p, *self.others), 1)


def resize_cases(conv):
    shape = (3, 4, 6)
    cases = []
    for mode in ("bilinear", "bicubic"):
        for align in (False, True):
            tag = f"{mode}_align{int(align)}"
            cases.append((f"{tag}_x2", Interpolate(shape, conv, scale_factor=2, mode=mode, align_corners=align)))
            cases.append((f"{tag}_size7x5", Interpolate(shape, conv, size=(7, 5), mode=mode, align_corners=align)))
    cases.append(("bilinear_x0.5", Interpolate(shape, conv, scale_factor=0.5, mode="bilinear", align_corners=False)))
    cases.append(("nearest_x2", Interpolate(shape, conv, scale_factor=2, mode="nearest")))
    cases.append(("nearest_x3x2", Interpolate(shape, conv, scale_factor=(3, 2), mode="nearest")))
    cases.append(("nearest_size5x7", Interpolate(shape, conv, size=(5, 7), mode="nearest")))
    return cases


def einsum_cases():
    return [
        ("batched_matmul", Einsum("bij,bjk->bik", [(3, 4), (BATCH, 4, 5)])),
        ("attention_scores", Einsum("bhqd,bhkd->bhqk", [(2, 3, 4), (BATCH, 2, 5, 4)])),
        ("matrix_vector", Einsum("bij,j->bi", [(3, 4), (4,)])),
        ("chain", Einsum("bi,ij,jk->bk", [(3,), (3, 4), (4, 5)])),
        ("diagonal", Einsum("bii->bi", [(4, 4)])),
        ("sum", Einsum("bij->bj", [(3, 4)])),
        ("ellipsis", Einsum("b...j,jk->b...k", [(2, 3), (3, 4)])),
        ("outer", Einsum("bi,j->bij", [(3,), (4,)])),
    ]


def rel(a, b):
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    denom = float(np.linalg.norm(b))
    return float(np.linalg.norm(a - b)) / denom if denom > 0 else float(np.linalg.norm(a - b))


def check(name, model, args, work):
    model = model.double()
    x = torch.randn(BATCH, *model.p.shape[1:], generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    with torch.no_grad():
        classes = min(10, model(x).shape[1])
    labels = torch.randint(0, classes, (BATCH,), generator=torch.Generator().manual_seed(2))
    case_dir = os.path.join(work, name)
    os.makedirs(case_dir, exist_ok=True)
    model_path = os.path.join(case_dir, "model.onnx")
    export(model, x, model_path)
    x_file, y_file = write_batch(case_dir, x, labels)
    out_dir = os.path.join(case_dir, "strata")
    subprocess.run([args.strata, "step", model_path, "--input", x_file, "--labels", y_file, "--dump-dir", out_dir,
                    "--threads", str(args.threads), "--channels-last", args.channels_last],
                   check=True, stdout=subprocess.DEVNULL)
    model.zero_grad()
    output = model(x)
    loss = F.cross_entropy(output, labels)
    loss.backward()
    errors = {"loss": rel(load_tensor(os.path.join(out_dir, "loss.pb")), loss.detach().numpy()),
              "output": rel(load_tensor(os.path.join(out_dir, "output_0.pb")), output.detach().numpy())}
    for pname, param in model.named_parameters():
        path = os.path.join(out_dir, "grads", pname.replace("/", "_").replace(":", "_") + ".pb")
        if not os.path.exists(path):
            errors[f"gradient of {pname}"] = float("inf")  # Strata found no gradient for it
            continue
        errors[f"gradient of {pname}"] = rel(load_tensor(path), param.grad.numpy())
    worst = max(errors, key=errors.get)
    ok = errors[worst] <= args.tolerance
    print(f"  {name}: {len(errors)} checks, worst {worst} {errors[worst]:.2e}{'' if ok else '  FAIL'}")
    return [] if ok else [f"{name}: {worst} {errors[worst]:.2e}"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--op", choices=["resize", "einsum"], required=True)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--tolerance", type=float, default=1e-9)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--channels-last", choices=["off", "on"], default="off",
                        help="strata step's --channels-last (Resize cases then start with a convolution)")
    args = parser.parse_args()
    torch.manual_seed(0)
    torch.set_num_threads(args.threads)
    conv = args.channels_last == "on"
    cases = resize_cases(conv) if args.op == "resize" else einsum_cases()
    work = os.path.join(args.work_dir, f"ops-{args.op}-{args.channels_last}")
    print(f"{args.op} against PyTorch {torch.__version__} (float64, channels-last {args.channels_last}):")
    failures = []
    for name, model in cases:
        failures += check(name, model, args, work)
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
