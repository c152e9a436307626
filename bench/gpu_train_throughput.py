#!/usr/bin/env python3
"""Training throughput of Strata's CUDA executor beside PyTorch eager on the same GPU, in one run.

Each torchvision model is exported for training (opset 17, training mode, no constant folding) and trained by
`strata train --device cuda --data synthetic`; PyTorch runs the same step (host batch copied to the GPU, forward,
cross-entropy, backward, SGD with momentum, loss read back with .item(), as Strata's trainer does) on the same
batch size and image size. Both sides: median step time after warm-up steps, images/s = batch / median, peak
memory (Strata's allocator accounting vs torch.cuda.max_memory_allocated). Rounds alternate between the two.

Precisions: fp32 (TF32 off on both sides), tf32 (TF32 allowed on both sides), bf16 (PyTorch autocast against
Strata's --precision bf16), fp16 (autocast with GradScaler against --precision fp16 with dynamic loss scaling).
TF32 stays allowed for the float32 ops that remain under bf16 and fp16, on both sides.
Layout: --channels-last goes to Strata (auto: NHWC for bf16 and fp16); PyTorch runs the same layout, the model and
the batch in torch.channels_last memory format wherever Strata runs channels-last, so both sides use cuDNN's NHWC
kernels or neither does.
Run on the GPU machine through scripts/gpu/device_run.sh, which sets up the libraries.
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

import torch
import torchvision

CASES = {
    "resnet50_224": (lambda: torchvision.models.resnet50(num_classes=1000), 128, 224),
    "resnet50_32": (lambda: torchvision.models.resnet50(num_classes=10), 256, 32),
    "vgg16_224": (lambda: torchvision.models.vgg16(num_classes=1000), 64, 224),
    # Stochastic depth off on both sides: it exports as RandomUniformLike, which Strata does not run.
    "convnext_tiny_224": (lambda: torchvision.models.convnext_tiny(num_classes=1000, stochastic_depth_prob=0.0), 64,
                          224),
}


def export(model, batch, size, path):
    x = torch.randn(batch, 3, size, size)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    kwargs = dict(opset_version=17, do_constant_folding=False, training=torch.onnx.TrainingMode.TRAINING)
    try:
        torch.onnx.export(model, x, path, dynamo=False, **kwargs)
    except TypeError:  # older torch without the dynamo argument
        torch.onnx.export(model, x, path, **kwargs)
    model.load_state_dict(state)


def channels_last_for(flag, precision):
    return flag == "on" or (flag == "auto" and precision in ("bf16", "fp16"))


def strata_step(strata, path, batch, size, classes, precision, steps, warmup, work, cuda_graph, channels_last):
    out = os.path.join(work, "run")
    cmd = [strata, "train", path, "--device", "cuda", "--precision", precision, "--cuda-graph", cuda_graph,
           "--channels-last", channels_last,
           "--data", "synthetic",
           "--synthetic-samples", str(batch * (steps + warmup)), "--batch-size", str(batch), "--max-steps",
           str(steps + warmup), "--lr", "0.01", "--momentum", "0.9", "--lr-schedule", "constant", "--out", out,
           "--log-every", "1"]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        return None, None, result.stderr.strip().splitlines()[-1] if result.stderr.strip() else "failed"
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    os.remove(os.path.join(out, "metrics.jsonl"))
    times = [r["step_time_ms"] for r in records if r["type"] == "step" and r["step"] > warmup]
    graph = summary.get("cuda_graph", {})
    return statistics.median(times), summary["ranks"][0]["peak_memory_bytes"], graph.get("detail")


def torch_step(model, batch, size, classes, precision, steps, warmup, channels_last):
    torch.backends.cuda.matmul.allow_tf32 = precision != "fp32"
    torch.backends.cudnn.allow_tf32 = precision != "fp32"
    low = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(precision)
    try:
        scaler = torch.amp.GradScaler("cuda", enabled=precision == "fp16")
    except (AttributeError, TypeError):  # torch before 2.3
        scaler = torch.cuda.amp.GradScaler(enabled=precision == "fp16")
    torch.backends.cudnn.benchmark = True
    layout = torch.channels_last if channels_last else torch.contiguous_format
    model = model.cuda().to(memory_format=layout).train()
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)
    x_host = torch.randn(batch, 3, size, size)
    y_host = torch.randint(0, classes, (batch,))
    torch.cuda.reset_peak_memory_stats()
    times = []
    for i in range(steps + warmup):
        torch.cuda.synchronize()
        start = time.perf_counter()
        x, y = x_host.cuda().contiguous(memory_format=layout), y_host.cuda()
        optimizer.zero_grad(set_to_none=True)
        with torch.autocast("cuda", dtype=low or torch.float32, enabled=low is not None):
            loss = torch.nn.functional.cross_entropy(model(x), y)
        scaler.scale(loss).backward()
        scaler.step(optimizer)
        scaler.update()
        loss.item()
        if i >= warmup:
            times.append((time.perf_counter() - start) * 1000.0)
    model.cpu().to(memory_format=torch.contiguous_format)
    return statistics.median(times), torch.cuda.max_memory_allocated()


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", default=os.path.join(os.path.dirname(__file__), "..", "build", "cli", "strata"))
    parser.add_argument("--models", default=",".join(CASES))
    parser.add_argument("--precisions", default="fp32,tf32,bf16,fp16")
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cuda-graph", default="off", choices=["off", "on", "auto"],
                        help="Strata's --cuda-graph; with auto, raise --warmup to 10 so the timed steps come after "
                             "its decision (it times 3 node-by-node steps and 3 replays after 2 warm-up steps)")
    parser.add_argument("--channels-last", default="auto", choices=["off", "on", "auto"],
                        help="Strata's --channels-last; PyTorch runs channels_last memory format wherever Strata "
                             "runs NHWC (auto: bf16 and fp16)")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.cuda.get_device_name()}, {args.rounds} rounds x {args.steps} steps "
          f"after {args.warmup} warm-up steps, strata --cuda-graph {args.cuda_graph}, "
          f"--channels-last {args.channels_last} (both sides)")
    print(f"{'model':<19}{'batch':>6}{'prec':>6}{'strata img/s':>14}{'torch img/s':>13}{'ratio':>7}"
          f"{'strata MiB':>12}{'torch MiB':>11}")
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            constructor, batch, size = CASES[name]
            torch.manual_seed(0)
            model = constructor()
            classes = 10 if size == 32 else 1000
            path = os.path.join(tmp, f"{name}.onnx")
            export(model.train(), batch, size, path)
            for precision in args.precisions.split(","):
                s_times, t_times, s_peak, t_peak, why, graph = [], [], 0, 0, None, None
                for _ in range(args.rounds):
                    ms, peak, detail = strata_step(args.strata, path, batch, size, classes, precision, args.steps,
                                                   args.warmup, tmp, args.cuda_graph, args.channels_last)
                    if ms is not None:
                        s_times.append(ms)
                        s_peak = peak
                        graph = detail
                    else:
                        why = detail
                    ms, t_peak = torch_step(model, batch, size, classes, precision, args.steps, args.warmup,
                                            channels_last_for(args.channels_last, precision))
                    t_times.append(ms)
                t = statistics.median(t_times)
                t_rate = batch * 1000.0 / t
                if s_times:
                    s = statistics.median(s_times)
                    s_rate = batch * 1000.0 / s
                    print(f"{name:<19}{batch:>6}{precision:>6}{s_rate:>14.1f}{t_rate:>13.1f}{s_rate / t_rate:>7.2f}"
                          f"{s_peak / 2**20:>12.0f}{t_peak / 2**20:>11.0f}"
                          + (f"   cuda graph: {graph}" if args.cuda_graph != "off" and graph else ""))
                else:
                    print(f"{name:<19}{batch:>6}{precision:>6}{'n/a':>14}{t_rate:>13.1f}{'':>7}{'':>12}"
                          f"{t_peak / 2**20:>11.0f}   strata: {why}")


if __name__ == "__main__":
    main()
