"""``attnkit train translate`` and ``attnkit translate``."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from attnkit.cli import argtypes, common, corpus, inference, jsonlines, recipes
from attnkit.cli.corpus import add_format_args, add_limit_arg, named, read_splits
from attnkit.data import CharVocab, SubwordVocab, generate_pairs, load_vocab
from attnkit.data.corpora.text_files import text_lines
from attnkit.decoding import Hypotheses
from attnkit.models import Seq2Seq, Transformer
from attnkit.tasks import loading
from attnkit.tasks.translate import BEST_BY, TranslateTask, plot_translation

# The option of each model config key not named after it (see attnkit.tasks.loading.existing_run).
OPTIONS = {
    "name": "--model",
    "kind": "--model",
    "d_model": "--hidden",
    "shared_embeddings": "--shared-vocab",
}
# The model options that only some models take (--hidden and --dropout apply to every one), and
# their defaults: an option given for a model that does not take it is refused.
TAKEN_BY = {
    "emb": ("bahdanau", "luong", "none"),
    "enc_hidden": ("bahdanau", "luong", "none"),
    "score": ("luong",),
    "input_feeding": ("luong",),
    "heads": ("transformer",),
    "layers": ("transformer",),
    "ff": ("transformer",),
}
DEFAULTS = {
    "emb": 64,
    "enc_hidden": None,
    "score": "general",
    "input_feeding": False,
    "heads": 4,
    "layers": 2,
    "ff": None,
}


def add_train_parser(train_sub: common.SubParsers) -> None:
    p, data = common.add_task_parser(
        train_sub,
        "translate",
        help="train a seq2seq translator",
        description="Train on your corpus (a TSV of source<TAB>target lines, two aligned "
        "text files, a Hugging Face dataset: see --format) or on the built-in numbers/dates "
        "task.",
        files="a TSV of source<TAB>target, a Moses prefix (with --src-lang, "
        "--tgt-lang) or its two files, or hf:PATH[:SPLIT]",
        valid="the same",
        n_train=20000,
        n_valid=300,
        paths="+",
    )
    data.add_argument(
        "--skip-bad-lines",
        action="store_true",
        help="tsv, moses: skip bad lines (counted in a warning) instead of stopping",
    )
    add_limit_arg(data, "translate")
    data.add_argument(
        "--tasks",
        type=argtypes.choice_list(("numbers", "dates"), "task list"),
        default=("numbers", "dates"),
        help="built-in tasks, comma-separated (default numbers,dates)",
    )
    data.add_argument("--direction", choices=("forward", "reverse"), default="forward")
    data.add_argument(
        "--vocab",
        choices=("char", "unigram", "bpe"),
        default="char",
        help="characters, or SentencePiece subwords trained on --train",
    )
    data.add_argument(
        "--vocab-size",
        type=argtypes.positive_int,
        default=1000,
        help="SentencePiece: pieces at most",
    )
    data.add_argument(
        "--shared-vocab",
        action="store_true",
        help="one vocabulary for sources and targets, built from both (with --model "
        "transformer: one embedding for both sides and the output, Press & Wolf 2017)",
    )
    data.add_argument(
        "--max-tokens",
        type=argtypes.positive_int,
        metavar="N",
        help="training batches of at most N padded tokens (by the longer side of each pair: "
        "many short sentences or few long ones) instead of --batch-size sentences, which "
        "then sizes validation batches only",
    )
    data.add_argument(
        "--subword-sampling",
        type=argtypes.proportion,
        default=0.0,
        metavar="ALPHA",
        help="SentencePiece vocabularies: segment each training batch by a random draw "
        "(unigram: subword regularisation with this alpha, Kudo 2018; bpe: BPE-dropout with "
        "this rate, Provilkov et al. 2020), so words split into characters are trained on; "
        "0: off (default)",
    )
    model = p.add_argument_group("model")
    model.add_argument(
        "--model", choices=("bahdanau", "luong", "transformer", "none"), default="bahdanau"
    )
    model.add_argument(
        "--score",
        choices=("dot", "general", "additive"),
        help="Luong's attention score (default general)",
    )
    model.add_argument(
        "--input-feeding", action="store_true", default=None, help="Luong: input feeding"
    )
    model.add_argument(
        "--emb", type=argtypes.positive_int, help="RNN models: embedding size (default 64)"
    )
    model.add_argument(
        "--hidden",
        type=argtypes.positive_int,
        default=128,
        help="RNN hidden size; the Transformer's d_model",
    )
    model.add_argument(
        "--enc-hidden",
        type=argtypes.positive_int,
        help="RNN models: the bidirectional encoder's units per direction (default --hidden; "
        "OpenNMT-py's encoders take half the decoder's size)",
    )
    model.add_argument("--heads", type=argtypes.positive_int, help="Transformer: heads (default 4)")
    model.add_argument(
        "--layers",
        type=argtypes.positive_int,
        help="Transformer: encoder and decoder layers (default 2)",
    )
    model.add_argument(
        "--ff",
        type=argtypes.positive_int,
        help="Transformer: feed-forward size (default 4 * hidden)",
    )
    model.add_argument(
        "--dropout",
        type=argtypes.proportion,
        default=None,
        help="default 0.0 for RNN models, 0.1 for the Transformer",
    )
    add_format_args(p, "translate")
    common.add_training_args(p)
    p.add_argument(
        "--unlikelihood",
        type=argtypes.non_negative_float,
        default=0.0,
        metavar="ALPHA",
        help="add the token-level unlikelihood loss with this weight (Welleck et al. 2020): "
        "the target's earlier tokens, other than the one due, made unlikely at each step, "
        "against outputs that repeat their last pieces; 0: off (default)",
    )
    p.add_argument(
        "--best-by",
        choices=tuple(BEST_BY),
        help="the validation metric that picks checkpoint-best and drives --patience: bleu "
        "(sacreBLEU; ties broken by chrF), chrf, loss (cross-entropy per token) or exact "
        "(exact match; ties broken by CER). Default: bleu with --train, exact on the built-in "
        "data",
    )
    p.set_defaults(run=run_train)


def _pairs(
    args: argparse.Namespace,
) -> tuple[Sequence[tuple[str, str]], Sequence[tuple[str, str]]]:
    if args.train:
        read = dict(skip_bad_lines=args.skip_bad_lines or None, max_chars=args.max_chars)
        train, valid = read_splits("translate", args, **read)
        return train, valid or []
    kw = dict(seed=common.data_seed(args), tasks=args.tasks, direction=args.direction)
    return (
        generate_pairs(args.n_train, split="train", **kw),
        generate_pairs(args.n_valid, split="valid", **kw),
    )


def run_train(args: argparse.Namespace) -> int:
    recipes.check_corpus(args.recipe, args.train)
    torch.manual_seed(args.seed)
    checks: dict[str, Any] = dict(
        model=_model_config(args),
        options=OPTIONS,
        vocab={"kind": args.vocab, "size": args.vocab_size},
    )
    ck, init = common.run_checkpoints(args, "translate", **checks)
    start = ck or init
    train, valid = _pairs(args)
    valid = common.held_out(train, valid, "pairs")
    data = (
        {"train": named(args.train), "valid": named(args.valid)}
        if args.train
        else {
            "built_in": list(args.tasks),
            "direction": args.direction,
            "n_train": args.n_train,
            "n_valid": args.n_valid,
        }
    )
    task_kw = dict(
        model_config=start.config["model"] if start else _model_config(args),
        batch_size=args.batch_size,
        seed=args.seed,
        vocab=args.vocab,
        vocab_size=args.vocab_size,
        shared_vocab=args.shared_vocab,
        label_smoothing=args.label_smoothing,
        subword_sampling=args.subword_sampling,
        unlikelihood=args.unlikelihood,
        max_tokens=args.max_tokens,
        teacher_forcing=common.teacher_forcing(args),
        data=data,
    )
    if start is not None:
        task_kw.update(
            src_vocab=load_vocab(start.vocab["src"]), tgt_vocab=load_vocab(start.vocab["tgt"])
        )
    task = TranslateTask(train, valid, **task_kw)
    model = task.build_model().to(args.device)
    metric, tiebreak = BEST_BY[args.best_by or ("bleu" if args.train else "exact")]
    result = common.train_and_report(model, task, args, metric=metric, tiebreak=tiebreak, init=init)
    if result is not None:
        _samples_and_plots(model, task, args.out, args.plot)
    return 0


def _model_options(args: argparse.Namespace) -> dict:
    """The options of ``--model``, defaults filled in; a model option given for a model that
    does not take it is a ValueError naming the options and the models they belong to."""
    foreign = [
        name
        for name, models in TAKEN_BY.items()
        if getattr(args, name) is not None and args.model not in models
    ]
    if foreign:
        named = ", ".join(f"--{n.replace('_', '-')} ({' or '.join(TAKEN_BY[n])})" for n in foreign)
        raise ValueError(f"--model {args.model}: does not take {named}")
    return {
        name: default if getattr(args, name) is None else getattr(args, name)
        for name, default in DEFAULTS.items()
    }


def _model_config(args: argparse.Namespace) -> dict:
    o = _model_options(args)
    if args.model == "transformer":
        dropout = 0.1 if args.dropout is None else args.dropout
        shared = {"shared_embeddings": True} if args.shared_vocab else {}
        return dict(
            name="transformer",
            d_model=args.hidden,
            heads=o["heads"],
            layers=o["layers"],
            ff=o["ff"],
            dropout=dropout,
            **shared,
        )
    return dict(
        name="seq2seq",
        kind=args.model,
        emb=o["emb"],
        hidden=args.hidden,
        score=o["score"],
        input_feeding=o["input_feeding"],
        dropout=args.dropout or 0.0,
        enc_hidden=o["enc_hidden"],
    )


def _samples_and_plots(
    model: Seq2Seq | Transformer, task: TranslateTask, out: Path, n_plots: int
) -> None:
    sources = [s for s, _ in task.valid[: max(n_plots, 5)]]
    outs, raws = task.translate(model, sources, weights=n_plots > 0)
    for (s, t), o in list(zip(task.valid, outs))[:5]:
        print(f"  {s}  ->  {o}" + ("" if o == t else f"   (reference: {t})"))
    _plot_all(raws, sources[:n_plots], task.src_vocab, task.tgt_vocab, out)


def _plot_all(
    raws: list[Hypotheses],
    sources: Sequence[str],
    src_vocab: CharVocab | SubwordVocab,
    tgt_vocab: CharVocab | SubwordVocab,
    folder: Path,
) -> None:
    offset = 0
    for hyp in raws:
        for i in range(hyp.tokens.shape[0]):
            if offset + i < len(sources):
                _plot(
                    hyp,
                    i,
                    sources[offset + i],
                    src_vocab,
                    tgt_vocab,
                    folder / f"attention_{offset + i}.png",
                )
        offset += hyp.tokens.shape[0]


def _plot(
    hyp: Hypotheses,
    i: int,
    source: str,
    src_vocab: CharVocab | SubwordVocab,
    tgt_vocab: CharVocab | SubwordVocab,
    path: Path,
) -> None:
    path = plot_translation(hyp, i, source, src_vocab, tgt_vocab, path)
    if path is not None:
        print(f"  wrote {path}")


def add_translate_parser(sub: common.SubParsers) -> None:
    p = sub.add_parser("translate", help="translate text with a trained checkpoint")
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument(
        "text",
        nargs="*",
        help="sentences, translated before those of --file; "
        "-: read them from standard input, one a line, each printed as soon as it "
        "is translated",
    )
    p.add_argument(
        "--file",
        type=Path,
        help="one sentence per line; one output line per line, empty for an empty line",
    )
    inference.add_inference_args(
        p, "translate", plot="folder for one attention heat-map per sentence"
    )
    p.set_defaults(run=run_translate)


def run_translate(args: argparse.Namespace) -> int:
    decoding = common.decoding(args)
    if jsonlines.reads_stdin(args.text, args):
        if args.file:
            raise ValueError("--file: give it or -, not both")
        evaluator = loading.load_evaluator(args.checkpoint, args.device, "translate")
        evaluator.max_chars = args.max_chars
        return jsonlines.stream(args, decoding, lambda text: evaluator.decode([text], decoding)[0])
    texts = list(args.text) + (_lines(args.file) if args.file else [])
    if not texts and not args.corpus:
        print("attnkit translate: give sentences, --file or --corpus", file=sys.stderr)
        return 2
    evaluator = loading.load_evaluator(args.checkpoint, args.device, "translate")
    evaluator.max_chars = args.max_chars
    if args.corpus:  # its source sentences, each named by its origin
        texts, origins = corpus.corpus_inputs(args, evaluator, texts)
        return inference.decode_and_write(
            args, evaluator, texts, decoding, names=origins, picture=None
        )
    # One output line per input line: a blank input gives an empty line, not a decoding.
    filled = [i for i, text in enumerate(texts) if text.strip()]
    start = time.perf_counter()
    decoded = (
        evaluator.decode([texts[i] for i in filled], decoding, weights=common.wants_weights(args))
        if filled
        else []
    )
    seconds = time.perf_counter() - start
    outputs = dict(zip(filled, decoded))
    for i in range(len(texts)):
        jsonlines.write(
            [outputs.get(i)],
            args,
            names=[texts[i]],
            decoding=decoding,
            seconds=seconds,
            batch_size=len(filled),
        )
    if args.plot:
        for i, output in outputs.items():
            path = output.draw(args.plot / f"attention_{i}.png")
            if path is not None:
                print(f"  wrote {path}")
    common.write_html(args, decoded, names=[texts[i] for i in filled])
    return 0


def _lines(path: Path) -> list[str]:
    """The lines of a text file, as :mod:`attnkit.data.corpora.text_files` reads them."""
    return [text for _, text in text_lines(path)]
