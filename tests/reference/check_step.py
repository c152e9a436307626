#!/usr/bin/env python3
"""Checks one training step of Strata against PyTorch for one torchvision model.

Exports the model for training (dropout 0), then on the same batch and labels compares `strata step` with PyTorch:
the loss and output within --tolerance, every parameter gradient within --grad-tolerance (relative error
||a - b|| / ||b||, parameters matched by initializer name), and the parameters after three SGD updates with
momentum within --grad-tolerance. See Note [float64 reference] in check_forward.py for --dtype float64.
With --device cuda both sides run on the GPU (Strata's CUDA executor against PyTorch on CUDA, TF32 off on both).
"""
import argparse
import os
import subprocess
import sys

import numpy as np
import onnx
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchvision_models  # noqa: E402
from torchvision_models import load_tensor, safe_name  # noqa: E402

LR = 0.01
MOMENTUM = 0.9
# Note [Gradient floor]: some gradients are analytically zero (the bias of a batch norm whose output is shifted
# into another training-mode batch norm through a 1x1 conv: the second one removes any per-channel shift), so
# both frameworks return rounding noise there. A relative error against noise means nothing; errors are taken
# relative to max(||b||, 1e-6 * the global gradient norm); parameters after updates likewise against the global
# parameter norm (such a bias stays at 0 plus noise).
FLOOR = 1e-6


def rel(a, b, floor=0.0):
    denom = max(float(np.linalg.norm(b)), floor)
    return float(np.linalg.norm(a - b) / denom) if denom > 0 else float(np.linalg.norm(a - b))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True, choices=sorted(torchvision_models.MODELS))
    parser.add_argument("--strata", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--grad-tolerance", type=float, default=1e-3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--updates", type=int, default=3, help="SGD updates (with momentum) to compare after")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--channels-last", choices=["off", "on", "auto"], default="auto",
                        help="strata step's --channels-last (PyTorch's reference stays channels-first)")
    args = parser.parse_args()
    updates = args.updates
    skip = torchvision_models.gpu_skip_reason(args.strata, args.device)
    if skip:
        print(f"skipped: {skip}")
        return 77  # ctest: skipped

    torch.set_num_threads(args.threads)
    work = os.path.join(args.work_dir, f"step-{args.model}-{args.dtype}-b{args.batch}")
    os.makedirs(work, exist_ok=True)
    model, x, labels, model_path = torchvision_models.exported_case(args.model, args.batch, work,
                                                                   double=args.dtype == "float64")
    host_x, host_labels = x, labels
    if args.device == "cuda":
        torch.backends.cuda.matmul.allow_tf32 = False
        torch.backends.cudnn.allow_tf32 = False
        model, x, labels = model.cuda(), x.cuda(), labels.cuda()

    x_file, y_file = torchvision_models.write_batch(work, host_x, host_labels)
    out_dir = os.path.join(work, "strata")
    subprocess.run([args.strata, "step", model_path, "--input", x_file, "--labels", y_file, "--dump-dir", out_dir,
                    "--threads", str(args.threads), "--updates", str(max(updates, 1)), "--optimizer", "sgd", "--lr",
                    str(LR), "--momentum", str(MOMENTUM), "--device", args.device, "--precision", "fp32",
                    "--channels-last", args.channels_last],
                   check=True)
    initializers = {i.name for i in onnx.load(model_path, load_external_data=False).graph.initializer}

    params = dict(model.named_parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    failures = []
    for update in range(max(updates, 1)):
        optimizer.zero_grad()
        output = model(x)
        loss = torch.nn.functional.cross_entropy(output, labels)
        loss.backward()
        if update == 0:
            loss_err = rel(load_tensor(os.path.join(out_dir, "loss.pb")), loss.detach().cpu().numpy())
            out_err = rel(load_tensor(os.path.join(out_dir, "output_0.pb")), output.detach().cpu().numpy())
            print(f"{args.model} ({args.dtype}, batch {args.batch}): loss error {loss_err:.2e}, "
                  f"output error {out_err:.2e}")
            if loss_err > args.tolerance or out_err > args.tolerance:
                failures.append("loss/output")
            worst = ("", 0.0)
            checked = 0
            floor = FLOOR * float(np.sqrt(sum(float(np.sum(p.grad.cpu().numpy() ** 2)) for p in params.values())))
            for name, p in params.items():
                if name not in initializers:
                    failures.append(f"parameter {name} is not an initializer of the exported model")
                    continue
                grad = load_tensor(os.path.join(out_dir, "grads", safe_name(name) + ".pb"))
                err = rel(grad, p.grad.cpu().numpy(), floor)
                checked += 1
                worst = max(worst, (name, err), key=lambda t: t[1])
                if err > args.grad_tolerance:
                    failures.append(f"gradient of {name}: {err:.2e}")
            print(f"  {checked} gradients, worst {worst[0]} {worst[1]:.2e}")
        optimizer.step()
    worst = ("", 0.0)
    param_floor = FLOOR * float(np.sqrt(sum(float(np.sum(p.detach().cpu().numpy() ** 2)) for p in params.values())))
    for name, p in params.items():
        if name in initializers and updates > 0:
            value = load_tensor(os.path.join(out_dir, "params", safe_name(name) + ".pb"))
            err = rel(value, p.detach().cpu().numpy(), param_floor)
            worst = max(worst, (name, err), key=lambda t: t[1])
            if err > args.grad_tolerance:
                failures.append(f"parameter {name} after {updates} updates: {err:.2e}")
    if updates > 0:
        print(f"  parameters after {updates} SGD updates with momentum: worst {worst[0]} {worst[1]:.2e}")
    os.remove(model_path)
    for failure in failures[:20]:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
