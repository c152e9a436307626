#!/usr/bin/env python3
"""Trains the default model on Fashion-MNIST and requires a minimum test accuracy from summary.json."""
import argparse
import json
import os
import subprocess
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--out", required=True)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--min-accuracy", type=float, default=0.90)
    args = parser.parse_args()
    subprocess.run([args.strata, "train", "--epochs", str(args.epochs), "--out", args.out], check=True)
    with open(os.path.join(args.out, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    accuracy = summary["test_accuracy"]
    print(f"test accuracy after {args.epochs} epochs: {accuracy:.4f} (required {args.min_accuracy})")
    return 0 if accuracy >= args.min_accuracy else 1


if __name__ == "__main__":
    sys.exit(main())
