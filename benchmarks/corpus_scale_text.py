"""Memory and time to the first training step of an OCR corpus of 1,000 to 100,000 lines, a
translation corpus of 10,000 to 1,000,000 sentence pairs and a captioning corpus of 1,000 to
100,000 images.

Each case reads a corpus in a fresh process (:mod:`harness`) as ``attnkit train`` does: the
corpus read in its format (:mod:`attnkit.data.corpora`), the task built (characters, length
batches), the model built with the command line's default settings and one training step
taken on the first batch. Reported: the seconds to read the corpus and to the end of that
first step, the process's peak resident memory (RSS, sampled every millisecond), and the peak
above the RSS after the imports: what the corpus, the model and one batch add. Memory flat in
the corpus size means that figure barely moves from the smallest corpus to the largest.

* **OCR** (``gt-txt``: ``NAME.png`` + ``NAME.gt.txt`` in folders of 1,000; ``labels``: the same
  images with a ``labels.tsv``): tiny generated line images (32 x 64 px, 8-bit grey) and a
  two-word transcription each. Every image is read once when the corpus is read (to check it
  and learn its width); a :class:`~attnkit.data.LineFolder` keeps names, widths and texts.
* **Translation** (``moses``: ``corpus.de.gz`` + ``corpus.en.gz``; ``tsv``: the same pairs
  in one TSV): sentences of 3-8 words of a small vocabulary, about 40 characters a side. The
  pairs are written to disk as they are read (:class:`~attnkit.data.corpora.text_pairs.TextPairs`)
  and a batch encodes its own; the task holds 4 bytes per pair (its lengths), and each epoch's plan
  (shuffled indices in batches) is built when the epoch starts.
* **Captioning** (``coco``: ``captions_train2017.json`` and ``train2017/``): tiny generated
  images (48 x 40 px RGB PNG) with two captions of 3-8 words each. Every image's header is
  checked when the corpus is read; a batch decodes its images, resized to the command line's
  default 64 px (:class:`~attnkit.data.CaptionedImages` keeps paths and captions).

The corpora are written once into ``--work`` (default: a temporary folder, removed after):
for 100,000 lines about 600 MB of small files; for 1,000,000 pairs about 90 MB of text; for
100,000 images about 800 MB.

Usage: ``python -m benchmarks.corpus_scale_text [--lines 1000,10000,100000]
[--pairs 10000,100000,1000000] [--images 1000,10000,100000]
[--formats gt-txt,labels,moses,tsv,coco]
[--json results/corpus_scale_text.json]``.
"""

from __future__ import annotations

import gzip
import io
import json
import random
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import harness

LINES = (1000, 10_000, 100_000)
PAIRS = (10_000, 100_000, 1_000_000)
IMAGES = (1000, 10_000, 100_000)
FORMATS = ("gt-txt", "labels", "moses", "tsv", "coco")
TASK = {
    "gt-txt": "ocr",
    "labels": "ocr",
    "moses": "translate",
    "tsv": "translate",
    "coco": "caption",
}
WORDS = (
    "total",
    "invoice",
    "net",
    "date",
    "amount",
    "paid",
    "due",
    "order",
    "item",
    "tax",
    "the",
    "house",
    "green",
    "small",
    "river",
    "runs",
    "quickly",
    "under",
    "bridge",
    "morning",
    "evening",
    "train",
    "station",
    "coffee",
    "city",
    "north",
    "south",
)
FOLDER = 1000  # lines per subfolder of a gt-txt corpus
BATCH = 32


def _line_png() -> bytes:
    """A 32 x 64 px 8-bit grey PNG of noise on white: every line's image."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    pixels = np.clip(255 - rng.integers(0, 200, size=(32, 64)), 0, 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels, "L").save(out, format="PNG")
    return out.getvalue()


def _sentence(rng: random.Random) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8)))


def write_lines(work: Path, sizes: tuple[int, ...]) -> dict[tuple[str, int], Path]:
    """The OCR corpora of each size: ``{(format, n): path}``; a gt-txt folder per size (its
    images shared by the labels.tsv of that size)."""
    png, rng, corpora = _line_png(), random.Random(0), {}
    for n in sizes:
        root = work / f"lines-{n}"
        rows = []
        for i in range(n):
            name = f"{i // FOLDER:04d}/{i % FOLDER:04d}"
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            (root / f"{name}.png").write_bytes(png)
            text = f"{rng.choice(WORDS)} {rng.randint(0, 999)}"
            (root / f"{name}.gt.txt").write_text(text + "\n", encoding="utf-8")
            rows.append(f"{name}.png\t{text}\n")
        (root / "lines.tsv").write_text("".join(rows), encoding="utf-8")
        corpora["gt-txt", n] = corpora["labels", n] = root
    return corpora


def write_pairs(work: Path, sizes: tuple[int, ...]) -> dict[tuple[str, int], Path]:
    """The translation corpora of each size: ``{(format, n): path}`` (moses: the prefix)."""
    corpora = {}
    for n in sizes:
        rng = random.Random(n)
        prefix = work / f"pairs-{n}"
        with (
            gzip.open(f"{prefix}.de.gz", "wt", encoding="utf-8", compresslevel=1) as de,
            gzip.open(f"{prefix}.en.gz", "wt", encoding="utf-8", compresslevel=1) as en,
            open(f"{prefix}.tsv", "w", encoding="utf-8") as tsv,
        ):
            for _ in range(n):
                source, target = _sentence(rng), _sentence(rng)
                de.write(source + "\n")
                en.write(target + "\n")
                tsv.write(f"{source}\t{target}\n")
        corpora["moses", n], corpora["tsv", n] = prefix, Path(f"{prefix}.tsv")
    return corpora


def _picture_png() -> bytes:
    """A 48 x 40 px RGB PNG of noise: every captioned image."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(1)
    out = io.BytesIO()
    Image.fromarray(rng.integers(0, 256, size=(40, 48, 3), dtype=np.uint8), "RGB").save(
        out, format="PNG"
    )
    return out.getvalue()


def write_images(work: Path, sizes: tuple[int, ...]) -> dict[tuple[str, int], Path]:
    """The COCO captioning corpora of each size: ``{("coco", n): captions JSON}``, the
    images of the largest size shared in ``train2017/``."""
    if not sizes:
        return {}
    png, rng, corpora = _picture_png(), random.Random(0), {}
    images = work / "coco" / "train2017"
    images.mkdir(parents=True, exist_ok=True)
    for i in range(max(sizes)):
        (images / f"{i:012d}.png").write_bytes(png)
    (work / "coco" / "annotations").mkdir(exist_ok=True)
    for n in sizes:
        data = {
            "images": [{"id": i, "file_name": f"{i:012d}.png"} for i in range(n)],
            "annotations": [
                {"id": 2 * i + k, "image_id": i, "caption": _sentence(rng)}
                for i in range(n)
                for k in range(2)
            ],
        }
        path = work / "coco" / "annotations" / f"captions_train2017-{n}.json"
        path.write_text(json.dumps(data), encoding="utf-8")
        corpora["coco", n] = path
    return corpora


def measure(path: str, fmt: str) -> dict:
    """One case in this process (the fresh process of :func:`harness.run`)."""
    import torch

    from attnkit.data.corpora.reading import read_corpus
    from attnkit.tasks.caption import CaptionTask
    from attnkit.tasks.ocr import OcrTask
    from attnkit.tasks.translate import TranslateTask

    torch.manual_seed(0)
    harness.trim()
    with harness.PeakRSS() as mem:
        start = time.perf_counter()
        if TASK[fmt] == "ocr":
            options = {"labels": "lines.tsv"} if fmt == "labels" else {}
            data = read_corpus("ocr", path, fmt, **options)
            read_s = time.perf_counter() - start
            # the command line's default CRNN (train ocr): CTC head, window attention
            task = OcrTask(
                data,
                data[:BATCH],
                model_config={"attention": "window", "window": 32},
                batch_size=BATCH,
                max_valid=BATCH,
            )
        elif TASK[fmt] == "caption":
            data = read_corpus(
                "caption", path, fmt, size=64, images=str(Path(path).parent.parent / "train2017")
            )
            read_s = time.perf_counter() - start
            # the command line's default captioner (train caption): soft attention
            task = CaptionTask(
                data,
                data[:BATCH],
                model_config={
                    "name": "captioner",
                    "image_size": 64,
                    "channels": [32, 64, 128],
                    "hidden": 256,
                    "emb": 128,
                    "attn_dim": 128,
                    "attention": "soft",
                },
                batch_size=BATCH,
                max_valid=BATCH,
            )
        else:
            options = {"src_lang": "de", "tgt_lang": "en"} if fmt == "moses" else {}
            data = read_corpus("translate", path, fmt, **options)
            read_s = time.perf_counter() - start
            # the command line's default model (train translate): Bahdanau, hidden 128
            task = TranslateTask(
                data,
                data[:BATCH],
                model_config={"name": "seq2seq", "kind": "bahdanau", "emb": 64, "hidden": 128},
                batch_size=BATCH,
                max_valid=BATCH,
            )
        model = task.build_model()
        batch = task.batches(0)[0]
        loss, _ = task.loss(model, batch)
        loss.backward()
        first_step_s = time.perf_counter() - start
    return {
        "examples": len(data),
        "read_s": round(read_s, 2),
        "first_step_s": round(first_step_s, 2),
        "peak_rss_mb": round(mem.peak / 2**20, 1),
        "extra_mb": round(mem.extra_mb, 1),
    }


HEADER = harness.table_header(
    ["format", "examples", "read s", "to first step s", "peak RSS MiB", "above imports MiB"]
)


def row(r: dict) -> str:
    """A row's cells: seconds to 2 decimals, MiB whole; a case that did not run, why."""
    if r["status"] != "ok":
        return harness.table_row([r["format"], r["n"], f"{r['status']}: {r['note']}"])
    times = [f"{r[key]:.2f}" for key in ("read_s", "first_step_s")]
    sizes = [f"{r[key]:.0f}" for key in ("peak_rss_mb", "extra_mb")]
    return harness.table_row([r["format"], f"{r['examples']:,}", *times, *sizes])


def _sizes(text: str) -> tuple[int, ...]:
    return tuple(int(s) for s in text.split(",") if s)


def main(argv=None) -> int:
    p = harness.parser(
        __doc__.split("\n\n")[0], time_budget=900.0, json_path="results/corpus_scale_text.json"
    )
    p.add_argument(
        "--lines",
        default=",".join(map(str, LINES)),
        help="lines per OCR corpus, comma-separated (default %(default)s)",
    )
    p.add_argument(
        "--pairs",
        default=",".join(map(str, PAIRS)),
        help="pairs per translation corpus, comma-separated (default %(default)s)",
    )
    p.add_argument(
        "--images",
        default=",".join(map(str, IMAGES)),
        help="images per captioning corpus, comma-separated (default %(default)s)",
    )
    p.add_argument(
        "--formats",
        default=",".join(FORMATS),
        help="formats measured, comma-separated (default %(default)s)",
    )
    p.add_argument(
        "--work",
        type=Path,
        help="where the corpora are written and kept (default: a temporary folder, removed after)",
    )
    args = p.parse_args(argv)
    formats = args.formats.split(",")
    lines = _sizes(args.lines) if {"gt-txt", "labels"} & set(formats) else ()
    pairs = _sizes(args.pairs) if {"moses", "tsv"} & set(formats) else ()
    images = _sizes(args.images) if "coco" in formats else ()
    work = args.work or Path(tempfile.mkdtemp(prefix="attnkit-corpus-scale-text-"))
    work.mkdir(parents=True, exist_ok=True)
    try:
        start = time.perf_counter()
        corpora = {
            **write_lines(work, lines),
            **write_pairs(work, pairs),
            **write_images(work, images),
        }
        print(
            f"wrote the corpora in {time.perf_counter() - start:.0f} s; {harness.machine()}",
            flush=True,
        )
        print(HEADER)
        rows = []
        for fmt in formats:
            for n in {"ocr": lines, "translate": pairs, "caption": images}[TASK[fmt]]:
                if args.match is not None and args.match not in f"{fmt} {n}":
                    continue
                case = {"format": fmt, "task": TASK[fmt], "n": n}
                rows.append(
                    {
                        **case,
                        **harness.run(
                            measure,
                            {"path": str(corpora[fmt, n]), "fmt": fmt},
                            time_budget=args.time_budget,
                            threads=args.threads or 1,
                        ),
                    }
                )
                print(row(rows[-1]), flush=True)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    if args.json:
        harness.write_json(
            args.json,
            rows,
            batch=BATCH,
            line_image="32 x 64 px grey PNG",
            words_per_sentence="3-8",
            caption_image="48 x 40 px RGB PNG",
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
