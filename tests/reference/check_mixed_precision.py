#!/usr/bin/env python3
"""Checks Strata's mixed precision (--precision bf16|fp16) against PyTorch autocast on one training step.

Both frameworks' 16-bit gradients are measured against the same float64 reference (the model in double): Strata
passes when its error is of the order of autocast's own, at most --factor times it (plus --slack for noise). The
two autocasts round in different places (PyTorch keeps batch norm in 16 bits, Strata in float32), so neither is
the other's reference; float64 is. The error is global, ||g - g64|| / ||g64|| over every parameter, and the loss
error is checked the same way. On the CPU Strata emulates 16 bits (Note [Low precision on the CPU]) and PyTorch
autocasts to bfloat16 only; with --device cuda both sides use the GPU's 16-bit kernels.
"""
import argparse
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import device_skip  # noqa: E402

device_skip.exit_if_skipped()  # a GPU check without a GPU ends here, before PyTorch loads

import numpy as np  # noqa: E402
import onnx  # noqa: E402
import torch  # noqa: E402

import torchvision_models  # noqa: E402
from torchvision_models import load_tensor, safe_name  # noqa: E402


def global_error(grads, reference):
    diff = sum(float(np.sum((grads[n] - reference[n]) ** 2)) for n in reference)
    norm = sum(float(np.sum(reference[n] ** 2)) for n in reference)
    return float(np.sqrt(diff / norm))


def torch_gradients(model, x, labels, autocast_dtype, device):
    model.zero_grad()
    with torch.autocast(device, dtype=autocast_dtype, enabled=autocast_dtype is not None):
        output = model(x)
        loss = torch.nn.functional.cross_entropy(output.float() if autocast_dtype else output, labels)
    loss.backward()
    grads = {n: p.grad.detach().double().cpu().numpy() for n, p in model.named_parameters()}
    return float(loss.detach().double().cpu()), grads


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="resnet50", choices=sorted(torchvision_models.MODELS))
    parser.add_argument("--precision", choices=["bf16", "fp16"], default="bf16")
    parser.add_argument("--strata", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--factor", type=float, default=3.0)
    parser.add_argument("--slack", type=float, default=1e-3)
    args = parser.parse_args()
    if args.device == "cpu" and args.precision == "fp16":
        print("PyTorch autocasts to float16 on CUDA only; run the fp16 check with --device cuda")
        return 2

    torch.set_num_threads(args.threads)
    work = os.path.join(args.work_dir, f"mixed-{args.model}-{args.precision}-{args.device}-b{args.batch}")
    os.makedirs(work, exist_ok=True)
    model, x, labels, model_path = torchvision_models.exported_case(args.model, args.batch, work)
    x_file, y_file = torchvision_models.write_batch(work, x, labels)
    out_dir = os.path.join(work, "strata")
    subprocess.run([args.strata, "step", model_path, "--input", x_file, "--labels", y_file, "--dump-dir", out_dir,
                    "--threads", str(args.threads), "--device", args.device, "--precision", args.precision],
                   check=True)
    initializers = {i.name for i in onnx.load(model_path, load_external_data=False).graph.initializer}
    os.remove(model_path)

    reference_model = torchvision_models.as_exported(torchvision_models.build(args.model))
    reference_model.load_state_dict(model.state_dict())  # the exported state (the model has not run since)
    reference_model = reference_model.double()
    ref_loss, reference = torch_gradients(reference_model, x.double(), labels, None, "cpu")
    if args.device == "cuda":
        model, x, labels = model.cuda(), x.cuda(), labels.cuda()
    low = torch.bfloat16 if args.precision == "bf16" else torch.float16
    torch_loss, autocast = torch_gradients(model, x, labels, low, args.device)

    missing = [n for n in reference if n not in initializers]
    if missing:
        print(f"FAIL: parameters that are not initializers of the exported model: {missing[:5]}")
        return 1
    strata = {n: load_tensor(os.path.join(out_dir, "grads", safe_name(n) + ".pb")).astype(np.float64)
              for n in reference}
    strata_loss = float(load_tensor(os.path.join(out_dir, "loss.pb")))
    strata_error = global_error(strata, reference)
    torch_error = global_error(autocast, reference)
    strata_loss_error = abs(strata_loss - ref_loss) / abs(ref_loss)
    torch_loss_error = abs(torch_loss - ref_loss) / abs(ref_loss)
    print(f"{args.model} {args.precision} on {args.device}, batch {args.batch}, error against float64:")
    print(f"  gradients: strata {strata_error:.2e}, pytorch autocast {torch_error:.2e}")
    print(f"  loss:      strata {strata_loss_error:.2e}, pytorch autocast {torch_loss_error:.2e}")
    failures = []
    if strata_error > args.factor * torch_error + args.slack:
        failures.append(f"gradient error {strata_error:.2e} > {args.factor} x autocast's {torch_error:.2e} + "
                        f"{args.slack}")
    if strata_loss_error > args.factor * torch_loss_error + args.slack:
        failures.append(f"loss error {strata_loss_error:.2e} > {args.factor} x autocast's {torch_loss_error:.2e} + "
                        f"{args.slack}")
    if strata_error == 0.0:
        failures.append("no 16-bit rounding shows: mixed precision did not take effect")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
