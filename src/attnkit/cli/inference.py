"""What the inference verbs that read files share (``transcribe``, ``read``; ``translate``
declares its options and writes a corpus's outputs the same way): their options after the
inputs, and the decoding of the files named, of ``-`` (their paths on standard input) or of
``--corpus``."""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from attnkit.cli import common, corpus, jsonlines
from attnkit.cli.decoder_options import add_joint_args
from attnkit.decoding import Decoding
from attnkit.tasks import loading
from attnkit.tasks.evaluator import Evaluator

__all__ = ["add_inference_args", "decode_and_write", "decode_files"]


def add_inference_args(p: argparse.ArgumentParser, task: str, *, plot: str) -> None:
    """The options of ``task``'s inference verb after its inputs: ``--corpus``, the largest
    input, decoding (joint CTC/attention for the recognisers), the device, ``--plot`` (whose
    help is ``plot``), ``--html`` and ``--json``."""
    corpus.add_corpus_input_args(p, task)
    corpus.add_limit_arg(p, task)
    common.add_decoding_args(p, beam=common.TASK_BEAM[task])
    if task in ("asr", "ocr"):
        add_joint_args(p)
    common.add_device_arg(p)
    p.add_argument("--plot", type=Path, help=plot)
    common.add_html_arg(p)
    jsonlines.add_json_arg(p)


def decode_files(
    args: argparse.Namespace,
    task: str,
    decoding: Decoding,
    paths: list[Path],
    load: Callable[[Path], object],
    *,
    expected: str,
    picture: str,
    prepare: Callable[[Any, Any], object] | None = None,
) -> int:
    """Decode the files ``paths`` with ``args.checkpoint`` of ``task``: each read by ``load``
    before the checkpoint is (then ``prepare(evaluator, loaded)``, when given, makes it the
    model's input), or, for ``-``, their paths read from standard input and each printed at
    once, or the inputs of ``--corpus``; then :func:`decode_and_write`. ``expected``: the
    inputs, in the error when there are none. Returns 0, the exit status."""
    if not paths and not args.corpus:
        raise ValueError(f"{args.command}: expected {expected}, - or --corpus, got none")
    stdin = not args.corpus and jsonlines.reads_stdin(paths, args)
    loaded = [] if stdin or args.corpus else [load(path) for path in paths]
    evaluator = loading.load_evaluator(args.checkpoint, args.device, task)

    def made(x: object) -> object:
        return x if prepare is None else prepare(evaluator, x)

    inputs, names = [made(x) for x in loaded], [str(p) for p in paths]
    if args.corpus:
        inputs, names = corpus.corpus_inputs(args, evaluator, paths)
    evaluator.lm = loading.load_lm(args.lm, evaluator.vocab, args.device, args.checkpoint)
    if stdin:
        return jsonlines.stream(
            args, decoding, lambda path: evaluator.decode([made(load(Path(path)))], decoding)[0]
        )
    return decode_and_write(args, evaluator, inputs, decoding, names=names, picture=picture)


def decode_and_write(
    args: argparse.Namespace,
    evaluator: Evaluator,
    inputs: list,
    decoding: Decoding,
    *,
    names: list[str],
    picture: str | None,
) -> int:
    """Decode ``inputs`` in one call and write the outputs (:func:`attnkit.cli.jsonlines.
    write`); with ``--plot`` draw each one's attention as ``picture_<i>.png`` (no pictures
    when ``picture`` is None), with ``--html`` write the explorer page. Returns 0, the exit
    status."""
    start = time.perf_counter()
    outputs = evaluator.decode(inputs, decoding, weights=common.wants_weights(args))
    jsonlines.write(
        outputs, args, names=names, decoding=decoding, seconds=time.perf_counter() - start
    )
    if args.plot and picture is not None:
        for i, output in enumerate(outputs):
            path = output.draw(args.plot / f"{picture}_{i}.png")
            if path is not None:
                print(f"  wrote {path}")
    common.write_html(args, outputs, names=names)
    return 0
