"""The built-in models exported to ONNX in float32 and with int8 weights (``attnkit export
--quantize int8``): size, decoding time and accuracy of each, decoded by the exported runner
with onnxruntime. Prints a Markdown table and writes JSON.

    python -m benchmarks.quantized --threads 1 --json results/quantized.json

Held-out inputs (split ``test``, seed 1): ``--n`` date sentences (beam 5, the export's
default), line images in the held-out faces (CTC best path) and utterances in the held-out
espeak-ng voices (beam 5). The inputs are made with attnkit (token ids, padded images,
log-mel features), then everything runs in the runner and onnxruntime; time is the wall clock
of encoding and decoding all of them in batches of ``--batch``.
"""

from __future__ import annotations

import contextlib
import importlib.util
import io
import json
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from attnkit.cli.main import main as attnkit
from attnkit.data import generate_lines, generate_pairs, pad_features, pad_images
from attnkit.data.worlds.speech import plan_utterances, utterances_audio
from attnkit.tasks.loading import load_evaluator
from attnkit.tasks.metrics import score
from benchmarks import harness

MODELS = ("translate-dates", "ocr-lines", "asr-digits")


def examples(name: str, n: int) -> tuple[list, list[str]]:
    """The inputs of model ``name`` (as its encoder is fed, one per example) and references."""
    if name == "translate-dates":
        pairs = generate_pairs(n, split="test", seed=1)
        return [s for s, _ in pairs], [t for _, t in pairs]
    if name == "ocr-lines":
        lines = generate_lines(n, split="test", seed=1, max_chars=200, fonts="faces")
        return [image for image, _ in lines], [text for _, text in lines]
    plan = plan_utterances(n, split="test", seed=1, kinds=("digits", "numbers"))
    evaluator = load_evaluator("builtin:asr-digits")
    return (
        [evaluator.features(samples) for samples in utterances_audio(plan)],
        [u.transcript for u in plan],
    )


def export(checkpoint: str, folder: Path, *options: str) -> str | None:
    """``attnkit export --checkpoint CHECKPOINT --out FOLDER OPTIONS...`` (``--format
    ctranslate2``, ``--quantize int8``...), its messages kept from the output: None when the
    export is written, else attnkit's one-line error (a package missing, a model the format
    cannot represent)."""
    argv = ["export", "--checkpoint", str(checkpoint), "--out", str(folder), *options]
    err = io.StringIO()
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(err):
        code = attnkit(argv)
    lines = err.getvalue().strip().splitlines()
    return None if code == 0 else (lines[-1] if lines else f"exit {code}").removeprefix("attnkit: ")


@dataclass
class Export:
    """An export folder as its runner decodes it: ``attnkit.json`` (``meta``), the folder's
    ``attnkit_runner.py`` imported (``runner``), onnxruntime sessions of the encoder and the
    decoder step (None for a CTC model), and the runner's vocabularies (``src``: None but for
    translation)."""

    folder: Path
    meta: dict
    runner: Any
    encoder: Any
    step: Any
    src: Any
    tgt: Any

    @property
    def mib(self) -> float:
        """The graphs' size on disk, MiB."""
        files = [self.meta["encoder"]["file"]]
        files += [self.meta["decoder_step"]["file"]] if "decoder_step" in self.meta else []
        return sum((self.folder / f).stat().st_size for f in files) / 2**20


def open_export(folder: Path, threads: int | None = None, profile: str | None = None) -> Export:
    """The export in ``folder``, its sessions with ``threads`` intra-op threads (default:
    torch's) and the session options ``attnkit.json`` gives; with ``profile``, onnxruntime's
    profiler on, its files named from that prefix (``session.end_profiling()`` writes them)."""
    import onnxruntime as ort  # here: importing this module needs no onnxruntime

    folder = Path(folder)
    meta = json.loads((folder / "attnkit.json").read_text())
    spec = importlib.util.spec_from_file_location(
        f"runner_{folder.name.replace('-', '_')}", folder / "attnkit_runner.py"
    )
    assert spec is not None and spec.loader is not None
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    options = ort.SessionOptions()
    options.intra_op_num_threads = threads or torch.get_num_threads()
    options.inter_op_num_threads = 1
    if profile is not None:
        options.enable_profiling = True
        options.profile_file_prefix = profile
    for key, value in meta.get("session_config", {}).items():
        options.add_session_config_entry(key, value)
    encoder = ort.InferenceSession(str(folder / meta["encoder"]["file"]), options)
    step = (
        ort.InferenceSession(str(folder / meta["decoder_step"]["file"]), options)
        if "decoder_step" in meta
        else None
    )
    src = runner.Vocab(meta["vocab"]["src"]) if "src" in meta["vocab"] else None
    return Export(folder, meta, runner, encoder, step, src, runner.Vocab(meta["vocab"]["tgt"]))


def feed(export: Export, batch: list) -> dict:
    """The encoder's inputs for ``batch``: source texts, line images or log-mel features,
    as the export's task takes them."""
    names = [i["name"] for i in export.meta["encoder"]["inputs"]]
    task = export.meta["task"]
    if task == "translate":
        ids = [export.src.encode(s) for s in batch]
        x = np.zeros((len(ids), max(map(len, ids))), dtype=np.int64)
        for i, row in enumerate(ids):
            x[i, : len(row)] = row
        lengths = np.array([len(r) for r in ids], dtype=np.int64)
    elif task == "ocr":
        images, widths = pad_images(batch)
        x, lengths = images.numpy(), widths.numpy()
    else:
        feats, lengths = pad_features(batch)
        x, lengths = feats.numpy(), lengths.numpy()
    return dict(zip(names, (x, lengths)))


def decode_export(export: Export, inputs: list, batch: int) -> list[list[int]]:
    """The best output's token ids of each of ``inputs``, decoded by the runner as
    ``export.meta["decoding"]`` says, in batches of ``batch`` taken in order."""
    outputs: list[list[int]] = []
    for i in range(0, len(inputs), batch):
        x = feed(export, inputs[i : i + batch])
        out = export.encoder.run(None, x)
        state = dict(zip([o.name for o in export.encoder.get_outputs()], out))
        outputs += [best[0] for best in export.runner.decode(export.step, state, export.meta, x)]
    return outputs


def measure(name: str, folder: Path, inputs: list, refs: list[str], batch: int) -> dict:
    export = open_export(folder)
    start = time.perf_counter()
    outputs = [export.tgt.decode(ids) for ids in decode_export(export, inputs, batch)]
    seconds = time.perf_counter() - start
    metrics = score(("cer", "exact"), outputs, refs)
    return {
        "model": name,
        "mib": round(export.mib, 2),
        "s": round(seconds, 2),
        "ms_per_example": round(1000 * seconds / len(inputs), 1),
        **metrics,
    }


def main(argv=None) -> int:
    p = harness.parser(__doc__.splitlines()[0], time_budget=1800.0)
    p.add_argument("--n", type=int, default=200, help="examples per model")
    p.add_argument("--batch", type=int, default=16)
    args = p.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    rows = []
    print(harness.table_header(["model", "weights", "MiB", "ms / example", "CER %", "exact %"]))
    with tempfile.TemporaryDirectory() as tmp:
        for name in MODELS:
            if args.match and args.match not in name:
                continue
            inputs, refs = examples(name, args.n)
            for weights in ("float32", "int8"):
                folder = Path(tmp) / f"{name}-{weights}"
                quantize = ["--quantize", "int8"] if weights == "int8" else []
                failed = export(f"builtin:{name}", folder, *quantize)
                if failed:
                    raise SystemExit(f"attnkit export: {failed}")
                row = {"weights": weights, **measure(name, folder, inputs, refs, args.batch)}
                rows.append(row)
                print(
                    harness.table_row(
                        [
                            name,
                            weights,
                            row["mib"],
                            row["ms_per_example"],
                            f"{100 * row['cer']:.2f}",
                            f"{100 * row['exact']:.1f}",
                        ]
                    ),
                    flush=True,
                )
    if args.json:
        harness.write_json(
            args.json, rows, n=args.n, batch=args.batch, threads=torch.get_num_threads()
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
