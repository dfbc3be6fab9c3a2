"""``attnkit demo``: a short tour of the attention API on built-in data, and of the built-in
models on inputs generated on the spot."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnkit.cli.common import SubParsers

import argparse
import shlex
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import torch

from attnkit import SCORES, Attention, SelfAttention, plot_attention
from attnkit.cli.common import Interrupted
from attnkit.data import (
    generate_lines,
    generate_pairs,
    plan_utterances,
    synthesize,
    write_line_folder,
    write_wav,
)
from attnkit.tasks.translate import TranslateTask, plot_translation
from attnkit.train import TrainConfig, Trainer


def add_parser(sub: SubParsers) -> None:
    p = sub.add_parser(
        "demo",
        help="a tour of the attention API and a translator trained in "
        "a few minutes on built-in data",
    )
    p.add_argument(
        "--out",
        type=Path,
        default=Path("demo-out"),
        help="folder for the heat-maps (default demo-out)",
    )
    p.add_argument("--seed", type=int, default=0)
    p.add_argument(
        "--time-budget",
        type=float,
        default=150.0,
        help="seconds of translation training (default 150)",
    )
    p.add_argument("--n-train", type=int, default=20000, help="built-in training pairs")
    p.set_defaults(run=run)


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


def translation(out_dir: Path, budget_s: float, n_train: int, seed: int) -> list[Path]:
    """Train a small Bahdanau translator on built-in numbers and dates for ``budget_s``."""
    train = generate_pairs(n_train, split="train", seed=seed)
    valid = generate_pairs(300, split="valid", seed=seed)
    task = TranslateTask(
        train,
        valid,
        model_config=dict(kind="bahdanau", emb=64, hidden=128),
        batch_size=64,
        seed=seed,
    )
    model = task.build_model()
    cfg = TrainConfig(
        max_steps=10**6,
        lr=3e-3,
        warmup_steps=100,
        eval_every=10**6,
        checkpoint_every=10**6,
        time_budget_s=budget_s,
        seed=seed,
        progress=True,
    )
    print(
        f"2. Bahdanau seq2seq on built-in numbers and dates ({len(train)} training pairs, "
        f"{budget_s:.0f} s of training on this CPU)"
    )
    # Task types the model as any nn.Module; TranslateTask takes its own (common.ModelTask).
    result = Trainer(model, task, cfg, out_dir / "translate").fit()  # type: ignore[arg-type]
    if result.stopped == "signal":  # Ctrl-C (or SIGTERM, SIGHUP) ends the demo, not the training
        signum = result.signal or signal.SIGTERM
        raise Interrupted(
            signum,
            f"stopped by {signal.Signals(signum).name} after "
            f"{result.step} steps of the demo's training",
        )
    scores = task.evaluate(model)
    print(
        f"   after {result.step} steps, held-out ({len(valid)} unseen pairs): exact match "
        f"{scores['accuracy']:.1%}, character error rate {scores['cer']:.2%}"
    )
    sources = [s for s, _ in valid[:6]]
    outs, raws = task.translate(model, sources, weights=True)
    for (s, t), o in zip(valid, outs):
        print(f"   {s}  ->  {o}" + ("" if o == t else f"   (reference: {t})"))
    return [
        plot_translation(
            raws[0], i, sources[i], task.src_vocab, task.tgt_vocab, out_dir / f"translation_{i}.png"
        )
        for i in range(2)
    ]


def long_sequence(out_dir: Path) -> Path:
    b, t, d = 8, 800, 256
    layer = SelfAttention(d, window=(64, 64))
    x = torch.randn(b, t, d, requires_grad=True)
    lengths = torch.randint(t // 2, t + 1, (b,))
    start = time.perf_counter()
    layer(x, lengths).sum().backward()
    took = time.perf_counter() - start
    plan = layer.attention.plan(x, x)
    print(
        f"3. SelfAttention between two RNNs, B={b}, T={t}, D={d}, window (64, 64): "
        f"forward+backward {took:.2f} s; path {plan.impl} ({plan.reason})"
    )
    with torch.no_grad():
        _, w = layer.with_weights(x[:1, :120], lengths=None)
    return plot_attention(
        w[0],
        None,
        None,
        out_dir / "self_attention_window.png",
        title="self-attention with a (64, 64) window, first 120 steps",
        x_title="step (keys)",
        y_title="step (queries)",
    )


def _command(argv: list[str | Path], truths: list[str]) -> None:
    """Run ``attnkit ARGV`` in a new process, as a user would, and print each output line
    beside what it should be."""
    print("   $ attnkit " + shlex.join(map(str, argv)))
    proc = subprocess.run(
        [sys.executable, "-m", "attnkit.cli.main", *map(str, argv)],
        capture_output=True,
        text=True,
        check=False,
    )
    if proc.returncode != 0:
        print(f"   failed (exit {proc.returncode}): {proc.stderr.strip()}")
        return
    for out, truth in zip(proc.stdout.splitlines(), truths):
        print(f"   {out}" + ("   (exact)" if out == truth else f"   (truth: {truth})"))


def builtin_models(out_dir: Path, seed: int) -> None:
    """``attnkit translate``, ``read`` and ``transcribe`` with the shipped models
    (docs/models.md) on held-out pairs, and on text lines rendered and speech synthesised now
    in fonts and voices held out of their training."""
    print(
        "4. The built-in models on held-out inputs made now (fonts and voices they were not "
        "trained on)"
    )
    pairs = generate_pairs(3, split="valid", seed=seed + 1)
    _command(
        ["translate", "--checkpoint", "builtin:translate-dates", *[s for s, _ in pairs]],
        [t for _, t in pairs],
    )
    lines = generate_lines(3, split="valid", seed=seed + 1, min_chars=10, max_chars=40)
    write_line_folder(lines, out_dir / "lines")
    _command(
        ["read", "--checkpoint", "builtin:ocr-lines", *sorted((out_dir / "lines").glob("*.png"))],
        [text for _, text in lines],
    )
    if shutil.which("espeak-ng") is None:
        print("   (espeak-ng is not installed: no speech to transcribe; apt-get install espeak-ng)")
        return
    (out_dir / "speech").mkdir(parents=True, exist_ok=True)
    plan = plan_utterances(3, split="valid", seed=seed + 1, kinds=("digits", "numbers"))
    wavs = [
        write_wav(
            out_dir / "speech" / f"{i}.wav",
            *synthesize(u.transcript, voice=u.voice, speed=u.speed, pitch=u.pitch),
        )
        for i, u in enumerate(plan)
    ]
    _command(
        ["transcribe", "--checkpoint", "builtin:asr-digits", *wavs], [u.transcript for u in plan]
    )


def run(args: argparse.Namespace) -> int:
    torch.manual_seed(args.seed)
    out_dir = Path(args.out)
    tour_scores()
    paths = translation(out_dir, args.time_budget, args.n_train, args.seed)
    paths.append(long_sequence(out_dir))
    for p in paths:
        print(f"   wrote {p}")
    builtin_models(out_dir, args.seed)
    return 0
