"""``attnkit serve``: a checkpoint's task over HTTP, its requests decoded in batches within the
server's limits.

:mod:`attnkit.serve.app` (``create_app``: the application, its middleware and errors),
:mod:`attnkit.serve.endpoints` (a task's endpoint, built from the route its evaluator
declares, :mod:`attnkit.tasks.route`),
:mod:`attnkit.serve.dynamic_batching` (``Batcher``: dynamic batching), :mod:`attnkit.serve.options`
(the decoding options a request may give), :mod:`attnkit.serve.limits` (``Limits``),
:mod:`attnkit.serve.prometheus` (``/metrics``) and :mod:`attnkit.serve.server`
(``run_server``, ``serve_checkpoint``: uvicorn). Only :class:`Limits` is imported with the
package; the others load FastAPI and uvicorn (the ``serve`` extra) when first named.
"""

from importlib import import_module

from attnkit.serve.limits import Limits

__all__ = [
    "ApiError",
    "Batcher",
    "DecodingOptions",
    "Limits",
    "Metrics",
    "QueueFull",
    "create_app",
    "decoding_for",
    "run_server",
    "serve_checkpoint",
]

_LAZY = {
    "create_app": "app",
    "Batcher": "dynamic_batching",
    "QueueFull": "dynamic_batching",
    "Metrics": "prometheus",
    "ApiError": "options",
    "DecodingOptions": "options",
    "decoding_for": "options",
    "run_server": "server",
    "serve_checkpoint": "server",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(f"attnkit.serve.{_LAZY[name]}"), name)
    raise AttributeError(f"module 'attnkit.serve' has no attribute {name!r}")
