"""``attnkit train caption`` and ``attnkit caption``: image captioning (Show-Attend-Tell)."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from attnkit.cli import argtypes, common, corpus, images, jsonlines
from attnkit.data import WordVocab, load_image
from attnkit.data.corpora.image_folders import CAPTIONS
from attnkit.tasks import loading
from attnkit.tasks.caption import CaptionTask, caption_images, plot_captions

DESCRIPTION = (
    "Train on your folder of images (captions.tsv of filename<TAB>caption, several "
    "lines per image allowed), COCO captions or Karpathy's split file (see "
    "--format), or on built-in scenes of coloured shapes."
)


def add_train_parser(train_sub: common.SubParsers) -> None:
    p, model = images.add_train_parser(
        train_sub,
        "caption",
        help="train an image captioner (Show-Attend-Tell)",
        description=DESCRIPTION,
        tsv=CAPTIONS,
    )
    model.add_argument(
        "--attention",
        choices=("soft", "hard", "none"),
        default="soft",
        help="soft (deterministic), hard (a sampled cell, REINFORCE) or none "
        "(the mean of the grid)",
    )
    model.add_argument("--no-gate", action="store_true", help="no gating scalar beta")
    model.add_argument("--hidden", type=argtypes.positive_int, default=256, help="LSTM size")
    model.add_argument("--emb", type=argtypes.positive_int, default=128)
    model.add_argument("--attn-dim", type=argtypes.positive_int, default=128)
    model.add_argument("--dropout", type=argtypes.proportion, default=0.1)
    model.add_argument(
        "--doubly-stochastic",
        type=argtypes.non_negative_float,
        default=1.0,
        metavar="LAMBDA",
        help="weight of sum_i (1 - sum_t alpha_ti)^2 (0: none)",
    )
    model.add_argument(
        "--entropy-weight",
        type=argtypes.non_negative_float,
        default=0.01,
        help="hard attention: the entropy bonus",
    )
    common.add_training_args(
        p, steps=20000, batch_size=32, lr=1e-3, eval_every=500, label_smoothing=0.0
    )
    p.set_defaults(run=run_train)


def run_train(args: argparse.Namespace) -> int:
    torch.manual_seed(args.seed)
    wanted = dict(
        name="captioner",
        image_size=args.image_size,
        channels=list(args.channels),
        hidden=args.hidden,
        emb=args.emb,
        attn_dim=args.attn_dim,
        attention=args.attention,
        gate=not args.no_gate,
        dropout=args.dropout,
    )
    ck, init = common.run_checkpoints(args, "caption", model=wanted, options={"gate": "--no-gate"})
    start = ck or init
    model_config = start.config["model"] if start is not None else wanted
    size = model_config["image_size"]
    train, valid = (
        images.user_data(args, size, CAPTIONS) if args.train else images.built_in_scenes(args, size)
    )
    valid = common.held_out(train, valid or [], "images")
    task = CaptionTask(
        train,
        valid,
        model_config=model_config,
        **common.sequence_task_options(args, "doubly_stochastic", "entropy_weight"),
        data=images.data_config(args),
        vocab=WordVocab.from_json(start.vocab) if start is not None else None,
    )
    model = task.build_model().to(args.device)
    if (
        common.train_and_report(model, task, args, metric="bleu", tiebreak="chrf", init=init)
        is not None
    ):
        shown = task.valid[: max(args.plot, 5)]
        captions = caption_images(
            model,
            task.words,
            [item.image for item in shown],
            max_words=task.max_words,
            weights=args.plot > 0,
        )
        for item, caption in list(zip(shown, captions))[:5]:
            print(
                f"  {caption.texts[0]}"
                + (
                    ""
                    if caption.texts[0] in item.captions
                    else f"   (reference: {item.captions[0]})"
                )
            )
        images.say_written(
            plot_captions([item.image for item in shown[: args.plot]], captions, args.out)
        )
    return 0


def add_caption_parser(sub: common.SubParsers) -> None:
    p = sub.add_parser("caption", help="caption images with a trained captioning checkpoint")
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument(
        "images",
        nargs="*",
        type=Path,
        help="image files (any size and mode: resized to the model's image size); "
        "-: read their paths from standard input, one a line, each printed as soon "
        "as it is captioned",
    )
    corpus.add_corpus_input_args(p, "caption")
    common.add_decoding_args(p, beam=common.TASK_BEAM["caption"])
    common.add_device_arg(p)
    p.add_argument(
        "--plot",
        type=Path,
        help="folder for one picture per caption: the attention of each word over the image",
    )
    jsonlines.add_json_arg(p)
    p.set_defaults(run=run_caption)


def run_caption(args: argparse.Namespace) -> int:
    decoding = common.decoding(args)
    if not args.images and not args.corpus:
        raise ValueError("caption: expected image files, - or --corpus, got none")
    stdin = not args.corpus and jsonlines.reads_stdin(args.images, args)
    evaluator = loading.load_evaluator(args.checkpoint, args.device, "caption")
    if stdin:
        return jsonlines.stream(
            args,
            decoding,
            lambda path: evaluator.decode([load_image(Path(path), evaluator.image_size)], decoding)[
                0
            ],
        )
    if args.corpus:
        pictures, names = corpus.corpus_inputs(args, evaluator, args.images)
    else:
        pictures = [load_image(path, evaluator.image_size) for path in args.images]
        names = [str(p) for p in args.images]
    start = time.perf_counter()
    captions = evaluator.decode(pictures, decoding, weights=args.plot is not None)
    jsonlines.write(
        captions, args, names=names, decoding=decoding, seconds=time.perf_counter() - start
    )
    if args.plot:
        images.say_written(plot_captions(pictures, captions, args.plot))
    return 0
