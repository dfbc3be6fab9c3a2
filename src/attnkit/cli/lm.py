"""``attnkit train lm``: a character language model on a recogniser's transcripts, and
loading it for shallow fusion (``read`` / ``transcribe --lm``)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

import torch

from attnkit.cli import argtypes, common
from attnkit.data import CharVocab, DataError, load_vocab
from attnkit.data.corpora.text_files import text_lines
from attnkit.tasks import loading
from attnkit.tasks.lm import CharLMTask
from attnkit.train import load_checkpoint

__all__ = ["add_train_parser"]


def add_train_parser(train_sub: common.SubParsers) -> None:
    p = train_sub.add_parser(
        "lm",
        help="train a character language model for shallow fusion",
        description="Train on transcripts (one per line) with the characters of a trained "
        "recogniser, for `read` / `transcribe --lm`.",
    )
    data = p.add_argument_group("data")
    data.add_argument(
        "--text",
        type=Path,
        required=True,
        help="UTF-8 transcripts, one per line (blank lines are skipped)",
    )
    data.add_argument(
        "--valid", type=Path, help="validation transcripts (default: the first 300 training lines)"
    )
    data.add_argument(
        "--vocab-from",
        type=Path,
        required=True,
        metavar="CHECKPOINT",
        help="the recogniser whose characters the LM uses",
    )
    model = p.add_argument_group("model")
    model.add_argument("--emb", type=argtypes.positive_int, default=64)
    model.add_argument("--hidden", type=argtypes.positive_int, default=256)
    model.add_argument("--layers", type=argtypes.positive_int, default=1)
    model.add_argument("--dropout", type=float, default=0.1)
    common.add_training_args(
        p, steps=5000, batch_size=64, lr=3e-3, eval_every=250, label_smoothing=0.0
    )
    p.set_defaults(run=run_train)


def _texts(path: Path) -> tuple[list[str], list[str]]:
    """Non-blank lines and their names (``path:line``)."""
    kept = [(f"{path}:{i}", line) for i, line in text_lines(path) if line.strip()]
    if not kept:
        raise DataError(f"{path}: no transcript (every line is blank)")
    return [line for _, line in kept], [name for name, _ in kept]


def _recogniser_chars(path: Path) -> CharVocab:
    vocab = load_vocab(load_checkpoint(path).vocab or {})
    if not isinstance(vocab, CharVocab):
        raise ValueError(
            f"--vocab-from: {path} has a subword vocabulary; a character LM "
            "needs a character recogniser (ocr, asr)"
        )
    return vocab


def run_train(args: argparse.Namespace) -> int:
    torch.manual_seed(args.seed)
    ck = loading.existing_run(args.out, "lm", resume=args.resume)
    wanted = {
        "name": "char_lm",
        "emb": args.emb,
        "hidden": args.hidden,
        "layers": args.layers,
        "dropout": args.dropout,
    }
    init = None if ck is not None else loading.initial_checkpoint(args.init, "lm", model=wanted)
    start = ck or init
    chars = (
        CharVocab.from_json(start.vocab)
        if start is not None
        else _recogniser_chars(args.vocab_from)
    )
    train, train_names = _texts(args.text)
    valid: Sequence[str]
    if args.valid:
        valid, valid_names = _texts(args.valid)
    else:
        valid = common.held_out(train, [], "transcripts")
        valid_names = train_names[: len(valid)]
    model_config = start.config["model"] if start is not None else wanted
    task = CharLMTask(
        train,
        valid,
        vocab=chars,
        model_config=model_config,
        batch_size=args.batch_size,
        seed=args.seed,
        origins=(train_names, valid_names),
        data={
            "text": str(args.text),
            "vocab_from": str(args.vocab_from),
            **({"valid": str(args.valid)} if args.valid else {}),
        },
    )
    model = task.build_model().to(args.device)
    common.train_and_report(model, task, args, tiebreak="-loss", init=init)
    return 0
