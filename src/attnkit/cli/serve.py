"""``attnkit serve``: the options of :func:`attnkit.serve.serve_checkpoint`."""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from attnkit.cli import argtypes, common
from attnkit.serve import Limits

API_KEY_ENV = "ATTNKIT_API_KEY"

# (group, option, Limits field, type, metavar, help): the options that make a Limits; an
# option's value is args.<option without dashes>, e.g. --timeout's args.timeout.
LIMIT_OPTIONS = (
    (
        "batching",
        "--max-batch",
        "max_batch",
        argtypes.positive_int,
        "N",
        "requests decoded together at most",
    ),
    (
        "batching",
        "--max-wait-ms",
        "max_wait_ms",
        argtypes.non_negative_float,
        "MS",
        "how long a batch waits for requests to join it, from its oldest request's arrival or "
        "the previous batch's answer, whichever is later",
    ),
    (
        "limits",
        "--max-queue",
        "max_queue",
        argtypes.positive_int,
        "N",
        "requests waiting at most; more are answered 503 with Retry-After",
    ),
    (
        "limits",
        "--timeout",
        "timeout_s",
        argtypes.positive_float,
        "S",
        "seconds from a request's arrival to its answer; later it is answered 504",
    ),
    (
        "limits",
        "--read-timeout",
        "read_timeout_s",
        argtypes.positive_float,
        "S",
        "seconds a connection has to send a whole request (headers and body) from its opening "
        "or the previous answer; later it is closed (default {default:g})",
    ),
    (
        "limits",
        "--keep-alive",
        "keep_alive_s",
        argtypes.positive_float,
        "S",
        "seconds a connection may stay idle after an answer; later it is closed "
        "(default {default:g})",
    ),
    (
        "limits",
        "--max-body",
        "max_body_bytes",
        argtypes.positive_int,
        "BYTES",
        "a request's body at most (else 413)",
    ),
    (
        "limits",
        "--max-chars",
        "max_chars",
        argtypes.positive_int,
        None,
        "characters of a text to translate, or a question",
    ),
    (
        "limits",
        "--max-seconds",
        "max_seconds",
        argtypes.positive_float,
        None,
        "seconds of audio to transcribe",
    ),
    (
        "limits",
        "--max-pixels",
        "max_pixels",
        argtypes.positive_int,
        None,
        "pixels of an image (width x height, from its header)",
    ),
    (
        "limits",
        "--max-beam",
        "max_beam",
        argtypes.positive_int,
        None,
        "a request's beam width, or its number of draws (sample)",
    ),
    (
        "limits",
        "--max-len",
        "max_len",
        argtypes.positive_int,
        None,
        "a request's max_len (output tokens)",
    ),
)


def add_parser(sub: common.SubParsers) -> None:
    d = Limits()
    p = sub.add_parser(
        "serve",
        help="serve a checkpoint over HTTP (JSON and uploads, batched decoding)",
        description="Serve a checkpoint's task over HTTP: POST /translate (JSON), /read, "
        "/transcribe, /caption or /ask (multipart uploads), GET /health, /metrics "
        "(Prometheus), /openapi.json and /docs. Concurrent requests are decoded together. "
        'docs/deploy.md, "Serving", has the requests and answers.',
    )
    p.add_argument(
        "--checkpoint",
        type=Path,
        required=True,
        help="a checkpoint folder, builtin:NAME, or an ONNX export folder "
        "(attnkit export --format onnx, float32 or int8; run on the CPU)",
    )
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="address to listen on (default 127.0.0.1: this machine only; 0.0.0.0 "
        "for every interface, then give an API key)",
    )
    p.add_argument("--port", type=argtypes.int_at_least(0, "port"), default=8000)
    key = p.add_mutually_exclusive_group()
    key.add_argument(
        "--api-key",
        metavar="KEY",
        help="requests must carry it (Authorization: Bearer KEY, or X-API-Key: "
        "KEY). A command line is visible to other users (ps): prefer "
        f"--api-key-file or the {API_KEY_ENV} environment variable (used when "
        "neither option is given); else none",
    )
    key.add_argument(
        "--api-key-file",
        type=Path,
        metavar="FILE",
        help="read the API key from FILE (its first line, without the line's end)",
    )
    common.add_device_arg(p)
    groups = {name: p.add_argument_group(name) for name in ("batching", "limits")}
    for group, flag, field, kind, metavar, text in LIMIT_OPTIONS:
        default = getattr(d, field)
        groups[group].add_argument(
            flag, type=kind, default=default, metavar=metavar, help=text.format(default=default)
        )
    p.set_defaults(run=run)


def _api_key(args: argparse.Namespace) -> str | None:
    """The key of ``--api-key``, ``--api-key-file`` or ``$ATTNKIT_API_KEY`` (in that order),
    or None when none is given.

    Raises:
        ValueError: naming where the key came from, when it cannot be read, is empty or has
            white space at an end (an HTTP header cannot carry that).
    """
    if args.api_key is not None:
        key, source = args.api_key, "--api-key"
    elif args.api_key_file is not None:
        source = "--api-key-file"
        try:
            lines = args.api_key_file.read_text(encoding="utf-8").splitlines()
        except (OSError, UnicodeDecodeError) as exc:
            raise ValueError(
                f"{source}: cannot read {args.api_key_file}: "
                f"{getattr(exc, 'strerror', None) or exc}"
            ) from None
        key = lines[0] if lines else ""
    elif API_KEY_ENV in os.environ:
        key, source = os.environ[API_KEY_ENV], API_KEY_ENV
    else:
        return None
    if not key.strip():
        raise ValueError(
            f"{source}: the API key is empty; give a key, or none at all to serve without one"
        )
    if key != key.strip():
        raise ValueError(
            f"{source}: the API key starts or ends with white space, which an "
            "HTTP header cannot carry"
        )
    return key


def run(args: argparse.Namespace) -> int:
    api_key = _api_key(args)
    try:
        from attnkit.serve import serve_checkpoint
    except ImportError as exc:
        raise ValueError(
            f"serve: needs the serve extra ({exc.name} is missing): pip install 'attnkit[serve]'"
        ) from None
    limits = Limits(
        **{
            field: getattr(args, flag.removeprefix("--").replace("-", "_"))
            for _, flag, field, *_ in LIMIT_OPTIONS
        }
    )
    from attnkit.export import is_export

    device = args.device  # an export runs in onnxruntime on the CPU unless told otherwise
    if is_export(args.checkpoint) and getattr(args, "device_asked", "auto") == "auto":
        device = "cpu"
    return serve_checkpoint(
        args.checkpoint,
        device=device,
        limits=limits,
        host=args.host,
        port=args.port,
        api_key=api_key,
    )
