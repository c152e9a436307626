#!/usr/bin/env python3
"""A language model learns on the built-in corpus, and generates from its export (issue 44's CI check).

1. `strata train --data text` trains the bundled GPT (models/make_gpt.py --size default, bytes, sequence 128) on the
   built-in corpus (the King James Bible) a short way. It must have learnt more than byte frequencies: its validation
   perplexity must be below --max-ratio (0.85) times that of the best unigram model of the bytes (frequencies counted
   on the training split, judged on the validation split, both read from the run's own token file). The figures of a
   language model must be in summary.json and metrics.jsonl (perplexity, token accuracy, tokens/s).
2. `strata generate` on the export: greedy decoding is deterministic, sampling is deterministic by seed, and the
   text continues the prompt.
3. A SentencePiece tokenizer (--tokenizer sentencepiece:320) trained on a small corpus, a model with that
   vocabulary, and generation that finds the tokenizer in the export's metadata.
Not a timed test: the step counts are fixed, the wall time is whatever the machine gives.
"""
import argparse
import json
import math
import os
import subprocess
import sys

import numpy as np

HEADER = 32  # Note [Token files]: Strata's header


def run(command, **kw):
    result = subprocess.run(command, capture_output=True, text=True, **kw)
    if result.returncode != 0:
        print(result.stdout[-3000:], result.stderr[-3000:])
        raise SystemExit(f"{' '.join(command)} failed with status {result.returncode}")
    return result


def unigram_perplexity(token_file, share=0.05, seq_len=128):
    """Perplexity on the validation windows of a model that knows only the training split's byte frequencies."""
    with open(token_file, "rb") as f:
        raw = f.read()
    assert raw[:8] == b"STRATOK1", f"{token_file}: not a Strata token file"
    width = int.from_bytes(raw[8:12], "little")
    ids = np.frombuffer(raw[HEADER:], dtype="<u2" if width == 2 else "<u4").astype(np.int64)
    windows = (len(ids) - 1) // seq_len
    split = int(math.floor((1 - share) * windows)) * seq_len
    train, validation = ids[:split + 1], ids[split + 1:windows * seq_len + 1]
    counts = np.bincount(train, minlength=256).astype(np.float64) + 1.0
    logp = np.log(counts / counts.sum())
    return float(np.exp(-logp[validation].mean()))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--strata", required=True)
    parser.add_argument("--python", default=sys.executable, help="Python with Debian's torch, for make_gpt.py")
    parser.add_argument("--work-dir", required=True)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--max-ratio", type=float, default=0.85)
    args = parser.parse_args()
    os.makedirs(args.work_dir, exist_ok=True)
    out = os.path.join(args.work_dir, "lm")
    model = os.path.join(out, "gpt.onnx")
    failures = []

    run([args.strata, "train", "--data", "text", "--max-steps", str(args.steps), "--batch-size", "16", "--optimizer",
         "adamw", "--lr", "3e-3", "--warmup-steps", "20", "--log-every", "50", "--threads", "2", "--seed", "1",
         "--out", out, "--export", model])
    with open(os.path.join(out, "summary.json"), encoding="utf-8") as f:
        summary = json.load(f)
    token_file = [os.path.join(out, "data", n) for n in os.listdir(os.path.join(out, "data")) if n.endswith(".tokens")]
    baseline = unigram_perplexity(token_file[0])
    perplexity = summary["test_perplexity"]
    print(f"validation perplexity {perplexity:.2f} after {args.steps} steps; the bytes' unigram model: {baseline:.2f}; "
          f"token accuracy {summary['test_token_accuracy']:.3f}; {summary['tokens_per_s']:.0f} tokens/s; "
          f"{summary['train_time_s']:.0f} s")
    if not perplexity < args.max_ratio * baseline:
        failures.append(f"perplexity {perplexity:.2f} is not below {args.max_ratio} x the unigram's {baseline:.2f}")
    for key, want in (("task", "language-model"), ("test_metric", "perplexity"), ("seq_len", 128),
                      ("vocabulary", 256)):
        if summary.get(key) != want:
            failures.append(f"summary.json {key} = {summary.get(key)!r}, expected {want!r}")
    if abs(summary["tokens_per_s"] - 128 * summary["samples_per_s"]) > 1e-6 * summary["tokens_per_s"]:
        failures.append("tokens_per_s is not 128 x samples_per_s")
    if abs(math.log(perplexity) - summary["test_loss"]) > 1e-9:
        failures.append("test_perplexity is not exp(test_loss)")
    with open(os.path.join(out, "metrics.jsonl"), encoding="utf-8") as f:
        lines = [json.loads(line) for line in f]
    steps = [m for m in lines if m["type"] == "step"]
    if not steps or "train_perplexity" not in steps[-1] or not steps[-1]["loss"] < steps[0]["loss"]:
        failures.append(f"metrics.jsonl: the step lines do not show the loss falling with perplexity: {steps[:1]}")
    if not os.path.exists(os.path.join(out, "tokenizer.json")):
        failures.append("the run directory has no tokenizer.json")

    prompt = "And God said"
    greedy = [run([args.strata, "generate", model, "--prompt", prompt, "--max-tokens", "40", "--temperature", "0",
                   "--threads", "2"]).stdout for _ in range(2)]
    sampled = [run([args.strata, "generate", model, "--prompt", prompt, "--max-tokens", "40", "--top-k", "20",
                    "--seed", str(seed), "--threads", "2"]).stdout for seed in (5, 5, 6)]
    print(f"greedy: {greedy[0].strip()!r}\nsampled: {sampled[0].strip()!r}")
    if greedy[0] != greedy[1] or prompt not in greedy[0]:
        failures.append(f"greedy generation is not deterministic or lost the prompt: {greedy}")
    if sampled[0] != sampled[1] or sampled[0] == sampled[2]:
        failures.append("sampling is not deterministic by seed")

    # SentencePiece: a tokenizer trained on a small corpus, a model of its vocabulary, generation from the export.
    corpus = os.path.join(args.work_dir, "corpus.txt")
    with open(corpus, "w", encoding="utf-8") as f:
        for i in range(400):
            f.write(f"the quick brown fox number {i % 37} jumps over the lazy dog\nthe dog sleeps in the sun\n")
    small = os.path.join(args.work_dir, "gpt320.onnx")
    run([args.python, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "models", "make_gpt.py"),
         small, "--size", "tiny", "--vocab", "320", "--seq-len", "32"])
    sp_out = os.path.join(args.work_dir, "lm-sp")
    run([args.strata, "train", small, "--data", f"text:{corpus}", "--tokenizer", "sentencepiece:320", "--max-steps",
         "30", "--batch-size", "8", "--optimizer", "adamw", "--lr", "3e-3", "--threads", "2", "--out", sp_out,
         "--export", os.path.join(sp_out, "gpt.onnx")])
    generated = run([args.strata, "generate", os.path.join(sp_out, "gpt.onnx"), "--prompt", "the quick", "--max-tokens",
                     "12", "--temperature", "0", "--threads", "2"])
    print(f"sentencepiece: {generated.stdout.strip()!r} ({generated.stdout.count(chr(10))} lines)")
    if "sentencepiece (320 pieces) (from the model's metadata)" not in generated.stdout or "the quick" not in \
            generated.stdout:
        failures.append(f"generation did not use the export's SentencePiece tokenizer: {generated.stdout!r}")
    for failure in failures:
        print("FAIL:", failure)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
