"""The HTTP application of ``attnkit serve``: one checkpoint's task behind one endpoint.

:func:`create_app` builds a FastAPI application around an evaluator
(:func:`attnkit.tasks.loading.load_evaluator`), its endpoint built from the route the task
declares (:class:`attnkit.tasks.route.Route`; :mod:`attnkit.serve.endpoints`):

========== ================ ========================================================
task       endpoint         request
========== ================ ========================================================
translate  POST /translate  JSON ``{"text": ..., "decoding": {...}}``
ocr        POST /read       multipart: ``image`` (a line image), ``decoding`` (JSON text)
asr        POST /transcribe multipart: ``audio`` (a WAV file), ``decoding``
caption    POST /caption    multipart: ``image``, ``decoding``
vqa        POST /ask        multipart: ``image``, ``question``
========== ================ ========================================================

Every endpoint answers one input with its outputs best first, their scores and the decoding
settings (:class:`~attnkit.serve.endpoints.Result`). ``GET /health`` says what is served,
``GET /metrics`` gives Prometheus' text format (:mod:`attnkit.serve.prometheus`),
``/openapi.json`` and ``/docs`` the schema. Requests are decoded together
(:class:`attnkit.serve.dynamic_batching.Batcher`) within the server's
:class:`~attnkit.serve.options.Limits`; every refusal is a JSON object
``{"error": message, "field": name or null, "request_id": id}`` naming the field, what was
expected and what was given.
"""

from __future__ import annotations

import gc
import hmac
import logging
import re
import time
import uuid
from collections.abc import Mapping
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException

from attnkit._version import __version__
from attnkit.checks import quoted
from attnkit.serve.dynamic_batching import Batcher
from attnkit.serve.endpoints import Serving, add_route
from attnkit.serve.options import ApiError, DecodingOptions, Limits
from attnkit.serve.prometheus import Metrics
from attnkit.tasks.evaluator import Evaluator, served_tasks

__all__ = ["Guard", "create_app"]

log = logging.getLogger("attnkit.serve")

_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


def create_app(
    evaluator: Evaluator,
    limits: Limits | None = None,
    *,
    api_key: str | None = None,
    name: str = "",
    runtime: str = "pytorch",
) -> FastAPI:
    """The application serving ``evaluator``'s task within ``limits`` (default
    :class:`Limits`), at the endpoint of its ``route``. ``api_key``: when given, every
    request must carry it (``Authorization: Bearer KEY`` or ``X-API-Key: KEY``; compared in
    constant time), else 401; an empty key is refused, and an empty header is never a key.
    ``name``: what ``/health`` calls the checkpoint; ``runtime``: what it says runs the
    model (``"pytorch"``, ``"onnxruntime (int8)"``).

    Its decoding thread starts and stops with the application's lifespan: stopping decodes
    what is queued first, so a server shutting down answers the requests it holds.

    Raises:
        ValueError: naming the task, when its evaluator declares no route; naming
            ``api_key`` when it is empty.
    """
    if api_key is not None and not api_key.strip():
        raise ValueError(f"api_key: empty ({api_key!r}); give a key, or None to serve without one")
    limits = limits or Limits()
    task, route = evaluator.task, getattr(evaluator, "route", None)
    if route is None:
        raise ValueError(f"task: expected one of {', '.join(served_tasks())}, got {task!r}")
    metrics = Metrics()
    batcher = Batcher(
        lambda inputs, decoding: evaluator.decode(inputs, decoding),
        max_batch=limits.max_batch,
        max_wait_ms=limits.max_wait_ms,
        max_queue=limits.max_queue,
        on_batch=metrics.batch,
    )
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

    app = FastAPI(
        title="attnkit",
        version=__version__,
        lifespan=lifespan,
        description=f"A {task} model ({name or 'checkpoint'}) served by attnkit: "
        f"POST {route.path}.",
    )
    app.add_middleware(
        Guard,
        api_key=api_key,
        max_body=limits.max_body_bytes,
        posts={route.path: route.content_type},
        metrics=metrics,
    )
    _add_error_handlers(app, body_fields=[*(t.name for t in route.texts), "decoding"])

    @app.get("/health", summary="what is served, and the queue")
    async def health() -> dict:
        return {
            "status": "ok",
            "task": task,
            "checkpoint": name,
            "runtime": runtime,
            "endpoint": route.path,
            "queue_depth": batcher.depth,
            "version": __version__,
        }

    @app.get("/metrics", summary="Prometheus text format", response_class=PlainTextResponse)
    async def metrics_text() -> PlainTextResponse:
        return PlainTextResponse(metrics.text(), media_type="text/plain; version=0.0.4")

    add_route(app, Serving(evaluator, route, limits, batcher, metrics))
    app.state.batcher, app.state.metrics = batcher, metrics
    return app


def _add_error_handlers(app: FastAPI, *, body_fields: list[str]) -> None:
    """Every refusal as ``{"error", "field", "request_id"}``; ``body_fields``: the keys a
    JSON body may hold, which an unknown key's refusal lists."""

    def error(
        request: Request,
        status: int,
        field: str | None,
        message: str,
        headers: Mapping[str, str] | None = None,
    ) -> JSONResponse:
        request_id = getattr(request.state, "request_id", None)
        return JSONResponse(
            {"error": message, "field": field, "request_id": request_id},
            status_code=status,
            headers=headers,
        )

    @app.exception_handler(ApiError)
    async def api_error(request: Request, exc: ApiError):
        return error(request, exc.status, exc.field, exc.message, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def invalid(request: Request, exc: RequestValidationError):
        first = exc.errors()[0]
        loc = [str(p) for p in first.get("loc", ())]
        if first.get("type") == "json_invalid":
            reason = (first.get("ctx") or {}).get("error", first.get("msg"))
            return error(
                request, 400, "body", f"body: expected a JSON object, got malformed JSON ({reason})"
            )
        loc = loc[1:] if loc[:1] == ["body"] else loc
        field = ".".join(loc) or "body"
        if first.get("type") == "missing":
            return error(request, 422, field, f"{field}: missing")
        if first.get("type") == "extra_forbidden":
            known = ", ".join(
                DecodingOptions.model_fields if loc[:1] == ["decoding"] else body_fields
            )
            return error(
                request,
                422,
                field,
                f"{field}: not an option; expected one of "
                f"{known}, got {quoted(first.get('input'))}",
            )
        expected = first.get("msg", "").removeprefix("Input should be ")
        got = first.get("input")
        got = quoted(got if not isinstance(got, bytes) else got.decode("utf-8", "replace"))
        return error(request, 422, field, f"{field}: expected {expected}, got {got}")

    @app.exception_handler(HTTPException)
    async def http_error(request: Request, exc: HTTPException):
        if exc.status_code == 400:  # Starlette's multipart parser: a body that is no form
            return error(
                request,
                400,
                "body",
                f"body: expected a multipart/form-data body, got malformed data ({exc.detail})",
            )
        return error(
            request,
            exc.status_code,
            None,
            f"{request.url.path}: {exc.detail}",
            dict(exc.headers or {}),
        )

    @app.exception_handler(Exception)
    async def unexpected(request: Request, exc: Exception):
        request_id = getattr(request.state, "request_id", None)
        log.error("request %s: %s", request_id, exc, exc_info=exc)
        return error(
            request, 500, None, f"request {request_id}: internal error (the server's log has why)"
        )


class Guard:
    """ASGI middleware in front of every request: gives it an id (its ``X-Request-ID`` when
    one of 1-64 letters, digits and ``._-``, else a new one), checks the API key, the body's
    size (declared and read) and a task endpoint's content type, and counts the answer in the
    metrics."""

    def __init__(
        self, app, *, api_key: str | None, max_body: int, posts: dict[str, str], metrics: Metrics
    ):
        self.app, self.api_key, self.max_body = app, api_key, max_body
        self.posts, self.metrics = posts, metrics

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        arrived = time.monotonic()
        headers = {
            k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])
        }
        given = headers.get("x-request-id", "")
        request_id = given if _REQUEST_ID.fullmatch(given) else uuid.uuid4().hex[:16]
        scope.setdefault("state", {}).update(request_id=request_id, arrived=arrived)
        status = [500]

        async def send_(message):
            if message["type"] == "http.response.start":
                status[0] = message["status"]
                message = {
                    **message,
                    "headers": [
                        *message.get("headers", []),
                        (b"x-request-id", request_id.encode()),
                    ],
                }
            await send(message)

        path = scope.get("path", "")
        try:
            refusal = self._check(scope, headers)
            if refusal is not None:
                await self._refuse(refusal, request_id, receive, send_)
            else:
                await self.app(scope, self._counted(receive), send_)
        finally:
            known = path in self.posts or path in ("/health", "/metrics")
            self.metrics.request(path if known else "other", status[0], time.monotonic() - arrived)

    def _check(self, scope, headers: dict[str, str]) -> ApiError | None:
        if self.api_key is not None:
            bearer = headers.get("authorization", "")
            key = bearer[7:] if bearer[:7].lower() == "bearer " else headers.get("x-api-key")
            if not key or not _same(key, self.api_key):  # an empty header is never a key
                return ApiError(
                    401,
                    "Authorization",
                    "Authorization: expected the server's "
                    "API key (Authorization: Bearer KEY, or X-API-Key: KEY), got "
                    + ("none" if key is None else "an empty key" if not key else "another key"),
                    {"WWW-Authenticate": "Bearer"},
                )
        length = headers.get("content-length")
        if length is not None and length.isdigit() and int(length) > self.max_body:
            return _too_large(self.max_body, f"{int(length):,} bytes declared")
        expected = self.posts.get(scope.get("path", ""))
        if expected is not None and scope.get("method") == "POST":
            given = headers.get("content-type", "")
            if given.split(";")[0].strip().lower() != expected:
                return ApiError(
                    415,
                    "Content-Type",
                    f"Content-Type: expected {expected}, got {given or 'none'!r}",
                )
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

    async def _refuse(self, error: ApiError, request_id: str, receive, send) -> None:
        response = JSONResponse(
            {"error": error.message, "field": error.field, "request_id": request_id},
            status_code=error.status,
            headers=error.headers,
        )
        await response({"type": "http"}, receive, send)


def _too_large(limit: int, got: str) -> ApiError:
    return ApiError(
        413, "body", f"body: expected at most {limit:,} bytes (the server's --max-body), got {got}"
    )


def _same(given: str, key: str) -> bool:
    return hmac.compare_digest(given.encode(), key.encode())
