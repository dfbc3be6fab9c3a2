"""Where an exported model's decoding spends its time, by operator: float32 against int8.

    python -m benchmarks.onnx_profile --checkpoint builtin:multi30k-en-de \\
        --data DIR --n 200 --threads 1 --json results/onnx_profile.json

exports CHECKPOINT twice with ``attnkit export`` (float32, and ``--quantize int8``), decodes
the same inputs with each export's runner (its default decoding: beam 5 for translation) with
onnxruntime's profiler on, and sums the kernel time of every node of the encoder and the decoder
step graphs by operator type. For each operator type: milliseconds under float32 and int8 and
their ratio; and the share of the wall clock spent outside the graphs (the runner's numpy: beam
bookkeeping between step calls). The inputs: the first ``--n`` sentences of
``DIR/test_2016_flickr.en.gz`` (``--data``: Multi30k's ``data/task1/raw``), or without
``--data`` the held-out inputs of a built-in model (:func:`benchmarks.quantized.examples`).

int8 (dynamic quantisation of the weights, :mod:`attnkit.export.quantize`) can speed up only the
operators that read those weights (``MatMulInteger``, ``DynamicQuantizeLinear`` and their
neighbours replace ``MatMul``/``Gemm``); what the table shows outside them is what int8 cannot
help.
"""

from __future__ import annotations

import gzip
import json
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch

from benchmarks import harness, quantized


def sentences(data: Path, n: int) -> list[str]:
    path = data / "test_2016_flickr.en.gz"
    if not path.exists():
        raise SystemExit(f"--data: {path} not found (expected the multi30k/dataset layout)")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f][:n]


def node_times(profile: Path) -> dict[str, float]:
    """Milliseconds of kernel time per operator type in one onnxruntime profile file."""
    out: dict[str, float] = defaultdict(float)
    for event in json.loads(profile.read_text()):
        if event.get("cat") == "Node" and event.get("name", "").endswith("_kernel_time"):
            out[event["args"]["op_name"]] += event["dur"] / 1000
    return dict(out)


def run_times(profile: Path) -> float:
    """Milliseconds of the session's runs (``model_run`` events) in one profile file."""
    return sum(
        e["dur"] / 1000 for e in json.loads(profile.read_text()) if e.get("name") == "model_run"
    )


def profile_export(folder: Path, inputs: list, batch: int, prefix: str) -> dict:
    """Decode ``inputs`` with the export in ``folder`` under the profiler: per operator type
    the milliseconds in both graphs, the wall clock and the time inside the graphs."""
    export = quantized.open_export(folder, profile=prefix)
    start = time.perf_counter()
    quantized.decode_export(export, inputs, batch)
    wall = 1000 * (time.perf_counter() - start)
    ops: dict[str, float] = defaultdict(float)
    inside = 0.0
    for session in (export.encoder, export.step):
        if session is None:
            continue
        path = Path(session.end_profiling())
        for op, ms in node_times(path).items():
            ops[op] += ms
        inside += run_times(path)
        path.unlink()
    return {"ops": dict(ops), "wall_ms": wall, "graphs_ms": inside}


def main(argv=None) -> int:
    p = harness.parser(__doc__.splitlines()[0], time_budget=1800.0)
    p.add_argument("--checkpoint", default="builtin:multi30k-en-de")
    p.add_argument("--data", type=Path, help="Multi30k's data/task1/raw (translation)")
    p.add_argument("--n", type=int, default=200, help="inputs decoded (default 200)")
    p.add_argument("--batch", type=int, default=32)
    args = p.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    if args.data is not None:
        inputs = sentences(args.data, args.n)
    else:
        name = args.checkpoint.removeprefix("builtin:")
        if name not in quantized.MODELS:
            raise SystemExit(
                f"--data: needed for {args.checkpoint} (held-out inputs are built in for "
                f"builtin:{', builtin:'.join(quantized.MODELS)} only)"
            )
        inputs = quantized.examples(name, args.n)[0]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for weights in ("float32", "int8"):
            folder = Path(tmp) / weights
            options = ["--quantize", "int8"] if weights == "int8" else []
            failed = quantized.export(args.checkpoint, folder, *options)
            if failed:
                raise SystemExit(f"attnkit export: {failed}")
            profile_export(folder, inputs[: args.batch], args.batch, str(Path(tmp) / "warm"))
            results[weights] = profile_export(folder, inputs, args.batch, str(Path(tmp) / weights))
    f32, i8 = results["float32"], results["int8"]
    names = sorted(set(f32["ops"]) | set(i8["ops"]), key=lambda op: -f32["ops"].get(op, 0.0))
    rows = [
        {
            "op": op,
            "float32_ms": round(f32["ops"].get(op, 0.0), 1),
            "int8_ms": round(i8["ops"].get(op, 0.0), 1),
        }
        for op in names
    ]
    for weights, r in results.items():
        rows.append(
            {
                "op": f"outside the graphs ({weights})",
                f"{weights}_ms": round(r["wall_ms"] - r["graphs_ms"], 1),
            }
        )
    columns = ["operator", "float32 ms", "int8 ms", "int8 / float32"]
    print(harness.table_header(columns))
    for row in rows:
        a, b = row.get("float32_ms"), row.get("int8_ms")
        ratio = f"{b / a:.2f}" if a and b is not None else ""
        print(
            harness.table_row(
                [row["op"], a if a is not None else "", b if b is not None else "", ratio]
            )
        )
    for weights, r in results.items():
        print(
            f"{weights}: wall {r['wall_ms'] / 1000:.2f} s, in the graphs "
            f"{r['graphs_ms'] / 1000:.2f} s ({100 * r['graphs_ms'] / r['wall_ms']:.0f}%)"
        )
    if args.json:
        harness.write_json(
            args.json,
            rows,
            checkpoint=args.checkpoint,
            n=len(inputs),
            batch=args.batch,
            threads=torch.get_num_threads(),
            wall_s={w: round(r["wall_ms"] / 1000, 2) for w, r in results.items()},
            graphs_s={w: round(r["graphs_ms"] / 1000, 2) for w, r in results.items()},
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
