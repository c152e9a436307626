#!/usr/bin/env python3
"""`strata plan`'s JSON output, and its memory prediction against real runs.

--json-only: `strata plan --world-size 2 --json PATH` (calibrated) writes every field `strata compare` reads, for
ddp, fsdp shard=full/grad_op/none and ps mode=sync/async; `--strategy fsdp --strategy-opt shard=grad_op` predicts
that configuration alone, with the same figures.

Otherwise also: the bundled CNN trains 30 steps (FSDP reaches its worst-case total peak within them) on --nproc ranks (synthetic data) with ddp and fsdp
shard=full and grad_op; every rank's training peak (summary.json's training_peak_memory_bytes) and each category
of training_memory_breakdown must be within --tolerance (5%) of the plan's peak_memory_bytes and memory_breakdown
(categories under 1 MiB are compared against 1 MiB), and for ddp also what the peak is made of (memory_at_peak
against training_memory_at_peak). FSDP's peak is a worst case that a loaded machine may not reach: it may fall short
by the communication buffers the prediction has alive at the peak, no more. Prints the marginal step time beside the predicted one (not
checked: the machine is shared).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import multirank  # noqa: E402  (tests/support/multirank.py)

FIELDS = ("model", "world_size", "nnodes", "batch_size", "threads", "device_memory_bytes", "calibration",
          "configurations")
CONFIG_FIELDS = ("strategy", "options", "label", "peak_memory_bytes", "memory_breakdown", "memory_at_peak",
                 "step_time_s", "fits")
LABELS = ["ddp", "fsdp shard=full", "fsdp shard=grad_op", "fsdp shard=none", "ps mode=sync", "ps mode=async"]
CATEGORIES = ("parameters", "gradients", "optimizer_state", "activations", "communication", "workspace", "compression",
              "other")


def run(command):
    result = subprocess.run(command, capture_output=True, text=True)
    if result.returncode != 0:
        print(result.stdout, result.stderr)
        raise SystemExit(f"{' '.join(command)} failed with status {result.returncode}")
    return result.stdout


def plan(args, tmp, name, extra):
    path = os.path.join(tmp, f"{name}.json")
    print(run([args.strata, "plan", "--world-size", str(args.nproc), "--batch-size", str(args.batch_size),
               "--threads", "1", "--optimizer", args.optimizer, "--json", path] + extra))
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def check_json(prediction, labels, calibrated):
    ok = True
    for field in FIELDS:
        if field not in prediction:
            print(f"missing field {field}")
            ok = False
    for field in ("compute_step_s", "allreduce_latency_s", "allreduce_bandwidth_bytes_per_s"):
        value = prediction["calibration"].get(field, "missing")
        if calibrated and not (isinstance(value, float) and value >= 0):
            print(f"calibration.{field} is {value}")
            ok = False
    # Note [Step time and overlap]: the share of the collectives' latency the step pays, in (0, 1].
    share = prediction["calibration"].get("latency_share")
    if not (isinstance(share, (int, float)) and 0 < share <= 1):
        print(f"calibration.latency_share is {share}")
        ok = False
    got = [c["label"] for c in prediction["configurations"]]
    if got != labels:
        print(f"labels {got}, expected {labels}")
        ok = False
    for c in prediction["configurations"]:
        for field in CONFIG_FIELDS:
            if field not in c:
                print(f"{c.get('label')}: missing {field}")
                ok = False
        if sorted(c["memory_breakdown"]) != sorted(CATEGORIES) or c["peak_memory_bytes"] <= 0:
            print(f"{c['label']}: breakdown {c['memory_breakdown']}, peak {c['peak_memory_bytes']}")
            ok = False
        if sum(c["memory_at_peak"].values()) != c["peak_memory_bytes"]:
            print(f"{c['label']}: at the peak {c['memory_at_peak']} does not add up to {c['peak_memory_bytes']}")
            ok = False
        if calibrated != isinstance(c["step_time_s"], float):
            print(f"{c['label']}: step_time_s {c['step_time_s']}")
            ok = False
    return ok


def train(args, tmp, strategy, options, steps):
    out = os.path.join(tmp, f"{strategy}-{'-'.join(options)}-{steps}")
    command = [args.strata, "train", "--data", "synthetic", "--synthetic-samples", str(args.batch_size * args.nproc * 40),
               "--batch-size", str(args.batch_size), "--max-steps", str(steps), "--nproc", str(args.nproc),
               "--threads", "1", "--optimizer", args.optimizer, "--master-port", str(args.master_port),
               "--log-every", "1000", "--strategy", strategy, "--out", out]
    for option in options:
        command += ["--strategy-opt", option]
    run(command)
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        return json.load(f)


def check_memory(label, predicted, summary, tolerance, composition):
    """With `composition`, also what the peak is made of (each category at the moment of the total peak)."""
    ok = True
    for rank in summary["ranks"]:
        measured = rank["training_memory_breakdown"]
        pairs = [("peak", predicted["peak_memory_bytes"], rank["training_peak_memory_bytes"])]
        pairs += [(k, predicted["memory_breakdown"][k], measured[k]) for k in CATEGORIES]
        pairs += [(f"{k} at the peak", predicted["memory_at_peak"][k], rank["training_memory_at_peak"][k])
                  for k in CATEGORIES]
        for name, p, m in pairs:
            error = abs(m - p) / max(p, 2**20)
            good = error <= tolerance or (not composition and name.endswith("at the peak"))
            if name == "peak" and not composition and m < p:
                # FSDP's predicted peak is its worst case: a collective's buffers still alive at the activation
                # peak. When they go depends on when the communication thread finishes against the compute
                # thread, so a loaded machine can run all 30 steps without that moment (measured: 17.53 against
                # 19.07 MiB, the 1.54 MiB of communication at the peak missing). Below the prediction by at most
                # those buffers is right; above it, or below by more, is not.
                in_flight = predicted["memory_at_peak"]["communication"]
                error = max(0.0, p - in_flight - m) / max(p, 2**20)
                good = error <= tolerance
            ok &= good
            print(f"{label}, rank {rank['rank']}: {name} predicted {p / 2**20:.3f} MiB, measured {m / 2**20:.3f} MiB "
                  f"({100 * error:.2f}%){'' if good else '  <- over ' + str(100 * tolerance) + '%'}")
    return ok


def main():
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--nproc", type=int, default=2)
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument("--optimizer", default="adam")
    parser.add_argument("--master-port", type=int, help="of the jobs' store (default: a free port)")
    parser.add_argument("--tolerance", type=float, default=0.05)
    parser.add_argument("--json-only", action="store_true")
    args = parser.parse_args()
    args.master_port = args.master_port or multirank.free_port()
    with tempfile.TemporaryDirectory() as tmp:
        everything = plan(args, tmp, "all", ["--device-memory", "1GiB", "--calibration-steps", "2"])
        ok = check_json(everything, LABELS, calibrated=True)
        ok &= all(c["fits"] is True for c in everything["configurations"])
        one = plan(args, tmp, "one", ["--no-calibrate", "--strategy", "fsdp", "--strategy-opt", "shard=grad_op"])
        ok &= check_json(one, ["fsdp shard=grad_op"], calibrated=False)
        ok &= one["configurations"][0]["options"] == {"shard": "grad_op"} and one["device_memory_bytes"] is None
        same = [c for c in everything["configurations"] if c["label"] == "fsdp shard=grad_op"][0]
        if {k: v for k, v in same["memory_breakdown"].items() if k != "workspace"} != \
                {k: v for k, v in one["configurations"][0]["memory_breakdown"].items() if k != "workspace"}:
            print(f"fsdp shard=grad_op alone predicts {one['configurations'][0]['memory_breakdown']}, "
                  f"among all {same['memory_breakdown']}")
            ok = False
        if args.json_only:
            return 0 if ok else 1
        for strategy, options in (("ddp", []), ("fsdp", ["shard=full"]), ("fsdp", ["shard=grad_op"])):
            label = " ".join([strategy] + options)
            predicted = [c for c in everything["configurations"] if c["label"] == label][0]
            short = train(args, tmp, strategy, options, 30)
            # FSDP's peak moment depends on when its collectives end (Note [Scratch until the wait]): its
            # composition is printed, not checked; DDP's is fixed.
            ok &= check_memory(label, predicted, short, args.tolerance, composition=strategy == "ddp")
            long = train(args, tmp, strategy, options, 60)
            marginal = (long["train_time_s"] - short["train_time_s"]) / (long["steps"] - short["steps"])
            step = predicted["step_time_s"]
            print(f"{label}: step time predicted {1e3 * step:.1f} ms, measured (marginal over 30 steps) "
                  f"{1e3 * marginal:.1f} ms ({100 * (step - marginal) / marginal:+.1f}%)")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
