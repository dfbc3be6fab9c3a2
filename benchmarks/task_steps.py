"""One training step of each built-in task's default model, on a batch of its usual shape.

The time to reach a task's target is its number of steps (fixed for a seed: the training curve
does not depend on the speed) times the time of a step, so this is what a speed change does to
the time to quality. Each task runs in a fresh process (:mod:`harness`); the figure is the CPU
time of one step (forward + backward + AdamW), the minimum over ``--reps`` after two warm-up
steps: CPU time, unlike wall time, does not count the time other processes hold the cores.

    python -m benchmarks.task_steps --threads 1
    PYTHONPATH=<another checkout>/src python -m benchmarks.task_steps --threads 1   # compare
    python -m benchmarks.task_steps --threads 1 --precision bf16      # bfloat16 autocast
    python -m benchmarks.task_steps --threads 1 --match multi30k --interleave  # unlikelihood

The ``multi30k`` rows are ``--recipe multi30k-en-de``'s Transformer on a batch of its shape
(128 pairs of up to 16 source and 17 target pieces, a shared vocabulary of 8,000, label
smoothing 0.1): cross-entropy alone; with the unlikelihood loss computing its own
log-normaliser (``token_unlikelihood(logits, ...)``); and with both losses reading one
log-softmax, as ``--unlikelihood`` trains (:mod:`attnkit.train.losses`).
"""

from __future__ import annotations

import math
import sys
import time

import torch
import torch.nn.functional as F

from attnkit.models import CRNN, LAS, Seq2Seq, Transformer
from attnkit.train import cross_entropy_and_unlikelihood, token_unlikelihood
from benchmarks import harness

MULTI30K = ("multi30k", "multi30k+unlikelihood-own-normaliser", "multi30k+unlikelihood")
TASKS = ("translate", "asr", "ocr", *MULTI30K)


def _lengths(gen: torch.Generator, b: int, n: int) -> torch.Tensor:
    out = torch.randint(n // 2, n + 1, (b,), generator=gen)
    out[0] = n
    return out


def _multi30k_loss(task: str, gen: torch.Generator):
    """--recipe multi30k-en-de's model and one batch's loss (see the module docstring)."""
    model = Transformer(
        8000, 8000, d_model=256, heads=4, layers=3, ff=1024, dropout=0.2, shared_embeddings=True
    )
    b, s, t = 128, 16, 17
    src_len = _lengths(gen, b, s)
    src = torch.randint(4, 8000, (b, s), generator=gen) * (torch.arange(s) < src_len[:, None])
    tgt_len = _lengths(gen, b, t)
    tgt = torch.randint(4, 8000, (b, t + 1), generator=gen) * (
        torch.arange(t + 1) <= tgt_len[:, None]
    )

    def loss():
        logits, target = model(src, src_len, tgt[:, :-1])[0], tgt[:, 1:]
        tokens = int((target != 0).sum())
        if task == "multi30k+unlikelihood":
            ce, ul = cross_entropy_and_unlikelihood(logits, target, 0, 0.1)
            return ce + ul / tokens
        ce = F.cross_entropy(
            logits.flatten(0, 1), target.flatten(), ignore_index=0, label_smoothing=0.1
        )
        return ce + token_unlikelihood(logits, target, 0) / tokens if "+" in task else ce

    return model, loss


def _loss_of(task: str, gen: torch.Generator):
    """The task's default model and the loss of one batch of its usual shape."""
    if task in MULTI30K:
        return _multi30k_loss(task, gen)
    if task == "translate":  # `attnkit train translate` defaults; numbers/dates lengths
        model = Seq2Seq(60, 15, kind="bahdanau", emb=64, hidden=128)
        b, s, t = 64, 25, 12
        src_len = _lengths(gen, b, s)
        src = torch.randint(4, 60, (b, s), generator=gen) * (torch.arange(s) < src_len[:, None])
        tgt = torch.randint(4, 15, (b, t + 1), generator=gen)
        return model, lambda: F.cross_entropy(
            model(src, src_len, tgt[:, :-1])[0].flatten(0, 1), tgt[:, 1:].flatten()
        )
    if task == "asr":  # `attnkit train asr` defaults; digits/numbers utterance lengths
        model = LAS(
            30,
            features=80,
            listener_hidden=128,
            hidden=256,
            emb=64,
            key_value_dim=128,
            score="location",
        )
        b, frames, u = 32, 200, 20
        lengths = _lengths(gen, b, frames)
        features = torch.randn(b, frames, 80, generator=gen)
        tgt = torch.randint(4, 30, (b, u + 1), generator=gen)
        return model, lambda: F.cross_entropy(
            model(features, lengths, tgt[:, :-1])[0].flatten(0, 1), tgt[:, 1:].flatten()
        )
    model = CRNN(100, hidden=128, attention="window", window=32)  # `attnkit train ocr` defaults
    b, w = 32, 600
    widths, images = _lengths(gen, b, w), torch.rand(b, 1, 32, w, generator=gen)
    chars = _lengths(gen, b, w // 25)
    targets = torch.randint(4, 100, (b, w // 25), generator=gen)

    def ctc():
        log_probs, steps = model(images, widths)  # (B, T, V), (B,)
        return F.ctc_loss(log_probs.transpose(0, 1), targets, steps, chars, zero_infinity=True)

    return model, ctc


def _step(task: str, precision: str):
    """One training step of ``task``'s model (forward, backward, AdamW), as a function;
    ``precision`` "bf16": the forward under bfloat16 autocast, as ``--precision bf16`` trains."""
    torch.manual_seed(0)
    model, loss_of = _loss_of(task, torch.Generator().manual_seed(0))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            loss = loss_of()
        loss.backward()
        opt.step()

    return step


def step_cpu_time(task: str, reps: int, precision: str = "fp32") -> dict:
    """In a fresh process: the minimum CPU time of a training step of ``task``'s model."""
    timing = harness.timed(
        _step(task, precision),
        reps=reps,
        time_budget=math.inf,
        warmup=2,
        memory=False,
        clock=time.process_time,
    )
    return {
        "step_cpu_s": min(timing.times),
        "times": timing.times,
        "threads": torch.get_num_threads(),
    }


def interleaved_cpu_times(tasks: list[str], reps: int, precision: str = "fp32") -> dict:
    """In one fresh process, the steps of ``tasks`` taken in turn ``reps`` times (after two
    warm-up rounds): the CPU time of each, so that what else runs on the machine weighs on
    all alike (``--interleave``, to compare variants on a busy machine)."""
    steps = [_step(task, precision) for task in tasks]
    times: list[list[float]] = [[] for _ in tasks]
    for rep in range(reps + 2):
        for step, kept in zip(steps, times):
            start = time.process_time()
            step()
            if rep >= 2:
                kept.append(time.process_time() - start)
    return {
        task: {"step_cpu_s": min(t), "times": t, "threads": torch.get_num_threads()}
        for task, t in zip(tasks, times)
    }


def main(argv=None) -> int:
    p = harness.parser(__doc__.split("\n\n")[0], time_budget=600.0, reps=8)
    p.add_argument("--precision", choices=("fp32", "bf16"), default="fp32")
    p.add_argument(
        "--interleave",
        action="store_true",
        help="time the tasks' steps in turn in one process (compare variants on a busy machine)",
    )
    args = p.parse_args(argv)
    rows = []
    print(harness.table_header(["task", "step CPU s (min)", "threads"]))
    tasks = [TASKS[i] for i in harness.select(list(TASKS), args.match)]
    together = {}
    if args.interleave:
        together = harness.run(
            interleaved_cpu_times,
            {"tasks": tasks, "reps": args.reps, "precision": args.precision},
            time_budget=args.time_budget,
            threads=args.threads,
        )
    for task in tasks:
        if args.interleave:
            failed = {k: v for k, v in together.items() if k in ("status", "note")}
            out = {**failed, **together.get(task, {})}
        else:
            out = harness.run(
                step_cpu_time,
                {"task": task, "reps": args.reps, "precision": args.precision},
                time_budget=args.time_budget,
                threads=args.threads,
            )
        rows.append({"task": task, **out})
        cells = (
            [f"{out['step_cpu_s']:.4f}", out["threads"]]
            if out["status"] == "ok"
            else [out["status"], out.get("note", "")]
        )
        print(harness.table_row([task, *cells]))
    if args.json:
        harness.write_json(
            args.json, rows, reps=args.reps, precision=args.precision, interleave=args.interleave
        )
    print(f"\n{harness.machine()}, commit {harness.commit()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
