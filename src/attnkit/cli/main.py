"""``attnkit`` entry point.

Importing this module loads nothing heavy: :func:`main` imports PyTorch and the sub-commands
inside the ``try`` that turns a Ctrl-C into one line and exit status 130, so a Ctrl-C in the
first seconds of a command, while PyTorch loads, ends it the same way.
"""

from __future__ import annotations

import argparse
import logging
import signal
import sys

from attnkit._version import __version__

# The commands whose results are what they print: with standard output closed (Python's
# sys.stdout is then None) they would be lost, so these refuse to start.
PRINTS_RESULTS = ("eval", "translate", "transcribe", "read", "caption", "ask", "plan")


def build_parser() -> argparse.ArgumentParser:
    from attnkit.cli import (
        asr,
        average,
        bench,
        caption,
        demo,
        evaluate,
        explore,
        export,
        lm,
        ocr,
        plan,
        serve,
        translate,
        vqa,
    )

    parser = argparse.ArgumentParser(
        prog="attnkit",
        description="Correct, fast, memory-light attention for PyTorch sequence models.",
    )
    parser.add_argument("--version", action="version", version=f"attnkit {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log attention path choices")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    demo.add_parser(sub)
    train = sub.add_parser("train", help="train a model (a sub-command per task)")
    train_sub = train.add_subparsers(dest="task", metavar="TASK", required=True)
    translate.add_train_parser(train_sub)
    ocr.add_train_parser(train_sub)
    asr.add_train_parser(train_sub)
    caption.add_train_parser(train_sub)
    vqa.add_train_parser(train_sub)
    lm.add_train_parser(train_sub)
    translate.add_translate_parser(sub)
    evaluate.add_parser(sub)
    explore.add_parser(sub)
    ocr.add_read_parser(sub)
    asr.add_transcribe_parser(sub)
    caption.add_caption_parser(sub)
    vqa.add_ask_parser(sub)
    export.add_parser(sub)
    average.add_parser(sub)
    bench.add_parser(sub)
    plan.add_parser(sub)
    serve.add_parser(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    try:
        return _run(argv)
    except KeyboardInterrupt:  # Ctrl-C outside the training loop (importing, reading, building)
        print("attnkit: interrupted", file=sys.stderr)
        return 128 + signal.SIGINT


def _run(argv: list[str] | None) -> int:
    from attnkit.checks import MESSAGE, clipped
    from attnkit.cli import recipes
    from attnkit.cli.common import (
        Interrupted,
        check_arguments,
        locked_run_folder,
        resolve_run_options,
    )
    from attnkit.data import DataError
    from attnkit.train import CheckpointError, distributed

    parser = build_parser()
    argv = sys.argv[1:] if argv is None else list(argv)
    args = parser.parse_args(argv)
    if getattr(args, "recipe", None):
        args = parser.parse_args(recipes.expand(argv, args.recipe))
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    if args.verbose:
        logging.getLogger("attnkit").setLevel(logging.DEBUG)
    if not distributed.is_main():  # under torchrun, rank 0 logs for every process
        logging.getLogger("attnkit").setLevel(logging.ERROR)
    if args.command is None:
        parser.print_help()
        return 2
    if sys.stdout is None and args.command in PRINTS_RESULTS:  # fd 1 closed (`>&-`)
        print(
            f"attnkit: standard output is closed; {args.command} prints its results there: "
            "redirect it to a file (or to /dev/null to discard them)",
            file=sys.stderr,
        )
        return 2
    try:
        resolve_run_options(args)  # before anything is read or written
        check_arguments(args)
        with locked_run_folder(args):
            return args.run(args)
    except Interrupted as exc:  # SIGINT/SIGTERM/SIGHUP during training: saved, then stopped
        print(f"attnkit: {exc}", file=sys.stderr)
        return exc.exit_code
    except (CheckpointError, DataError, ValueError, FloatingPointError) as exc:  # a message
        if args.verbose:
            raise
        # one line, bounded (above a message that names a file and quotes a part cut already)
        print(f"attnkit: {clipped(str(exc), 2 * MESSAGE)}", file=sys.stderr)
        return 2
    except OSError as exc:  # a full disk, a read-only folder, a file gone: where and why
        if args.verbose:
            raise
        where = f"{clipped(str(exc.filename), MESSAGE)}: " if exc.filename else ""
        print(f"attnkit: {where}{exc.strerror or clipped(str(exc), MESSAGE)}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
