"""What the check for NaN or inf keys costs a call with a causal mask or window.

    python -m benchmarks.nan_checks [--reps 15]

Times, in one process with one thread, the attention call (forward, or forward and backward
for the training cases) and the check it makes of its keys and values
(:func:`attnkit.attention.masks.non_finite_keys`, on finite inputs: one sum over each),
alternately, and prints the medians and their ratio.
"""

from __future__ import annotations

import argparse
import math
import sys

import torch

from attnkit import Attention
from attnkit.attention.masks import non_finite_keys
from benchmarks import harness

# name: (module, input (B, T, D), train)
CASES = {
    "local B=4 T=4096 D=64 window 64, forward (chunked)": (
        lambda: Attention(64, score="scaled_dot", window=(64, 64)),
        (4, 4096, 64),
        False,
    ),
    "SelfAttention-like B=32 T=400 D=256 window 32, train": (
        lambda: Attention(256, score="general", window=(32, 32)),
        (32, 400, 256),
        True,
    ),
    "causal, 4 heads, B=32 T=50 D=256, train": (
        lambda: Attention(256, score="scaled_dot", heads=4, causal=True),
        (32, 50, 256),
        True,
    ),
}


def median_ms(fn, reps: int) -> float:
    timing = harness.timed(fn, reps=reps, time_budget=math.inf, warmup=0, memory=False)
    return 1e3 * timing.median


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reps", type=int, default=15)
    args = p.parse_args(argv)
    torch.set_num_threads(1)
    torch.manual_seed(0)
    for name, (build, shape, train) in CASES.items():
        attn, x = build(), torch.randn(*shape, requires_grad=train)

        def call(attn=attn, x=x, train=train):
            with torch.set_grad_enabled(train):
                out = attn(x, x).context
                if train:
                    out.sum().backward()

        def check(x=x):
            assert non_finite_keys(x, x) is None

        call(), check()  # warm-up
        t_call, t_check = median_ms(call, args.reps), median_ms(check, args.reps)
        print(
            f"{name}: call {t_call:.2f} ms, check {t_check:.3f} ms ({100 * t_check / t_call:.2f}%)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
