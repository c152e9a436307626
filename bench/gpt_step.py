#!/usr/bin/env python3
"""GPT training step of Strata beside the current PyTorch eager (with scaled_dot_product_attention), one run.

The model is models/make_gpt.py's GPT-2-architecture decoder. Strata trains the ONNX file that Debian's PyTorch
exports (--export-python, /usr/bin/python3) on a token file of random ids (`strata train --data tokens:FILE`, AdamW,
forward + backward + update per step); PyTorch (this interpreter: run it with the peer from
../shared/tools/peer-torch.sh) runs the same model with the same weights, attention through
torch.nn.functional.scaled_dot_product_attention(is_causal=True), cross-entropy over every position and AdamW, on a
fixed random batch; ONNX Runtime Training (--ort-python, ../shared/tools/peer-ort.sh's $ORT_PY) trains the same .onnx
file with AdamW (bench/ort_train_step.py --tokens). Same batch, sequence and threads; rounds alternate the sides. The table gives median ms per
step, tokens/s and the ratio Strata/PyTorch (below 1.0: Strata is faster), and each side's peak resident memory
(whole process; Strata's allocator peak beside it).

  eval "$(../shared/tools/peer-torch.sh)"; eval "$(../shared/tools/peer-ort.sh)"
  "$PEER_PY" bench/gpt_step.py --cases small:256:8,small:1024:2
"""
import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np
import torch

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
sys.path.insert(0, os.path.join(ROOT, "models"))
import make_gpt  # noqa: E402


def export(python, size, seq_len, path):
    subprocess.run([python, os.path.join(ROOT, "models", "make_gpt.py"), path, "--size", size, "--seq-len",
                    str(seq_len), "--seed", "0"], check=True, capture_output=True)


def strata_run(strata, model, tokens, batch, threads, steps, work):
    out = os.path.join(work, "run")
    command = ["/usr/bin/time", "-f", "%M", strata, "train", model, "--data", f"tokens:{tokens}", "--batch-size",
               str(batch), "--max-steps", str(steps + 2), "--threads", str(threads), "--optimizer", "adamw",
               "--lr", "1e-3", "--lr-schedule", "constant", "--out", out, "--log-every", "1", "--sample-every", "0",
               "--device", "cpu"]
    result = subprocess.run(command, check=True, capture_output=True, text=True)
    peak_rss_kib = int(result.stderr.strip().splitlines()[-1])
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    os.remove(os.path.join(out, "metrics.jsonl"))
    times = [r["step_time_ms"] for r in records if r["type"] == "step" and r["step"] > 2]
    return statistics.median(times), peak_rss_kib * 1024, summary["ranks"][0]["training_peak_memory_bytes"]


TORCH_SIDE = r'''
import json, resource, statistics, sys, time
import torch
sys.path.insert(0, sys.argv[1])
import make_gpt
size, seq_len, batch, threads, steps = sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), int(sys.argv[6])
torch.set_num_threads(threads)
config = dict(make_gpt.SIZES[size]); config["seq_len"] = seq_len
torch.manual_seed(0)
model = make_gpt.Gpt(**config, sdpa=True).train()
optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
x = torch.randint(0, config["vocab"], (batch, seq_len))
y = torch.randint(0, config["vocab"], (batch, seq_len))
times = []
for i in range(steps + 2):
    start = time.perf_counter()
    optimizer.zero_grad(set_to_none=True)
    logits = model(x)
    torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).backward()
    optimizer.step()
    if i >= 2:
        times.append((time.perf_counter() - start) * 1000.0)
print(json.dumps({"ms": statistics.median(times), "rss": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024}))
'''


def torch_run(size, seq_len, batch, threads, steps):
    # A process of its own per round, so that its peak resident set is this model's alone.
    result = subprocess.run([sys.executable, "-c", TORCH_SIDE, os.path.join(ROOT, "models"), size, str(seq_len),
                             str(batch), str(threads), str(steps)], check=True, capture_output=True, text=True)
    figures = json.loads(result.stdout.strip().splitlines()[-1])
    return figures["ms"], figures["rss"]


def ort_run(python, model, vocab, seq_len, batch, threads, steps):
    """ONNX Runtime Training's median step on the same file; None where it cannot build the training graph."""
    result = subprocess.run([python, os.path.join(ROOT, "bench", "ort_train_step.py"), model, "--shape",
                             f"{batch},{seq_len}", "--tokens", str(vocab), "--optimizer", "adamw", "--threads",
                             str(threads), "--steps", str(steps)], capture_output=True, text=True)
    if result.returncode != 0:
        print(f"  ONNX Runtime Training failed: {result.stderr.strip().splitlines()[-1:]}", flush=True)
        return None
    return statistics.median(json.loads(result.stdout.strip().splitlines()[-1])["ms"])


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--strata", default=os.path.join(ROOT, "build", "cli", "strata"))
    parser.add_argument("--export-python", default="/usr/bin/python3", help="Debian's python3 with torch 1.13")
    parser.add_argument("--cases", default="small:256:8,small:1024:2,gpt2:1024:1",
                        help="SIZE:SEQ_LEN:BATCH,... (sizes of models/make_gpt.py)")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--ort-python", default=os.environ.get("ORT_PY"),
                        help="interpreter of ../shared/tools/peer-ort.sh (default: $ORT_PY; unset or 'none': skipped)")
    args = parser.parse_args()
    use_ort = args.ort_python not in (None, "", "none")
    print(f"torch {torch.__version__}, threads {args.threads}, {args.rounds} rounds x {args.steps} steps (medians)")
    print(f"{'case':<18}{'strata ms':>10}{'torch ms':>10}{'ratio':>7}{'strata tok/s':>13}{'torch tok/s':>12}"
          f"{'strata RSS MiB':>15}{'(allocator)':>12}{'torch RSS MiB':>14}{'ort ms':>8}{'vs ort':>7}")
    with tempfile.TemporaryDirectory() as tmp:
        for case in args.cases.split(","):
            size, seq_len, batch = case.split(":")
            seq_len, batch = int(seq_len), int(batch)
            model = os.path.join(tmp, f"{size}_{seq_len}.onnx")
            export(args.export_python, size, seq_len, model)
            vocab = make_gpt.SIZES[size]["vocab"]
            tokens = os.path.join(tmp, f"tokens_{vocab}.bin")
            np.random.default_rng(0).integers(0, vocab, 2_000_000).astype("<u2").tofile(tokens)
            ours, theirs, rss, peers_rss, allocator, orts = [], [], [], [], [], []
            for _ in range(args.rounds):
                ms, peak, held = strata_run(args.strata, model, tokens, batch, args.threads, args.steps, tmp)
                ours.append(ms)
                rss.append(peak)
                allocator.append(held)
                ms, peak = torch_run(size, seq_len, batch, args.threads, args.steps)
                theirs.append(ms)
                peers_rss.append(peak)
                if use_ort:
                    orts.append(ort_run(args.ort_python, model, vocab, seq_len, batch, args.threads, args.steps))
            s, t = statistics.median(ours), statistics.median(theirs)
            ratios = sorted(a / b for a, b in zip(ours, theirs))
            ort_ratios = sorted(a / b for a, b in zip(ours, orts) if b is not None)
            ort = (f"{statistics.median([o for o in orts if o is not None]):>8.1f}{statistics.median(ort_ratios):>7.2f}"
                   if ort_ratios else f"{'-':>8}{'-':>7}")
            print(f"{case:<18}{s:>10.1f}{t:>10.1f}{statistics.median(ratios):>7.2f}{batch * seq_len * 1000 / s:>13.0f}"
                  f"{batch * seq_len * 1000 / t:>12.0f}{max(rss) / 2**20:>15.0f}{max(allocator) / 2**20:>12.0f}"
                  f"{max(peers_rss) / 2**20:>14.0f}{ort}   rounds {', '.join(f'{r:.2f}' for r in ratios)}", flush=True)


if __name__ == "__main__":
    main()
