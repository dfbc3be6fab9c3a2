"""A task's endpoint, built from the route its evaluator declares
(:class:`attnkit.tasks.route.Route`): the request's fields as FastAPI reads them
(:func:`add_route`), each checked in the route's order within the server's
:class:`~attnkit.serve.limits.Limits`, the input queued for the batcher and the answer
(:class:`Result`; :class:`Serving`). Nothing here knows a task by name."""

from __future__ import annotations

import inspect
import re
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

from fastapi import FastAPI, File, Form, Request, UploadFile
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model
from starlette.concurrency import run_in_threadpool

from attnkit.checks import quoted
from attnkit.errors import DataError
from attnkit.serve.dynamic_batching import Batcher, DecodingFailed, QueueFull
from attnkit.serve.options import (
    ApiError,
    DecodingOptions,
    Limits,
    decoding_for,
    describe_decoding,
    validation_error,
)
from attnkit.serve.prometheus import Metrics
from attnkit.tasks.evaluator import TASK_BEAM
from attnkit.tasks.route import Refused, Route

__all__ = [
    "DECODING_HELP",
    "Hypothesis",
    "Result",
    "Serving",
    "Token",
    "add_route",
    "request_model",
]

DECODING_HELP = (
    "decoding: a JSON object of decoding options (beam, length_penalty, "
    "coverage_penalty, no_repeat_ngram, n_best, beam_stop, sample, temperature, top_k, "
    "top_p, seed, max_len, loop_stop)"
)


class Token(BaseModel):
    """One output token (a character, a word or a subword piece; EOS included) and its
    log-probability when it was chosen."""

    token: str
    log_prob: float | None


class Hypothesis(BaseModel):
    """One output and its score (None when the task's decoding gives none), with its tokens
    where the decoding keeps their log-probabilities (not CTC heads, not VQA's classes)."""

    text: str
    score: float | None
    tokens: list[Token] | None = None


class Result(BaseModel):
    """The answer to one input: its ``outputs`` best first (``text`` is the first's), the
    decoding settings used, how many requests were decoded together and the time from the
    request's arrival to its answer."""

    id: str = Field(description="the request's id (X-Request-ID), as the log names it")
    task: str
    text: str
    outputs: list[Hypothesis]
    decoding: dict
    batch_size: int
    time_ms: float


def request_model(task: str, route: Route) -> type[BaseModel]:
    """The JSON body of a route without an upload (``TranslateRequest``): its texts and the
    decoding options (default: the command line's); other keys are refused."""
    texts: dict[str, Any] = {t.name: (str, Field(description=t.about or None)) for t in route.texts}
    return create_model(
        f"{task.capitalize()}Request",
        __config__=ConfigDict(extra="forbid", strict=True),
        __doc__=f"A request to {route.summary}, and its decoding options.",
        **texts,
        decoding=(DecodingOptions | None, None),
    )


def add_route(app: FastAPI, serving: Serving) -> None:
    """``POST serving.route.path`` on ``app``: a JSON body (:func:`request_model`), or a
    multipart form of the upload, the texts and ``decoding`` (a JSON object), in that
    order; answered by :meth:`Serving.handle`."""
    route, keyword = serving.route, inspect.Parameter.KEYWORD_ONLY
    if route.upload is None:
        fields = [
            inspect.Parameter(
                "body", keyword, annotation=request_model(serving.evaluator.task, route)
            )
        ]
    else:
        fields = [
            inspect.Parameter(route.upload.name, keyword, default=File(...), annotation=UploadFile),
            *(
                inspect.Parameter(
                    t.name, keyword, annotation=str, default=Form(..., description=t.about or None)
                )
                for t in route.texts
            ),
            inspect.Parameter("decoding", keyword, default=Form(None), annotation=str | None),
        ]

    async def endpoint(request: Request, **given) -> dict:
        return await serving.handle(request, given)

    # FastAPI reads the request's fields from the signature: the route's, not **given.
    # (typeshed's functions have no __signature__, which inspect.signature reads.)
    endpoint.__signature__ = inspect.Signature(  # type: ignore[attr-defined]
        [
            inspect.Parameter(
                "request", inspect.Parameter.POSITIONAL_OR_KEYWORD, annotation=Request
            ),
            *fields,
        ],
        return_annotation=dict,
    )
    app.add_api_route(
        route.path,
        endpoint,
        methods=["POST"],
        response_model=Result,
        summary=route.summary,
        name=serving.evaluator.task,
        description=None if route.no_decoding else DECODING_HELP,
    )


class Serving:
    """One task's requests, as its ``route`` declares them, answered by ``evaluator``
    through ``batcher`` within ``limits``: reading uploads, checking fields, queueing inputs,
    writing results."""

    def __init__(self, evaluator, route: Route, limits: Limits, batcher: Batcher, metrics: Metrics):
        self.evaluator, self.route, self.limits = evaluator, route, limits
        self.batcher, self.metrics = batcher, metrics
        self.default_beam = TASK_BEAM.get(evaluator.task, 1)

    async def handle(self, request: Request, given: dict) -> dict:
        """The answer to one request, ``given`` its fields by name (``body``: a JSON body),
        checked in the order :mod:`attnkit.tasks.route` gives; every refusal an
        :class:`ApiError` naming the field."""
        route = self.route
        if route.upload is None:
            body = given["body"]
            options, texts = body.decoding, {t.name: getattr(body, t.name) for t in route.texts}
            raw = options and options.model_dump_json(exclude_none=True)
        else:
            raw = given["decoding"]
            options, texts = _decoding_options(raw), {t.name: given[t.name] for t in route.texts}
        if route.no_decoding is not None:
            if options not in (None, DecodingOptions()):
                raise ApiError(
                    422,
                    "decoding",
                    f"decoding: {route.no_decoding}; expected no decoding options, got {raw}",
                )
            options = None
        for text in route.texts:
            _check_text(text.name, texts[text.name], self.limits.max_chars)
            if text.check is not None:
                try:
                    text.check(self.evaluator, texts[text.name])
                except DataError as exc:
                    raise ApiError(422, text.name, f"{text.name}: {exc}") from None
        decoding = decoding_for(options, self.limits, default_beam=self.default_beam)
        if route.check_decoding is not None:
            try:
                route.check_decoding(self.evaluator, decoding)
            except Refused as exc:
                raise ApiError(422, exc.field, str(exc)) from None
        if route.upload is None:
            item = self._read_texts(texts)
        else:
            item = await self._read_upload(given[route.upload.name], texts)
        return await self.answer(request, item, decoding)

    def _read_texts(self, texts: dict[str, str]):
        """The input of a request of texts only: read here, since nothing waits on a file."""
        try:
            return self.route.read(self.evaluator, texts, max_seconds=self.limits.max_seconds)
        except (DataError, ValueError) as exc:
            field = self.route.texts[0].name
            raise ApiError(422, field, f"{field}: {exc}") from None

    async def _read_upload(self, upload: UploadFile, texts: dict[str, str]):
        """The input of a request with an upload: the file saved, an image held to
        ``--max-pixels`` by its header, then read by the route in a worker thread."""
        spec = self.route.upload
        assert spec is not None  # called only for a route with an upload
        field = spec.name
        path = await self.saved(upload, field)
        try:
            if spec.kind == "image":
                _check_pixels(path, field, upload, self.limits.max_pixels)
            return await self.read(
                lambda: self.route.read(
                    self.evaluator, {field: path, **texts}, max_seconds=self.limits.max_seconds
                ),
                field,
                upload,
                path,
            )
        finally:
            path.unlink(missing_ok=True)

    async def saved(self, upload: UploadFile, field: str) -> Path:
        """The upload written to a file of its own (the task's readers take paths), its
        suffix kept (a reader may go by it)."""
        suffix = Path(upload.filename or "").suffix
        suffix = suffix if re.fullmatch(r"\.[A-Za-z0-9]{1,8}", suffix) else ""

        def write() -> Path:
            upload.file.seek(0)
            with tempfile.NamedTemporaryFile(
                prefix="attnkit-upload-", suffix=suffix, delete=False
            ) as f:
                while chunk := upload.file.read(1 << 20):
                    f.write(chunk)
            return Path(f.name)

        path = await run_in_threadpool(write)
        if path.stat().st_size == 0:
            path.unlink(missing_ok=True)
            raise ApiError(
                422,
                field,
                f"{field}: expected a file, got an empty upload ({upload.filename or 'no name'})",
            )
        return path

    async def read(self, reader, field: str, upload: UploadFile, path: Path):
        """``reader()`` in a worker thread; its refusals become a 422 naming ``field`` and
        the upload (not the file it was written to)."""
        try:
            return await run_in_threadpool(reader)
        except (DataError, ValueError) as exc:
            message = str(exc).replace(str(path), upload.filename or "upload")
            raise ApiError(422, field, f"{field}: {message}") from None

    async def answer(self, request: Request, item, decoding) -> dict:
        """Queue ``item``, await its outputs and describe them (:class:`Result`)."""
        request_id = request.state.request_id
        try:
            done = await self.batcher.submit(
                item, decoding, request_id, timeout=self.limits.timeout_s
            )
        except QueueFull as exc:
            raise ApiError(503, None, str(exc), {"Retry-After": str(exc.retry_after)}) from None
        except TimeoutError:
            raise ApiError(
                504,
                None,
                f"request: no output within {self.limits.timeout_s:g} s (the server's --timeout)",
            ) from None
        except DecodingFailed as exc:
            self.metrics.decoding_failed()
            raise ApiError(500, None, str(exc)) from None
        output = done.output
        return {
            "id": request_id,
            "task": self.evaluator.task,
            "text": output.text,
            "outputs": output.records(),
            "decoding": describe_decoding(decoding),
            "batch_size": done.batch_size,
            "time_ms": round((time.monotonic() - request.state.arrived) * 1000, 3),
        }


def _check_text(field: str, text: str, max_chars: int) -> str:
    if not text.strip():
        raise ApiError(422, field, f"{field}: expected a non-empty text, got {quoted(text)}")
    if len(text) > max_chars:
        raise ApiError(
            422,
            field,
            f"{field}: expected at most {max_chars} characters (the "
            f"server's --max-chars), got {len(text)}",
        )
    return text


def _decoding_options(text: str | None) -> DecodingOptions | None:
    """The ``decoding`` form field of an upload, a JSON object of options."""
    if text is None or not text.strip():
        return None
    try:
        return DecodingOptions.model_validate_json(text)
    except ValidationError as exc:
        raise validation_error(exc, "decoding") from None


def _check_pixels(path: Path, field: str, upload: UploadFile, max_pixels: int) -> None:
    """Refuse an image of more than ``max_pixels`` from its header, before decoding it; one
    whose header cannot be read is left to the task's reader to refuse."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            with Image.open(path) as image:
                width, height = image.size
    except Exception:  # the reader says why it cannot read it
        return
    if width * height > max_pixels:
        raise ApiError(
            422,
            field,
            f"{field}: expected at most {max_pixels:,} pixels (the "
            f"server's --max-pixels), got {width} x {height} = {width * height:,} "
            f"in {upload.filename or 'the upload'}",
        )
