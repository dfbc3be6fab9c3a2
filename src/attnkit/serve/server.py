"""Running an application with uvicorn: :func:`serve_checkpoint` loads a checkpoint (or an ONNX
export, :func:`exported_evaluator`) and serves it, :func:`run_server` serves an application
until SIGTERM or SIGINT.

On either signal uvicorn stops accepting connections, lets the requests it holds finish (the
batcher decodes what is queued) for up to the request timeout and a few seconds more, then
ends the application's lifespan; :func:`run_server` then returns ``128 + signal`` (143 for
SIGTERM), as a shell reports a process ended by that signal.
"""

from __future__ import annotations

import logging
import signal
import threading

import uvicorn

from attnkit.export import ExportedModel, is_export
from attnkit.serve.app import create_app
from attnkit.serve.options import Limits
from attnkit.tasks.evaluator import EVALUATORS, Evaluator, evaluator_for
from attnkit.tasks.loading import load_evaluator

__all__ = ["LOCAL_HOSTS", "exported_evaluator", "run_server", "serve_checkpoint"]

log = logging.getLogger("attnkit.serve")

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")
GRACE_S = 5.0  # beyond the request timeout, for the answers to be written


def run_server(app, *, host: str = "127.0.0.1", port: int = 8000, grace_s: float = 35.0,
               log_level: str = "info") -> int:
    """Serve ``app`` on ``host:port`` until SIGTERM or SIGINT, then shut down gracefully
    (``grace_s``: seconds at most for the requests in flight). Returns 0, or ``128 +
    signal`` when a signal stopped it."""
    server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level=log_level,
                                           timeout_graceful_shutdown=grace_s,
                                           lifespan="on"))
    received: list[int] = []
    # uvicorn handles the signals while it runs, then raises the one it got again after
    # restoring the handlers it found: these record it instead of ending the process.
    main = threading.current_thread() is threading.main_thread()
    previous = {sig: signal.signal(sig, lambda signum, frame: received.append(signum))
                for sig in (signal.SIGINT, signal.SIGTERM)} if main else {}
    try:
        server.run()
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if received:
        log.info("stopped by %s after answering the requests in flight",
                 signal.Signals(received[-1]).name)
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
        raise ValueError(f"{folder}: an export of task {task!r}; expected one of "
                         f"{', '.join(sorted(EVALUATORS))}")
    config = {"task": task, "model": meta["model"]}
    if task == "translate":  # the length rule the exporter wrote
        config["max_len_extra"] = meta["decoding"]["max_len"]["extra"]
        vocab = meta["vocab"]
    else:
        vocab = meta["vocab"]["tgt"]
    return evaluator_for(task)(model, config, vocab)


def serve_checkpoint(checkpoint, *, device="cpu", limits: Limits | None = None,
                     host: str = "127.0.0.1", port: int = 8000,
                     api_key: str | None = None) -> int:
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
            raise ValueError(f"device: an ONNX export is served on the CPU (onnxruntime), got "
                             f"{device!r}; serve its checkpoint for another device")
        evaluator = exported_evaluator(checkpoint)
        runtime = f"onnxruntime ({evaluator.model.meta.get('quantize') or 'float32'})"
    else:
        evaluator, runtime = load_evaluator(checkpoint, device), "pytorch"
    app = create_app(evaluator, limits, api_key=api_key, name=str(checkpoint), runtime=runtime)
    if host not in LOCAL_HOSTS and api_key is None:
        log.warning("serving on %s without an API key: anyone who reaches this address can "
                    "use the model (--api-key or ATTNKIT_API_KEY)", host)
    return run_server(app, host=host, port=port, grace_s=limits.timeout_s + GRACE_S)
