#!/usr/bin/env python3
"""Checks Strata's forward output against PyTorch's for one torchvision model.

Exports the model (train mode, dropout 0) to ONNX, runs PyTorch and `strata run` on the same input, and requires
the relative error ||strata - torch|| / ||torch|| to be at most --tolerance.
With --eval the model runs in eval mode instead, its batch norms on random running statistics and affine parameters,
exported unfolded: `strata run` must fold each batch norm into its convolution (Note [Batch norm folded into the
convolution]) and say so, and still match.
"""
import argparse
import os
import re
import subprocess
import sys

import numpy as np
import onnx
import torch
from onnx import numpy_helper

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torchvision_models  # noqa: E402


def randomise_batch_norms(model: torch.nn.Module) -> None:
    """Running statistics and affine parameters away from their initial 0 and 1, so that folding them is tested."""
    generator = torch.Generator().manual_seed(2)
    with torch.no_grad():
        for module in model.modules():
            if isinstance(module, torch.nn.BatchNorm2d):
                channels = module.num_features
                module.running_mean.copy_(torch.rand(channels, generator=generator) - 0.5)
                module.running_var.copy_(torch.rand(channels, generator=generator) * 1.5 + 0.5)
                module.weight.copy_(torch.rand(channels, generator=generator) + 0.5)
                module.bias.copy_(torch.rand(channels, generator=generator) * 0.4 - 0.2)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", required=True, choices=sorted(torchvision_models.MODELS))
    parser.add_argument("--strata", required=True, help="path to the strata binary")
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--batch", type=int, default=2)
    parser.add_argument("--tolerance", type=float, default=1e-4)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--dtype", choices=["float32", "float64"], default="float32",
                        help="precision of the exported model and of Strata's run")
    parser.add_argument("--eval", action="store_true",
                        help="eval mode, random running statistics, batch norms left for Strata to fold")
    args = parser.parse_args()

    torch.set_num_threads(args.threads)
    work = os.path.join(args.work_dir, f"{args.model}-{args.dtype}{'-eval' if args.eval else ''}")
    os.makedirs(work, exist_ok=True)
    model = torchvision_models.build(args.model)
    if args.eval:
        randomise_batch_norms(model)
        model.eval()
    size = torchvision_models.input_size(args.model)
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch, 3, size, size, generator=generator)
    if args.dtype == "float64":
        model = model.double()
        x = x.double()

    model_path = os.path.join(work, "model.onnx")
    torchvision_models.export(model, x, model_path, inference=args.eval)
    norms = sum(node.op_type == "BatchNormalization" for node in onnx.load(model_path).graph.node)
    # Export traces the model, which moves batch-norm running statistics; train-mode outputs do not read them.
    # Note [float64 reference]: with batch 2 at 32x32 the last stages normalise over 2 values per channel, where
    # float32 batch-norm statistics cancel badly: PyTorch's own float32 output is off from its float64 output by
    # up to tens of percent on ResNet50 and DenseNet121. The reference is therefore PyTorch in float64; PyTorch's
    # float32 error against it is printed beside Strata's.
    with torch.no_grad():
        torch_same = model(x).numpy()
        expected = model.double()(x.double()).numpy()

    input_path = os.path.join(work, "input_0.pb")
    with open(input_path, "wb") as f:
        f.write(numpy_helper.from_array(x.numpy(), "input").SerializeToString())
    out_dir = os.path.join(work, "strata_out")
    run = subprocess.run([args.strata, "run", model_path, "--input", input_path, "--output-dir", out_dir,
                          "--threads", str(args.threads)], check=True, capture_output=True, text=True)
    print(run.stdout, end="")
    if args.eval:
        folded = re.search(r"(\d+) batch norms? folded into (?:its|their) convolutions?", run.stdout)
        if norms == 0 or folded is None or int(folded.group(1)) != norms:
            print(f"FAIL: the file has {norms} batch norms; strata run should have folded them all")
            return 1
    actual = numpy_helper.to_array(onnx.load_tensor(os.path.join(out_dir, "output_0.pb")))

    if actual.shape != expected.shape:
        print(f"{args.model}: shape {actual.shape} vs PyTorch {expected.shape}")
        return 1
    rel = float(np.linalg.norm(actual - expected) / np.linalg.norm(expected))
    rel_torch = float(np.linalg.norm(torch_same - expected) / np.linalg.norm(expected))
    print(f"{args.model} ({args.dtype}): relative error of Strata {rel:.3e} (tolerance {args.tolerance:.0e}); "
          f"of PyTorch {args.dtype} {rel_torch:.3e} (both against PyTorch float64)")
    os.remove(model_path)  # VGG16 alone is 0.5 GB
    return 0 if rel <= args.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
