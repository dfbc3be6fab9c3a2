"""The HTTP application of ``attnkit serve``: one checkpoint's task behind one endpoint.

:func:`create_app` builds a FastAPI application around an evaluator
(:func:`attnkit.tasks.loading.load_evaluator`):

========== ============== ==========================================================
task       endpoint       request
========== ============== ==========================================================
translate  POST /translate JSON ``{"text": ..., "decoding": {...}}``
ocr        POST /read      multipart: ``image`` (a line image), ``decoding`` (JSON text)
asr        POST /transcribe multipart: ``audio`` (a WAV file), ``decoding``
caption    POST /caption   multipart: ``image``, ``decoding``
vqa        POST /ask       multipart: ``image``, ``question``
========== ============== ==========================================================

Every endpoint answers one input with its outputs best first, their scores and the decoding
settings (:class:`Result`). ``GET /health`` says what is served, ``GET /metrics`` gives
Prometheus' text format (:mod:`attnkit.serve.prometheus`), ``/openapi.json`` and ``/docs`` the
schema. Requests are decoded together (:class:`attnkit.serve.batcher.Batcher`) within the
server's :class:`~attnkit.serve.options.Limits`; every refusal is a JSON object
``{"error": message, "field": name or null, "request_id": id}`` naming the field, what was
expected and what was given.
"""

from __future__ import annotations

import gc
import hmac
import logging
import re
import tempfile
import time
import uuid
import warnings
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from fastapi import FastAPI, File, Form, Request, UploadFile
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from PIL import Image
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from attnkit._version import __version__
from attnkit.checks import quoted
from attnkit.errors import DataError
from attnkit.serve.batcher import Batcher, DecodingFailed, QueueFull
from attnkit.serve.prometheus import Metrics
from attnkit.serve.options import (
    ApiError,
    DecodingOptions,
    Limits,
    decoding_for,
    describe_decoding,
    validation_error,
)
from attnkit.tasks.asr import wav_samples
from attnkit.tasks.evaluator import TASK_BEAM, Evaluator
from attnkit.tasks.vqa import check_words

__all__ = ["ENDPOINTS", "Endpoint", "Hypothesis", "Result", "TranslateRequest", "create_app"]

log = logging.getLogger("attnkit.serve")


@dataclass(frozen=True)
class Endpoint:
    """A task's endpoint: its ``path``, the multipart field of its upload (None: a JSON
    body) and the content type its requests carry."""

    path: str
    upload: str | None

    @property
    def content_type(self) -> str:
        return "application/json" if self.upload is None else "multipart/form-data"


ENDPOINTS = {"translate": Endpoint("/translate", None), "ocr": Endpoint("/read", "image"),
             "asr": Endpoint("/transcribe", "audio"), "caption": Endpoint("/caption", "image"),
             "vqa": Endpoint("/ask", "image")}


class TranslateRequest(BaseModel):
    """A text to translate (with its task tag when the model has several, ``<en> ...``) and
    the decoding options (default: the command line's, beam search of 5)."""

    model_config = ConfigDict(extra="forbid", strict=True)

    text: str
    decoding: DecodingOptions | None = None


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


_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


def create_app(evaluator: Evaluator, limits: Limits | None = None, *,
               api_key: str | None = None, name: str = "", runtime: str = "pytorch") -> FastAPI:
    """The application serving ``evaluator``'s task within ``limits`` (default
    :class:`Limits`). ``api_key``: when given, every request must carry it
    (``Authorization: Bearer KEY`` or ``X-API-Key: KEY``; compared in constant time), else
    401; an empty key is refused, and an empty header is never a key. ``name``: what
    ``/health`` calls the checkpoint; ``runtime``: what it says runs the model
    (``"pytorch"``, ``"onnxruntime (int8)"``).

    Its decoding thread starts and stops with the application's lifespan: stopping decodes
    what is queued first, so a server shutting down answers the requests it holds.

    Raises:
        ValueError: naming the task, when no endpoint serves it; naming ``api_key`` when it
            is empty.
    """
    if api_key is not None and not api_key.strip():
        raise ValueError(f"api_key: empty ({api_key!r}); give a key, or None to serve without "
                         "one")
    limits = limits or Limits()
    task = evaluator.task
    if task not in ENDPOINTS:
        raise ValueError(f"task: expected one of {', '.join(ENDPOINTS)}, got {task!r}")
    endpoint = ENDPOINTS[task]
    metrics = Metrics()
    batcher = Batcher(lambda inputs, decoding: evaluator.decode(inputs, decoding),
                      max_batch=limits.max_batch, max_wait_ms=limits.max_wait_ms,
                      max_queue=limits.max_queue, on_batch=metrics.batch)
    metrics.queue_depth = lambda: batcher.depth

    @asynccontextmanager
    async def lifespan(app):
        batcher.start()
        # The model, the libraries and the application are a great many objects that live as
        # long as the server: a full collection walking them all stopped every thread for
        # 0.2-0.3 s under load, the slowest answers' whole delay. Frozen, collections walk
        # only what requests make.
        gc.collect()
        gc.freeze()
        yield
        await run_in_threadpool(batcher.stop)

    app = FastAPI(title="attnkit", version=__version__, lifespan=lifespan,
                  description=f"A {task} model ({name or 'checkpoint'}) served by attnkit: "
                  f"POST {endpoint.path}.")
    app.add_middleware(Guard, api_key=api_key, max_body=limits.max_body_bytes,
                       posts={endpoint.path: endpoint.content_type}, metrics=metrics)
    _add_error_handlers(app)
    serving = _Serving(evaluator, limits, batcher, metrics)

    @app.get("/health", summary="what is served, and the queue")
    async def health() -> dict:
        return {"status": "ok", "task": task, "checkpoint": name, "runtime": runtime,
                "endpoint": endpoint.path, "queue_depth": batcher.depth,
                "version": __version__}

    @app.get("/metrics", summary="Prometheus text format", response_class=PlainTextResponse)
    async def metrics_text() -> PlainTextResponse:
        return PlainTextResponse(metrics.text(), media_type="text/plain; version=0.0.4")

    if task == "translate":
        @app.post(endpoint.path, response_model=Result, summary="translate one text")
        async def translate(body: TranslateRequest, request: Request) -> dict:
            text = _check_text("text", body.text, limits.max_chars)
            decoding = decoding_for(body.decoding, limits, default_beam=TASK_BEAM[task])
            return await serving.answer(request, text, decoding)
    elif task == "vqa":
        @app.post(endpoint.path, response_model=Result,
                  summary="answer a question about an image")
        async def ask(request: Request, image: UploadFile = File(...),
                      question: str = Form(...), decoding: str | None = Form(None)) -> dict:
            if _decoding_options(decoding) not in (None, DecodingOptions()):
                raise ApiError(422, "decoding", "decoding: a VQA model answers with its most "
                               f"probable class; expected no decoding options, got {decoding}")
            question = _check_text("question", question, limits.max_chars)
            try:
                check_words(evaluator.words, [question])
            except DataError as exc:
                raise ApiError(422, "question", f"question: {exc}") from None
            path = await serving.saved(image, "image")
            try:
                _check_pixels(path, "image", image, limits.max_pixels)
                item = await serving.read(
                    lambda: evaluator.load_inputs([str(path), question])[0][0], "image",
                    image, path)
            finally:
                path.unlink(missing_ok=True)
            return await serving.answer(request, item, decoding_for(None, limits))
    else:
        field = endpoint.upload
        default_beam = TASK_BEAM.get(task, 1)
        if task == "ocr" and getattr(evaluator.model, "head_kind", None) == "ctc":
            default_beam = 1

        async def decode_upload(request: Request, upload: UploadFile,
                                options: str | None) -> dict:
            decoding = decoding_for(_decoding_options(options), limits, default_beam=default_beam)
            _check_head(evaluator, decoding)
            path = await serving.saved(upload, field)
            try:
                if task == "asr":
                    item = await serving.read(lambda: evaluator.features(
                        wav_samples(path, max_seconds=limits.max_seconds)), field, upload, path)
                else:
                    _check_pixels(path, field, upload, limits.max_pixels)
                    item = await serving.read(
                        lambda: evaluator.load_inputs([str(path)])[0][0], field, upload, path)
            finally:
                path.unlink(missing_ok=True)
            return await serving.answer(request, item, decoding)

        description = ("decoding: a JSON object of decoding options (beam, length_penalty, "
                       "coverage_penalty, no_repeat_ngram, n_best, sample, temperature, top_k, "
                       "top_p, seed, max_len, loop_stop)")
        if field == "audio":
            @app.post(endpoint.path, response_model=Result, summary="transcribe a WAV file",
                      description=description)
            async def transcribe(request: Request, audio: UploadFile = File(...),
                                 decoding: str | None = Form(None)) -> dict:
                return await decode_upload(request, audio, decoding)
        else:
            @app.post(endpoint.path, response_model=Result,
                      summary="read a text line" if task == "ocr" else "caption an image",
                      description=description)
            async def image_endpoint(request: Request, image: UploadFile = File(...),
                                     decoding: str | None = Form(None)) -> dict:
                return await decode_upload(request, image, decoding)

    app.state.batcher, app.state.metrics = batcher, metrics
    return app


class _Serving:
    """What the endpoints share: reading uploads, queueing inputs, writing results."""

    def __init__(self, evaluator, limits: Limits, batcher: Batcher, metrics: Metrics):
        self.evaluator, self.limits, self.batcher, self.metrics = (evaluator, limits, batcher,
                                                                   metrics)

    async def saved(self, upload: UploadFile, field: str) -> Path:
        """The upload written to a file of its own (the task's readers take paths), its
        suffix kept (a reader may go by it)."""
        suffix = Path(upload.filename or "").suffix
        suffix = suffix if re.fullmatch(r"\.[A-Za-z0-9]{1,8}", suffix) else ""

        def write() -> Path:
            upload.file.seek(0)
            with tempfile.NamedTemporaryFile(prefix="attnkit-upload-", suffix=suffix,
                                             delete=False) as f:
                while chunk := upload.file.read(1 << 20):
                    f.write(chunk)
            return Path(f.name)

        path = await run_in_threadpool(write)
        if path.stat().st_size == 0:
            path.unlink(missing_ok=True)
            raise ApiError(422, field, f"{field}: expected a file, got an empty upload "
                           f"({upload.filename or 'no name'})")
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
            done = await self.batcher.submit(item, decoding, request_id,
                                             timeout=self.limits.timeout_s)
        except QueueFull as exc:
            raise ApiError(503, None, str(exc), {"Retry-After": str(exc.retry_after)}) from None
        except TimeoutError:
            raise ApiError(504, None, f"request: no output within {self.limits.timeout_s:g} s "
                           f"(the server's --timeout)") from None
        except DecodingFailed as exc:
            self.metrics.decoding_failed()
            raise ApiError(500, None, str(exc)) from None
        output = done.output
        return {"id": request_id, "task": self.evaluator.task, "text": output.text,
                "outputs": output.records(),
                "decoding": describe_decoding(decoding), "batch_size": done.batch_size,
                "time_ms": round((time.monotonic() - request.state.arrived) * 1000, 3)}


def _check_text(field: str, text: str, max_chars: int) -> str:
    if not text.strip():
        raise ApiError(422, field, f"{field}: expected a non-empty text, got {quoted(text)}")
    if len(text) > max_chars:
        raise ApiError(422, field, f"{field}: expected at most {max_chars} characters (the "
                       f"server's --max-chars), got {len(text)}")
    return text


def _decoding_options(text: str | None) -> DecodingOptions | None:
    """The ``decoding`` form field of an upload, a JSON object of options."""
    if text is None or not text.strip():
        return None
    try:
        return DecodingOptions.model_validate_json(text)
    except ValidationError as exc:
        raise validation_error(exc, "decoding") from None


def _check_head(evaluator, decoding) -> None:
    """An OCR model with a CTC head reads the best path: greedy only, no ``max_len``."""
    if getattr(evaluator.model, "head_kind", None) != "ctc":
        return
    if decoding.method != "greedy":
        raise ApiError(422, "decoding.beam", f"decoding.beam: this model's CTC head reads the "
                       f"best path only; expected greedy decoding, got {decoding.describe()}")
    if decoding.max_len is not None:
        raise ApiError(422, "decoding.max_len", f"decoding.max_len: this model's CTC head sets "
                       f"the output's length by the line's steps; expected none, got "
                       f"{decoding.max_len}")


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
        raise ApiError(422, field, f"{field}: expected at most {max_pixels:,} pixels (the "
                       f"server's --max-pixels), got {width} x {height} = {width * height:,} "
                       f"in {upload.filename or 'the upload'}")


def _add_error_handlers(app: FastAPI) -> None:
    def error(request: Request, status: int, field: str | None, message: str,
              headers: dict | None = None) -> JSONResponse:
        request_id = getattr(request.state, "request_id", None)
        return JSONResponse({"error": message, "field": field, "request_id": request_id},
                            status_code=status, headers=headers)

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError):
        return error(request, exc.status, exc.field, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0]
        loc = [str(p) for p in first.get("loc", ())]
        if first.get("type") == "json_invalid":
            reason = (first.get("ctx") or {}).get("error", first.get("msg"))
            return error(request, 400, "body", f"body: expected a JSON object, got malformed "
                         f"JSON ({reason})")
        loc = loc[1:] if loc[:1] == ["body"] else loc
        field = ".".join(loc) or "body"
        if first.get("type") == "missing":
            return error(request, 422, field, f"{field}: missing")
        if first.get("type") == "extra_forbidden":
            known = ", ".join(DecodingOptions.model_fields if loc[:1] == ["decoding"]
                              else TranslateRequest.model_fields)
            return error(request, 422, field, f"{field}: not an option; expected one of "
                         f"{known}, got {quoted(first.get('input'))}")
        expected = first.get("msg", "").removeprefix("Input should be ")
        got = first.get("input")
        got = quoted(got if not isinstance(got, bytes) else got.decode("utf-8", "replace"))
        return error(request, 422, field, f"{field}: expected {expected}, got {got}")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        if exc.status_code == 400:  # Starlette's multipart parser: a body that is no form
            return error(request, 400, "body", "body: expected a multipart/form-data body, "
                         f"got malformed data ({exc.detail})")
        return error(request, exc.status_code, None, f"{request.url.path}: {exc.detail}",
                     dict(exc.headers or {}))

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):
        request_id = getattr(request.state, "request_id", None)
        log.error("request %s: %s", request_id, exc, exc_info=exc)
        return error(request, 500, None, f"request {request_id}: internal error (the server's "
                     "log has why)")


class Guard:
    """ASGI middleware in front of every request: gives it an id (its ``X-Request-ID`` when
    one of 1-64 letters, digits and ``._-``, else a new one), checks the API key, the body's
    size (declared and read) and a task endpoint's content type, and counts the answer in the
    metrics."""

    def __init__(self, app, *, api_key: str | None, max_body: int, posts: dict[str, str],
                 metrics: Metrics):
        self.app, self.api_key, self.max_body = app, api_key, max_body
        self.posts, self.metrics = posts, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        arrived = time.monotonic()
        headers = {k.decode("latin-1").lower(): v.decode("latin-1")
                   for k, v in scope.get("headers", [])}
        given = headers.get("x-request-id", "")
        request_id = given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex[:16]
        scope.setdefault("state", {}).update(request_id=request_id, arrived=arrived)
        status = [500]

        async def send_(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message = {**message, "headers": [*message.get("headers", []),
                                                  (b"x-request-id", request_id.encode())]}
            await send(message)

        path = scope.get("path", "")
        try:
            refusal = self._check(scope, headers)
            if refusal is not None:
                await self._refuse(refusal, request_id, send_)
            else:
                await self.app(scope, self._counted(receive), send_)
        finally:
            known = path in self.posts or path in ("/health", "/metrics")
            self.metrics.request(path if known else "other", status[0],
                                 time.monotonic() - arrived)

    def _check(self, scope, headers: dict[str, str]) -> ApiError | None:
        if self.api_key is not None:
            bearer = headers.get("authorization", "")
            key = bearer[7:] if bearer[:7].lower() == "bearer " else headers.get("x-api-key")
            if not key or not _same(key, self.api_key):  # an empty header is never a key
                return ApiError(401, "Authorization", "Authorization: expected the server's "
                                "API key (Authorization: Bearer KEY, or X-API-Key: KEY), got "
                                + ("none" if key is None else
                                   "an empty key" if not key else "another key"),
                                {"WWW-Authenticate": "Bearer"})
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            return _too_large(self.max_body, f"{int(length):,} bytes declared")
        expected = self.posts.get(scope.get("path", ""))
        if expected is not None and scope.get("method") == "POST":
            given = headers.get("content-type", "")
            if given.split(";")[0].strip().lower() != expected:
                return ApiError(415, "Content-Type", f"Content-Type: expected {expected}, "
                                f"got {given or 'none'!r}")
        return None

    def _counted(self, receive):
        """``receive``, refusing a body that grows past ``max_body`` as it is read."""
        seen = 0

        async def counted():
            nonlocal seen
            message = await receive()
            if message["type"] == "http.request":
                seen += len(message.get("body", b""))
                if seen > self.max_body:
                    raise _too_large(self.max_body, "more than that sent")
            return message

        return counted

    async def _refuse(self, error: ApiError, request_id: str, send) -> None:
        response = JSONResponse({"error": error.message, "field": error.field,
                                 "request_id": request_id}, status_code=error.status,
                                headers=error.headers)
        await response({"type": "http"}, None, send)


def _too_large(limit: int, got: str) -> ApiError:
    return ApiError(413, "body", f"body: expected at most {limit:,} bytes (the server's "
                    f"--max-body), got {got}")


def _same(given: str, key: str) -> bool:
    return hmac.compare_digest(given.encode(), key.encode())
