"""Peak training memory of the LAS speller's location-aware attention: attnkit vs the usual way.

The usual way (as in most LAS implementations) computes each decoder step's energies as
``v^T tanh(W s + V h + U f)`` with ``f = conv(previous weights)`` in plain PyTorch, so autograd
keeps every step's ``(B, S, A)`` tanh input until backward. attnkit's location score goes through
its one-step path (scores built block by block, the pair tensor recomputed in backward).

Two levels, each case in a fresh process (peak RSS during its first training step minus the
RSS before it, sampled by :class:`attnkit.bench.PeakRSS`; batch 16, 25 output characters):

* ``las``: a whole :class:`attnkit.models.LAS` training step (listener + speller) on ``frames``
  input frames (the speller attends over ``frames // 8`` listener steps);
* ``attention``: the speller alone over ``keys`` memory steps given directly (1,600 frames
  are only 200 keys after the three halvings).

Usage: ``python benchmarks/las_memory.py [--time-budget 60] [--json docs/las_memory.json]``.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path
from types import SimpleNamespace

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.bench import PeakRSS, _trim, machine
from attnkit.models import LAS

BATCH, STEPS, FEATURES = 16, 25, 80
CASES = [("las", 1600), ("attention", 1600)]
IMPLS = ("attnkit", "usual")


class UsualLocationAttention(nn.Module):
    """Location-aware attention written the usual way: one step, plain autograd.

    ``prepare(keys (B, S, Dk), values (B, S, Dv))`` once, then per step
    ``(query (B, Dq), memory, key_lengths (B,), prev_weights (B, S) | None)`` ->
    ``(context (B, Dv), weights (B, S))``.
    """

    score = SimpleNamespace(needs_prev=True)  # what AttentionDecoder.start asks

    def __init__(self, query_dim, key_dim, attn_dim, filters=10, kernel=31):
        super().__init__()
        self.w_query = nn.Linear(query_dim, attn_dim)
        self.w_key = nn.Linear(key_dim, attn_dim, bias=False)
        self.conv = nn.Conv1d(1, filters, kernel, padding=kernel // 2, bias=False)
        self.w_loc = nn.Linear(filters, attn_dim, bias=False)
        self.v = nn.Linear(attn_dim, 1, bias=False)

    def prepare(self, keys, values):
        return self.w_key(keys), values  # (B, S, A), (B, S, Dv)

    def forward(self, query, memory, *, key_lengths, need_weights=True, prev_weights=None):
        keys, values = memory
        b, s, _ = keys.shape
        if prev_weights is None:
            prev_weights = keys.new_zeros(b, s)
        f = self.conv(prev_weights[:, None]).transpose(1, 2)  # (B, S, filters)
        pre = self.w_query(query)[:, None] + keys + self.w_loc(f)  # (B, S, A): kept per step
        energy = self.v(torch.tanh(pre)).squeeze(-1)  # (B, S)
        valid = torch.arange(s, device=keys.device)[None] < key_lengths[:, None]
        weights = torch.softmax(energy.masked_fill(~valid, torch.finfo(energy.dtype).min), -1)
        return torch.bmm(weights[:, None], values).squeeze(1), weights  # (B, Dv), (B, S)


def build(level: str, size: int, impl: str):
    """A training step (a function) of one case."""
    torch.manual_seed(0)
    model = LAS(30, features=FEATURES, listener_hidden=128, hidden=256, emb=64,
                key_value_dim=128, score="location")
    if impl == "usual":
        model.speller.attention = UsualLocationAttention(256, 128, 256)
    tgt = torch.randint(4, 30, (BATCH, STEPS))
    if level == "las":
        x, lengths = torch.randn(BATCH, size, FEATURES), torch.full((BATCH,), size)

        def step():
            logits, _ = model(x, lengths, tgt)
            F.cross_entropy(logits.flatten(0, 1), tgt.flatten()).backward()
    else:
        memory = torch.randn(BATCH, size, model.listener.output_dim, requires_grad=True)
        lengths = torch.full((BATCH,), size)

        def step():
            logits, _ = model.speller(memory, lengths, tgt)
            F.cross_entropy(logits.flatten(0, 1), tgt.flatten()).backward()
    return step, model


def worker(level: str, size: int, impl: str) -> dict:
    step, _ = build(level, size, impl)
    _trim()  # no full-size warm-up (it would double the run): both paths pay first calls alike
    with PeakRSS() as mem:
        start = time.perf_counter()
        step()
        seconds = time.perf_counter() - start
    return {"level": level, "size": size, "impl": impl, "train_mb": round(mem.extra_mb, 1),
            "train_s": round(seconds, 2), "status": "ok"}


def run_case(level: str, size: int, impl: str, budget: float) -> dict:
    cmd = [sys.executable, __file__, "--worker", level, str(size), impl]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=budget, check=False)
    except subprocess.TimeoutExpired:
        return {"level": level, "size": size, "impl": impl, "status": f"over {budget:.0f} s"}
    if proc.returncode != 0:
        tail = (proc.stderr.strip().splitlines() or ["?"])[-1]
        return {"level": level, "size": size, "impl": impl, "status": f"error: {tail}"}
    return json.loads(proc.stdout.strip().splitlines()[-1])


def row(r: dict) -> str:
    keys = r["size"] // 8 if r["level"] == "las" else r["size"]
    what = f"{r['size']} frames" if r["level"] == "las" else f"{r['size']} keys"
    if r["status"] != "ok":
        return f"| {r['level']} | {what} | {keys} | {r['impl']} | {r['status']} | |"
    return (f"| {r['level']} | {what} | {keys} | {r['impl']} | {r['train_mb']:.0f} | "
            f"{r['train_s']:.1f} |")


HEADER = ("| level | input | keys attended | attention | train extra MiB | train s |\n"
          "|---|---|---|---|---|---|")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--worker", nargs=3, metavar=("LEVEL", "SIZE", "IMPL"), help=argparse.SUPPRESS)
    p.add_argument("--time-budget", type=float, default=60.0, help="seconds per case")
    p.add_argument("--json", type=Path, default=Path("docs/las_memory.json"))
    args = p.parse_args(argv)
    if args.worker:
        level, size, impl = args.worker
        print(json.dumps(worker(level, int(size), impl)))
        return 0
    print(f"batch {BATCH}, {STEPS} output steps, location-aware attention; {machine()}")
    print(HEADER)
    results = []
    for level, size in CASES:
        for impl in IMPLS:
            results.append(run_case(level, size, impl, args.time_budget))
            print(row(results[-1]), flush=True)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps({"machine": machine(), "batch": BATCH, "steps": STEPS,
                                     "date": time.strftime("%Y-%m-%d"),
                                     "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
