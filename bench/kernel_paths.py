#!/usr/bin/env python3
"""Which kernel runs each node of the study's models and of held-out torchvision classifiers, on this host's ISA and
as on an AVX2-only host (issue 18: no op on a non-JIT oneDNN path or a scalar loop on either).

For each model: PyTorch exports a training-mode file (opset 17, no constant folding) and an eval-mode one; `strata
train --profile` runs a few steps of the first (forward, backward and optimizer nodes) and `strata run --profile`
the second, natively and with ONEDNN_MAX_CPU_ISA=AVX2. The profiles name every node's implementation; an
implementation is flagged when it names one of oneDNN's reference or plain-layout kernels (ref, simple_, ncsp), its
GEMM fallback for grouped convolutions (one small GEMM per image and group: a JIT kernel, but the slow path on small
maps), or one of Strata's fallbacks for what oneDNN does not cover (a direct or scalar loop). Exits 1 when anything is
flagged.

    "$PEER_PY" bench/kernel_paths.py [--models resnet18,mobilenet_v3_small,...] [--isa native,avx2]

Needs PyTorch and torchvision (Debian's /usr/bin/python3 or ../shared/tools/peer-torch.sh's); not part of the test
suite (it exports and trains a dozen models).
"""
import argparse
import os
import re
import subprocess
import sys
import tempfile
import warnings

warnings.filterwarnings("ignore")
import torch  # noqa: E402
import torchvision  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from export_study_models import MODELS  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from held_out_models import held_out_cases  # noqa: E402

# The paper's models (VGG16 below 224x224 as the study runs it) and held-out classifiers the project was not tuned on.
CASES = {
    "vgg16": (lambda: MODELS["vgg16"](64), (4, 3, 64, 64)),
    "efficientnet_v2_s": (lambda: MODELS["efficientnet_v2_s"](32), (4, 3, 32, 32)),
    "convnext_tiny": (lambda: MODELS["convnext_tiny"](32), (4, 3, 32, 32)),
    "resnet18": (lambda: torchvision.models.resnet18(num_classes=10), (4, 3, 32, 32)),
    "resnet50": (lambda: torchvision.models.resnet50(num_classes=10), (4, 3, 32, 32)),
    "densenet121": (lambda: torchvision.models.densenet121(num_classes=10), (4, 3, 32, 32)),
    **held_out_cases(lambda size: 4),
}

SUSPECT = re.compile(r"\bref\b|ref:|simple_|ncsp|direct loop|scalar|per image and group", re.IGNORECASE)
OP_LINE = re.compile(r"^  (?:(forward|backward|loss|optimizer) )?(\S+)\s+[0-9.]+\s+[0-9.]+%\s+\((\d+) nodes\)")
IMPL_LINE = re.compile(r"^      (.+) \((\d+) nodes\)$")


def export(model, x, path, training):
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    model.train(training)
    kwargs = dict(opset_version=17, do_constant_folding=not training, training=mode, input_names=["input"],
                  output_names=["logits"])
    try:
        torch.onnx.export(model, x, path, dynamo=False, **kwargs)
    except TypeError:  # PyTorch < 2.5 has no dynamo argument
        torch.onnx.export(model, x, path, **kwargs)


def implementations(output):
    """(phase op, implementation, nodes) for every implementation line of a --profile printout, and the op types
    that name no implementation (elementwise and data-movement kernels), with their share of the time."""
    rows, unnamed, op, share = [], {}, None, 0.0
    for line in output.splitlines():
        m = OP_LINE.match(line)
        if m:
            op = f"{m.group(1) or ''} {m.group(2)}".strip()
            share = float(line.split("%")[0].split()[-1])
            unnamed[op] = share
            continue
        m = IMPL_LINE.match(line)
        if m and op:
            rows.append((op, m.group(1), int(m.group(2))))
            unnamed.pop(op, None)
    return rows, unnamed


def profile(command, env):
    result = subprocess.run(command, capture_output=True, text=True, env=env)
    if result.returncode != 0:
        return None, (result.stderr or result.stdout)[-600:]
    return implementations(result.stdout), None


def main() -> int:
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strata", default=os.path.join(here, "..", "build", "cli", "strata"))
    parser.add_argument("--models", default=",".join(CASES))
    parser.add_argument("--isa", default="native,avx2")
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    flagged, failures = 0, 0
    with tempfile.TemporaryDirectory() as work:
        for name in args.models.split(","):
            constructor, shape = CASES[name]
            torch.manual_seed(0)
            model = constructor()
            x = torch.randn(*shape)
            train_path, eval_path = os.path.join(work, f"{name}.train.onnx"), os.path.join(work, f"{name}.onnx")
            export(model, x, train_path, training=True)
            export(model, x, eval_path, training=False)
            for isa in args.isa.split(","):
                env = dict(os.environ)
                if isa == "avx2":
                    env["ONEDNN_MAX_CPU_ISA"] = "AVX2"
                runs = {
                    "train": [args.strata, "train", train_path, "--data", "synthetic", "--synthetic-samples",
                              str(shape[0] * 4), "--batch-size", str(shape[0]), "--max-steps", "4", "--threads",
                              str(args.threads), "--out", os.path.join(work, f"{name}-{isa}"), "--log-every", "100",
                              "--profile"],
                    "run": [args.strata, "run", eval_path, "--input-shape", ",".join(map(str, shape)), "--threads",
                            str(args.threads), "--repeat", "2", "--profile"],
                }
                for kind, command in runs.items():
                    profiled, error = profile(command, env)
                    if profiled is None:
                        failures += 1
                        print(f"{name:20} {isa:7} {kind:6} FAILED: {error.strip()}")
                        continue
                    rows, unnamed = profiled
                    bad = [r for r in rows if SUSPECT.search(r[1])]
                    flagged += len(bad)
                    kernels = sum(n for _, _, n in rows)
                    status = "ok" if not bad else f"{len(bad)} flagged"
                    print(f"{name:20} {isa:7} {kind:6} {kernels:5} nodes with a named kernel: {status}", flush=True)
                    for op, impl, nodes in bad:
                        print(f"    {op}: {impl} ({nodes} nodes)")
                    # Kernels that name no implementation: listed with their share of the time, for a reader to
                    # judge (Strata's elementwise kernels are vectorised loops; a slow one shows as a large share).
                    heavy = sorted(((v, k) for k, v in unnamed.items() if v >= 2.0), reverse=True)
                    if heavy:
                        print("    no kernel named, >= 2% of the time: " +
                              ", ".join(f"{k} {v:.1f}%" for v, k in heavy))
    print(f"flagged implementations: {flagged}; failed runs: {failures}")
    return 0 if flagged == 0 and failures == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
