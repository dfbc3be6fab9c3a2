"""``attnkit demo``: a short tour of the attention API on built-in data."""

from __future__ import annotations

import math
import time
from pathlib import Path

import torch

from attnkit import SCORES, Attention, SelfAttention, plot_attention


def add_parser(sub) -> None:
    p = sub.add_parser("demo", help="run a short demonstration of the attention API")
    p.add_argument("--out", default="demo-out", help="folder for the heat-maps (default demo-out)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=int, default=300, help="training steps of the alignment demo")
    p.set_defaults(run=run)


def _positions(t: int, d: int) -> torch.Tensor:
    """Sinusoidal position codes ``(T, D)``."""
    pos = torch.arange(t, dtype=torch.float32)[:, None]
    freq = torch.exp(-math.log(1e4) * torch.arange(0, d, 2, dtype=torch.float32) / d)
    return torch.cat([torch.sin(pos * freq), torch.cos(pos * freq)], dim=-1)


def tour_scores() -> None:
    print("1. Every score on one padded batch (B=2, Tq=4, Tk=6, key lengths 6 and 3)")
    query, key = torch.randn(2, 4, 16), torch.randn(2, 6, 16)
    lengths = torch.tensor([6, 3])
    for score in SCORES:
        attn = Attention(16, score=score)
        out = attn(query, key, key_lengths=lengths, need_weights=True)
        sums = out.weights.sum(-1)
        print(
            f"   {score:<10} context {tuple(out.context.shape)}  row sums {sums.min():.4f}.."
            f"{sums.max():.4f}  weight on padding {out.weights[1, :, 3:].abs().sum():.1f}"
            f"  path: {attn.plan(query, key).impl}"
        )


def learn_reversal(out_dir: Path, steps: int) -> Path:
    """Learn to read a sequence backwards: query i must find key T-1-i."""
    t, d = 12, 32
    attn = Attention(d, 2 * d, d, score="additive", attn_dim=32)
    opt = torch.optim.Adam(attn.parameters(), lr=0.02)
    queries = _positions(t, d).expand(64, t, d)
    loss = torch.tensor(0.0)
    for _ in range(steps):
        tokens = torch.randn(64, t, d)
        keys = torch.cat([tokens, queries], dim=-1)  # (B, T, 2D): content and position
        context, _ = attn(queries, keys, tokens)
        loss = torch.nn.functional.mse_loss(context, tokens.flip(1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    tokens = torch.randn(1, t, d)
    with torch.no_grad():
        keys = torch.cat([tokens, queries[:1]], dim=-1)
        _, w = attn(queries[:1], keys, tokens, need_weights=True)
    hits = (w[0].argmax(-1) == torch.arange(t - 1, -1, -1)).float().mean()
    print(f"2. Additive attention learned to reverse a sequence: loss {loss.item():.3f}, "
          f"argmax on the mirrored key for {hits:.0%} of queries")
    labels = [f"k{j}" for j in range(t)]
    return plot_attention(w[0], labels, [f"q{i}" for i in range(t)], out_dir / "reversal.png",
                          title="learned alignment: query i attends key T-1-i")


def long_sequence(out_dir: Path) -> Path:
    b, t, d = 8, 800, 256
    layer = SelfAttention(d, window=(64, 64))
    x = torch.randn(b, t, d, requires_grad=True)
    lengths = torch.randint(t // 2, t + 1, (b,))
    start = time.perf_counter()
    layer(x, lengths).sum().backward()
    took = time.perf_counter() - start
    plan = layer.attention.plan(x, x)
    print(f"3. SelfAttention between two RNNs, B={b}, T={t}, D={d}, window (64, 64): "
          f"forward+backward {took:.2f} s; path {plan.impl} ({plan.reason})")
    with torch.no_grad():
        _, w = layer.with_weights(x[:1, :120], lengths=None)
    return plot_attention(w[0], None, None, out_dir / "self_attention_window.png",
                          title="self-attention with a (64, 64) window, first 120 steps",
                          x_title="step (keys)", y_title="step (queries)")


def run(args) -> int:
    torch.manual_seed(args.seed)
    out_dir = Path(args.out)
    tour_scores()
    paths = [learn_reversal(out_dir, args.steps), long_sequence(out_dir)]
    for p in paths:
        print(f"   wrote {p}")
    return 0
