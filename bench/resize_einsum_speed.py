#!/usr/bin/env python3
"""Resize (bilinear) forward and backward and an attention-shaped Einsum: Strata's kernels beside PyTorch's.

Times torch.nn.functional.interpolate (forward, and backward as the gradient of its input) and torch.einsum on the
shapes given, float32, with the same thread count, then runs build/bench/strata_bench_resize_einsum_ops on the same
shapes (NCHW and channels-last for Resize) and prints both sides. The fastest of fifteen runs after a warm-up (on a
shared machine the slower ones measure the neighbours).

    /usr/bin/python3 bench/resize_einsum_speed.py [--threads 2] [--shape 8,64,64,64] [--scale 2]
"""
import argparse
import os
import subprocess
import time

import torch
import torch.nn.functional as F


def fastest_ms(call):
    call()
    times = []
    for _ in range(15):
        start = time.perf_counter()
        call()
        times.append((time.perf_counter() - start) * 1e3)
    return min(times)


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--shape", default="8,64,64,64", help="N,C,H,W")
    parser.add_argument("--scale", type=float, default=2.0)
    parser.add_argument("--einsum", default="bhqd,bhkd->bhqk")
    parser.add_argument("--einsum-shapes", default="8,8,256,64 8,8,256,64")
    parser.add_argument("--bench", default=os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "build",
                                                        "bench", "strata_bench_resize_einsum_ops"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    n, c, h, w = (int(v) for v in args.shape.split(","))
    print(f"PyTorch {torch.__version__}, {args.threads} threads, float32")
    for layout, memory_format in (("nchw", torch.contiguous_format), ("nhwc", torch.channels_last)):
        x = torch.randn(n, c, h, w).contiguous(memory_format=memory_format).requires_grad_()
        y = F.interpolate(x, scale_factor=args.scale, mode="bilinear", align_corners=False)
        dy = torch.randn_like(y)
        forward = fastest_ms(lambda: F.interpolate(x, scale_factor=args.scale, mode="bilinear", align_corners=False))
        backward = fastest_ms(lambda: torch.autograd.grad(y, x, dy, retain_graph=True))
        print(f"torch resize {layout} forward {forward:.3f} ms, backward {backward:.3f} ms")
    operands = [torch.randn(*(int(v) for v in s.split(","))) for s in args.einsum_shapes.split()]
    print(f"torch einsum {args.einsum} {fastest_ms(lambda: torch.einsum(args.einsum, *operands)):.3f} ms")
    print(f"Strata ({args.bench}):", flush=True)
    subprocess.run([args.bench, str(args.threads), str(n), str(c), str(h), str(w), str(args.scale)], check=True)
    subprocess.run([args.bench, str(args.threads), "einsum", args.einsum, *args.einsum_shapes.split()], check=True)


if __name__ == "__main__":
    main()
