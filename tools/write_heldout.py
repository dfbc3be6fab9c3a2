"""Write held-out built-in data in the formats `attnkit eval --data` reads, for the model card
(docs/models.md): translation pairs as a TSV, text lines as a folder with labels.tsv, speech as
WAV files with a manifest.

    python tools/write_heldout.py --out heldout --split test --seed 1 \
        --pairs 1000 --lines 300 --utterances 200
"""

from __future__ import annotations

import argparse
from pathlib import Path

from attnkit.data import (
    generate_lines,
    generate_pairs,
    plan_utterances,
    utterances_audio,
    write_line_folder,
    write_wav,
)
from attnkit.data.audio.features import SAMPLE_RATE


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--split", choices=("valid", "test"), default="test")
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--pairs", type=int, default=1000)
    p.add_argument("--lines", type=int, default=300)
    p.add_argument("--utterances", type=int, default=200)
    p.add_argument(
        "--engines",
        default="espeak-ng",
        help="speech synthesisers, comma-separated (espeak-ng, festival, gnuspeech, pico)",
    )
    p.add_argument("--prose", type=float, default=0.0, help="share of lines that are sentences")
    args = p.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    pairs = generate_pairs(args.pairs, split=args.split, seed=args.seed)
    (args.out / "pairs.tsv").write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    write_line_folder(
        generate_lines(
            args.lines,
            split=args.split,
            seed=args.seed,
            min_chars=5,
            max_chars=200,
            prose=args.prose,
        ),
        args.out / "lines",
    )
    speech = args.out / "speech"
    speech.mkdir(exist_ok=True)
    plan = plan_utterances(
        args.utterances,
        split=args.split,
        seed=args.seed,
        kinds=("digits", "numbers"),
        engines=tuple(args.engines.split(",")),
    )
    rows = []
    for i, (u, samples) in enumerate(zip(plan, utterances_audio(plan))):
        write_wav(speech / f"{i:05d}.wav", samples, SAMPLE_RATE)
        rows.append(f"{i:05d}.wav\t{u.transcript}\n")
    (speech / "manifest.tsv").write_text("".join(rows), encoding="utf-8")
    print(f"wrote {args.out}/pairs.tsv, {args.out}/lines/, {args.out}/speech/manifest.tsv")


if __name__ == "__main__":
    main()
