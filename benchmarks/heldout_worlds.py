"""The speech and OCR models on worlds they were not trained in: voices and a synthesiser they
never heard, font families they never saw. Prints a Markdown table and writes JSON.

    python -m benchmarks.heldout_worlds --json results/heldout_worlds.json
    python -m benchmarks.heldout_worlds --asr build/models/asr-digits/checkpoint-best \\
        --ocr build/models/ocr-lines/checkpoint-best --utterances 100 --lines 50

Each held-out set is built afresh (split ``test``, seed 1) and written as the files a user
would have, then scored as ``attnkit eval`` scores them without decoding options (greedy
for speech, best path for CTC lines):

* speech (digits and numbers, ``--utterances`` per set): the espeak-ng voice variants held out
  of training (:data:`attnkit.data.worlds.speech.HELD_OUT_VARIANTS`) at the test speeds; festival's
  ``ked_diphone`` voice, held out; every festival voice in turn (a model trained on
  espeak-ng alone has never heard that engine); gnuspeech's ``small_child`` voice, held out,
  and every gnuspeech voice in turn (an engine a model trained on espeak-ng and festival has
  never heard); pico's ``en-GB`` voice, held out, and both pico voices in turn (an engine a model
  trained on the other three has never heard); the accented engine's ``czech_ph``, held out,
  and its seven voices in turn (festival's voices of other languages saying English);
* lines (``--lines`` per set): each font family held out of training
  (:data:`attnkit.data.worlds.lines.HELD_OUT_FAMILIES`) with real English sentences of 5-80
  characters, and the in-family held-out faces with the random text of 5-200 characters the
  model card's test split has; then the six families' sentences again with the text smaller
  in the line (:data:`TEXT_SIZES`: 60%, 75% and 90% of the height the renderer gives it, in a
  line of the same 32 pixels, placed at a random height), as text with wide margins is.

A model is a checkpoint folder or ``builtin:NAME``; ``--asr none`` or ``--ocr none`` leaves
one out. ``--against-asr`` / ``--against-ocr`` name a model to compare with: it is scored on
the same examples, and each row adds the CER difference (the model minus the other) with its
95% interval by a paired bootstrap over the examples (:func:`paired_difference`), the other
model's CER beside it. The six families then get one more row, their mean (each family's CER
averaged, as the model card gives it), its difference's interval resampling each family's lines
within that family (:func:`paired_mean_difference`).

The lines are rendered from the fonts :data:`attnkit.data.worlds.lines.FONT_ROOT` holds
(``/usr/share/fonts``, or the folder ``ATTNKIT_FONT_ROOT`` names); the JSON records it.
"""

from __future__ import annotations

import dataclasses
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from attnkit.data import write_line_folder, write_wav
from attnkit.data.audio.features import SAMPLE_RATE
from attnkit.data.augment.augmentation import example_rng
from attnkit.data.augment.line_augment import LineAugment, Scale
from attnkit.data.worlds import lines as line_world
from attnkit.data.worlds.lines import (
    HELD_OUT_FAMILIES,
    available_fonts,
    font_family,
    generate_lines,
)
from attnkit.data.worlds.speech import plan_utterances, utterances_audio
from attnkit.data.worlds.synthesis import (
    FESTIVAL_ACCENTS,
    FESTIVAL_VOICES,
    GNUSPEECH_VOICES,
    PICO_VOICES,
)
from attnkit.tasks.evaluator import Evaluation, evaluate
from attnkit.tasks.loading import load_evaluator
from attnkit.tasks.metrics import closest_reference, example_cer
from benchmarks import harness

SEED = 1
FAMILY_PREFIX = "family "  # the rows of the held-out families, averaged in one more row
TEXT_SIZES = (0.6, 0.75, 0.9)  # the text's height against the renderer's, in the same line


def speech_sets(n: int) -> dict[str, list]:
    """The planned utterances of each held-out speech world."""
    kinds = ("digits", "numbers")
    espeak = plan_utterances(n, split="test", seed=SEED, kinds=kinds)
    ked = plan_utterances(n, split="test", seed=SEED, kinds=kinds, engines=("festival",))
    child = plan_utterances(n, split="test", seed=SEED, kinds=kinds, engines=("gnuspeech",))
    pico = plan_utterances(n, split="test", seed=SEED, kinds=kinds, engines=("pico",))
    accented = plan_utterances(n, split="test", seed=SEED, kinds=kinds, engines=("accented",))
    return {
        "espeak-ng held-out variants": espeak,
        "festival ked (held-out voice)": ked,
        "festival, all three voices": _every_voice(ked, list(FESTIVAL_VOICES)),
        "gnuspeech small_child (held-out voice)": child,
        "gnuspeech, all four voices": _every_voice(child, list(GNUSPEECH_VOICES)),
        "pico en-GB (held-out voice)": pico,
        "pico, both voices": _every_voice(pico, list(PICO_VOICES)),
        "accented czech_ph (held-out voice)": accented,
        "accented, all seven voices": _every_voice(accented, list(FESTIVAL_ACCENTS)),
    }


def _every_voice(plan: list, voices: list[str]) -> list:
    """``plan`` with its voices taken from ``voices`` in turn."""
    return [dataclasses.replace(u, voice=voices[i % len(voices)]) for i, u in enumerate(plan)]


def line_sets(n: int) -> dict[str, list]:
    """The lines of each held-out font world."""
    fonts = available_fonts()["test"]
    sets = {}
    for family in HELD_OUT_FAMILIES["test"]:
        files = [f for f in fonts if font_family(f) == family]
        if files:
            sets[FAMILY_PREFIX + family] = generate_lines(
                n, split="test", seed=SEED, max_chars=80, prose=1.0, fonts=files
            )
    sets["in-family held-out faces"] = generate_lines(
        n, split="test", seed=SEED, max_chars=200, fonts="faces"
    )
    families = generate_lines(
        n, split="test", seed=SEED + 1, max_chars=80, prose=1.0, fonts="families"
    )
    for size in TEXT_SIZES:
        smaller = LineAugment([Scale(p=1.0, size=(size, size))])
        sets[f"six families, text at {size:.0%} height"] = [
            (smaller(image, example_rng(SEED, 0, i)), text)
            for i, (image, text) in enumerate(families)
        ]
    return sets


def score(checkpoint: str, data: Path) -> tuple[dict, Evaluation]:
    evaluator = load_evaluator(checkpoint)
    start = time.perf_counter()
    evaluation = evaluate(evaluator, data)
    return {**evaluation.metrics, "s": round(time.perf_counter() - start, 1)}, evaluation


def char_errors(evaluation: Evaluation) -> tuple[np.ndarray, np.ndarray]:
    """Each example's character edits against its closest reference, and that reference's
    length: ``(errors (N,), lengths (N,))``; their sums' ratio is the CER."""
    pairs = [
        (o.text, closest_reference(o.text, e.reference))
        for e, o in zip(evaluation.examples, evaluation.outputs)
    ]
    lengths = np.array([len(ref) for _, ref in pairs], dtype=np.float64)
    errors = np.array([example_cer(text, ref) for text, ref in pairs]) * lengths
    return errors, lengths


def paired_difference(
    ours: Evaluation, theirs: Evaluation, *, resamples: int = 10_000, seed: int = 0
) -> tuple[float, float, float]:
    """``(difference, low, high)``: the CER of ``ours`` minus that of ``theirs`` on the same
    examples, and the 2.5th and 97.5th percentiles of that difference over ``resamples``
    resamplings of the examples with replacement, each resample scoring both models on the
    same examples (the paired bootstrap of Koehn 2004)."""
    (a, n), (b, _) = char_errors(ours), char_errors(theirs)
    picks = np.random.default_rng(seed).integers(0, len(n), (resamples, len(n)))
    diffs = (a[picks].sum(1) - b[picks].sum(1)) / np.maximum(n[picks].sum(1), 1.0)
    low, high = np.percentile(diffs, [2.5, 97.5])
    return float((a.sum() - b.sum()) / max(n.sum(), 1.0)), float(low), float(high)


def paired_mean_difference(
    pairs: list[tuple[Evaluation, Evaluation]], *, resamples: int = 10_000, seed: int = 0
) -> tuple[float, float, float]:
    """``(difference, low, high)`` for the mean over worlds of each world's CER: ``pairs`` holds
    each world's ``(ours, theirs)`` on the same examples; the difference is the mean of ours
    minus the mean of theirs, and its interval the 2.5th and 97.5th percentiles over
    ``resamples`` stratified resamplings (each world's examples drawn with replacement within
    that world, both models scored on the same draw, then the worlds' differences averaged).
    One world gives :func:`paired_difference`'s difference."""
    rng = np.random.default_rng(seed)
    diffs = np.zeros(resamples)
    total = 0.0
    for ours, theirs in pairs:
        (a, n), (b, _) = char_errors(ours), char_errors(theirs)
        picks = rng.integers(0, len(n), (resamples, len(n)))
        diffs += (a[picks].sum(1) - b[picks].sum(1)) / np.maximum(n[picks].sum(1), 1.0)
        total += (a.sum() - b.sum()) / max(n.sum(), 1.0)
    low, high = np.percentile(diffs / len(pairs), [2.5, 97.5])
    return float(total / len(pairs)), float(low), float(high)


def main(argv=None) -> int:
    p = harness.parser(__doc__.splitlines()[0], time_budget=3600.0)
    p.add_argument("--asr", default="builtin:asr-digits", help="speech checkpoint, or none")
    p.add_argument("--ocr", default="builtin:ocr-lines", help="OCR checkpoint, or none")
    p.add_argument("--utterances", type=int, default=200, help="per speech world")
    p.add_argument("--lines", type=int, default=100, help="per font world")
    p.add_argument("--against-asr", help="a speech checkpoint to compare with (none)")
    p.add_argument("--against-ocr", help="an OCR checkpoint to compare with (none)")
    args = p.parse_args(argv)
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    rows = []
    against = {args.asr: args.against_asr, args.ocr: args.against_ocr}
    compare = args.against_asr or args.against_ocr
    print(
        harness.table_header(
            ["model", "world", "n", "CER %", "WER %", "exact %"]
            + (["other's CER %", "difference (95% interval)"] if compare else [])
        )
    )
    with tempfile.TemporaryDirectory() as tmp:
        worlds = []
        if args.asr != "none":
            for name, plan in speech_sets(args.utterances).items():
                if args.match and args.match not in name:
                    continue
                folder = Path(tmp) / f"speech-{len(worlds)}"
                folder.mkdir()
                manifest = [f"{i:05d}.wav\t{u.transcript}\n" for i, u in enumerate(plan)]
                for i, samples in enumerate(utterances_audio(plan)):
                    write_wav(folder / f"{i:05d}.wav", samples, SAMPLE_RATE)
                (folder / "manifest.tsv").write_text("".join(manifest), encoding="utf-8")
                worlds.append((args.asr, name, len(plan), folder / "manifest.tsv"))
        if args.ocr != "none":
            for name, lines in line_sets(args.lines).items():
                if args.match and args.match not in name:
                    continue
                folder = write_line_folder(lines, Path(tmp) / f"lines-{len(worlds)}").parent
                worlds.append((args.ocr, name, len(lines), folder))
        families: list[tuple[dict, dict, tuple[Evaluation, Evaluation]]] = []
        for model, name, n, data in worlds:
            metrics, evaluation = score(model, data)
            row = {"model": model, "world": name, "n": n, **metrics}
            cells = []
            if against.get(model):
                other, theirs = score(against[model], data)
                diff, low, high = paired_difference(evaluation, theirs)
                if name.startswith(FAMILY_PREFIX):
                    families.append((metrics, other, (evaluation, theirs)))
                row.update(
                    against=against[model],
                    against_cer=other["cer"],
                    cer_difference=diff,
                    cer_difference_95=[low, high],
                )
                cells = [
                    f"{100 * other['cer']:.2f}",
                    f"{100 * diff:+.2f} ({100 * low:+.2f} to {100 * high:+.2f})",
                ]
            elif compare:
                cells = ["", ""]
            rows.append(row)
            print(
                harness.table_row(
                    [
                        model,
                        name,
                        n,
                        *(
                            f"{100 * row[k]:.2f}" if k in row else ""
                            for k in ("cer", "wer", "exact")
                        ),
                        *cells,
                    ]
                ),
                flush=True,
            )
        if families:
            rows.append(_mean_row(args.ocr, args.against_ocr, families))
            mean = rows[-1]
            print(
                harness.table_row(
                    [
                        args.ocr,
                        mean["world"],
                        mean["n"],
                        f"{100 * mean['cer']:.2f}",
                        "",
                        "",
                        f"{100 * mean['against_cer']:.2f}",
                        "{:+.2f} ({:+.2f} to {:+.2f})".format(
                            100 * mean["cer_difference"],
                            *(100 * x for x in mean["cer_difference_95"]),
                        ),
                    ]
                ),
                flush=True,
            )
    if args.json:
        harness.write_json(
            args.json,
            rows,
            seed=SEED,
            utterances=args.utterances,
            lines=args.lines,
            font_root=str(line_world.FONT_ROOT),
        )
    return 0


def _mean_row(
    model: str, other: str, families: list[tuple[dict, dict, tuple[Evaluation, Evaluation]]]
) -> dict:
    """The row of the held-out families' mean CER, ours and the other model's, with the
    difference's stratified interval (:func:`paired_mean_difference`)."""
    diff, low, high = paired_mean_difference([pair for _, _, pair in families])
    return {
        "model": model,
        "world": f"the {len(families)} families (mean of the rows)",
        "n": sum(len(pair[0].examples) for _, _, pair in families),
        "cer": float(np.mean([ours["cer"] for ours, _, _ in families])),
        "against": other,
        "against_cer": float(np.mean([theirs["cer"] for _, theirs, _ in families])),
        "cer_difference": diff,
        "cer_difference_95": [low, high],
    }


if __name__ == "__main__":
    raise SystemExit(main())
