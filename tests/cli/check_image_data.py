#!/usr/bin/env python3
"""Users' photos and segmentation masks end to end: `strata train --data images:DIR` and `--data segmentation:DIR`.

1. An image folder of two classes (dark and bright coloured noise, PNG and JPEG of mixed sizes) trains the bundled CNN
   (its 1 x 28 x 28 input: the photos are fitted and turned gray) to a test accuracy of at least --min-accuracy.
2. A segmentation folder (a bright square, class 1, on a dark noisy background, class 0; palette PNG masks with a
   border of 255, ignored) trains a small fully convolutional net exported from PyTorch (convolutions, a stride-2
   stage and a bilinear Resize back up) to a test mean IoU of at least --min-iou; summary.json names the task and
   the metric.
3. The same net on `--data synthetic:segmentation` (a random class per pixel, for benchmarks): it trains the steps
   asked for as a segmentation task, with a mean IoU reported.
Not a timed test.
"""
import argparse
import json
import os
import subprocess
import sys

import numpy as np
import torch
from PIL import Image


def run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stdout[-3000:], result.stderr[-3000:])
        raise SystemExit(f"{' '.join(command)} failed with status {result.returncode}")
    return result


def write_folder(root, rng):
    for label, name in enumerate(["dark", "bright"]):
        os.makedirs(os.path.join(root, name), exist_ok=True)
        for i in range(60):
            h, w = rng.integers(20, 48, size=2)
            pixels = rng.integers(0, 110, size=(h, w, 3)) + (130 if label else 0)
            image = Image.fromarray(pixels.astype(np.uint8))
            image.save(os.path.join(root, name, f"{i:03d}." + ("png" if i % 2 else "jpg")))


def write_segmentation(root, rng, size=32):
    os.makedirs(os.path.join(root, "images"), exist_ok=True)
    os.makedirs(os.path.join(root, "masks"), exist_ok=True)
    for i in range(100):
        pixels = rng.integers(0, 90, size=(size, size, 3)).astype(np.uint8)
        mask = np.zeros((size, size), dtype=np.uint8)
        side = int(rng.integers(8, 16))
        y, x = rng.integers(0, size - side, size=2)
        pixels[y:y + side, x:x + side] = rng.integers(170, 255, size=(side, side, 3))
        mask[y:y + side, x:x + side] = 1
        mask[0, :] = 255  # a row nobody owns
        image = Image.fromarray(mask, mode="P")
        image.putpalette([0, 0, 0, 255, 255, 255] + [128, 0, 0] * 254)
        image.save(os.path.join(root, "masks", f"s{i:03d}.png"))
        Image.fromarray(pixels).save(os.path.join(root, "images", f"s{i:03d}.jpg"), quality=95)


class TinyFcn(torch.nn.Module):
    def __init__(self, classes=2):
        super().__init__()
        self.stem = torch.nn.Sequential(torch.nn.Conv2d(3, 16, 3, padding=1), torch.nn.ReLU(),
                                        torch.nn.Conv2d(16, 32, 3, stride=2, padding=1), torch.nn.ReLU(),
                                        torch.nn.Conv2d(32, 32, 3, padding=1), torch.nn.ReLU())
        self.head = torch.nn.Conv2d(32, classes, 1)

    def forward(self, x):
        y = self.head(self.stem(x))
        return torch.nn.functional.interpolate(y, size=x.shape[-2:], mode="bilinear", align_corners=False)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--min-accuracy", type=float, default=0.9)
    parser.add_argument("--min-iou", type=float, default=0.6)
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    rng = np.random.default_rng(7)
    failures = []

    photos = os.path.join(args.work_dir, "photos")
    write_folder(photos, rng)
    out = os.path.join(args.work_dir, "images-run")
    run([args.strata, "train", "--data", f"images:{photos}", "--epochs", "4", "--batch-size", "16", "--lr", "0.02",
         "--augment", "--threads", "2", "--out", out])
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    print(f"images: test accuracy {summary['test_accuracy']:.3f} ({summary['task']})")
    if summary["test_accuracy"] < args.min_accuracy:
        failures.append(f"images: test accuracy {summary['test_accuracy']} below {args.min_accuracy}")

    masks = os.path.join(args.work_dir, "shapes")
    write_segmentation(masks, rng)
    torch.manual_seed(0)
    model = os.path.join(args.work_dir, "tiny_fcn.onnx")
    torch.onnx.export(TinyFcn().train(), torch.randn(2, 3, 32, 32), model, input_names=["input"],
                      output_names=["out"], dynamic_axes={"input": {0: "N"}, "out": {0: "N"}}, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)
    out = os.path.join(args.work_dir, "segmentation-run")
    run([args.strata, "train", model, "--data", f"segmentation:{masks}", "--epochs", "8", "--batch-size", "8",
         "--optimizer", "adam", "--lr", "0.01", "--augment", "--threads", "2", "--out", out])
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    print(f"segmentation: test mean IoU {summary.get('test_mean_iou')}, pixel accuracy "
          f"{summary.get('test_pixel_accuracy')} ({summary['task']}, headline {summary['test_metric']})")
    if summary["task"] != "segmentation" or summary["test_metric"] != "mean_iou":
        failures.append(f"segmentation: task {summary['task']}, metric {summary['test_metric']}")
    if not summary.get("test_mean_iou") or summary["test_mean_iou"] < args.min_iou:
        failures.append(f"segmentation: mean IoU {summary.get('test_mean_iou')} below {args.min_iou}")

    out = os.path.join(args.work_dir, "synthetic-segmentation-run")
    run([args.strata, "train", model, "--data", "synthetic:segmentation", "--synthetic-samples", "32", "--max-steps",
         "3", "--batch-size", "8", "--threads", "2", "--out", out])
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    print(f"synthetic:segmentation: {summary['steps']} steps, {summary['task']}, mean IoU {summary.get('test_mean_iou')}")
    if summary["task"] != "segmentation" or summary["steps"] != 3 or summary.get("test_mean_iou") is None:
        failures.append(f"synthetic:segmentation: task {summary['task']}, {summary['steps']} steps, mean IoU "
                        f"{summary.get('test_mean_iou')}")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
