"""Memory and time to the first training step of a speech corpus of 1,000 to 100,000 utterances.

Each case reads a corpus of tiny generated WAV files (0.1 s of 16-bit noise at 16 kHz, a
three-word transcript each) in a fresh process (:mod:`harness`) as ``attnkit train asr`` does:
the corpus read in its format (:mod:`attnkit.data.corpora.speech_formats`: every audio header
checked, paths and transcripts packed), the :class:`attnkit.tasks.AsrTask` built (characters, length
batches), the model built and one training step taken on the first batch (its features
computed then). Reported: the seconds to read the corpus and to the end of that first step,
the process's peak resident memory (RSS, sampled every millisecond), and the peak above the
RSS after the imports: what the corpus, the model and one batch add. Memory flat in the corpus
size means that figure barely moves from 1,000 to 100,000 utterances.

The corpora are written once into ``--work`` (default: a temporary folder, removed after):
100,000 files of 3.2 kB, about 400 MB on disk, and the manifest, Kaldi directory and JSON-lines
manifest of the first N of them.

Usage: ``python -m benchmarks.corpus_scale [--sizes 1000,10000,100000]
[--formats manifest,kaldi,jsonl] [--json results/corpus_scale.json]``.
"""

from __future__ import annotations

import json
import random
import shutil
import struct
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import harness

SIZES = (1000, 10_000, 100_000)
FORMATS = ("manifest", "kaldi", "jsonl")
RATE, SAMPLES = 16000, 1600  # 0.1 s: 11 log-mel frames, over the listener's minimum of 8
WORDS = ("one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "zero")
BATCH = 32


def _wav(noise: bytes) -> bytes:
    """A mono 16-bit PCM WAV of the samples ``noise``."""
    return (
        b"RIFF"
        + struct.pack("<I", 36 + len(noise))
        + b"WAVEfmt "
        + struct.pack("<IHHIIHH", 16, 1, 1, RATE, 2 * RATE, 2, 16)
        + b"data"
        + struct.pack("<I", len(noise))
        + noise
    )


def write_corpora(work: Path, sizes: tuple[int, ...]) -> dict[tuple[str, int], Path]:
    """The audio files of the largest size and each size's corpus in each format, under
    ``work``: ``{(format, n): path}``."""
    rng = random.Random(0)
    audio = work / "wav"
    audio.mkdir(parents=True, exist_ok=True)
    n_max = max(sizes)
    texts = [" ".join(rng.choice(WORDS) for _ in range(3)) for _ in range(n_max)]
    for i in range(n_max):
        path = audio / f"{i:06d}.wav"
        if not path.exists():
            path.write_bytes(_wav(rng.randbytes(2 * SAMPLES)))
    corpora = {}
    for n in sizes:
        manifest = work / f"manifest-{n}.tsv"
        manifest.write_text("".join(f"wav/{i:06d}.wav\t{texts[i]}\n" for i in range(n)))
        kaldi = work / "data" / f"train{n}"
        kaldi.mkdir(parents=True, exist_ok=True)
        (kaldi / "text").write_text("".join(f"u{i:06d} {texts[i]}\n" for i in range(n)))
        (kaldi / "wav.scp").write_text("".join(f"u{i:06d} wav/{i:06d}.wav\n" for i in range(n)))
        jsonl = work / f"manifest-{n}.jsonl"
        jsonl.write_text(
            "".join(
                json.dumps(
                    {"audio_filepath": f"wav/{i:06d}.wav", "text": texts[i], "duration": 0.1}
                )
                + "\n"
                for i in range(n)
            )
        )
        corpora.update({("manifest", n): manifest, ("kaldi", n): kaldi, ("jsonl", n): jsonl})
    return corpora


def measure(path: str, fmt: str) -> dict:
    """One case in this process (the fresh process of :func:`harness.run`)."""
    import torch
    import torch.nn.functional as F

    from attnkit.data.corpora.reading import choose_format
    from attnkit.models.las import MIN_FRAMES
    from attnkit.tasks.asr import AsrTask

    torch.manual_seed(0)
    harness.trim()
    with harness.PeakRSS() as mem:
        start = time.perf_counter()
        speech = choose_format("asr", path, fmt).read(path, normalize=True, min_frames=MIN_FRAMES)
        read_s = time.perf_counter() - start
        task = AsrTask(
            speech, speech.head(BATCH), model_config={}, batch_size=BATCH, max_valid=BATCH
        )
        model = task.build_model()
        batch = task.batches(0)[0]
        out = model(batch["features"], batch["lengths"], batch["tgt_in"])
        F.cross_entropy(out[0].flatten(0, 1), batch["tgt_out"].flatten()).backward()
        first_step_s = time.perf_counter() - start
    return {
        "utterances": len(speech),
        "read_s": round(read_s, 2),
        "first_step_s": round(first_step_s, 2),
        "peak_rss_mb": round(mem.peak / 2**20, 1),
        "extra_mb": round(mem.extra_mb, 1),
    }


HEADER = harness.table_header(
    ["format", "utterances", "read s", "to first step s", "peak RSS MiB", "above imports MiB"]
)


def row(r: dict) -> str:
    if r["status"] != "ok":
        return harness.table_row([r["format"], r["n"], f"{r['status']}: {r['note']}", "", "", ""])
    return harness.table_row(
        [
            r["format"],
            f"{r['utterances']:,}",
            f"{r['read_s']:.2f}",
            f"{r['first_step_s']:.2f}",
            f"{r['peak_rss_mb']:.0f}",
            f"{r['extra_mb']:.0f}",
        ]
    )


def main(argv=None) -> int:
    p = harness.parser(
        __doc__.split("\n\n")[0], time_budget=600.0, json_path="results/corpus_scale.json"
    )
    p.add_argument(
        "--sizes",
        default=",".join(map(str, SIZES)),
        help="utterances per corpus, comma-separated (default %(default)s)",
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
    sizes = tuple(int(s) for s in args.sizes.split(","))
    formats = args.formats.split(",")
    work = args.work or Path(tempfile.mkdtemp(prefix="attnkit-corpus-scale-"))
    try:
        start = time.perf_counter()
        corpora = write_corpora(work, sizes)
        print(
            f"wrote {max(sizes):,} WAV files and {len(corpora)} corpora in "
            f"{time.perf_counter() - start:.0f} s; {harness.machine()}",
            flush=True,
        )
        print(HEADER)
        rows = []
        for fmt in formats:
            for n in sizes:
                if args.match is not None and args.match not in f"{fmt} {n}":
                    continue
                case = {"format": fmt, "n": n}
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
        harness.write_json(args.json, rows, batch=BATCH, seconds_per_file=SAMPLES / RATE)
    return 0


if __name__ == "__main__":
    sys.exit(main())
