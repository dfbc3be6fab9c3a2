"""``attnkit train ocr`` and ``attnkit read``: text-line recognition."""

from __future__ import annotations

import argparse
import hashlib
import logging
from collections.abc import Sequence
from pathlib import Path

import torch

from attnkit.attention import SCORES
from attnkit.cli import argtypes, augment, common, inference, ocr_pages, recipes
from attnkit.cli.corpus import (
    add_format_args,
    add_limit_arg,
    read_splits,
)
from attnkit.cli.decoder_options import (
    add_alignment_args,
    add_loss_args,
    alignment_config,
    joint_decoding,
)
from attnkit.data import (
    ALPHABET,
    CharVocab,
    JoinedLines,
    available_fonts,
    iter_lines,
    load_line_image,
    read_line_folder,
    write_line_folder,
)
from attnkit.data.corpora.line_folders import LineFolder
from attnkit.data.corpora.line_formats import LABELS
from attnkit.models import CRNN
from attnkit.tasks.ocr import Line, OcrTask, plot_line, read_lines

log = logging.getLogger("attnkit")

DESCRIPTION = (
    "Train on your folder of line images (labels.tsv of filename<TAB>text, or "
    "NAME.png + NAME.gt.txt pairs), ALTO or PAGE-XML pages beside their images, or a "
    "Hugging Face dataset (see --format), or on built-in rendered lines."
)


def channel_list(text: str) -> tuple[int, ...]:
    values = tuple(int(c) for c in text.split(","))
    if len(values) != 5 or min(values) < 1:
        raise ValueError(text)
    return values


channel_list.__name__ = "five positive ints (e.g. 32,64,128,128,128)"


def add_train_parser(train_sub: common.SubParsers) -> None:
    p, data = common.add_task_parser(
        train_sub,
        "ocr",
        help="train a text-line recogniser (CRNN)",
        description=DESCRIPTION,
        files="folder with line images and a labels TSV or .gt.txt files, or hf:PATH[:SPLIT]",
        valid="the same",
        n_train=20000,
        n_valid=300,
    )
    data.add_argument(
        "--labels", default=LABELS, help=f"labels: the TSV's name in each folder (default {LABELS})"
    )
    data.add_argument("--min-chars", type=argtypes.positive_int, default=5)
    data.add_argument(
        "--max-chars",
        type=argtypes.positive_int,
        default=200,
        help="longest built-in training line (validation: 5-200)",
    )
    data.add_argument(
        "--prose",
        type=argtypes.probability,
        default=0.0,
        metavar="P",
        help="share of built-in lines (training and validation) that are real "
        "English sentences rather than random words, numbers and codes "
        "(default 0)",
    )
    data.add_argument(
        "--synthetic-share",
        type=argtypes.proportion,
        default=0.0,
        metavar="P",
        help="with --train: that share of the training lines are built-in rendered ones "
        "(--max-chars, --prose, drawn from the training fonts), mixed with --train's lines "
        "(validation: --valid's alone; default 0: none)",
    )
    data.add_argument(
        "--cache-dir", type=Path, help="keep rendered built-in lines here (default: OUT/lines)"
    )
    add_limit_arg(data, "ocr")
    model = p.add_argument_group("model")
    model.add_argument(
        "--attention",
        choices=("none", "global", "window"),
        default="window",
        help="the attention layer between RNN1 and RNN2",
    )
    model.add_argument("--window", type=argtypes.positive_int, default=32, help="steps each side")
    model.add_argument(
        "--score",
        choices=("dot", "scaled_dot", "general", "additive", "cosine"),
        default="scaled_dot",
    )
    model.add_argument("--heads", type=argtypes.positive_int, default=1)
    model.add_argument("--head", choices=("ctc", "attention"), default="ctc")
    model.add_argument("--channels", type=channel_list, default=(32, 64, 128, 128, 128))
    model.add_argument("--hidden", type=argtypes.positive_int, default=128)
    model.add_argument("--dec-hidden", type=argtypes.positive_int, default=128)
    model.add_argument(
        "--dec-score",
        choices=SCORES,
        default="additive",
        help="attention head: its score (softmax and local_p alignments)",
    )
    add_alignment_args(model)
    add_loss_args(
        model,
        head="attention head: ",
        ctc=" of an auxiliary CTC head (0: none)",
        diagonal="the line",
        order="narrowest",
    )
    model.add_argument("--dropout", type=argtypes.proportion, default=0.1)
    augment.add_line_args(p)
    common.add_training_args(
        p, steps=20000, batch_size=32, lr=1e-3, eval_every=500, label_smoothing=0.0
    )
    add_format_args(p, "ocr")
    p.set_defaults(run=run_train)


def _built_in(
    args: argparse.Namespace, split: str, n: int, min_chars: int, max_chars: int
) -> LineFolder:
    # the cache's name says the settings and the fonts the lines were drawn from
    fonts = hashlib.sha256("\n".join(p.name for p in available_fonts()[split]).encode())
    cache = (args.cache_dir or args.out / "lines") / (
        f"{split}-{n}-seed{common.data_seed(args)}-{min_chars}-{max_chars}"
        f"{f'-prose{args.prose:g}' if args.prose else ''}-fonts{fonts.hexdigest()[:8]}"
    )
    if (cache / "labels.tsv").exists():
        return read_line_folder(cache, cache / "labels.tsv")
    log.info("rendering %d %s lines into %s", n, split, cache)
    write_line_folder(
        iter_lines(
            n,
            split=split,
            seed=common.data_seed(args),
            min_chars=min_chars,
            max_chars=max_chars,
            prose=args.prose,
        ),
        cache,
    )  # one line in memory at a time
    return read_line_folder(cache, cache / "labels.tsv")  # what later runs will read


def _lines(args: argparse.Namespace) -> tuple[Sequence[Line], Sequence[Line]]:
    if args.train:
        read = dict(
            alphabet=ALPHABET,
            max_width=args.max_width,
            labels=None if args.labels == LABELS else args.labels,
        )
        train, valid = read_splits("ocr", args, **read)
        n = common.synthetic_count(len(train), args.synthetic_share)
        if n:
            log.info("mixing %d built-in lines with the %d lines of --train", n, len(train))
            built_in = _built_in(args, "train", n, args.min_chars, args.max_chars)
            train = JoinedLines([train, built_in])
        return train, valid or []
    if args.synthetic_share:
        raise ValueError(
            "--synthetic-share: mixes built-in lines with --train's; give --train "
            "(without it every line is built-in)"
        )
    return (
        _built_in(args, "train", args.n_train, args.min_chars, args.max_chars),
        _built_in(args, "valid", args.n_valid, 5, 200),
    )


def run_train(args: argparse.Namespace) -> int:
    recipes.check_corpus(args.recipe, args.train)
    torch.manual_seed(args.seed)
    wanted = dict(
        name="crnn",
        channels=list(args.channels),
        hidden=args.hidden,
        attention=None if args.attention == "none" else args.attention,
        window=args.window,
        score=args.score,
        heads=args.heads,
        head=args.head,
        dec_hidden=args.dec_hidden,
        dropout=args.dropout,
        **_decoder_config(args),
    )
    ck, init = common.run_checkpoints(args, "ocr", model=wanted)
    start = ck or init
    augmentations = augment.line_augmentations(args, ck)
    train, valid = _lines(args)
    valid = common.held_out(train, valid, "lines")
    model_config = start.config["model"] if start is not None else wanted
    data = (
        {
            "train": str(args.train),
            "valid": str(args.valid),
            **(
                {
                    "synthetic_share": args.synthetic_share,
                    "n_synthetic": len(train.parts[-1]),
                    "max_chars": args.max_chars,
                    "prose": args.prose,
                }
                if isinstance(train, JoinedLines)
                else {}
            ),
        }
        if args.train
        else {
            "built_in": "lines",
            "n_train": args.n_train,
            "n_valid": args.n_valid,
            "min_chars": args.min_chars,
            "max_chars": args.max_chars,
            "prose": args.prose,
        }
    )
    task = OcrTask(
        train,
        valid,
        model_config=model_config,
        **common.sequence_task_options(args, "ctc_weight", "guided_attention", "sortagrad"),
        data=data,
        vocab=CharVocab.from_json(start.vocab) if start is not None else None,
        augment=augmentations,
    )
    model = task.build_model().to(args.device)
    if (
        common.train_and_report(
            model, task, args, metric="char_accuracy", tiebreak="line_accuracy", init=init
        )
        is not None
    ):
        _samples_and_pictures(model, task.chars, task.valid, args.out, args.plot)
    return 0


def _decoder_config(args: argparse.Namespace) -> dict:
    """The attention head's score and alignment (nothing for the CTC head)."""
    if args.head == "attention":
        config = alignment_config(args)
        return {
            "dec_score": args.dec_score,
            "dec_alignment": config["alignment"],
            "dec_alignment_options": config["alignment_options"],
        }
    if args.dec_score != "additive" or args.alignment != "softmax":
        raise ValueError(
            "--dec-score, --alignment: options of --head attention (the CTC head has no decoder)"
        )
    return {}


def _samples_and_pictures(
    model: CRNN, chars: CharVocab, lines: Sequence[Line], out: Path, n_plots: int
) -> None:
    shown = lines[: max(n_plots, 5)]
    readings = read_lines(model, chars, [image for image, _ in shown], weights=n_plots > 0)
    for (_, ref), reading in list(zip(shown, readings))[:5]:
        text = reading.texts[0]
        print(f"  {text}" + ("" if text == ref else f"   (reference: {ref})"))
    eos = model.head_kind == "attention"
    for i, ((image, _), r) in enumerate(zip(shown[:n_plots], readings)):
        path = plot_line(
            image,
            r.texts[0],
            r.weights,
            r.steps,
            out / f"line_{i}.png",
            eos=eos,
            self_attention=r.self_attention,
        )
        if path is not None:
            print(f"  wrote {path}")


def add_read_parser(sub: common.SubParsers) -> None:
    p = sub.add_parser("read", help="read text-line images with a trained OCR checkpoint")
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument(
        "images",
        nargs="*",
        type=Path,
        help="line images (any size: scaled to 32 "
        "px); -: read their paths from standard input, one a line, each printed as "
        "soon as it is read; or ALTO / PAGE-XML pages (.xml), each line read and the "
        "page's text written into a copy (--out)",
    )
    inference.add_inference_args(p, "ocr", plot="folder for one picture per image")
    ocr_pages.add_page_args(p)
    p.set_defaults(run=run_read)


def run_read(args: argparse.Namespace) -> int:
    decoding = joint_decoding(args, common.decoding(args))
    if ocr_pages.is_pages(args):
        if common.wants_weights(args):
            raise ValueError("--plot, --html: for line images, not for pages (.xml)")
        return ocr_pages.read_pages_cli(args, decoding)
    if args.out is not None or args.force:
        raise ValueError("--out, --force: for pages (ALTO, PAGE-XML), not for line images")
    return inference.decode_files(
        args,
        "ocr",
        decoding,
        args.images,
        lambda path: load_line_image(path, max_width=args.max_width),
        expected="line images",
        picture="line",
    )
