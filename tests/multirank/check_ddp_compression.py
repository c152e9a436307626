#!/usr/bin/env python3
"""DDP with a gradient compressor (--strategy-opt compress=SPEC) against plain DDP on the same ranks.

Trains the bundled CNN on synthetic data under plain DDP once and with each --case's compressor, same seed and
samples, then checks for each:
  * every exported parameter within the case's tolerance (relative) of the plain run's: 1e-6 for the compressors
    that are exact at their setting (topk:ratio=1, powersgd at full rank), a stated looser bound for lossy ones;
  * the bytes every rank handed to collectives (summary.json's gradient_bytes_sent against
    gradient_bytes_uncompressed) within the case's [MIN, MAX] ratio, so a compressor that sends everything, or
    nothing, fails.
With --resume SPEC: the compressed run for 2 epochs straight, and for 1 epoch then resumed from its checkpoint for
the second: the two exports must be bitwise equal (the compressor's residuals and warm starts are in the
checkpoint), and a resume whose checkpoint lost them must not be (the state matters at this setting).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

import numpy as np

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import multirank  # noqa: E402  (tests/support/multirank.py)


def train(strata, out, nproc, extra, steps="8"):
    command = [strata, "train", "--data", "synthetic", "--synthetic-samples", "256", "--batch-size", "8", "--seed",
               "1", "--lr", "0.05", "--momentum", "0.9", "--lr-schedule", "constant", "--threads", "1", "--nproc",
               str(nproc), "--strategy", "ddp", "--strategy-opt", "first_bucket_mb=0.05", "--strategy-opt",
               "bucket_mb=0.5", "--master-port", str(multirank.free_port()), "--log-every", "2", "--out", out,
               "--export", out + ".onnx"] + (["--max-steps", steps] if steps else []) + extra
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stdout, result.stderr)
        raise SystemExit(f"{' '.join(command)} failed with status {result.returncode}")
    return result.stdout + result.stderr


def relative_error(a, b):
    worst = max((float(np.linalg.norm(a[k] - v) / np.linalg.norm(v)), k) for k, v in b.items())
    return worst


def check_against_plain(args, work):
    train(args.strata, os.path.join(work, "plain"), args.nproc, [])
    plain = multirank.weights(os.path.join(work, "plain.onnx"))
    problems = check_time_series(os.path.join(work, "plain"), "plain DDP")
    if problems:
        raise SystemExit("\n".join(problems))
    for rank in json.load(open(os.path.join(work, "plain", "summary.json")))["ranks"]:
        if rank["gradient_bytes_sent"] != rank["gradient_bytes_uncompressed"] or rank["gradient_bytes_sent"] <= 0:
            raise SystemExit(f"plain DDP's rank {rank['rank']} reports {rank['gradient_bytes_sent']} bytes sent of "
                             f"{rank['gradient_bytes_uncompressed']}")
    failures = []
    for index, (spec, tolerance, low, high) in enumerate(args.case):
        out = os.path.join(work, f"compressed{index}")
        train(args.strata, out, args.nproc, ["--strategy-opt", f"compress={spec}"])
        error, name = relative_error(multirank.weights(out + ".onnx"), plain)
        ratios = []
        for rank in json.load(open(os.path.join(out, "summary.json")))["ranks"]:
            sent, whole = rank.get("gradient_bytes_sent", 0), rank.get("gradient_bytes_uncompressed", 0)
            if whole <= 0:
                raise SystemExit(f"{spec}: rank {rank['rank']} reports no gradient bytes: {rank}")
            ratios.append(sent / whole)
        failures += check_time_series(out, spec)
        print(f"compress={spec} on {args.nproc} ranks: worst relative error against plain DDP {error:.2e} ({name}), "
              f"bytes sent / uncompressed per rank {', '.join(f'{r:.4f}' for r in ratios)}")
        if error > float(tolerance):
            failures.append(f"{spec}: relative error {error:.2e} above the tolerance {tolerance}")
        if any(r > float(high) or r < float(low) for r in ratios):
            failures.append(f"{spec}: a rank's byte ratio is outside [{low}, {high}]")
    if failures:
        raise SystemExit("\n".join(failures))


def check_time_series(out, what):
    """metrics.jsonl's step records carry rank 0's gradient bytes per step, which add up to its summary's total."""
    summary = json.load(open(os.path.join(out, "summary.json")))
    steps = [json.loads(line) for line in open(os.path.join(out, "metrics.jsonl"))]
    steps = [s for s in steps if s["type"] == "step"]
    if not steps or any("gradient_bytes_per_step" not in s for s in steps):
        return [f"{what}: metrics.jsonl's step records lack gradient_bytes_per_step"]
    logged, previous = 0.0, 0
    for s in steps:
        logged += s["gradient_bytes_per_step"] * (s["step"] - previous)
        previous = s["step"]
    if previous != summary["steps"] or abs(logged - summary["ranks"][0]["gradient_bytes_sent"]) > 1e-6 * logged:
        return [f"{what}: the time series adds up to {logged} bytes over {previous} steps, the summary says "
                f"{summary['ranks'][0]['gradient_bytes_sent']} over {summary['steps']}"]
    return []


def check_resume(args, compress, work):
    spec = ["--strategy-opt", f"compress={compress}", "--epochs", "2"]
    # 256 samples, batch 8 x 2 ranks: 16 steps an epoch.
    straight = os.path.join(work, "straight")
    train(args.strata, straight, args.nproc, spec, steps=None)
    first = os.path.join(work, "first")
    train(args.strata, first, args.nproc, spec + ["--save", "--stop-after-epoch", "1"], steps=None)
    lost = os.path.join(work, "lost")
    shutil.copytree(first, lost)
    resumed = os.path.join(work, "resumed")
    out = train(args.strata, resumed, args.nproc, spec + ["--resume", first], steps=None)
    if "resumed from" not in out:
        print(out)
        raise SystemExit("the second run did not resume")
    a = multirank.weights(straight + ".onnx")
    b = multirank.weights(resumed + ".onnx")
    differ = [k for k in a if not np.array_equal(a[k], b[k])]
    if differ:
        raise SystemExit(f"compress={compress}: the resumed run differs from the straight one in {differ}")
    print(f"compress={compress}: 1 epoch + resume equals 2 epochs straight, bitwise ({len(a)} parameters)")
    # The control: the same resume from a checkpoint without the compressor's state ends elsewhere.
    strip_compressor_state(os.path.join(lost, "checkpoint"))
    text = train(args.strata, os.path.join(work, "resumed-lost"), args.nproc, spec + ["--resume", lost], steps=None)
    if "its error feedback and warm starts begin again" not in text:
        print(text)
        raise SystemExit("a resume without the compressor's state did not say so")
    c = multirank.weights(os.path.join(work, "resumed-lost") + ".onnx")
    if all(np.array_equal(a[k], c[k]) for k in a):
        raise SystemExit("a resume without the compressor's state ended equal: the check cannot tell")
    print("without the compressor's state the resume ends elsewhere, and says so")


def strip_compressor_state(checkpoint):
    """Removes the compressor's entries from every rank's manifest (checkpoint/rank<R>/manifest.json)."""
    removed = 0
    for entry in sorted(os.listdir(checkpoint)):
        path = os.path.join(checkpoint, entry, "manifest.json")
        if not entry.startswith("rank") or not os.path.exists(path):
            continue
        manifest = json.load(open(path))
        for field in ("tensors", "text"):
            kept = {k: v for k, v in manifest[field].items() if "ddp_compression" not in k and k != "ddp/compress"}
            removed += len(manifest[field]) - len(kept)
            manifest[field] = kept
        json.dump(manifest, open(path, "w"))
    if removed == 0:
        raise SystemExit(f"{checkpoint}: no compressor state to remove")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--case", nargs=4, action="append", default=[], metavar=("SPEC", "TOLERANCE", "MIN", "MAX"),
                        help="a compressor, its tolerance against plain DDP and the range of its byte ratio")
    parser.add_argument("--resume", action="append", default=[], metavar="SPEC",
                        help="check checkpoint/resume with this compressor instead")
    args = parser.parse_args()
    work = os.path.join(args.work_dir, f"ddp-compression-n{args.nproc}{'-resume' if args.resume else ''}")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    for index, compress in enumerate(args.resume):
        os.makedirs(os.path.join(work, str(index)))
        check_resume(args, compress, os.path.join(work, str(index)))
    if args.case:
        check_against_plain(args, work)
    return 0


if __name__ == "__main__":
    sys.exit(main())
