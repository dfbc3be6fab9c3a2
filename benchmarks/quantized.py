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

import importlib.util
import json
import tempfile
import time
from pathlib import Path

import numpy as np
import onnxruntime as ort
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


def feed(name: str, batch: list, runner, meta: dict) -> dict:
    """The encoder's inputs for ``batch``."""
    names = [i["name"] for i in meta["encoder"]["inputs"]]
    if name == "translate-dates":
        vocab = runner.Vocab(meta["vocab"]["src"])
        ids = [vocab.encode(s) for s in batch]
        x = np.zeros((len(ids), max(map(len, ids))), dtype=np.int64)
        for i, row in enumerate(ids):
            x[i, : len(row)] = row
        lengths = np.array([len(r) for r in ids], dtype=np.int64)
    elif name == "ocr-lines":
        images, widths = pad_images(batch)
        x, lengths = images.numpy(), widths.numpy()
    else:
        feats, lengths = pad_features(batch)
        x, lengths = feats.numpy(), lengths.numpy()
    return dict(zip(names, (x, lengths)))


def measure(name: str, folder: Path, inputs: list, refs: list[str], batch: int) -> dict:
    meta = json.loads((folder / "attnkit.json").read_text())
    spec = importlib.util.spec_from_file_location(
        f"runner_{folder.name}", folder / "attnkit_runner.py"
    )
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    options = ort.SessionOptions()
    options.intra_op_num_threads = torch.get_num_threads()
    for key, value in meta.get("session_config", {}).items():
        options.add_session_config_entry(key, value)
    encoder = ort.InferenceSession(str(folder / meta["encoder"]["file"]), options)
    step = (
        "decoder_step" in meta
        and ort.InferenceSession(str(folder / meta["decoder_step"]["file"]), options)
    ) or None
    vocab = runner.Vocab(meta["vocab"]["tgt"])
    outputs = []
    start = time.perf_counter()
    for i in range(0, len(inputs), batch):
        x = feed(name, inputs[i : i + batch], runner, meta)
        state = dict(zip([o.name for o in encoder.get_outputs()], encoder.run(None, x)))
        outputs += [vocab.decode(out[0]) for out in runner.decode(step, state, meta, x)]
    seconds = time.perf_counter() - start
    size = sum(
        (folder / f).stat().st_size
        for f in (meta["encoder"]["file"], *([meta["decoder_step"]["file"]] if step else []))
    )
    metrics = score(("cer", "exact"), outputs, refs)
    return {
        "model": name,
        "mib": round(size / 2**20, 2),
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
                assert (
                    attnkit(
                        [
                            "export",
                            "--checkpoint",
                            f"builtin:{name}",
                            "--out",
                            str(folder),
                            *quantize,
                        ]
                    )
                    == 0
                )
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
