"""Training-step time of attnkit's additive-attention decoders in three modes: plain PyTorch
(``ATTNKIT_COMPILE=0``), the default (decoder steps on the C++ step kernel), and the default
after ``attnkit.ops.kernels.warm_up()`` (the Inductor kernels compiled ahead, as
``attnkit train`` does for long runs).

Each (model, mode) runs in a fresh process (:mod:`harness`): two warm-up steps, then the median
of the timed ones (an AdamW step included). Models: the Bahdanau translator at the CLI's default
size on sentence-length inputs, the CRNN's attention-decoder head on 800 px lines (400 encoder
steps, 40 characters), and LAS with the location-aware score on 8 s of audio (800 frames, 100
listener steps, 60 characters).

    python -m benchmarks.decoder_training --json results/decoder_training.json
"""

from __future__ import annotations

import sys
import time

import torch

from benchmarks import harness


def build(name: str):
    """Model, a training step's inputs, and the vocabulary size."""
    torch.manual_seed(0)
    if name == "bahdanau":
        from attnkit.models import Seq2Seq

        v, b, s, t = 60, 64, 30, 30
        model = Seq2Seq(v, v, kind="bahdanau", emb=64, hidden=128)
        src = torch.randint(4, v, (b, s))
        src_len = torch.randint(s // 2, s + 1, (b,))
        src_len[0] = s
        tgt = torch.randint(4, v, (b, t + 1))
        return model, (src, src_len, tgt[:, :-1]), tgt[:, 1:], v
    if name == "las-location":
        from attnkit.models import LAS

        v, b, frames, u = 30, 16, 800, 60
        model = LAS(v, score="location", listener_hidden=128, hidden=256)
        tgt = torch.randint(4, v, (b, u + 1))
        return (
            model,
            (torch.randn(b, frames, 80), torch.full((b,), frames), tgt[:, :-1]),
            tgt[:, 1:],
            v,
        )
    from attnkit.models import CRNN

    v, b, w, t = 80, 32, 800, 40
    model = CRNN(v, head="attention", attention=None, hidden=128)
    tgt = torch.randint(4, v, (b, t + 1))
    return model, (torch.randn(b, 1, 32, w), torch.full((b,), w), tgt[:, :-1]), tgt[:, 1:], v


MODES = ("plain", "default", "warm")
MODELS = ("bahdanau", "crnn-attention-head", "las-location")


def measure(name: str, mode: str, steps: int, time_budget: float) -> dict:
    """One (model, mode) in this process (the fresh process of :func:`harness.run`)."""
    from attnkit.ops import kernels

    compile_s = 0.0
    if mode == "warm":
        start = time.perf_counter()
        kernels.warm_up()
        compile_s = time.perf_counter() - start
    model, inputs, target, v = build(name)
    opt = torch.optim.AdamW(model.parameters(), 1e-3)

    def step():
        logits = model(*inputs)[0]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, v), target.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()

    timing = harness.timed(step, reps=steps, time_budget=time_budget / 2, warmup=2)
    return {
        "model": name,
        "mode": mode,
        "step_s": timing.median,
        "train_mb": timing.extra_mb,
        "steps": len(timing.times),
        "compile_s": compile_s,
        "threads": torch.get_num_threads(),
    }


def main(argv=None) -> int:
    p = harness.parser(__doc__.split("\n\n")[0], time_budget=600.0)
    p.add_argument("--steps", type=int, default=9, help="timed steps per case")
    args = p.parse_args(argv)
    rows = {}
    for name in MODELS:
        for mode in MODES:
            if args.match is not None and args.match not in f"{name} {mode}":
                continue
            env = {"ATTNKIT_COMPILE": "0"} if mode == "plain" else None
            rows[name, mode] = {
                "model": name,
                "mode": mode,
                **harness.run(
                    measure,
                    {
                        "name": name,
                        "mode": mode,
                        "steps": args.steps,
                        "time_budget": args.time_budget,
                    },
                    time_budget=args.time_budget,
                    env=env,
                    threads=args.threads,
                ),
            }
    print(
        harness.table_header(
            [
                "model",
                "plain PyTorch step s",
                "default step s",
                "after warm_up() step s",
                "compile s",
            ]
        )
    )
    for name in MODELS:
        plain, default, warm = (rows.get((name, mode), {}) for mode in MODES)
        if not (plain or default or warm):
            continue
        print(
            harness.table_row(
                [
                    name,
                    _step(plain),
                    _step(default, plain),
                    _step(warm, plain),
                    f"{warm['compile_s']:.1f}" if "compile_s" in warm else "",
                ]
            )
        )
    if args.json:
        harness.write_json(args.json, list(rows.values()), steps=args.steps)
    return 0


def _step(row: dict, plain: dict | None = None) -> str:
    """A row's step time, with its ratio to plain PyTorch's; or why it has none."""
    if row.get("status") != "ok":
        return f"{row['status']}: {row['note']}" if row else ""
    ratio = (
        f" ({row['step_s'] / plain['step_s']:.2f}x)"
        if plain and plain.get("status") == "ok"
        else ""
    )
    return f"{row['step_s']:.3f}{ratio}"


if __name__ == "__main__":
    sys.exit(main())
