#!/usr/bin/env python3
"""A DDP checkpoint written by 4 ranks resumes on 2 (issue 17).

Trains the bundled CNN on synthetic data with 4 DDP ranks for one epoch of three (--save --stop-after-epoch 1),
then resumes it with 2 ranks:
  * with --max-steps equal to the checkpoint's steps, so no step runs: the exported parameters must equal the
    checkpoint's param/* tensors exactly (every rank loaded them; rank 0 exports);
  * to the end of epoch 3, twice from copies of the same checkpoint: it finishes, its checkpoint records world
    size 2, and the two exports are identical (the resume is deterministic).
Prints the time each run took.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import time

import numpy as np
import onnx
from onnx import numpy_helper

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "support"))
import multirank  # noqa: E402  (tests/support/multirank.py)


def train(strata, args, what):
    command = [strata, "train", "--data", "synthetic", "--synthetic-samples", "256", "--batch-size", "16", "--seed",
               "1", "--epochs", "3", "--strategy", "ddp", "--threads", "1"] + args
    start = time.monotonic()
    result = subprocess.run(command, capture_output=True, text=True)
    print(f"{what}: {time.monotonic() - start:.1f} s")
    if result.returncode != 0:
        print(result.stdout, result.stderr)
        raise SystemExit(f"{what} failed: {' '.join(command)}")
    return result.stdout


def initializers(path):
    return {i.name: numpy_helper.to_array(i) for i in onnx.load(path).graph.initializer}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--master-port", help="of the jobs' store (default: a free port)")
    args = parser.parse_args()
    work = os.path.join(args.work_dir, "resume-world-size")
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    port = ["--master-port", str(args.master_port or multirank.free_port())]

    four = os.path.join(work, "four")
    train(args.strata, ["--nproc", "4", "--save", "--stop-after-epoch", "1", "--out", four] + port, "4 ranks, epoch 1")
    state = json.load(open(os.path.join(four, "checkpoint", "state.json")))
    steps = state["trainer"]["steps"]
    assert state["world_size"] == 4 and state["trainer"]["epochs_done"] == 1, state

    # The checkpoint's parameters, read straight from its TensorProto files; the weights it lists as stored
    # channels-last (Note [Channels-last weights]: [K, R, S, C], the plan's layout) turned back into the model's.
    manifest = json.load(open(os.path.join(four, "checkpoint", "rank0", "manifest.json")))
    channels_last = set(state["trainer"]["channels_last_parameters"])
    assert channels_last == {"conv1.weight", "conv2.weight"}, channels_last  # a float32 model on the CPU
    saved = {}
    for key, entry in manifest["tensors"].items():
        if key.startswith("param/"):
            proto = onnx.load_tensor(os.path.join(four, "checkpoint", "rank0", entry["file"]))
            name = key[len("param/"):]
            value = numpy_helper.to_array(proto)
            saved[name] = np.transpose(value, (0, 3, 1, 2)) if name in channels_last else value
    assert saved, "the checkpoint holds no parameters"

    # Resumed on 2 ranks without a step: the weights are the checkpoint's, bit for bit.
    loaded = os.path.join(work, "loaded")
    shutil.copytree(four, loaded)
    out = train(args.strata, ["--nproc", "2", "--resume", loaded, "--max-steps", str(steps), "--export",
                              loaded + ".onnx"] + port, "2 ranks, resumed, no step")
    if f"resumed from {loaded}/checkpoint after epoch 1 (step {steps})" not in out:
        print(out)
        raise SystemExit("the 2-rank run did not say it resumed after epoch 1")
    exported = initializers(loaded + ".onnx")
    missing = sorted(set(saved) - set(exported))
    if missing:
        raise SystemExit(f"the export lacks the checkpoint's parameters {missing}")
    differ = [name for name, value in saved.items() if not np.array_equal(exported[name], value)]
    if differ:
        raise SystemExit(f"resumed on 2 ranks, parameters differ from the 4-rank checkpoint: {differ}")
    print(f"{len(saved)} parameters resumed on 2 ranks equal the 4-rank checkpoint's")

    # Resumed to the end, twice: both finish with identical weights and a 2-rank checkpoint.
    exports = []
    for attempt in ("a", "b"):
        run = os.path.join(work, f"two-{attempt}")
        shutil.copytree(four, run)
        train(args.strata, ["--nproc", "2", "--resume", run, "--save", "--export", run + ".onnx"] + port,
              f"2 ranks, resumed to epoch 3 ({attempt})")
        state = json.load(open(os.path.join(run, "checkpoint", "state.json")))
        if state["world_size"] != 2 or state["trainer"]["epochs_done"] != 3:
            raise SystemExit(f"{run}: the resumed run's checkpoint is {state}")
        if os.path.exists(os.path.join(run, "checkpoint", "rank2")):
            raise SystemExit(f"{run}: the 4-rank checkpoint's rank2 directory was kept")
        exports.append(open(run + ".onnx", "rb").read())
    if exports[0] != exports[1]:
        raise SystemExit("two resumes of the same checkpoint on 2 ranks gave different weights")
    before = initializers(loaded + ".onnx")
    after = initializers(os.path.join(work, "two-a.onnx"))
    if all(np.array_equal(before[k], after[k]) for k in saved):
        raise SystemExit("the resumed run did not train (its weights are the checkpoint's)")
    print("two 2-rank resumes of the 4-rank checkpoint finished with identical weights")
    return 0


if __name__ == "__main__":
    sys.exit(main())
