"""Running an application with uvicorn: :func:`serve_checkpoint` loads a checkpoint (or an ONNX
export, :func:`exported_evaluator`) and serves it, :func:`run_server` serves an application
until SIGTERM or SIGINT.

A connection must send each whole request (headers and body) within the read timeout
(:attr:`Limits.read_timeout_s`) of its opening or of the previous answer, and may stay idle
after an answer for the keep-alive time (:attr:`Limits.keep_alive_s`); past either it is
closed (uvicorn alone arms a timer only after an answer, so a client that opens connections
and sends nothing, or half a request, held each one open until the file descriptors ran
out). The requests are read by uvicorn's h11 protocol with that deadline added
(:func:`server_config`), also where httptools is installed.

On either signal uvicorn stops accepting connections, lets the requests it holds finish (the
batcher decodes what is queued) for up to the request timeout and a few seconds more, then
ends the application's lifespan; :func:`run_server` then returns ``128 + signal`` (143 for
SIGTERM), as a shell reports a process ended by that signal.
"""

from __future__ import annotations

import asyncio
import logging
import signal
import threading

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from attnkit.export import ExportedModel, is_export
from attnkit.serve.app import create_app
from attnkit.serve.options import Limits
from attnkit.tasks.evaluator import EVALUATORS, Evaluator, evaluator_for
from attnkit.tasks.loading import load_evaluator

__all__ = ["LOCAL_HOSTS", "exported_evaluator", "run_server", "serve_checkpoint", "server_config"]

log = logging.getLogger("attnkit.serve")

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
GRACE_S = 5.0  # beyond the request timeout, for the answers to be written


class _ReadDeadline(H11Protocol):
    """uvicorn's h11 protocol, closing a connection that has not sent a whole request within
    ``read_timeout_s`` of its opening or of the previous answer (set by :func:`server_config`).
    The deadline runs while the client owes a request or its body (h11's ``their_state``
    IDLE or SEND_BODY), not while the request is decoded."""

    read_timeout_s = Limits.read_timeout_s

    def connection_made(self, transport) -> None:
        self._deadline: asyncio.TimerHandle | None = None
        super().connection_made(transport)
        self._watch()

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._watch()

    def on_response_complete(self) -> None:
        super().on_response_complete()
        self._watch()

    def connection_lost(self, exc) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None
        super().connection_lost(exc)

    def _watch(self) -> None:
        """Start the deadline when a request is owed, stop it when one has come whole."""
        owed = (
            self.conn.their_state in (h11.IDLE, h11.SEND_BODY) and not self.transport.is_closing()
        )
        if owed and self._deadline is None:
            self._deadline = self.loop.call_later(self.read_timeout_s, self._expired)
        elif not owed and self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if not self.transport.is_closing():
            client = f"{self.client[0]}:{self.client[1]}" if self.client else "a client"
            log.info(
                "closed the connection of %s: no whole request within %g s (--read-timeout)",
                client,
                self.read_timeout_s,
            )
            self.transport.close()


def server_config(
    app,
    limits: Limits | None = None,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    grace_s: float | None = None,
    log_level: str = "info",
) -> uvicorn.Config:
    """uvicorn's settings for serving ``app``: ``limits``' read timeout and keep-alive (see
    the module docstring), a graceful shutdown of ``grace_s`` seconds at most, the lifespan
    on."""
    limits = limits or Limits()
    protocol = type("ReadDeadline", (_ReadDeadline,), {"read_timeout_s": limits.read_timeout_s})
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        lifespan="on",
        # uvicorn annotates both as int, but only hands them to asyncio.wait_for and
        # loop.call_later, which take float seconds: a fractional time is kept as given
        timeout_graceful_shutdown=grace_s,  # type: ignore[arg-type]
        http=protocol,
        timeout_keep_alive=limits.keep_alive_s,  # type: ignore[arg-type]
    )


def run_server(
    app,
    *,
    host: str = "127.0.0.1",
    port: int = 8000,
    grace_s: float = 35.0,
    log_level: str = "info",
    limits: Limits | None = None,
) -> int:
    """Serve ``app`` on ``host:port`` until SIGTERM or SIGINT, then shut down gracefully
    (``grace_s``: seconds at most for the requests in flight); ``limits``: the read timeout
    and keep-alive of its connections (:func:`server_config`). Returns 0, or ``128 +
    signal`` when a signal stopped it."""
    server = uvicorn.Server(
        server_config(app, limits, host=host, port=port, grace_s=grace_s, log_level=log_level)
    )
    received: list[int] = []
    # uvicorn handles the signals while it runs, then raises the one it got again after
    # restoring the handlers it found: these record it instead of ending the process.
    main = threading.current_thread() is threading.main_thread()
    previous = (
        {
            sig: signal.signal(sig, lambda signum, frame: received.append(signum))
            for sig in (signal.SIGINT, signal.SIGTERM)
        }
        if main
        else {}
    )
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        log.info(
            "stopped by %s after answering the requests in flight",
            signal.Signals(received[-1]).name,
        )
        return 128 + received[-1]
    return 0


def exported_evaluator(folder) -> Evaluator:
    """The task evaluator of an ONNX export (``attnkit export --format onnx``, float32 or
    int8) in ``folder``: its graphs run by onnxruntime on the CPU
    (:class:`attnkit.export.ExportedModel`), its texts, images and audio read as for a
    checkpoint, and any decoding the graphs allow (greedy, beam search, sampling; not the joint
    CTC or language-model decoding, which need the PyTorch model).

    Raises:
        ValueError: naming the file, when the folder is not a readable export or its task
            has no evaluator.
    """
    model = ExportedModel(folder)
    meta = model.meta
    task = meta["task"]
    if task not in EVALUATORS:
        raise ValueError(
            f"{folder}: an export of task {task!r}; expected one of {', '.join(sorted(EVALUATORS))}"
        )
    config = {"task": task, "model": meta["model"]}
    if task == "translate":  # the length rule the exporter wrote
        config["max_len_extra"] = meta["decoding"]["max_len"]["extra"]
        vocab = meta["vocab"]
    else:
        vocab = meta["vocab"]["tgt"]
    return evaluator_for(task)(model, config, vocab)


def serve_checkpoint(
    checkpoint,
    *,
    device="cpu",
    limits: Limits | None = None,
    host: str = "127.0.0.1",
    port: int = 8000,
    api_key: str | None = None,
) -> int:
    """Load the checkpoint (a folder or ``builtin:NAME``) on ``device``, or the ONNX export
    in a folder (:func:`exported_evaluator`; the CPU only), and serve its task
    (:func:`attnkit.serve.app.create_app`, :func:`run_server`).

    Raises:
        attnkit.train.CheckpointError: naming what is wrong with the checkpoint.
        ValueError: naming the task, when no endpoint serves it; naming ``device`` when an
            export is to run on another than the CPU.
    """
    limits = limits or Limits()
    if is_export(checkpoint):  # builtin:NAME is a checkpoint
        if str(device) != "cpu":
            raise ValueError(
                f"device: an ONNX export is served on the CPU (onnxruntime), got "
                f"{device!r}; serve its checkpoint for another device"
            )
        evaluator = exported_evaluator(checkpoint)
        runtime = f"onnxruntime ({evaluator.model.meta.get('quantize') or 'float32'})"
    else:
        evaluator, runtime = load_evaluator(checkpoint, device), "pytorch"
    app = create_app(evaluator, limits, api_key=api_key, name=str(checkpoint), runtime=runtime)
    if host not in LOCAL_HOSTS and api_key is None:
        log.warning(
            "serving on %s without an API key: anyone who reaches this address can "
            "use the model (--api-key or ATTNKIT_API_KEY)",
            host,
        )
    return run_server(app, host=host, port=port, grace_s=limits.timeout_s + GRACE_S, limits=limits)
