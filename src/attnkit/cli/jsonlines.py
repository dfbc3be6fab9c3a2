"""What the inference verbs (``translate``, ``read``, ``transcribe``, ``caption``, ``ask``)
print for programs: ``--json`` writes one JSON object per input, a line each (JSON Lines), and
an input ``-`` reads the inputs from standard input, one a line, each decoded and printed as
soon as it is read. Standard input is read as ``--file`` is: UTF-8 (a byte-order mark
dropped, a line that is not UTF-8 refused by its number), a line of at most
:data:`MAX_STDIN_LINE` bytes (a longer one is refused without being read into memory whole).

A line of ``--json``::

    {"input": "<en> 3 March 2001", "text": "2001-03-03", "score": -0.39,
     "outputs": [{"text": "2001-03-03", "score": -0.39}, ...],
     "decoding": {"beam": 5, ...}, "time_ms": 41.2, "batch_size": 1}

``outputs``: every output best first (beam search's n-best, or the samples) with its score
(:attr:`attnkit.tasks.evaluator.Output.scores`; null where the task gives none); ``time_ms``:
the decoding call that produced it, which decoded ``batch_size`` inputs together.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from typing import BinaryIO

from attnkit.cli import common
from attnkit.data.corpora.text_files import BLOCK, decode_line, undecodable
from attnkit.decoding import Decoding
from attnkit.errors import DataError
from attnkit.tasks.evaluator import Output

STDIN = "-"
# Bytes in one line of standard input at most: one sentence, question or path (--max-chars
# and the path limits are far below it); a longer line is no input.
MAX_STDIN_LINE = 1 << 20
SHOWN = 100  # characters of a refused input echoed in its --json error
_BOM = b"\xef\xbb\xbf"


def add_json_arg(p: common.Options) -> None:
    """``--json`` (see the module's docstring)."""
    p.add_argument(
        "--json",
        action="store_true",
        help="print one JSON object per input, a line each: input, text, score, "
        "outputs (every output with its score), decoding, time_ms, batch_size",
    )


def reads_stdin(items: Sequence, args: argparse.Namespace) -> bool:
    """Whether the inputs are ``-`` alone (standard input).

    Raises:
        ValueError: ``-`` among other inputs, or with ``--plot`` or ``--html`` (which need
            every input decoded at once).
    """
    names = [str(item) for item in items]
    if STDIN not in names:
        return False
    if names != [STDIN]:
        raise ValueError(
            f"-: reads the inputs from standard input; expected it alone, got {' '.join(names)}"
        )
    if common.wants_weights(args):
        raise ValueError(
            "-: inputs from standard input are printed as they are decoded; "
            "--plot and --html need them all at once"
        )
    return True


def record(
    name: str, output: Output | None, decoding: Decoding, seconds: float, batch_size: int
) -> dict:
    """The JSON object of one input's ``output`` (None: a blank input, not decoded)."""
    outputs = (
        []
        if output is None
        else [  # "tokens" only where the decoding keeps them
            {k: v for k, v in r.items() if k != "tokens" or v is not None} for r in output.records()
        ]
    )
    return {
        "input": name,
        "text": outputs[0]["text"] if outputs else "",
        "score": outputs[0]["score"] if outputs else None,
        "outputs": outputs,
        "decoding": asdict(decoding),
        "time_ms": round(seconds * 1000, 3),
        "batch_size": batch_size,
    }


def write(
    outputs: Sequence,
    args: argparse.Namespace,
    *,
    names: Sequence[str],
    decoding: Decoding,
    seconds: float,
    batch_size: int | None = None,
) -> None:
    """Print ``outputs`` (one per input, None for a blank one) as ``--json`` lines, or as
    :func:`attnkit.cli.common.print_outputs` does (an empty line for a blank input; the
    inputs of a ``--corpus`` named first, ``origin<TAB>text``), and flush: a reader of the pipe
    sees each input's lines as they are decoded. ``seconds``: the decoding call that gave them,
    which decoded ``batch_size`` inputs (default: these)."""
    for name, output in zip(names, outputs):
        if args.json:
            print(
                json.dumps(
                    record(name, output, decoding, seconds, batch_size or len(outputs)),
                    ensure_ascii=False,
                )
            )
        elif output is None:
            print()
        else:
            common.print_outputs([output], args, name if getattr(args, "corpus", None) else None)
    sys.stdout.flush()


def stream(args: argparse.Namespace, decoding: Decoding, decode: Callable[[str], object]) -> int:
    """Decode each line of standard input (``decode(line) -> Output``) and print it at once
    (:func:`write`); a blank line gives an empty output. A line that cannot be decoded (a
    file that cannot be read, a text too long) prints its error (on stderr, and an empty line;
    with ``--json`` an object with ``error``) and the next lines go on. Returns 0, or 2 when
    a line failed."""
    failed = False
    for n, raw, whole in _stdin_lines(sys.stdin.buffer):
        item = raw.decode("utf-8", "replace")  # what is echoed of a refused line
        start = time.perf_counter()
        try:
            if not whole:
                raise DataError(
                    f"stdin:{n}: a line of more than {MAX_STDIN_LINE:,} bytes; "
                    "expected one input a line (a sentence, a question or a path)"
                )
            try:
                item = decode_line(raw)
            except UnicodeDecodeError as exc:
                raise DataError(f"stdin:{n}: {undecodable(exc)}") from None
            if not item.strip():
                write([None], args, names=[item], decoding=decoding, seconds=0.0)
                continue
            output = decode(item)
        except (DataError, ValueError) as exc:
            failed = True
            shown = item if len(item) <= SHOWN else item[:SHOWN] + "..."
            if args.json:
                print(json.dumps({"input": shown, "error": str(exc)}, ensure_ascii=False))
            else:
                print(f"attnkit {args.command}: {exc}", file=sys.stderr)
                print()
            sys.stdout.flush()
            continue
        write([output], args, names=[item], decoding=decoding, seconds=time.perf_counter() - start)
    return 2 if failed else 0


def _stdin_lines(f: BinaryIO) -> Iterator[tuple[int, bytes, bool]]:
    """``(line number, bytes, whole)`` of each line of ``f`` without its line end (LF or
    CRLF), the first without a UTF-8 byte-order mark; a line of more than
    :data:`MAX_STDIN_LINE` bytes gives only its first ``MAX_STDIN_LINE + 1`` bytes and
    ``whole`` False, the rest read past a block at a time."""
    n = 0
    while line := f.readline(MAX_STDIN_LINE + 1):
        n += 1
        if n == 1:
            line = line.removeprefix(_BOM)
        whole = line.endswith(b"\n") or len(line) <= MAX_STDIN_LINE
        rest = line
        while not whole and rest and not rest.endswith(b"\n"):  # the rest of a long line
            rest = f.readline(BLOCK)
        yield n, line.removesuffix(b"\n").removesuffix(b"\r"), whole
