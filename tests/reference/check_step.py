#!/usr/bin/env python3
"""Checks one training step of Strata against PyTorch for one torchvision model.

Exports the model for training (dropout 0), then on the same batch and labels compares `strata step` with PyTorch:
the loss and output within --tolerance, every parameter gradient within --grad-tolerance (relative error
||a - b|| / ||b||, parameters matched by initializer name), and the parameters after three SGD updates with
momentum within --grad-tolerance. See Note [float64 reference] in check_forward.py for --dtype float64.
With --device cuda both sides run on the GPU (Strata's CUDA executor against PyTorch on CUDA, TF32 off on both).
"""
import argparse
import copy
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

LR = 0.01
MOMENTUM = 0.9
# Note [Gradient floor]: some gradients are analytically zero (the bias of a batch norm whose output is shifted
# into another training-mode batch norm through a 1x1 conv: the second one removes any per-channel shift), so
# both frameworks return rounding noise there. A relative error against noise means nothing; errors are taken
# relative to max(||b||, 1e-6 * the global gradient norm); parameters after updates likewise against the global
# parameter norm (such a bias stays at 0 plus noise).
FLOOR = 1e-6
# Note [float32 judged by float64]: how much larger than PyTorch float32's error Strata float32's may be over all
# gradients (parameters) together, and on one tensor, where it may also reach JUDGE_TENSOR_FLOOR times the tolerance:
# which implementation an ill-conditioned spot amplifies is rounding luck (DenseNet-121 at batch 16: one layer's
# gradients 1.8e-2 off float64 in Strata and 1e-5 in PyTorch with one seed, 1.8e-2 in both with another).
JUDGE_GLOBAL_RATIO = 1.5
JUDGE_RATIO = 10.0
JUDGE_TENSOR_FLOOR = 5.0


def rel(a, b, floor=0.0):
    denom = max(float(np.linalg.norm(b)), floor)
    return float(np.linalg.norm(a - b) / denom) if denom > 0 else float(np.linalg.norm(a - b))


def global_rel(run, reference):
    """||a - b|| / ||b|| over all the tensors of `reference` at once."""
    diff = sum(float(np.sum((run[n].astype(np.float64) - v) ** 2)) for n, v in reference.items())
    norm = sum(float(np.sum(v.astype(np.float64) ** 2)) for v in reference.values())
    return float(np.sqrt(diff / norm)) if norm > 0 else float(np.sqrt(diff))


def torch_steps(model, x, labels, updates, names):
    """PyTorch's side: loss, output and gradients of the first step, the parameters after `updates` SGD updates."""
    params = dict(model.named_parameters())
    optimizer = torch.optim.SGD(model.parameters(), lr=LR, momentum=MOMENTUM)
    run = {}
    for update in range(max(updates, 1)):
        optimizer.zero_grad()
        output = model(x)
        loss = torch.nn.functional.cross_entropy(output, labels)
        loss.backward()
        if update == 0:
            # Copies: on the CPU .numpy() shares the tensor's memory, which the next steps overwrite.
            run["loss"] = loss.detach().cpu().numpy().copy()
            run["output"] = output.detach().cpu().numpy().copy()
            run["grads"] = {n: params[n].grad.cpu().numpy().copy() for n in names}
        optimizer.step()
    run["params"] = {n: params[n].detach().cpu().numpy().copy() for n in names} if updates > 0 else {}
    return run


def compare(strata_run, torch_run, judge, tolerance, grad_tolerance, updates):
    """Failures of Strata against PyTorch (judge None), or against the float64 judge with PyTorch float32's error
    on each quantity as the yardstick (Note [float32 judged by float64])."""
    failures = []
    reference = judge or torch_run

    def check(label, ours, key, bound, floor=0.0, name=None):
        ref = reference[key][name] if name else reference[key]
        theirs = torch_run[key][name] if name else torch_run[key]
        err = rel(ours, ref, floor)
        allowed = max(JUDGE_TENSOR_FLOOR * bound, JUDGE_RATIO * rel(theirs, ref, floor)) if judge else bound
        if err > allowed:
            failures.append(f"{label}: {err:.2e}" + (f" (PyTorch float32's: {rel(theirs, ref, floor):.2e})"
                                                    if judge else ""))
        return err

    loss_err = check("loss", strata_run["loss"], "loss", tolerance)
    out_err = check("output", strata_run["output"], "output", tolerance)
    print(f"  loss error {loss_err:.2e}, output error {out_err:.2e}")
    for key, label, what in (("grads", "gradient of", "gradients"),
                             ("params", "parameter", f"parameters after {updates} SGD updates with momentum")):
        values = reference[key]
        if not values:
            continue
        floor = FLOOR * float(np.sqrt(sum(float(np.sum(v.astype(np.float64) ** 2)) for v in values.values())))
        errors = {n: check(f"{label} {n}", strata_run[key][n], key, grad_tolerance, floor, n) for n in values}
        worst = max(errors, key=errors.get)
        line = f"  {len(errors)} {what}: worst {worst} {errors[worst]:.2e}"
        if judge:
            theirs = {n: rel(torch_run[key][n], values[n], floor) for n in values}
            line += f" (PyTorch float32's worst: {max(theirs.values()):.2e})"
            ours_all, theirs_all = (global_rel(run[key], values) for run in (strata_run, torch_run))
            line += f"; over all {ours_all:.2e} (PyTorch float32's {theirs_all:.2e})"
            if ours_all > max(grad_tolerance, JUDGE_GLOBAL_RATIO * theirs_all):
                failures.append(f"{what} over all: {ours_all:.2e} (PyTorch float32's: {theirs_all:.2e})")
        print(line)
    return failures


def check_case(args, dtype, tolerance, grad_tolerance, judge=None, make_judge=False):
    """One dtype's step of Strata against PyTorch from the same start. The judge is a PyTorch float64 run to judge
    a float32 step by (Note [float32 judged by float64]), given or computed here (make_judge). Returns (Strata's
    run, PyTorch's run, failures)."""
    updates = args.updates
    work = os.path.join(args.work_dir, f"step-{args.model}-{dtype}-b{args.batch}")
    os.makedirs(work, exist_ok=True)
    model, x, labels, model_path = torchvision_models.exported_case(args.model, args.batch, work,
                                                                   double=dtype == "float64")
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
    missing = [name for name, _ in model.named_parameters() if name not in initializers]
    failures = [f"parameter {name} is not an initializer of the exported model" for name in missing]
    names = [name for name, _ in model.named_parameters() if name in initializers]
    strata_run = {
        "loss": load_tensor(os.path.join(out_dir, "loss.pb")),
        "output": load_tensor(os.path.join(out_dir, "output_0.pb")),
        "grads": {n: load_tensor(os.path.join(out_dir, "grads", safe_name(n) + ".pb")) for n in names},
        "params": ({n: load_tensor(os.path.join(out_dir, "params", safe_name(n) + ".pb")) for n in names}
                   if updates > 0 else {}),
    }
    if make_judge:
        # Note [float32 judged by float64]: in float32 two correct implementations drift apart on batch-norm nets
        # (ResNet-50 at batch 16: 2e-2 in a first-step gradient, 0.9 in a bias after three updates, for PyTorch as
        # for Strata: rounding amplified through normalisation by small batch variances) without either being
        # wrong. So both float32 runs are measured against PyTorch in float64 from the same start: over all
        # gradients (parameters) together Strata's error must be within JUDGE_GLOBAL_RATIO times PyTorch float32's
        # (or the tolerance), and on each tensor within JUDGE_RATIO times PyTorch's or JUDGE_TENSOR_FLOOR times the
        # tolerance. This catches float32-only faults (a wrong algorithm, layout or precision mode); the float64
        # checks judge the arithmetic itself, to 1e-9.
        judge = torch_steps(copy.deepcopy(model).double(), x.double(), labels, updates, names)  # model not yet run
    torch_run = torch_steps(model, x, labels, updates, names)
    print(f"{args.model} ({dtype}, batch {args.batch}" + (", judged by float64" if judge else "") + "):")
    failures += compare(strata_run, torch_run, judge, tolerance, grad_tolerance, updates)
    os.remove(model_path)
    return strata_run, torch_run, failures


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
    parser.add_argument("--judge", choices=["peer", "float64"], default="peer",
                        help="peer: Strata within the tolerances of PyTorch in the same dtype; float64: float32 runs "
                             "of both judged by PyTorch in float64 (Note [float32 judged by float64])")
    parser.add_argument("--and-float32", action="store_true",
                        help="with --dtype float64: then also the float32 step, judged by the same PyTorch float64 run "
                             "(Note [One float64 reference for two checks])")
    parser.add_argument("--float32-tolerance", type=float, default=1e-3, help="--tolerance of the --and-float32 check")
    parser.add_argument("--float32-grad-tolerance", type=float, default=1e-2,
                        help="--grad-tolerance of the --and-float32 check")
    args = parser.parse_args()
    if args.judge == "float64" and args.dtype != "float32":
        parser.error("--judge float64 is for --dtype float32")

    torch.set_num_threads(args.threads)
    if args.and_float32:
        if args.dtype != "float64":
            parser.error("--and-float32 extends a --dtype float64 check")
        # Note [One float64 reference for two checks]: VGG16's float64 step and its float32 step judged by float64
        # need the same PyTorch float64 run from the same start (138M parameters, three updates: a minute on 2
        # cores), so one run serves both: it is the peer of the float64 step and the judge of the float32 step.
        float64_run, failures = check_case(args, "float64", args.tolerance, args.grad_tolerance)[1:]
        failures += check_case(args, "float32", args.float32_tolerance, args.float32_grad_tolerance,
                               judge=float64_run)[2]
    else:
        failures = check_case(args, args.dtype, args.tolerance, args.grad_tolerance,
                              make_judge=args.judge == "float64")[2]
    for failure in failures[:20]:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
