"""Accuracy by source length, with and without attention (Bahdanau et al. 2015, Fig. 2).

Trains a Bahdanau model and the no-attention baseline on the same built-in data for the same
time budget, each in a fresh process (:mod:`harness`), then measures held-out exact match per
source-length bucket; writes a table (Markdown, printed), JSON and a plot.

    python -m benchmarks.length_curve --time-budget 200
"""

from __future__ import annotations

import sys
from pathlib import Path

import torch
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from attnkit.data import generate_pairs
from attnkit.tasks.translate import TranslateTask, translate_texts
from attnkit.train import TrainConfig, Trainer
from benchmarks import harness

BUCKETS = [(0, 20), (20, 30), (30, 40), (40, 50), (50, 60), (60, 80), (80, 200)]


def train_and_score(kind: str, n_train: int, n_test: int, time_budget: float, out: str) -> dict:
    """Train ``kind`` for ``time_budget`` seconds, then its exact match per length bucket."""
    train = generate_pairs(n_train, split="train", tasks=("numbers",))
    test = generate_pairs(n_test, split="test", tasks=("numbers",))
    torch.manual_seed(0)
    task = TranslateTask(
        train, test[:300], model_config=dict(kind=kind, emb=64, hidden=128), batch_size=64
    )
    model = task.build_model()
    cfg = TrainConfig(
        max_steps=10**6,
        lr=3e-3,
        warmup_steps=100,
        eval_every=10**6,
        checkpoint_every=10**6,
        time_budget_s=time_budget,
        progress=False,
    )
    result = Trainer(model, task, cfg, Path(out) / kind).fit()
    outs, _ = translate_texts(
        model,
        task.src_vocab,
        task.tgt_vocab,
        [s for s, _ in test],
        max_len_extra=task.max_len_extra,
    )
    rows = {}
    for lo, hi in BUCKETS:
        hits = [o == t for (s, t), o in zip(test, outs) if lo <= len(s) < hi]
        if hits:
            rows[f"{lo}-{hi - 1}"] = {"n": len(hits), "accuracy": sum(hits) / len(hits)}
    return {
        "kind": kind,
        "steps": result.step,
        "buckets": rows,
        "overall": sum(o == t for (_, t), o in zip(test, outs)) / len(test),
    }


def main(argv=None) -> int:
    p = harness.parser(
        __doc__.splitlines()[0],
        time_budget=200.0,
        json_path="results/length_curve.json",
        time_budget_help="training seconds per model",
    )
    p.add_argument(
        "--plot",
        type=Path,
        default=Path("docs/img/length_curve.png"),
        help="the plot (default docs/img/length_curve.png, docs/translation.md's)",
    )
    p.add_argument("--n-train", type=int, default=20000)
    p.add_argument("--n-test", type=int, default=2000)
    args = p.parse_args(argv)
    results = []
    for kind in ("bahdanau", "none"):
        if args.match is not None and args.match not in kind:
            continue
        row = harness.run(
            train_and_score,
            {
                "kind": kind,
                "n_train": args.n_train,
                "n_test": args.n_test,
                "time_budget": args.time_budget,
                "out": "/tmp/attnkit-length-curve",
            },
            time_budget=None,
            threads=args.threads,
        )
        if row["status"] != "ok":
            raise SystemExit(f"length_curve: {kind}: {row['status']}: {row['note']}")
        results.append(row)
    print(harness.table_header(["source length (chars)", "n", *(r["kind"] for r in results)]))
    for bucket in results[0]["buckets"]:
        n = results[0]["buckets"][bucket]["n"]
        print(
            harness.table_row(
                [bucket, n, *(f"{r['buckets'][bucket]['accuracy']:.3f}" for r in results)]
            )
        )
    print(
        harness.table_row(
            ["all", args.n_test, *(f"{r['overall']:.3f} ({r['steps']} steps)" for r in results)]
        )
    )
    harness.write_json(args.json, results, time_budget_s=args.time_budget, n_train=args.n_train)
    fig = Figure(figsize=(6, 4))
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    for r in results:
        labels = list(r["buckets"])
        ax.plot(
            range(len(labels)),
            [r["buckets"][b]["accuracy"] for b in labels],
            marker="o",
            label="with attention (Bahdanau)" if r["kind"] == "bahdanau" else "no attention",
        )
    ax.set_xticks(range(len(labels)))
    ax.set_xticklabels(labels)
    ax.set_xlabel("source length (characters)")
    ax.set_ylabel("held-out exact match")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"numbers -> digits, {args.time_budget:.0f} s of CPU training each")
    ax.legend()
    fig.tight_layout()
    args.plot.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.plot, dpi=110)
    return 0


if __name__ == "__main__":
    sys.exit(main())
