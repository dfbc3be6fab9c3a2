"""Whole models: attnkit's against the plain PyTorch model a user writes, one training step.

For each model family and shape, attnkit's model and the plain one (:mod:`plain`: from the
paper or a tutorial, same sizes, same seeded data) each run in a fresh process
(:mod:`harness`): one training step is forward + backward + an Adam step; after one warm-up
step (which also allocates Adam's state) the median of ``--reps`` steps and the peak extra
resident memory during them are reported, with the ratios attnkit / plain.

* ``bahdanau``: ``Seq2Seq(kind="bahdanau")`` vs the tutorial's model
  (:class:`plain.TutorialBahdanau`); V=100, E=H=256, masked cross-entropy; shapes (B, S, T).
* ``luong``: ``Seq2Seq(kind="luong", score="general", input_feeding=True)`` vs the per-step
  loop (:class:`plain.PlainLuong`); same sizes and shapes.
* ``las``: ``LAS(score="location")`` at its default sizes vs a packed pyramidal BLSTM and a
  per-step location-aware speller (:class:`plain.PlainLAS`); shapes (B, T frames, U characters).
* ``transformer``: ``Transformer`` (d_model 256, 4 heads, 3 + 3 layers, feed-forward 1024, no
  dropout) vs ``nn.Transformer`` with the same sizes and parameters
  (:class:`plain.PlainTransformer`); masked cross-entropy; shapes (B, S, T).
* ``crnn``: ``CRNN(attention="global" | "window", score="general")`` with the CTC loss vs seed
  000's CRNN with the full ``(B, T, T)`` attention matrix (:class:`plain.PlainCRNN`); hidden 256,
  shapes (B, W pixels), ``T = W // 2`` steps.

Source, frame and line lengths are random between half and all of the padded length (the first
example full), target lengths likewise; token ids in ``[4, V)``.

    python -m benchmarks.models_vs_plain --json results/models_vs_plain.json
    python -m benchmarks.models_vs_plain --smoke   # every row on tiny shapes: does it run
    python -m benchmarks.models_vs_plain --match bahdanau --device cuda   # on a GPU

On a GPU (``--device cuda``) the extra memory is the peak of CUDA's allocator, not the
resident memory, and no row is skipped for the host's free memory.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from attnkit.models import CRNN, LAS, Seq2Seq, Transformer
from benchmarks import harness, plain

V_TEXT, E, H = 100, 256, 256
V_CHARS, FEATURES = 30, 80
LAS_SIZES = dict(listener_hidden=256, hidden=256, emb=64, key_value_dim=128)
CRNN_HIDDEN = 256

# family -> (shape names, shapes, smoke shape, implementations)
FAMILIES = {
    "bahdanau": (
        ("B", "S", "T"),
        [(64, 60, 20), (32, 200, 50), (32, 400, 100)],
        (2, 6, 4),
        ("plain", "attnkit"),
    ),
    "luong": (
        ("B", "S", "T"),
        [(64, 60, 20), (32, 200, 50), (32, 400, 100)],
        (2, 6, 4),
        ("plain", "attnkit"),
    ),
    "las": (
        ("B", "T", "U"),
        [(32, 400, 50), (16, 800, 100), (16, 1600, 150)],
        (2, 32, 4),
        ("plain", "attnkit"),
    ),
    "crnn": (
        ("B", "W"),
        [(32, 400), (32, 800), (32, 1600)],
        (2, 64),
        ("plain", "attnkit-global", "attnkit-window"),
    ),
    "transformer": (
        ("B", "S", "T"),
        [(64, 40, 40), (32, 200, 50), (32, 400, 100)],
        (2, 6, 4),
        ("plain", "attnkit"),
    ),
}
TRANSFORMER = dict(d_model=256, heads=4, layers=3, ff=1024, dropout=0.0)


def lengths(gen: torch.Generator, b: int, n: int) -> torch.Tensor:
    """``(B,)`` lengths between ``n // 2`` and ``n``, the first ``n``."""
    out = torch.randint(max(1, n // 2), n + 1, (b,), generator=gen)
    out[0] = n
    return out


def tokens(gen: torch.Generator, lens: torch.Tensor, n: int, vocab: int) -> torch.Tensor:
    """``(B, n)`` ids in ``[4, vocab)``, 0 past each length."""
    ids = torch.randint(4, vocab, (lens.shape[0], n), generator=gen)
    return ids * (torch.arange(n) < lens[:, None])


def teacher_forced(gen: torch.Generator, b: int, t: int, vocab: int):
    """``tgt_in`` (BOS = 1, then the target) and ``tgt_out`` (0 = padding), ``(B, T)`` each."""
    n = lengths(gen, b, t)
    out = tokens(gen, n, t, vocab)
    return torch.cat([torch.ones(b, 1, dtype=torch.long), out[:, :-1]], 1), out


def build(family: str, impl: str, shape: tuple, device: torch.device | str = "cpu"):
    """The model and a function of it giving the loss of one batch (seeded data, drawn on
    the CPU and moved to ``device``, the same on every device); the model is built on the
    CPU (move it to ``device``)."""
    gen = torch.Generator().manual_seed(1)
    torch.manual_seed(0)

    def on(*tensors):
        return (x.to(device) for x in tensors)

    if family in ("bahdanau", "luong", "transformer"):
        b, s, t = shape
        src_len = lengths(gen, b, s)
        src = tokens(gen, src_len, s, V_TEXT)
        tgt_in, tgt_out = teacher_forced(gen, b, t, V_TEXT)
        src_len, src, tgt_in, tgt_out = on(src_len, src, tgt_in, tgt_out)
        if family == "transformer":
            model = (
                Transformer(V_TEXT, V_TEXT, **TRANSFORMER)
                if impl == "attnkit"
                else plain.PlainTransformer(V_TEXT, V_TEXT, **TRANSFORMER)
            )

            def logits_of(m):
                out = m(src, src_len, tgt_in)
                return out[0] if impl == "attnkit" else out
        elif impl == "attnkit":
            extra = {"score": "general", "input_feeding": True} if family == "luong" else {}
            model = Seq2Seq(V_TEXT, V_TEXT, kind=family, emb=E, hidden=H, **extra)

            def logits_of(m):
                return m(src, src_len, tgt_in)[0]
        elif family == "bahdanau":
            model = plain.TutorialBahdanau(V_TEXT, V_TEXT, emb=E, hidden=H)

            def logits_of(m):
                return m(src, tgt_in)  # the tutorial's model takes no lengths
        else:
            model = plain.PlainLuong(V_TEXT, V_TEXT, emb=E, hidden=H)

            def logits_of(m):
                return m(src, src_len, tgt_in)

        return model, lambda m: F.cross_entropy(
            logits_of(m).flatten(0, 1), tgt_out.flatten(), ignore_index=0
        )
    if family == "las":
        b, t, u = shape
        frames = lengths(gen, b, t)
        features = torch.randn(b, t, FEATURES, generator=gen)
        tgt_in, tgt_out = teacher_forced(gen, b, u, V_CHARS)
        frames, features, tgt_in, tgt_out = on(frames, features, tgt_in, tgt_out)
        if impl == "attnkit":
            model = LAS(V_CHARS, features=FEATURES, score="location", **LAS_SIZES)

            def logits_of(m):
                return m(features, frames, tgt_in)[0]
        else:
            model = plain.PlainLAS(V_CHARS, features=FEATURES, **LAS_SIZES)

            def logits_of(m):
                return m(features, frames, tgt_in)

        return model, lambda m: F.cross_entropy(
            logits_of(m).flatten(0, 1), tgt_out.flatten(), ignore_index=0
        )
    b, w = shape
    widths = lengths(gen, b, w)
    images = torch.rand(b, 1, 32, w, generator=gen)
    chars = lengths(gen, b, w // 25)
    targets = tokens(gen, chars, w // 25, V_TEXT)
    widths, images, chars, targets = on(widths, images, chars, targets)
    if impl == "plain":
        model = plain.PlainCRNN(V_TEXT, hidden=CRNN_HIDDEN)
    else:
        model = CRNN(
            V_TEXT, hidden=CRNN_HIDDEN, attention=impl.split("-")[1], score="general", dropout=0.0
        )

    def ctc(m):
        log_probs, steps = m(images, widths)  # (B, T, V), (B,)
        return F.ctc_loss(log_probs.transpose(0, 1), targets, steps, chars)

    return model, ctc


def estimate_bytes(family: str, impl: str, shape: tuple) -> int:
    """Rough peak memory of a plain model's training step (float32), to skip hopeless rows:
    the per-step tensors autograd keeps."""
    if impl != "plain":
        return 0
    if family == "bahdanau":  # per step: (B, S) rows of [s; h] (3H), energy and tanh (2H)
        b, s, t = shape
        return 4 * b * s * t * 5 * H
    if family == "las":  # per step: (B, T/8) rows of the location features and three (.., A)
        b, t, u = shape
        return 4 * b * (t // 8) * u * (10 + 3 * LAS_SIZES["hidden"])
    if family == "crnn":  # the (B, T, T) scores, masked, softmax and their gradients
        b, w = shape
        return 4 * 5 * b * (w // 2) ** 2
    return 0


def measure(
    family: str, impl: str, shape: list, reps: int, time_budget: float, device: str = "cpu"
) -> dict:
    """One row in this process (the fresh process of :func:`harness.run`), on ``device``."""
    model, loss_of = build(family, impl, tuple(shape), device)
    model.to(device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def step():
        opt.zero_grad(set_to_none=True)
        loss_of(model).backward()
        opt.step()

    timing = harness.timed(step, reps=reps, time_budget=time_budget / 2, device=device)
    return {
        "step_s": timing.median,
        "train_mb": timing.extra_mb,
        "memory": timing.memory,
        "times": timing.times,
        "params": sum(p.numel() for p in model.parameters()),
        "threads": torch.get_num_threads(),
    }


def rows_of(smoke: bool) -> list[dict]:
    """Every (family, shape, implementation), named for ``--match``."""
    rows = []
    for family, (names, shapes, tiny, impls) in FAMILIES.items():
        for shape in [tiny] if smoke else shapes:
            label = " ".join(f"{n}={v}" for n, v in zip(names, shape))
            rows.extend(
                {
                    "name": f"{family} {label} {impl}",
                    "family": family,
                    "shape": label,
                    "impl": impl,
                    "size": list(shape),
                }
                for impl in impls
            )
    return rows


def main(argv=None) -> int:
    p = harness.parser(__doc__.split("\n\n")[0], time_budget=900.0, reps=5, device=True)
    p.add_argument(
        "--smoke",
        action="store_true",
        help="every row on a tiny shape, one measured step: checks that all run",
    )
    args = p.parse_args(argv)
    reps = 1 if args.smoke else args.reps
    rows = [r for r in rows_of(args.smoke) if args.match is None or args.match in r["name"]]
    print(
        harness.table_header(
            [
                "model",
                "shape",
                "implementation",
                "step s",
                "extra MiB",
                "time attnkit/plain",
                "memory attnkit/plain",
                "parameters",
            ]
        )
    )
    plain_rows = {}  # (family, shape) -> the plain row, measured first
    for row in rows:
        row.update(
            harness.run(
                measure,
                {
                    "family": row["family"],
                    "impl": row["impl"],
                    "shape": row["size"],
                    "reps": reps,
                    "time_budget": args.time_budget,
                    "device": args.device,
                },
                time_budget=args.time_budget,
                threads=args.threads,
                need_bytes=(
                    estimate_bytes(row["family"], row["impl"], tuple(row["size"]))
                    if args.device == "cpu"
                    else 0
                ),
            )
        )
        if row["impl"] == "plain":
            plain_rows[row["family"], row["shape"]] = row
        base = plain_rows.get((row["family"], row["shape"]))
        if base and row is not base and row["status"] == base["status"] == "ok":
            row["time_ratio"] = row["step_s"] / base["step_s"]
            row["memory_ratio"] = row["train_mb"] / max(base["train_mb"], 1e-9)
        print(table_row(row), flush=True)
    if args.json:
        harness.write_json(args.json, rows, device=args.device, reps=reps, smoke=args.smoke)
    return 0


def table_row(r: dict) -> str:
    if r["status"] != "ok":
        return harness.table_row(
            [r["family"], r["shape"], r["impl"], f"{r['status']}: {r['note']}", "", "", "", ""]
        )
    ratios = (
        [f"{r['time_ratio']:.2f}", f"{r['memory_ratio']:.2f}"] if "time_ratio" in r else ["", ""]
    )
    return harness.table_row(
        [
            r["family"],
            r["shape"],
            r["impl"],
            f"{r['step_s']:.3f}",
            f"{r['train_mb']:.0f}",
            *ratios,
            f"{r['params']:,}",
        ]
    )


if __name__ == "__main__":
    sys.exit(main())
