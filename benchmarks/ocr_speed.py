"""A CRNN text recogniser over ~800 steps (:class:`plain.PlainCRNN`): what the attention layer
between RNN1 and RNN2 costs.

    python -m benchmarks.ocr_speed --json results/ocr_speed.json

Batch 32 of line images 1600 px wide (800 steps after the CNN; ``--batch``, ``--width``),
BiLSTMs of hidden 256, a CTC loss: one training step (forward, backward) of the CRNN without
attention, and with the same attention layer (general score ``x_t W x_s^T``, output
``tanh(W_c [x_t; c_t])``) written four ways: attnkit ``SelfAttention`` over the whole line
and over a window of 32 steps each side, a per-step Python loop over the 800
steps and the full ``(B, T, T)`` matrix through autograd. Each case runs in a
fresh process (:mod:`harness`); time is the median of the steps after one warm-up, memory the
peak resident memory during them minus that before them.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from attnkit.attention import SelfAttention
from attnkit.models import CRNN
from benchmarks import harness
from benchmarks.plain import LoopAttention, MatrixAttention

CASES = ("none", "attnkit-global", "attnkit-window32", "loop (per step)", "matrix (B, T, T)")
B, WIDTH, HIDDEN, VOCAB = 32, 1600, 256, 100


def build(case: str) -> CRNN:
    torch.manual_seed(0)
    model = CRNN(VOCAB, hidden=HIDDEN, dropout=0.0)
    d = 2 * HIDDEN
    if case == "attnkit-global":
        model.attention = SelfAttention(d, score="general")
    elif case == "attnkit-window32":
        model.attention = SelfAttention(d, score="general", window=(32, 32))
    elif case.startswith("loop"):
        model.attention = LoopAttention(d)
    elif case.startswith("matrix"):
        model.attention = MatrixAttention(d)
    return model


def measure(case: str, reps: int, time_budget: float, batch: int = B, width: int = WIDTH) -> dict:
    """One case in this process (the fresh process of :func:`harness.run`)."""
    torch.manual_seed(0)
    model = build(case)
    images = torch.rand(batch, 1, 32, width)
    widths = torch.randint(width // 2, width + 1, (batch,))
    widths[0] = width
    chars = min(60, width // 8)  # CTC needs more steps than characters
    targets = torch.randint(4, VOCAB, (batch, chars))
    target_lengths = torch.full((batch,), chars)

    def step():
        log_probs, steps = model(images, widths)
        loss = F.ctc_loss(log_probs.transpose(0, 1), targets, steps, target_lengths)
        model.zero_grad(set_to_none=True)
        loss.backward()

    timing = harness.timed(step, reps=reps, time_budget=time_budget / 2)
    return {"step_s": timing.median, "reps": len(timing.times), "extra_mib": timing.extra_mb}


def main(argv=None) -> int:
    p = harness.parser(__doc__.split("\n\n")[0], time_budget=600.0, reps=3)
    p.add_argument("--batch", type=int, default=B, help=f"lines per batch (default {B})")
    p.add_argument(
        "--width",
        type=int,
        default=WIDTH,
        help=f"line width in pixels, half as many steps (default {WIDTH})",
    )
    args = p.parse_args(argv)
    rows = []
    for case in CASES:
        if args.match is not None and args.match not in case:
            continue
        rows.append(
            {
                "case": case,
                **harness.run(
                    measure,
                    {
                        "case": case,
                        "reps": args.reps,
                        "time_budget": args.time_budget,
                        "batch": args.batch,
                        "width": args.width,
                    },
                    time_budget=args.time_budget,
                    threads=args.threads,
                ),
            }
        )
        print(f"done: {rows[-1]}", file=sys.stderr)
    base = next((r["step_s"] for r in rows if r["case"] == "none" and r["status"] == "ok"), None)
    print(
        f"CRNN B={args.batch}, {args.width} px -> {args.width // 2} steps, hidden {HIDDEN}, "
        "CTC; one training step (forward + backward)\n"
    )
    print(
        harness.table_header(
            ["attention between RNN1 and RNN2", "step (s)", "x CRNN without", "extra MiB", "steps"]
        )
    )
    for r in rows:
        if r["status"] != "ok":
            print(harness.table_row([r["case"], f"{r['status']}: {r['note']}", "", "", ""]))
            continue
        ratio = f"{r['step_s'] / base:.2f}" if base else ""
        print(
            harness.table_row(
                [r["case"], f"{r['step_s']:.2f}", ratio, f"{r['extra_mib']:.0f}", r["reps"]]
            )
        )
    if args.json:
        harness.write_json(args.json, rows, batch=args.batch, width=args.width, hidden=HIDDEN)
    return 0


if __name__ == "__main__":
    sys.exit(main())
