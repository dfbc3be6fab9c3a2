"""``attnkit train vqa`` and ``attnkit ask``: visual question answering (stacked attention
networks, or the baseline without attention)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from typing import Any

import torch

from attnkit.cli import argtypes, common, corpus, images, jsonlines
from attnkit.data import WordVocab, question_set
from attnkit.data.corpora.image_folders import QUESTIONS, load_image
from attnkit.data.worlds.scenes import ANSWERS
from attnkit.decoding import Decoding
from attnkit.models.vqa import KINDS
from attnkit.tasks import loading
from attnkit.tasks.vqa import VqaTask, answer_questions, plot_answers

DESCRIPTION = (
    "Train on your folder of images (questions.tsv of filename<TAB>question<TAB>"
    "answer) or VQA v2's questions and annotations (see --format), or on built-in "
    "scenes of coloured shapes with typed questions."
)


def add_train_parser(train_sub: common.SubParsers) -> None:
    p, model = images.add_train_parser(
        train_sub,
        "vqa",
        help="train a visual question answerer (stacked attention network)",
        description=DESCRIPTION,
        tsv=QUESTIONS,
    )
    model.add_argument(
        "--model",
        choices=KINDS,
        default="san",
        help="san: stacked attention; relational: stacked attention whose hops "
        "see where the previous hop looked, with presence gates that "
        "count; none: CNN and LSTM features concatenated",
    )
    model.add_argument(
        "--hops", type=argtypes.positive_int, default=2, help="san, relational: attention hops"
    )
    model.add_argument("--emb", type=argtypes.positive_int, default=64)
    model.add_argument(
        "--hidden",
        type=argtypes.positive_int,
        default=128,
        help="question BiLSTM size per direction",
    )
    model.add_argument("--attn-dim", type=argtypes.positive_int, default=128)
    model.add_argument("--dropout", type=argtypes.proportion, default=0.1)
    common.add_training_args(
        p, steps=20000, batch_size=64, lr=1e-3, eval_every=500, label_smoothing=0.0
    )
    p.set_defaults(run=run_train)


def _data(args: argparse.Namespace, size: int) -> tuple[Any, Any]:
    if args.train:
        return images.user_data(args, size, QUESTIONS)
    train, valid = images.built_in_scenes(args, size)
    return question_set(train, "train"), question_set(valid, "valid")


def run_train(args: argparse.Namespace) -> int:
    torch.manual_seed(args.seed)
    wanted = dict(
        name="vqa",
        image_size=args.image_size,
        channels=list(args.channels),
        kind=args.model,
        hops=args.hops,
        emb=args.emb,
        hidden=args.hidden,
        attn_dim=args.attn_dim,
        dropout=args.dropout,
    )
    ck, init = common.run_checkpoints(args, "vqa", model=wanted, options={"kind": "--model"})
    start = ck or init
    model_config = start.config["model"] if start is not None else wanted
    train, valid = _data(args, model_config["image_size"])
    if valid is None:
        valid = (train[0], common.held_out(train[1], [], "questions"))
    words = answers = None
    if start is not None:
        words, answers = WordVocab.from_json(start.vocab["words"]), start.vocab["answers"]
    elif not args.train:
        answers = ANSWERS
    task = VqaTask(
        train,
        valid,
        model_config=model_config,
        words=words,
        answers=answers,
        batch_size=args.batch_size,
        seed=args.seed,
        label_smoothing=args.label_smoothing,
        data=images.data_config(args),
    )
    model = task.build_model().to(args.device)
    if common.train_and_report(model, task, args, init=init) is not None:
        pictures, questions = task.valid
        shown = questions[: max(args.plot, 5)]
        found = answer_questions(
            model, task.words, task.answers, [(pictures[q.image], q.question) for q in shown]
        )
        for q, a in list(zip(shown, found))[:5]:
            print(
                f"  {q.question}  ->  {a.answer}"
                + ("" if a.answer == q.answer else f"   (reference: {q.answer})")
            )
        asked = [(pictures[q.image], q.question) for q in shown[: args.plot]]
        images.say_written(plot_answers(asked, found, args.out))
    return 0


def add_ask_parser(sub: common.SubParsers) -> None:
    p = sub.add_parser("ask", help="ask questions about an image with a trained VQA checkpoint")
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument(
        "image",
        type=Path,
        nargs="?",
        help="an image file (any size and mode: resized to the model's image size)",
    )
    p.add_argument(
        "questions",
        nargs="*",
        metavar="question",
        help="questions about the image; -: read them from standard input, one a "
        "line, each answered as soon as it is read",
    )
    corpus.add_corpus_input_args(p, "vqa")
    common.add_device_arg(p)
    p.add_argument(
        "--plot",
        type=Path,
        help="folder for one picture per question: the attention of each hop over the image",
    )
    jsonlines.add_json_arg(p)
    p.set_defaults(run=run_ask, pick=None)  # every answer is one text


def run_ask(args: argparse.Namespace) -> int:
    given = [args.image, *args.questions] if args.image is not None else []
    if not args.corpus and not args.questions:
        raise ValueError(
            "ask: expected an image file and questions about it (or --corpus), "
            f"got {'an image and no question' if given else 'neither'}"
        )
    stdin = not args.corpus and jsonlines.reads_stdin(args.questions, args)
    evaluator = loading.load_evaluator(args.checkpoint, args.device, "vqa")
    if stdin:  # each question answered as it comes
        load_image(args.image, evaluator.image_size)  # the image's errors, before any line
        return jsonlines.stream(
            args,
            Decoding(),
            lambda question: evaluator.decode(
                evaluator.load_inputs([str(args.image), question])[0]
            )[0],
        )
    if args.corpus:  # (image, question) pairs, named by where each question is
        asked, names = corpus.corpus_inputs(args, evaluator, given)
    else:
        asked, names = evaluator.load_inputs([str(args.image), *args.questions])
    start = time.perf_counter()
    outputs = evaluator.decode(asked)
    jsonlines.write(
        outputs, args, names=names, decoding=Decoding(), seconds=time.perf_counter() - start
    )
    if args.plot:  # each answer's hops over the image, as answer_<i>.png
        drawn = (o.draw(args.plot / f"answer_{i}.png") for i, o in enumerate(outputs))
        images.say_written([path for path in drawn if path is not None])
    return 0
