#!/usr/bin/env python3
"""Writes a GPT-2-architecture decoder as ONNX for Strata to train: the bundled default language model and larger ones.

The architecture is GPT-2's (Radford et al., 2019): learned token and position embeddings, pre-LayerNorm blocks of
causal multi-head self-attention and a GELU MLP (4x wide), a final LayerNorm, and an output projection tied to the
token embedding. Weights follow GPT-2's initialisation (normal, std 0.02; the residual projections scaled by
1/sqrt(2 * layers)), seeded, so the file is reproducible. The graph is exported from PyTorch in training mode
(dropout, when asked for, stays a Dropout node) at opset 17 with a symbolic batch dimension "N"; the sequence length
is fixed (the position table's size). Input: "input", int64 token ids [N, T]; output: "logits" [N, T, vocab]
(class axis last, as language models export it).

Sizes (--size): tiny (2 layers, 64 wide: ~0.1M parameters plus embeddings), default (4 layers, 128 wide, 4 heads,
vocab 256, sequence 128: the bundled byte-level model, ~0.8M), small (6 layers, 384 wide, 6 heads), gpt2 (GPT-2
small: 12 layers, 768 wide, 12 heads, vocab 50257, sequence 1024: 124M). Every dimension can be overridden.
"""
import argparse
import math
import sys

import torch
from torch import nn

SIZES = {
    "tiny": dict(layers=2, width=64, heads=2, vocab=256, seq_len=64),
    "default": dict(layers=4, width=128, heads=4, vocab=256, seq_len=128),
    "small": dict(layers=6, width=384, heads=6, vocab=256, seq_len=256),
    "gpt2": dict(layers=12, width=768, heads=12, vocab=50257, seq_len=1024),
}


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads, seq_len, dropout, sdpa=False):
        super().__init__()
        self.sdpa = sdpa  # PyTorch's fused scaled_dot_product_attention (2.0 and later), for benchmarks' peers
        self.heads = heads
        self.head_width = width // heads
        self.qkv = nn.Linear(width, 3 * width)
        self.proj = nn.Linear(width, width)
        self.attn_dropout = nn.Dropout(dropout)
        self.resid_dropout = nn.Dropout(dropout)
        self.register_buffer("causal", torch.tril(torch.ones(seq_len, seq_len, dtype=torch.bool)), persistent=False)

    def forward(self, x):
        n, t, c = x.shape
        d = self.head_width
        q, k, v = self.qkv(x).split(c, dim=2)
        q = q.view(n, t, self.heads, d).transpose(1, 2)
        k = k.view(n, t, self.heads, d).transpose(1, 2)
        v = v.view(n, t, self.heads, d).transpose(1, 2)
        if self.sdpa:
            y = torch.nn.functional.scaled_dot_product_attention(q, k, v, dropout_p=self.attn_dropout.p if
                                                                 self.training else 0.0, is_causal=True)
            return self.resid_dropout(self.proj(y.transpose(1, 2).reshape(n, t, c)))
        scores = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(self.head_width))
        scores = scores.masked_fill(~self.causal[:t, :t], float("-inf"))
        weights = self.attn_dropout(torch.softmax(scores, dim=-1))
        y = (weights @ v).transpose(1, 2).reshape(n, t, c)
        return self.resid_dropout(self.proj(y))


class Block(nn.Module):
    def __init__(self, width, heads, seq_len, dropout, sdpa=False):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, seq_len, dropout, sdpa)
        self.ln2 = nn.LayerNorm(width)
        self.fc = nn.Linear(width, 4 * width)
        self.gelu = nn.GELU()
        self.fc_proj = nn.Linear(4 * width, width)
        self.mlp_dropout = nn.Dropout(dropout)

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp_dropout(self.fc_proj(self.gelu(self.fc(self.ln2(x)))))


class Gpt(nn.Module):
    def __init__(self, layers, width, heads, vocab, seq_len, dropout=0.0, sdpa=False):
        super().__init__()
        if width % heads != 0:
            raise SystemExit(f"--width {width} is not a multiple of --heads {heads}")
        self.wte = nn.Embedding(vocab, width)
        self.wpe = nn.Embedding(seq_len, width)
        self.drop = nn.Dropout(dropout)
        self.blocks = nn.ModuleList(Block(width, heads, seq_len, dropout, sdpa) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.apply(self._init)
        for name, p in self.named_parameters():
            if name.endswith("attn.proj.weight") or name.endswith("fc_proj.weight"):
                nn.init.normal_(p, mean=0.0, std=0.02 / math.sqrt(2 * layers))

    @staticmethod
    def _init(module):
        if isinstance(module, (nn.Linear, nn.Embedding)):
            nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if isinstance(module, nn.Linear) and module.bias is not None:
            nn.init.zeros_(module.bias)

    def forward(self, idx):
        t = idx.shape[1]
        x = self.drop(self.wte(idx) + self.wpe.weight[:t])
        for block in self.blocks:
            x = block(x)
        # The output projection is the token embedding itself (tied, as in GPT-2): one parameter, two uses.
        return self.ln_f(x) @ self.wte.weight.t()


def build(args) -> Gpt:
    torch.manual_seed(args.seed)
    return Gpt(args.layers, args.width, args.heads, args.vocab, args.seq_len, args.dropout)


def export(model: Gpt, path: str, seq_len: int, batch: int = 2, dtype=torch.float32) -> None:
    model = model.to(dtype)
    idx = torch.zeros(batch, seq_len, dtype=torch.int64)
    torch.onnx.export(model, idx, path, input_names=["input"], output_names=["logits"],
                      dynamic_axes={"input": {0: "N"}, "logits": {0: "N"}}, opset_version=17,
                      training=torch.onnx.TrainingMode.TRAINING, do_constant_folding=False)


def parse(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("output")
    parser.add_argument("--size", choices=sorted(SIZES), default="default")
    parser.add_argument("--layers", type=int)
    parser.add_argument("--width", type=int)
    parser.add_argument("--heads", type=int)
    parser.add_argument("--vocab", type=int, help="vocabulary size (256: Strata's byte-level tokenizer)")
    parser.add_argument("--seq-len", type=int, help="the sequence length T (the position table's size)")
    parser.add_argument("--dropout", type=float, default=0.0)
    parser.add_argument("--float64", action="store_true", help="export float64 weights (reference checks)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    for key, value in SIZES[args.size].items():
        if getattr(args, key) is None:
            setattr(args, key, value)
    return args


def main(argv=None):
    args = parse(argv)
    model = build(args)
    export(model, args.output, args.seq_len, dtype=torch.float64 if args.float64 else torch.float32)
    params = sum(p.numel() for p in model.parameters())
    print(f"{args.output}: GPT with {args.layers} layers, width {args.width}, {args.heads} heads, vocab {args.vocab}, "
          f"sequence {args.seq_len}: {params:,} parameters", file=sys.stderr)


if __name__ == "__main__":
    main()
