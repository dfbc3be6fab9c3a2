"""One decoder step of the Bahdanau model: onnxruntime against PyTorch eager, on CPU. Prints a
Markdown table and writes JSON.

    python -m benchmarks.export_latency --threads 1 --json results/export_latency.json

The model (emb = hidden = 256, additive attention, source length 100, untrained) is exported by
:func:`attnkit.export.export_onnx`; both sides run the same step on the same state (checked
before timing). Each case runs in a fresh process (:mod:`harness`) with ``--threads`` threads
for torch and for onnxruntime's intra-op pool; its time is the median of ``--reps`` steps after
a warm-up.
"""

from __future__ import annotations

import sys
import tempfile

import numpy as np
import torch

from attnkit.export import export_onnx
from attnkit.export.decoder_state import flatten
from attnkit.models import Seq2Seq
from attnkit.tokens import BOS
from benchmarks import harness

MODEL = dict(src_vocab=60, tgt_vocab=60, kind="bahdanau", emb=256, hidden=256)
SRC_LEN = 100
BATCHES = (1, 32)
SIDES = ("pytorch", "onnxruntime")


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
            session = ort.InferenceSession(f"{folder}/decoder_step.onnx", options)
        flat = flatten(state)
        feed = {
            i.name: (tokens if i.name == "tokens" else flat[i.name]).numpy()
            for i in session.get_inputs()
        }
        if not np.allclose(session.run(["log_probs"], feed)[0], want.numpy(), atol=1e-4):
            raise AssertionError("onnxruntime's step differs from PyTorch's")

        def step():
            session.run(None, feed)

    return {**row, "s": harness.timed(step, reps=reps, time_budget=time_budget / 2).median}


def main(argv=None) -> int:
    p = harness.parser(__doc__.splitlines()[0], time_budget=120.0, reps=300)
    args = p.parse_args(argv)
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
    if args.json:
        harness.write_json(args.json, rows, model=MODEL, threads=args.threads)
    return 0


if __name__ == "__main__":
    sys.exit(main())
