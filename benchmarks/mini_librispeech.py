"""Mini LibriSpeech (train-clean-5: read books, real voices), split by speaker:
``attnkit train asr --recipe mini-librispeech`` under a time budget, then the utterances of the
four held-out test speakers decoded and scored. Prints a Markdown table and writes JSON.

    python -m benchmarks.mini_librispeech --data build/corpora/mini_librispeech/LibriSpeech \\
        --time-budget 7200 --out runs/mini-librispeech --json results/mini_librispeech.json
    python -m benchmarks.mini_librispeech --data build/corpora/mini_librispeech/LibriSpeech \\
        --checkpoint runs/mini-librispeech/checkpoint-best --beam 8

``--data`` is the ``LibriSpeech`` folder (``SPEAKERS.TXT`` and ``train-clean-5/``; or
``train-clean-5`` itself), read with ``--format mini-librispeech``: training on every speaker
but the six held out, validation on two of them, scores on the other four (244 utterances;
which and why: docs/speech.md). Training, decoding and the options are those of
:mod:`benchmarks.an4`, whose functions this script runs.

Scores: jiwer's CER and WER over the whole test set (edits summed over utterances, divided by
the reference characters or words), each transcript normalised the same way first: upper
case, white space collapsed to single spaces (LibriSpeech's transcripts are upper-case words
and apostrophes; the model writes them so). No peer's figure on these speakers, or on
another split of train-clean-5 alone, was found (:data:`PEER`).
"""

from __future__ import annotations

from benchmarks import an4, harness

RECIPE = "mini-librispeech"
TEST_UTTERANCES = 244  # of the four test speakers (19, 32, 118, 163)
# What was looked for, and not found: a published WER or CER of a model trained on
# train-clean-5 alone. Kaldi's and ESPnet's mini_librispeech recipes score on dev-clean-2
# (other speakers, another subset of LibriSpeech); SpeechBrain's speech_recognition template
# (speechbrain/templates/speech_recognition, trained on mini-librispeech) publishes no figure.
PEER = (
    "none found: no published WER/CER of a model trained on train-clean-5 alone was found "
    "(searched: ESPnet's and Kaldi's mini_librispeech recipes, which score on dev-clean-2 "
    "and whose figures were not found; SpeechBrain's speech_recognition template, trained "
    "on mini-librispeech, which publishes none)"
)


def main(argv=None) -> int:
    args = an4.parse(
        argv,
        __doc__.splitlines()[0],
        data_help="the LibriSpeech folder (SPEAKERS.TXT and train-clean-5/)",
        out="runs/mini-librispeech",
    )
    ours, utterances = an4.run(args, recipe=RECIPE, format=RECIPE)
    an4.print_rows([ours], utterances, n=TEST_UTTERANCES)
    print(f"peer's figure: {PEER}")
    if args.json:
        harness.write_json(
            args.json,
            [ours],
            data=str(args.data),
            normalization=an4.NORMALIZATION,
            peer=PEER,
            utterances=utterances,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
