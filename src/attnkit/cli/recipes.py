"""``attnkit train TASK --recipe NAME``: the named sets of training options that produce the
built-in models (docs/models.md).

A recipe is shorthand for its options, placed right after ``train TASK``: any option written
on the command line as well wins over the recipe's value.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from attnkit.cli.common import Options


@dataclass(frozen=True)
class Recipe:
    """``task``: the ``attnkit train`` sub-command; ``options``: its command-line options;
    ``corpus``: for a recipe of a public corpus, what ``--train`` must name (else the built-in
    data), and ``guide`` the page that says how to get it."""

    task: str
    options: tuple[str, ...]
    corpus: str | None = None
    guide: str = "and --valid: docs/translation.md"


# the speech of builtin:asr-digits: digit strings and numbers, the five engines, the strong
# augmentation
DIGITS_SPEECH = (
    "--kinds",
    "digits,numbers",
    "--engines",
    "espeak-ng,festival,gnuspeech,pico,accented",
    "--augment",
    "strong",
)
# the size of the LAS of builtin:asr-digits and of the real-speech recipes
LAS_SIZE = (
    "--listener-hidden",
    "128",
    "--hidden",
    "256",
    "--key-value-dim",
    "128",
)
# the model and loss options of builtin:asr-digits
DIGITS_LAS = (
    *LAS_SIZE,
    "--batch-size",
    "32",
    "--ctc-weight",
    "0.2",
    "--teacher-forcing",
    "1.0",
    "--teacher-forcing-end",
    "0.8",
    "--teacher-forcing-steps",
    "4000",
)
# The Multi30k recipes' data, schedule and validation, for either model.
MULTI30K_TRAINING = (
    "--vocab",
    "unigram",
    "--vocab-size",
    "8000",
    "--shared-vocab",
    "--label-smoothing",
    "0.1",
    "--batch-size",
    "128",
    "--lr",
    "1e-3",
    "--warmup",
    "400",
    "--schedule",
    "inverse_sqrt",
    "--steps",
    "20000",
    "--time-budget",
    "5400",
    "--eval-every",
    "500",
    "--checkpoint-every",
    "500",
    "--keep-best",
    "5",
    "--best-by",
    "bleu",
)
MULTI30K = (
    *MULTI30K_TRAINING,
    "--model",
    "transformer",
    "--hidden",
    "256",
    "--heads",
    "4",
    "--layers",
    "3",
    "--ff",
    "1024",
    "--dropout",
    "0.2",
    # the token-level unlikelihood loss (Welleck et al. 2020): without it a few test outputs
    # loop to the length limit; with it none does, at the same BLEU (docs/translation.md)
    "--unlikelihood",
    "1.0",
)
# Luong et al. (2015) with input feeding and the general score over a bidirectional GRU
# encoder: the seeds' RNN translator at the size of OpenNMT-py's RNN defaults (500 units there)
# brought to 256, with dropout 0.3 as Luong et al. used.
MULTI30K_RNN = (
    *MULTI30K_TRAINING,
    "--model",
    "luong",
    "--input-feeding",
    "--score",
    "general",
    "--emb",
    "256",
    "--hidden",
    "256",
    "--dropout",
    "0.3",
)

# The built-in lines and the model of builtin:ocr-lines: its recipe and the recipes that
# fine-tune it (--init requires the same model options).
OCR_LINES = (
    "--max-chars",
    "80",
    "--prose",
    "0.5",
    "--augment",
    "light",
    "--attention",
    "window",
    "--window",
    "32",
    "--hidden",
    "128",
    "--batch-size",
    "32",
)

# LAS on real speech (the an4 and mini-librispeech recipes): characters, joint CTC/attention,
# the light augmentation (speed perturbation 0.9-1.1, SpecAugment), label smoothing, the
# shortest utterances first in the first epoch, teacher forcing eased from 1.0 to 0.9.
REAL_SPEECH_LAS = (
    "--augment",
    "light",
    *LAS_SIZE,
    "--dropout",
    "0.1",
    "--lr",
    "1e-3",
    "--label-smoothing",
    "0.1",
    "--ctc-weight",
    "0.3",
    "--sortagrad",
    "1",
    "--teacher-forcing",
    "1.0",
    "--teacher-forcing-end",
    "0.9",
)

RECIPES = {
    "translate-dates": Recipe(
        "translate",
        (
            "--n-train",
            "50000",
            "--n-valid",
            "1000",
            "--steps",
            "10000",
            "--eval-every",
            "1000",
            "--checkpoint-every",
            "1000",
        ),
    ),
    # Multi30k (Elliott et al. 2016), task 1, as the public repository multi30k/dataset has it
    # (data/task1/raw/*.gz): give --train train.en.gz train.de.gz --valid val.en.gz val.de.gz.
    # A Transformer (Vaswani et al. 2017) of d_model 256, 3 layers, one joint unigram
    # vocabulary of 8,000 pieces and one embedding for both sides and the output (Press & Wolf
    # 2017), checkpoint-best by validation BLEU and the 5 best kept for averaging
    # (docs/translation.md); the -rnn recipes: MULTI30K_RNN.
    "multi30k-en-de": Recipe("translate", MULTI30K, "train.en.gz train.de.gz"),
    "multi30k-en-fr": Recipe("translate", MULTI30K, "train.en.gz train.fr.gz"),
    "multi30k-en-de-rnn": Recipe("translate", MULTI30K_RNN, "train.en.gz train.de.gz"),
    "multi30k-en-fr-rnn": Recipe("translate", MULTI30K_RNN, "train.en.gz train.fr.gz"),
    # the fonts of every family not held out, half the lines real sentences, and the light
    # augmentation: scale, stretch, rotation, shear (italics), baseline, margins, stroke width,
    # shades, blur, noise and JPEG. Measured: 8-9 s a step with one torch thread on an AVX2
    # AMD EPYC beside another training (docs/models.md)
    "ocr-lines": Recipe(
        "ocr",
        (
            "--n-train",
            "30000",
            "--n-valid",
            "400",
            *OCR_LINES,
            "--lr",
            "1e-3",
            "--steps",
            "1800",
            "--eval-every",
            "500",
            "--checkpoint-every",
            "500",
        ),
    ),
    # builtin:ocr-lines fine-tuned on real print: the lines of ALTO / PAGE-XML pages (give
    # --train and --valid as lists of documents held out whole; docs/ocr.md splits
    # FoNDUE-EN-PRINT-20: Dracula the test document, The Turn of the Screw validation, the
    # others training), every other training line a built-in rendered one (the synthetic
    # worlds of ocr-lines: its --max-chars, --prose and augmentation), so that the model keeps
    # what it read before; measured, it keeps most of it, not all (text at 60% of the line's
    # height +3.5 points CER; the held-out font families' mean +0.18 points, beyond noise, even
    # with 80% built-in lines and the card's --scale: docs/ocr.md), so builtin:ocr-lines is
    # not this recipe's model. The model options are ocr-lines's (--init requires them); a
    # lower learning rate and a short warm-up for a short run; --max-unusable 0.3: lines with
    # characters outside the alphabet (curly quotes, dashes, FoNDUE's hyphen mark) are left
    # out of training, counted.
    "ocr-real": Recipe(
        "ocr",
        (
            "--init",
            "builtin:ocr-lines",
            "--synthetic-share",
            "0.5",
            "--max-unusable",
            "0.3",
            *OCR_LINES,
            "--lr",
            "3e-4",
            "--warmup",
            "20",
            "--steps",
            "1000",
            "--eval-every",
            "50",
            "--checkpoint-every",
            "50",
        ),
        "train.lst --valid valid.lst",
        "lists of ALTO or PAGE-XML documents: docs/ocr.md",
    ),
    # the five engines (every espeak-ng variant but the held-out ones; festival's kal and
    # slt voices; gnuspeech's male, female and large_child; pico's en-US; six of festival's
    # voices of other languages saying English) and the strong
    # augmentation: speed, gain, reverberation, noise, telephone band, vocal-tract length and
    # SpecAugment. Measured: 2.3-3.3 s a step with one torch thread on an AVX2 AMD EPYC beside
    # another training (docs/models.md)
    "asr-digits": Recipe(
        "asr",
        (
            *DIGITS_SPEECH,
            "--n-train",
            "12000",
            "--n-valid",
            "300",
            *DIGITS_LAS,
            "--lr",
            "1e-3",
            "--pretrain-lm-steps",
            "300",
            "--steps",
            "4500",
            "--eval-every",
            "500",
            "--checkpoint-every",
            "500",
        ),
    ),
    # builtin:asr-digits fine-tuned on real voices too: AN4's digit strings and numbers in
    # words (--words numbers: 224 utterances of ESPnet's train_nodev, 66 speakers; --train and
    # --valid the AN4 folder; validation on train_dev's, 8 other speakers; AN4's test speakers
    # held out: docs/speech.md), three of every four training utterances built-in ones of the
    # five engines (--synthetic-share 0.75, their own data seed), half of whose zeros are said
    # "oh" as AN4's speakers say them (--say-oh 0.5; the transcript keeps "zero"), with
    # asr-digits's model options (--init requires them), augmentation and the last round's
    # fine-tuning settings (src/attnkit/pretrained/asr-digits/MODEL_CARD.md). Measured: the
    # 1,500 steps in 74 minutes with one torch thread, another training on the other core
    # (docs/speech.md has its figures).
    "asr-digits-real": Recipe(
        "asr",
        (
            "--init",
            "builtin:asr-digits",
            "--format",
            "an4",
            "--words",
            "numbers",
            "--transcripts",
            "normalize",
            "--synthetic-share",
            "0.75",
            "--say-oh",
            "0.5",
            "--data-seed",
            "59",
            *DIGITS_SPEECH,
            *DIGITS_LAS,
            "--dropout",
            "0.15",
            "--pitch-shift",
            "0.8,1.6",
            "--voice-source",
            "3,30",
            "--lr",
            "5e-4",
            "--schedule",
            "cosine",
            "--warmup",
            "20",
            "--steps",
            "1500",
            "--eval-every",
            "100",
            "--checkpoint-every",
            "100",
        ),
        "the AN4 folder (etc/ and wav/)",
        "and --valid: docs/speech.md",
    ),
    # CMU's AN4 (real speech, 848 training utterances of ESPnet's train_nodev; --train and
    # --valid the AN4 folder, --format an4): characters, as AN4 spells names and words letter
    # by letter (upper case, as its transcripts); joint CTC/attention; the light augmentation
    # (speed perturbation 0.9-1.1, SpecAugment) as ESPnet's egs2/an4 has speed perturbation
    # and SpecAugment. Measured with one torch thread, another training on the other core:
    # 2,400 steps in 3,081 s, 6,184 in 2 hours (docs/speech.md); --steps is past what 2 hours
    # give, so --time-budget ends it (the schedule does not depend on --steps).
    "an4": Recipe(
        "asr",
        (
            "--format",
            "an4",
            *REAL_SPEECH_LAS,
            "--batch-size",
            "16",
            "--warmup",
            "200",
            "--teacher-forcing-steps",
            "2000",
            "--steps",
            "7000",
            "--eval-every",
            "200",
            "--checkpoint-every",
            "200",
        ),
    ),
    # Mini LibriSpeech (train-clean-5: read books, 1,151 training utterances of 22 speakers
    # once the test and validation speakers are held out; --train and --valid the LibriSpeech
    # folder, --format mini-librispeech: docs/speech.md): the an4 recipe's LAS over characters
    # (upper case, as LibriSpeech's transcripts); batch 8, as its utterances are four times
    # AN4's (14 s median, 17 s at most); 2,000 steps, 14 epochs, validation every 200 on the
    # 124 utterances of the two validation speakers. Measured: 7 steps in 180 s (about 25 s a
    # step) on 2 CPU cores shared with a long training, so --time-budget ends it far sooner.
    "mini-librispeech": Recipe(
        "asr",
        (
            "--format",
            "mini-librispeech",
            *REAL_SPEECH_LAS,
            "--batch-size",
            "8",
            "--warmup",
            "200",
            "--teacher-forcing-steps",
            "1600",
            "--steps",
            "2000",
            "--eval-every",
            "200",
            "--checkpoint-every",
            "200",
        ),
        "LibriSpeech (the folder of SPEAKERS.TXT and train-clean-5/)",
        "and --valid: docs/speech.md",
    ),
}


def add_recipe_arg(p: Options, task: str) -> None:
    """``--recipe``, offering the recipes of ``task``."""
    names = [n for n, r in RECIPES.items() if r.task == task]
    p.add_argument(
        "--recipe",
        choices=names,
        help="the options that trained the built-in model of that name "
        "(docs/models.md); options given here as well win",
    )


def check_corpus(name: str | None, train: object) -> None:
    """A recipe of a public corpus (:attr:`Recipe.corpus`) run without ``--train`` is a
    ValueError naming the files to give."""
    recipe = RECIPES.get(name) if name is not None else None
    if recipe is not None and recipe.corpus is not None and not train:
        raise ValueError(
            f"--recipe {name}: give the corpus: --train {recipe.corpus} ({recipe.guide})"
        )


def expand(argv: list[str], name: str) -> list[str]:
    """``argv`` (an ``attnkit train TASK ... --recipe NAME ...`` command line) with the options
    of recipe ``name`` inserted right after ``TASK``."""
    at = argv.index("train") + 2
    return argv[:at] + list(RECIPES[name].options) + argv[at:]
