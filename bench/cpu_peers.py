#!/usr/bin/env python3
"""CPU speed of Strata beside the current PyTorch and ONNX Runtime Training, in one run, on the same .onnx files.

Run it with the peers' interpreter (issue 18; docs/performance.md, "CPU against the current peers"):
    eval "$(../shared/tools/peer-ort.sh)"      # also installs PyTorch 2.15 (PEER_PY)
    "$PEER_PY" bench/cpu_peers.py --ort-python "$ORT_PY" [--isa avx2] [--models resnet18,...]
The default models are issue 18's; seven held-out torchvision classifiers (MobileNetV2, MobileNetV3-Small,
ShuffleNetV2, RegNetY-400MF, MNASNet 0.5, SqueezeNet 1.1, ResNeXt-50) and torchvision's segmentation models
(fcn_resnet50, deeplabv3_mobilenet_v3_large, lraspp_mobilenet_v3_large: a class per pixel, `strata train --data
synthetic:segmentation`, issue 44) can be named in --models.

For each model: PyTorch builds it, exports a training-mode file (opset 17, no constant folding) and an eval-mode one.
- Training step: `strata train --data synthetic` (SGD with momentum, median `step_time_ms` after two warm-up steps);
  PyTorch's forward + cross-entropy + backward + SGD-with-momentum step on a fixed batch; ONNX Runtime Training's
  step on the same training-mode file (bench/ort_train_step.py; plain SGD, it has no momentum).
- Forward: `strata run --repeat` on the eval-mode file against PyTorch eager under no_grad.
- GFLOP/s: the step's floating-point work (PyTorch's FlopCounterMode over one training step, with the convolutions'
  backward counted from their forward since it ignores groups there, less the convolution taps that only meet
  padding, which Strata skips: Note [Pruned taps]) divided by Strata's step time; "%peak" is the median over rounds
  of that round's figure against the host's sgemm peak measured just before it (the faster of torch.mm and Strata's
  MatMul on 2048^3, same threads), so a host whose speed drifts between rounds moves both alike.
Rounds alternate between the tools; every figure is a median over rounds of per-round medians. Ratios are
Strata / peer: below 1.0 means Strata is faster.

`--isa avx2` runs Strata and PyTorch as on an AVX2-only host (oneDNN's, PyTorch's and MKL's ISA switches); ONNX
Runtime has no such switch and keeps the host's ISA.
"""
import argparse
import collections
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import tempfile
import time
import warnings

# Every tool as on a host with only this ISA: oneDNN's switch (Strata's kernels, and PyTorch's bundled oneDNN),
# PyTorch's own kernels (ATEN_CPU_CAPABILITY) and MKL's. ONNX Runtime's MLAS kernels have no such switch: ORT keeps
# the host's ISA. On hosts with full-width AVX-512 units (AMD Zen 5, Intel server cores) capping only Strata would
# halve its arithmetic against the peers'.
ISA_ENV = {"avx2": {"ONEDNN_MAX_CPU_ISA": "AVX2", "DNNL_MAX_CPU_ISA": "AVX2", "ATEN_CPU_CAPABILITY": "avx2",
                    "MKL_ENABLE_INSTRUCTIONS": "AVX2"}}


def parse_args():
    here = os.path.dirname(os.path.abspath(__file__))
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strata", default=os.path.join(here, "..", "build", "cli", "strata"))
    parser.add_argument("--ort-python", default=os.environ.get("ORT_PY"),
                        help="interpreter of ../shared/tools/peer-ort.sh (default: $ORT_PY; unset or 'none': ORT skipped)")
    parser.add_argument("--models", default="fashion_cnn,resnet18,resnet50,densenet121,vgg16,efficientnet_v2_s,"
                                            "convnext_tiny")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=10, help="timed training steps per round")
    parser.add_argument("--repeat", type=int, default=10, help="timed forward passes per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--isa", choices=sorted(ISA_ENV), help="run every tool as on a host with this ISA")
    parser.add_argument("--no-forward", action="store_true", help="time the training step only")
    parser.add_argument("--json", help="also write the figures to this file")
    parser.add_argument("--keep", help="write the exported .onnx files (MODEL.train.onnx, MODEL.onnx) here and keep them")
    return parser.parse_args()


args = parse_args()
STRATA_ENV = dict(os.environ, **ISA_ENV.get(args.isa, {}))
os.environ.update(ISA_ENV.get(args.isa, {}))  # before torch loads: PyTorch in this process, ORT in its own
warnings.filterwarnings("ignore")  # the exporter's notes on BN's num_batches_tracked, once per layer

import torch  # noqa: E402
import torchvision  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "scripts"))
from export_study_models import MODELS  # noqa: E402  (VGG16 below 224x224, no stochastic depth)
import train_step  # noqa: E402
from forward_latency import FashionCnn  # noqa: E402
from held_out_models import held_out_cases  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "reference"))
import torchvision_models  # noqa: E402

# Not in the default --models: per-pixel labels [N, H, W]. The models as the reference tests build them
# (tests/reference/torchvision_models.py: no pretrained backbone, no auxiliary head, 10 classes, the logits tensor).
SEGMENTATION_CASES = {
    "fcn_resnet50": (torchvision_models.MODELS["fcn_resnet50"][0], (4, 3, 128, 128)),
    "deeplabv3_mobilenet_v3_large": (torchvision_models.MODELS["deeplabv3_mobilenet_v3_large"][0], (8, 3, 128, 128)),
    "lraspp_mobilenet_v3_large": (torchvision_models.MODELS["lraspp_mobilenet_v3_large"][0], (8, 3, 128, 128)),
}

CASES = {
    "fashion_cnn": (FashionCnn, (64, 1, 28, 28)),
    "resnet18": (lambda: torchvision.models.resnet18(num_classes=10), (32, 3, 32, 32)),
    "resnet50": (lambda: torchvision.models.resnet50(num_classes=10), (32, 3, 32, 32)),
    "densenet121": (lambda: torchvision.models.densenet121(num_classes=10), (16, 3, 32, 32)),
    "vgg16": (lambda: MODELS["vgg16"](64), (8, 3, 64, 64)),
    "efficientnet_v2_s": (lambda: MODELS["efficientnet_v2_s"](32), (16, 3, 32, 32)),
    "convnext_tiny": (lambda: MODELS["convnext_tiny"](32), (16, 3, 32, 32)),
    # Held-out classifiers the project was not tuned on (bench/held_out_models.py), not in the default --models:
    # batch 32 at 64x64, 16 at 32x32 as the study's models above.
    **held_out_cases(lambda size: 32 if size == 64 else 16),
    **SEGMENTATION_CASES,
}


def host_description():
    model, flags, family = platform.processor(), set(), {}
    with open("/proc/cpuinfo", encoding="utf-8") as f:
        for line in f:
            key = line.split(":", 1)[0].strip()
            if key == "model name":
                model = line.split(":", 1)[1].strip()
            elif key in ("cpu family", "model") and key not in family:
                family[key] = line.split(":", 1)[1].strip()  # AMD family 25: Zen 3/4, 26: Zen 5
            elif key == "flags":
                flags = set(line.split(":", 1)[1].split())
    if family:
        model += f" (family {family.get('cpu family', '?')} model {family.get('model', '?')})"
    isa = "AVX-512" if "avx512f" in flags else "AVX2" if "avx2" in flags else "SSE4"
    if args.isa:
        isa += f", Strata and PyTorch run as {args.isa.upper()}"
    return f"{model}, {isa}, {os.cpu_count()} cores"


def sgemm_peak_gflops(work):
    """The host's float32 GEMM peak: the faster of PyTorch's torch.mm and Strata's MatMul (oneDNN) on 2048^3, same
    threads. Either alone can be far from the peak: PyTorch's BLAS reached half of oneDNN's on an AMD Zen 5 host."""
    n = 2048
    a, b = torch.randn(n, n), torch.randn(n, n)
    for _ in range(2):
        torch.mm(a, b)
    times = []
    for _ in range(5):
        start = time.perf_counter()
        torch.mm(a, b)
        times.append(time.perf_counter() - start)
    torch_gflops = 2 * n ** 3 / min(times) / 1e9
    import onnx  # noqa: E402  (the peer venv has it)
    from onnx import helper, numpy_helper
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["a", "b"], ["c"])], "sgemm",
        [helper.make_tensor_value_info("a", onnx.TensorProto.FLOAT, [n, n])],
        [helper.make_tensor_value_info("c", onnx.TensorProto.FLOAT, [n, n])],
        [numpy_helper.from_array(b.numpy(), "b")])
    path = os.path.join(work, "sgemm.onnx")
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8  # what Debian's libonnx checks
    onnx.save(model, path)
    strata_ms = strata_forward_ms(path, (n, n))
    strata_gflops = 2 * n ** 3 / (strata_ms / 1000.0) / 1e9
    return max(torch_gflops, strata_gflops), torch_gflops, strata_gflops


def export(model, x, path, training):
    mode = torch.onnx.TrainingMode.TRAINING if training else torch.onnx.TrainingMode.EVAL
    current = model.state_dict()
    state = collections.OrderedDict((k, v.clone()) for k, v in current.items())
    state._metadata = getattr(current, "_metadata", None)  # module versions (MNASNet's loader checks its own)
    model.train(training)
    torch.onnx.export(model, x, path, opset_version=17, do_constant_folding=not training, training=mode,
                      input_names=["input"], output_names=["logits"], dynamo=False)
    model.load_state_dict(state)


def used_tap_fraction(conv, spatial):
    """The share of a convolution's kernel taps that meet its input for some output position (Note [Pruned taps]
    in core/backend/cpu/conv_taps.h: Strata's float32 kernels skip the others, which only ever meet padding)."""
    if isinstance(conv.padding, str):
        return 1.0  # "same"/"valid": not in the exported models
    fraction = 1.0
    for size, k, s, p, d in zip(spatial, conv.kernel_size, conv.stride, conv.padding, conv.dilation):
        out = (size + 2 * p - d * (k - 1) - 1) // s + 1
        used = [t for t in range(k) if any(0 <= o * s - p + t * d < size for o in range(out))]
        fraction *= (max(used) - min(used) + 1) / k if used else 1.0
    return fraction


def step_flops(model, x, y):
    """The training step's floating-point work, and the part of it Strata's kernels do: without the convolution
    taps that only meet padding (forward, data and weight gradient: 3x each conv's forward work).
    PyTorch's FlopCounterMode counts every op but the convolutions' backward, which it counts as if groups were 1
    (12x the forward work on EfficientNetV2-S, whose depthwise convolutions have one channel per group): each
    convolution's backward is counted here instead, as its forward work once for the weight gradient and once more
    for the data gradient where its input needs one."""
    model.train()
    skipped = []
    conv_backward = []

    def note(conv, inputs, output):
        forward = 2 * output.numel() * (conv.in_channels // conv.groups) * math.prod(conv.kernel_size)
        conv_backward.append(forward * (2 if inputs[0].requires_grad else 1))
        fraction = used_tap_fraction(conv, inputs[0].shape[2:])
        if fraction < 1.0:
            skipped.append(3 * forward * (1.0 - fraction))

    hooks = [m.register_forward_hook(note) for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    with FlopCounterMode(display=False) as counter:
        torch.nn.functional.cross_entropy(model(x), y).backward()
    for h in hooks:
        h.remove()
    model.zero_grad()
    counted = counter.get_flop_counts()["Global"]
    total = counter.get_total_flops() - counted.get(torch.ops.aten.convolution_backward, 0) + sum(conv_backward)
    return total, total - sum(skipped)


def strata_train_ms(path, shape, work, per_pixel):
    out = tempfile.mkdtemp(dir=work)  # a fresh run folder: `strata train` appends to an existing metrics.jsonl
    steps = args.steps + 2
    data = "synthetic:segmentation" if per_pixel else "synthetic"
    subprocess.run([args.strata, "train", path, "--data", data, "--synthetic-samples", str(shape[0] * steps),
                    "--batch-size", str(shape[0]), "--max-steps", str(steps), "--threads", str(args.threads),
                    "--lr", "0.01", "--lr-schedule", "constant", "--out", out, "--log-every", "1"],
                   check=True, capture_output=True, env=STRATA_ENV)
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    return statistics.median(r["step_time_ms"] for r in records if r["type"] == "step" and r["step"] > 2)


def strata_forward_ms(path, shape):
    out = subprocess.run([args.strata, "run", path, "--input-shape", ",".join(map(str, shape)), "--threads",
                          str(args.threads), "--repeat", str(args.repeat)], check=True, capture_output=True,
                         text=True, env=STRATA_ENV).stdout
    return float(re.search(r"forward: ([0-9.]+) ms", out).group(1))


def torch_train_ms(model, x, y):
    model.train()
    return train_step.torch_ms(model, x, y, args.steps)  # SGD with momentum; two warm-up steps


def torch_forward_ms(model, x):
    model.eval()
    times = []
    with torch.no_grad():
        for i in range(args.repeat + 2):
            start = time.perf_counter()
            model(x)
            if i >= 2:
                times.append((time.perf_counter() - start) * 1000.0)
    return statistics.median(times)


def ort_train_ms(path, shape, per_pixel):
    if not args.ort_python or args.ort_python == "none":
        return None
    result = subprocess.run([args.ort_python, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                                           "ort_train_step.py"), path,
                             "--shape", ",".join(map(str, shape)), "--threads", str(args.threads),
                             "--steps", str(args.steps)] + (["--per-pixel"] if per_pixel else []),
                            capture_output=True, text=True)
    if result.returncode != 0:
        last = (result.stderr.strip().splitlines() or ["no output"])[-1]
        print(f"  ONNX Runtime Training failed on {os.path.basename(path)}: {last}", flush=True)
        return None
    return statistics.median(json.loads(result.stdout.strip().splitlines()[-1])["ms"])


def ratio(a, b):
    return f"{a / b:.2f}" if a and b else "-"


def ms(value):
    """A time in the table, or "-" where the tool failed or did not run."""
    return f"{value:.1f}" if value else "-"


def main():
    unknown = [name for name in args.models.split(",") if name not in CASES]
    if unknown:
        sys.exit(f"cpu_peers.py: unknown model(s) {', '.join(unknown)} in --models; known: {', '.join(CASES)}")
    torch.set_num_threads(args.threads)
    with tempfile.TemporaryDirectory() as scratch:
        peak, torch_peak, strata_peak = sgemm_peak_gflops(scratch)
    print(f"host: {host_description()}")
    print(f"torch {torch.__version__}, threads {args.threads}, {args.rounds} rounds x {args.steps} steps "
          f"/ {args.repeat} forwards; sgemm peak {peak:.0f} GFLOP/s (torch.mm {torch_peak:.0f}, Strata MatMul "
          f"{strata_peak:.0f})", flush=True)
    header = (f"{'model':<18}{'batch':<13}{'train ms':>9}{'torch':>8}{'ort':>8}{'/torch':>8}{'/ort':>7}"
              f"{'fwd ms':>8}{'torch':>8}{'/torch':>8}{'GFLOP/s':>9}{'%peak':>7}")
    print(header, flush=True)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        tmp = args.keep or scratch
        os.makedirs(tmp, exist_ok=True)
        for name in args.models.split(","):
            constructor, shape = CASES[name]
            torch.manual_seed(0)
            model = constructor()
            x = torch.randn(*shape)
            per_pixel = name in SEGMENTATION_CASES
            y = torch.randint(0, 10, (shape[0],) + (tuple(shape[2:]) if per_pixel else ()))
            train_path, eval_path = os.path.join(tmp, f"{name}.train.onnx"), os.path.join(tmp, f"{name}.onnx")
            export(model, x, train_path, training=True)
            export(model, x, eval_path, training=False)
            nominal_flops, flops = step_flops(model, x, y)
            figures = {k: [] for k in ("strata_train", "torch_train", "ort_train", "strata_fwd", "torch_fwd")}
            # The share of the peak compares the step with the mean of peaks measured just before and just after
            # it: on a host whose speed drifts (shared cores; the 2-core Zen 4 host's torch.mm moved between 137 and
            # 175 GFLOP/s in phases of a few seconds), a peak from minutes earlier, or from one side only, would move
            # the share with the drift.
            shares, round_peaks = [], []
            for _ in range(args.rounds):
                before = sgemm_peak_gflops(tmp)[0]
                figures["strata_train"].append(strata_train_ms(train_path, shape, tmp, per_pixel))
                round_peaks.append((before + sgemm_peak_gflops(tmp)[0]) / 2)
                shares.append(flops / (figures["strata_train"][-1] / 1000.0) / 1e9 / round_peaks[-1])
                figures["torch_train"].append(torch_train_ms(model, x, y))
                figures["ort_train"].append(ort_train_ms(train_path, shape, per_pixel))
                if not args.no_forward:
                    figures["strata_fwd"].append(strata_forward_ms(eval_path, shape))
                    figures["torch_fwd"].append(torch_forward_ms(model, x))
            med = {k: statistics.median(v) if v and None not in v else None for k, v in figures.items()}
            gflops = flops / (med["strata_train"] / 1000.0) / 1e9
            share = statistics.median(shares)
            rows.append(dict(model=name, batch=list(shape), step_gflop=flops / 1e9,
                             nominal_step_gflop=nominal_flops / 1e9, gflops=gflops,
                             sgemm_peak_gflops=statistics.median(round_peaks), peak_share=share,
                             peak_shares=shares, **med))
            st, tt, ot = med["strata_train"], med["torch_train"], med["ort_train"]
            sf, tf = med["strata_fwd"], med["torch_fwd"]
            print(f"{name:<18}{'x'.join(map(str, shape)):<13}{st:>9.1f}{tt:>8.1f}{ms(ot):>8}{ratio(st, tt):>8}"
                  f"{ratio(st, ot):>7}{ms(sf):>8}{ms(tf):>8}{ratio(sf, tf):>8}{gflops:>9.1f}"
                  f"{100 * share:>6.0f}%", flush=True)
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"host": host_description(), "torch": torch.__version__, "threads": args.threads,
                       "sgemm_peak_gflops": {"torch_mm": torch_peak, "strata_matmul": strata_peak},
                       "rows": rows}, f, indent=2)


if __name__ == "__main__":
    main()
