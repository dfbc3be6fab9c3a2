"""Decoding engines on Multi30k: attnkit (PyTorch), its ONNX export (float32, int8) and its
CTranslate2 export (float32, int8), in sentences and target tokens per second at each beam,
batch size and thread count, with the BLEU of each configuration's outputs (issue 62: the
speed must not cost quality). Prints a Markdown table and writes JSON.

    python -m benchmarks.decoding_engines --data build/corpora/multi30k/data/task1/raw \\
        --checkpoint build/runs/m30k-ende/checkpoint-best --threads 1 2 \\
        --json results/decoding_engines.json

The exports are made once from ``--checkpoint`` by ``attnkit export`` (``--format onnx`` and
``--format ctranslate2``, each also with ``--quantize int8``) in a temporary folder. An engine
that cannot run (its package missing, a model its format cannot represent) is a row saying
why, with attnkit's own message.

Each engine at each thread count runs in a fresh process (:mod:`harness`; torch's threads,
onnxruntime's intra-op pool and CTranslate2's ``intra_threads`` all set to that count). There
each configuration (beam, batch) translates one batch first (warm-up), then the whole test set
once, timed from source texts to output texts (tokenising included). Every engine takes the
sentences sorted by length in characters, longest first, in batches of the batch size (the
order of attnkit's :func:`attnkit.decoding.decode_batches`), and decodes:

* ``torch``: :func:`attnkit.tasks.translate.translate_texts`, as ``attnkit translate`` and
  ``attnkit eval`` do: greedy at beam 1, else beam search ranked with Wu et al. (2016)'s
  length penalty 1, the task's length limit per sentence (``ceil(3 * source tokens) +
  max_len_extra``, EOS included) and the loop stop;
* ``onnx``, ``onnx-int8``: the export's ``attnkit_runner.py`` (numpy) over onnxruntime, by
  the same rules (``attnkit.json``'s decoding set to the beam);
* ``ct2``, ``ct2-int8``: ``ctranslate2.Translator.translate_batch`` with the options of
  ``attnkit_ct2.json`` (those that decode as ``attnkit translate --beam 1`` does), the beam
  and CTranslate2's own length penalty (1: the score divided by the length; attnkit's has no
  CTranslate2 equivalent, docs/deploy.md); one length limit per call, the largest of the
  batch's attnkit limits; no loop stop (CTranslate2 has none).

``--no-loop-stop`` decodes attnkit's engines without the loop stop too: at beam 1 and batch 1
every engine then decodes by the same rules, and CTranslate2's float32 outputs are attnkit's
(tests/test_decoding_engines.py). BLEU: sacreBLEU's standard (cased, 13a;
:func:`attnkit.tasks.metrics.bleu`) against the corpus's references. Target tokens: the
output's tokens in the model's target vocabulary, EOS not counted.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import math
import os
import shlex
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from attnkit.data.corpora.reading import read_corpus
from attnkit.decoding import MAX_BEAM
from attnkit.decoding.front import MAX_BATCH
from attnkit.tasks.metrics import bleu, signature
from benchmarks import harness

ENGINES = ("torch", "onnx", "onnx-int8", "ct2", "ct2-int8")
TEST_SET = "test_2016_flickr"
# what each engine needs installed, and the export options that make its model
NEEDS = {
    "torch": [],
    "onnx": ["onnx", "onnxruntime"],
    "onnx-int8": ["onnx", "onnxruntime"],
    "ct2": ["ctranslate2"],
    "ct2-int8": ["ctranslate2"],
}
EXPORT = {
    "onnx": [],
    "onnx-int8": ["--quantize", "int8"],
    "ct2": ["--format", "ctranslate2"],
    "ct2-int8": ["--format", "ctranslate2", "--quantize", "int8"],
}
COLUMNS = ["engine", "threads", "beam", "batch", "sentences/s", "tokens/s", "s", "BLEU"]

# (text, target tokens) of each source, in input order
Translate = Callable[[Sequence[str], int, int], list[tuple[str, int]]]


def read_test_set(data: Path, test_set: str, pair: str, limit: int | None):
    """The (source, reference) pairs of ``data/test_set.{src,tgt}.gz``, the first ``limit``."""
    src, tgt = pair.split("-")
    pairs = read_corpus("translate", data / test_set, role="test", src_lang=src, tgt_lang=tgt)
    return list(pairs)[:limit]


def by_length(texts: Sequence[str]) -> list[int]:
    """Indices of ``texts``, the longest first (ties in input order), as attnkit batches."""
    return sorted(range(len(texts)), key=lambda i: -len(texts[i]))


def torch_engine(checkpoint: str, loop_stop: bool) -> Translate:
    """attnkit's own decoding of the checkpoint (:func:`translate_texts`)."""
    from attnkit.decoding import Decoding
    from attnkit.tasks.loading import load_evaluator
    from attnkit.tasks.translate import translate_texts
    from attnkit.tokens import EOS

    evaluator = load_evaluator(checkpoint)

    def translate(texts, beam, batch):
        outs, raws = translate_texts(
            evaluator.model,
            evaluator.src_vocab,
            evaluator.tgt_vocab,
            texts,
            decoding=Decoding(beam=beam, loop_stop=loop_stop),
            max_len_extra=evaluator.max_len_extra,
            max_chars=None,
            batch_size=batch,
        )
        counts = []
        for hyp in raws:  # (B, T) tokens, EOS included, and (B,) lengths up to it
            best = hyp.best()
            for row, n in zip(best.tokens, best.lengths.tolist()):
                counts.append(n - int(bool((row[:n] == EOS).any())))
        return list(zip(outs, counts))

    return translate


def onnx_engine(folder: str, loop_stop: bool) -> Translate:
    """The ONNX export in ``folder`` decoded by its runner with onnxruntime."""
    from attnkit.decoding import Decoding
    from attnkit.export import decoding_json
    from benchmarks.quantized import decode_export, open_export

    exported = open_export(Path(folder), torch.get_num_threads())
    max_len = exported.meta["decoding"]["max_len"]

    def translate(texts, beam, batch):
        decoding = Decoding(beam=beam, loop_stop=loop_stop)
        exported.meta["decoding"] = decoding_json(decoding, max_len, ctc=False)
        order = by_length(texts)
        ids = decode_export(exported, [texts[i] for i in order], batch)
        out: list[tuple[str, int]] = [("", 0)] * len(texts)
        for i, row in zip(order, ids):
            out[i] = (exported.tgt.decode(row), len(row))
        return out

    return translate


def _tokeniser(how: dict, folder: Path) -> tuple[Callable, Callable]:
    """``(encode(text) -> pieces, decode(pieces) -> text)`` as ``attnkit_ct2.json``'s
    ``tokenise`` entry says: SentencePiece, or a task tag then characters."""
    if how["type"] == "sentencepiece":
        import sentencepiece

        sp = sentencepiece.SentencePieceProcessor(model_file=str(folder / how["model"]))
        return (lambda text: sp.encode(text, out_type=str)), sp.decode
    tags = sorted(how["tags"], key=len, reverse=True)

    def encode(text: str) -> list[str]:
        tag = next((t for t in tags if text.startswith(t)), "")
        return [tag] * bool(tag) + list(text[len(tag) :])

    return encode, "".join


def ct2_engine(folder: str) -> Translate:
    """The CTranslate2 export in ``folder``, decoded as its ``attnkit_ct2.json`` says."""
    import ctranslate2

    from attnkit.export.ctranslate2_format import CT2_JSON

    where = Path(folder)
    meta = json.loads((where / CT2_JSON).read_text())
    translator = ctranslate2.Translator(
        folder,
        compute_type=meta["compute_type"],
        intra_threads=torch.get_num_threads(),
        inter_threads=1,
    )
    encode, _ = _tokeniser(meta["tokenise"]["source"], where)
    _, decode = _tokeniser(meta["tokenise"]["target"], where)
    rule = meta["max_len"]

    def limit(pieces: list[str]) -> int:  # attnkit's, EOS included
        return min(math.ceil(rule["ratio"] * len(pieces)) + rule["extra"], rule["at_most"])

    def translate(texts, beam, batch):
        order = by_length(texts)
        out: list[tuple[str, int]] = [("", 0)] * len(texts)
        for start in range(0, len(order), batch):
            chunk = order[start : start + batch]
            pieces = [encode(texts[i]) or meta["empty_source"] for i in chunk]
            results = translator.translate_batch(
                pieces,
                **{**meta["translate_batch"], "beam_size": beam},
                max_decoding_length=max(map(limit, pieces)),
            )
            for i, result in zip(chunk, results):
                hyp = result.hypotheses[0]
                out[i] = (decode(hyp), len(hyp))
        return out

    return translate


def open_engine(engine: str, checkpoint: str, folder: str | None, loop_stop: bool) -> Translate:
    """``translate(texts, beam, batch)`` of ``engine`` (``folder``: its export)."""
    if engine == "torch":
        return torch_engine(checkpoint, loop_stop)
    assert folder is not None, engine
    if engine.startswith("onnx"):
        return onnx_engine(folder, loop_stop)
    return ct2_engine(folder)


def measure(
    engine: str,
    checkpoint: str,
    folder: str | None,
    data: str,
    test_set: str,
    pair: str,
    limit: int | None,
    beams: list[int],
    batches: list[int],
    loop_stop: bool,
) -> dict:
    """In this process: one row per (beam, batch) of ``engine`` on the test set."""
    pairs = read_test_set(Path(data), test_set, pair, limit)
    sources, refs = [s for s, _ in pairs], [r for _, r in pairs]
    translate = open_engine(engine, checkpoint, folder, loop_stop)
    rows = []
    for beam in beams:
        for batch in batches:
            translate(sources[:batch], beam, batch)  # warm-up
            start = time.perf_counter()
            outputs = translate(sources, beam, batch)
            seconds = time.perf_counter() - start
            tokens = sum(n for _, n in outputs)
            rows.append(
                {
                    "beam": beam,
                    "batch": batch,
                    "s": seconds,
                    "sentences_per_s": round(len(sources) / seconds, 2),
                    "tokens_per_s": round(tokens / seconds, 1),
                    "target_tokens": tokens,
                    "bleu": round(bleu([t for t, _ in outputs], refs), 2),
                }
            )
    return {"rows": rows, "sentences": len(sources), "threads": torch.get_num_threads()}


def prepare(engine: str, checkpoint: str, tmp: Path) -> tuple[str | None, str | None]:
    """``(folder of the engine's export or None, why the engine cannot run or None)``."""
    missing = [name for name in NEEDS[engine] if importlib.util.find_spec(name) is None]
    if missing:
        return None, f"{', '.join(missing)} not installed (pip install 'attnkit[export]')"
    if engine == "torch":
        return None, None
    from benchmarks.quantized import export

    folder = tmp / engine
    failed = export(checkpoint, folder, *EXPORT[engine])
    return (None, f"attnkit export: {failed}") if failed else (str(folder), None)


def versions() -> dict:
    """The installed versions of the engines' packages."""
    out = {}
    for name in ("torch", "onnxruntime", "ctranslate2"):
        try:
            out[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            out[name] = None
    return out


def targets(rows: list[dict]) -> list[str]:
    """Issue 62's comparisons among ``rows``: attnkit against CTranslate2 float32 (target:
    within 1.5x of its speed, at beam 5, batch 32, 2 threads), and int8 against float32
    (target: >= 1.5x), in sentences per second, for each configuration both ran."""
    speed = {
        (r["engine"], r["threads"], r["beam"], r["batch"]): r["sentences_per_s"]
        for r in rows
        if r.get("status") == "ok"
    }
    lines = []
    for (engine, threads, beam, batch), ours in speed.items():
        where = f"beam {beam}, batch {batch}, {threads} thread{'s' * (threads > 1)}"
        if engine == "torch" and ("ct2", threads, beam, batch) in speed:
            ratio = speed["ct2", threads, beam, batch] / ours
            met = (
                ""
                if (beam, batch, threads) != (5, 32, 2)
                else ("; target <= 1.5x: " + ("met" if ratio <= 1.5 else "missed"))
            )
            lines.append(f"CTranslate2 float32 / attnkit (PyTorch), {where}: {ratio:.2f}x{met}")
        if engine.endswith("-int8") and (engine[:-5], threads, beam, batch) in speed:
            ratio = ours / speed[engine[:-5], threads, beam, batch]
            lines.append(
                f"{engine} / {engine[:-5]} float32, {where}: {ratio:.2f}x (target >= 1.5x: "
                + ("met)" if ratio >= 1.5 else "missed)")
            )
    return lines


class _Parser(argparse.ArgumentParser):
    """argparse, its errors in one line (no usage block)."""

    def error(self, message: str):
        self.exit(2, f"{self.prog}: {message}\n")


def _ints(option: str, values: list[str], low: int, high: int, what: str = "") -> list[int]:
    """``values`` as distinct ints in ``[low, high]``, else a ValueError naming ``option``."""
    out = []
    for value in values:
        try:
            number = int(value)
        except ValueError:
            number = None
        if number is None or not low <= number <= high:
            raise ValueError(f"{option}: expected ints in [{low}, {high}]{what}, got {value!r}")
        if number not in out:
            out.append(number)
    return out


def parse(argv) -> argparse.Namespace:
    p = _Parser(
        prog=shlex.join(["python", *harness.program()]), description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--data", type=Path, required=True, help="folder of TEST_SET.en.gz ...")
    p.add_argument("--checkpoint", required=True, help="a translation Transformer checkpoint")
    p.add_argument("--test-set", default=TEST_SET, help=f"default {TEST_SET}")
    p.add_argument("--pair", choices=("en-de", "en-fr", "en-cs"), default="en-de")
    p.add_argument("--limit", help="the first N sentences only (default: all)")
    p.add_argument("--threads", nargs="+", default=["1", "2"], help="default 1 2")
    p.add_argument("--beams", nargs="+", default=["1", "5"], help="default 1 5")
    p.add_argument("--batches", nargs="+", default=["1", "32"], help="default 1 32")
    p.add_argument("--engines", nargs="+", default=list(ENGINES), help=" ".join(ENGINES))
    p.add_argument("--no-loop-stop", action="store_true", help="attnkit's engines without it")
    p.add_argument("--json", type=Path, help="write the rows here")
    p.add_argument(
        "--time-budget",
        default="7200",
        help="seconds for one engine at one thread count; its process is stopped after",
    )
    args = p.parse_args(argv)
    args.threads = _ints(
        "--threads", args.threads, 1, os.cpu_count() or 1, " (this machine's cores)"
    )
    args.beams = _ints("--beams", args.beams, 1, MAX_BEAM)
    args.batches = _ints("--batches", args.batches, 1, MAX_BATCH)
    args.limit = None if args.limit is None else _ints("--limit", [args.limit], 1, 10**9)[0]
    (budget,) = _ints("--time-budget", [args.time_budget], 1, 10**6)
    args.time_budget = float(budget)
    unknown = [e for e in args.engines if e not in ENGINES]
    if unknown:
        raise ValueError(f"--engines: expected some of {', '.join(ENGINES)}, got {unknown[0]!r}")
    src, tgt = args.pair.split("-")
    for lang in (src, tgt):
        if not (args.data / f"{args.test_set}.{lang}.gz").is_file():
            raise ValueError(f"--data: no {args.test_set}.{lang}.gz in {args.data}")
    if not (Path(args.checkpoint) / "config.json").is_file():
        raise ValueError(f"--checkpoint: no checkpoint in {args.checkpoint} (no config.json)")
    return args


def _cells(row: dict) -> list:
    where = [row["engine"], row.get("threads", ""), row.get("beam", ""), row.get("batch", "")]
    if row["status"] != "ok":
        return [*where, f"{row['status']}: {row['note']}", "", "", ""]
    return [*where, row["sentences_per_s"], row["tokens_per_s"], f"{row['s']:.2f}", row["bleu"]]


def main(argv=None) -> int:
    try:
        args = parse(argv)
    except ValueError as exc:
        print(f"{shlex.join(['python', *harness.program()])}: {exc}", file=sys.stderr)
        return 2
    n = len(read_test_set(args.data, args.test_set, args.pair, args.limit))
    print(f"{args.test_set}: {n} sentences; sacreBLEU {signature('bleu')}")
    print(harness.table_header(COLUMNS), flush=True)
    rows: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        ready = {}
        for engine in args.engines:
            folder, why = prepare(engine, args.checkpoint, Path(tmp))
            if why is None:
                ready[engine] = folder
                continue
            rows.append({"engine": engine, "status": "unavailable", "note": why})
            print(harness.table_row(_cells(rows[-1])), flush=True)
        for threads in args.threads:
            for engine, folder in ready.items():
                kwargs = {
                    "engine": engine,
                    "checkpoint": args.checkpoint,
                    "folder": folder,
                    "data": str(args.data),
                    "test_set": args.test_set,
                    "pair": args.pair,
                    "limit": args.limit,
                    "beams": args.beams,
                    "batches": args.batches,
                    "loop_stop": not args.no_loop_stop,
                }
                result = harness.run(
                    measure,
                    kwargs,
                    time_budget=args.time_budget,
                    threads=threads,
                    env={"OMP_NUM_THREADS": str(threads)},
                )
                base = {"engine": engine, "threads": threads}
                if result["status"] != "ok":
                    found = [{**base, "status": result["status"], "note": result["note"]}]
                else:
                    found = [{**base, "status": "ok", **r} for r in result["rows"]]
                for row in found:
                    rows.append(row)
                    print(harness.table_row(_cells(row)), flush=True)
    lines = targets(rows)
    if lines:
        print("\n" + "\n".join(f"- {line}" for line in lines))
    if args.json:
        harness.write_json(
            args.json,
            rows,
            checkpoint=args.checkpoint,
            test_set=args.test_set,
            pair=args.pair,
            sentences=n,
            loop_stop=not args.no_loop_stop,
            versions=versions(),
            bleu_signature=signature("bleu"),
            targets=lines,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
