"""Exported decoders on CPU: one decoder step of the Bahdanau model, onnxruntime against
PyTorch eager; and every built-in model's export decoding held-out inputs at batch 1 and
batch 32, per example. Prints Markdown tables and writes JSON.

    python -m benchmarks.export_latency --threads 1 --json results/export_latency.json

The model (emb = hidden = 256, additive attention, source length 100, untrained) is exported by
:func:`attnkit.export.export_onnx`; both sides run the same step on the same state (checked
before timing). Each case runs in a fresh process (:mod:`harness`) with ``--threads`` threads
for torch and for onnxruntime's intra-op pool; its time is the median of ``--reps`` steps after
a warm-up.

The built-in models (``--models``; :data:`benchmarks.quantized.MODELS`) are exported in
float32 by ``attnkit export`` (their default decoding: beam 5 for translate-dates and
asr-digits, CTC best path for ocr-lines) and decode ``--n`` held-out inputs
(:func:`benchmarks.quantized.examples`) with the export's runner over onnxruntime, in input
order, in batches of 1 and of 32 (a batch padded to its longest input), one fresh process per
model. The figure is the wall time per example of encoding and decoding them all, after one
batch of warm-up; ``batch 32 / batch 1`` is issue 62's ratio (target: <= 1/4).
"""

from __future__ import annotations

import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from attnkit.export import export_onnx
from attnkit.models import Seq2Seq
from attnkit.tokens import BOS
from benchmarks import harness, quantized

MODEL = dict(src_vocab=60, tgt_vocab=60, kind="bahdanau", emb=256, hidden=256)
SRC_LEN = 100
BATCHES = (1, 32)
SIDES = ("pytorch", "onnxruntime")
MODEL_BATCHES = (1, 32)
RATIO_TARGET = 0.25  # issue 62: per example, batch 32 at most a quarter of batch 1


def step_latency(side: str, batch: int, reps: int, time_budget: float) -> dict:
    """Seconds of one decoder step (``model.step`` under no_grad, or the exported step graph
    in onnxruntime) for ``batch`` sentences of ``SRC_LEN`` tokens."""
    torch.manual_seed(0)
    model = Seq2Seq(**MODEL).eval()
    src = torch.randint(4, MODEL["src_vocab"], (batch, SRC_LEN))
    lengths = torch.full((batch,), SRC_LEN)
    tokens = torch.full((batch,), BOS)
    with torch.no_grad():
        state = model.start(src, lengths)
        want = model.step(tokens, state)[0]
    row = {}
    if side == "pytorch":
        attention = model.decoder.attention
        plan = attention.plan(state["h"], state["memory"], need_weights=True, key_lengths=lengths)
        row["path"] = f"{plan.impl} ({plan.kernel})"

        @torch.no_grad()
        def step():
            model.step(tokens, state)
    else:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.intra_op_num_threads = torch.get_num_threads()
        options.inter_op_num_threads = 1
        with tempfile.TemporaryDirectory() as folder:
            export_onnx(
                model,
                folder,
                task="benchmark",
                vocab={},
                max_len={"input": "src_len", "ratio": 1.0, "extra": 0, "rounding": "ceil"},
            )
            encoder = ort.InferenceSession(f"{folder}/encoder.onnx", options)
            session = ort.InferenceSession(f"{folder}/decoder_step.onnx", options)
        # the step's state as a deployment has it: the exported encoder's outputs (they hold
        # the keys' NaN marks, state.memory.bad, which an eager Memory without NaN leaves None)
        names = [o.name for o in encoder.get_outputs()]
        outputs = encoder.run(names, {"src": src.numpy(), "src_len": lengths.numpy()})
        feed = {"tokens": tokens.numpy(), **dict(zip(names, outputs))}
        feed = {i.name: feed[i.name] for i in session.get_inputs()}
        if not np.allclose(session.run(["log_probs"], feed)[0], want.numpy(), atol=1e-4):
            raise AssertionError("onnxruntime's step differs from PyTorch's")

        def step():
            session.run(None, feed)

    return {**row, "s": harness.timed(step, reps=reps, time_budget=time_budget / 2).median}


def model_latency(name: str, n: int, batches: list[int]) -> dict:
    """In this process: built-in model ``name`` exported in float32 and decoding ``n``
    held-out inputs by its runner with onnxruntime; ms per example at each batch size."""
    inputs, _ = quantized.examples(name, n)
    row = {}
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / name
        failed = quantized.export(f"builtin:{name}", folder)
        if failed:
            raise ValueError(f"attnkit export: {failed}")
        exported = quantized.open_export(folder)
        row["decoding"] = exported.meta["decoding"]["method"]
        row["beam"] = exported.meta["decoding"].get("beam", 1)
        for batch in batches:
            quantized.decode_export(exported, inputs[:batch], batch)  # warm-up
            start = time.perf_counter()
            quantized.decode_export(exported, inputs, batch)
            row[f"ms_batch_{batch}"] = 1000 * (time.perf_counter() - start) / len(inputs)
    return row


def models_table(args) -> list[dict]:
    """The built-in models' rows (see the module's docstring), printed as a table."""
    rows = []
    low, high = MODEL_BATCHES
    print(
        harness.table_header(
            [
                "model",
                "decoding",
                f"ms / example, batch {low}",
                f"batch {high}",
                f"batch {high} / batch {low}",
                f"target <= {RATIO_TARGET:g}",
            ]
        )
    )
    for name in args.models.split(","):
        if args.match is not None and args.match not in name:
            continue
        result = harness.run(
            model_latency,
            {"name": name, "n": args.n, "batches": list(MODEL_BATCHES)},
            time_budget=args.time_budget,
            threads=args.threads,
        )
        row = {"model": name, "n": args.n, **result}
        if row["status"] == "ok":
            row["ratio"] = row[f"ms_batch_{high}"] / row[f"ms_batch_{low}"]
            decoding = (
                "CTC best path"
                if row["decoding"] == "ctc_best_path"
                else (
                    f"{row['decoding']} {row['beam']}"
                    if row["decoding"] == "beam"
                    else row["decoding"]
                )
            )
            cells = [
                decoding,
                f"{row[f'ms_batch_{low}']:.1f}",
                f"{row[f'ms_batch_{high}']:.1f}",
                f"{row['ratio']:.2f}",
                "met" if row["ratio"] <= RATIO_TARGET else "missed",
            ]
        else:
            cells = [f"{row['status']}: {row['note']}", "", "", "", ""]
        rows.append(row)
        print(harness.table_row([name, *cells]), flush=True)
    return rows


def main(argv=None) -> int:
    p = harness.parser(__doc__.splitlines()[0], time_budget=120.0, reps=300)
    p.add_argument(
        "--models",
        default=",".join(quantized.MODELS),
        help=f"built-in models, comma-separated (default {','.join(quantized.MODELS)})",
    )
    p.add_argument("--n", type=int, default=64, help="held-out inputs per model (default 64)")
    args = p.parse_args(argv)
    unknown = [m for m in args.models.split(",") if m not in quantized.MODELS]
    if unknown:
        p.error(f"--models: expected some of {', '.join(quantized.MODELS)}, got {unknown[0]!r}")
    if args.n < max(MODEL_BATCHES):
        p.error(f"--n: expected at least {max(MODEL_BATCHES)} (a full batch), got {args.n}")
    rows = []
    for batch in BATCHES:
        if args.match is not None and args.match not in f"batch {batch}":
            continue
        eager, onnx = (
            harness.run(
                step_latency,
                {"side": side, "batch": batch, "reps": args.reps, "time_budget": args.time_budget},
                time_budget=args.time_budget,
                threads=args.threads,
            )
            for side in SIDES
        )
        row = {"batch": batch, "src_len": SRC_LEN}
        failed = next((r for r in (eager, onnx) if r["status"] != "ok"), None)
        if failed:
            row.update(status=failed["status"], note=failed["note"])
        else:
            row.update(
                status="ok",
                pytorch_ms=1e3 * eager["s"],
                onnxruntime_ms=1e3 * onnx["s"],
                pytorch_path=eager["path"],
                speedup=eager["s"] / onnx["s"],
            )
        rows.append(row)
    print(
        harness.table_header(
            [
                "batch",
                "PyTorch eager ms",
                "onnxruntime ms",
                "onnxruntime speed-up",
                "PyTorch attention path",
            ]
        )
    )
    for r in rows:
        cells = (
            [
                f"{r['pytorch_ms']:.3f}",
                f"{r['onnxruntime_ms']:.3f}",
                f"{r['speedup']:.2f}x",
                r["pytorch_path"],
            ]
            if r["status"] == "ok"
            else [f"{r['status']}: {r['note']}", "", "", ""]
        )
        print(harness.table_row([r["batch"], *cells]))
    print()
    models = models_table(args)
    if args.json:
        harness.write_json(args.json, rows, model=MODEL, threads=args.threads, builtin=models)
    return 0


if __name__ == "__main__":
    sys.exit(main())
