"""How a task is served over HTTP (``attnkit serve``), declared by the task beside its
evaluator: the endpoint's path, the fields a request carries, and how they become the input
that :meth:`~attnkit.tasks.evaluator.Evaluator.decode` takes.

A task's evaluator names its :class:`Route` as a class attribute, as it names its ``data``
and ``metrics``::

    class VqaEvaluator(Evaluator, task="vqa"):
        route = Route("/ask", "answer a question about an image", upload=Upload("image"),
                      texts=(Text("question", check=_known_words),),
                      no_decoding="a VQA model answers with its most probable class")

:func:`attnkit.serve.app.create_app` then builds the endpoint from it, with no code of the
task's in the server. The declaration knows nothing of HTTP: the server reads the fields,
holds them to its limits and turns every refusal into an answer naming the field.

A request is handled in this order, each step refusing with a 422 that names its field:
the decoding options (none at all when :attr:`Route.no_decoding` says why), each text (not
empty, at most the server's ``--max-chars``, then its :attr:`Text.check`), the decoding
settings (:attr:`Route.check_decoding`), the upload (not empty; an image at most the
server's ``--max-pixels`` by its header), then :attr:`Route.read`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = ["UPLOAD_KINDS", "Refused", "Route", "Text", "Upload"]

UPLOAD_KINDS = ("image", "audio")


class Refused(ValueError):
    """A request the task cannot serve: ``field`` names what is wrong (``"decoding.beam"``),
    the message says what was expected and what was given."""

    def __init__(self, field: str, message: str):
        super().__init__(message)
        self.field = field


@dataclass(frozen=True)
class Text:
    """A text field of a request: ``name`` (a JSON key, or a multipart form field beside an
    upload) and what it holds (``about``, for the schema). ``check(evaluator, text)``: raises
    :class:`~attnkit.errors.DataError` when the model cannot take ``text`` (words it never
    saw); None: any text of the server's length."""

    name: str
    about: str = ""
    check: Callable[[Any, str], None] | None = None


@dataclass(frozen=True)
class Upload:
    """The file a request uploads, in the multipart field ``name``; its ``kind`` (one of
    :data:`UPLOAD_KINDS`) says which server limit holds it: ``--max-pixels`` for an image,
    ``--max-seconds`` for audio (:attr:`Route.read` is given it)."""

    name: str
    kind: str = "image"

    def __post_init__(self):
        if self.kind not in UPLOAD_KINDS:
            raise ValueError(f"kind: expected one of {', '.join(UPLOAD_KINDS)}, got {self.kind!r}")


def _load_inputs(evaluator, given: Mapping[str, str | Path], *, max_seconds: float):
    """The evaluator's own reader of what a command line gives: the fields' values in their
    order, as texts."""
    return evaluator.load_inputs([str(value) for value in given.values()])[0][0]


@dataclass(frozen=True)
class Route:
    """A task's endpoint: ``POST path``, described by ``summary``.

    Attributes:
        path: the endpoint, e.g. ``"/translate"``.
        summary: what one request does, for the schema.
        upload: the file a request carries (a multipart body), or None (a JSON body).
        texts: the text fields, in the order the request's schema lists them.
        no_decoding: why a request may give no decoding options (``"a VQA model answers
            with its most probable class"``); None: it may give any the server allows.
        check_decoding: ``check_decoding(evaluator, decoding)`` raises :class:`Refused`
            naming the option when the model cannot decode as the request's
            :class:`~attnkit.decoding.Decoding` says (a CTC head: greedy only); None: the
            server's limits are the only ones.
        read: ``read(evaluator, given, *, max_seconds)``: the input ``evaluator.decode``
            takes, from ``given``, each field's value by name (the upload as the path of a
            file holding it, the texts as given, upload first); ``max_seconds``: the longest
            audio the server takes. Raises :class:`~attnkit.errors.DataError` or
            ``ValueError`` naming what it cannot read. Default: the evaluator's
            ``load_inputs`` of the values in that order, its first input.
    """

    path: str
    summary: str
    upload: Upload | None = None
    texts: tuple[Text, ...] = ()
    no_decoding: str | None = None
    check_decoding: Callable[[Any, Any], None] | None = None
    read: Callable[..., Any] = _load_inputs

    def __post_init__(self):
        if not self.path.startswith("/"):
            raise ValueError(f"path: expected a path starting with '/', got {self.path!r}")
        if self.upload is None and not self.texts:
            raise ValueError(f"{self.path}: expected an upload or a text field, got neither")
        names = [t.name for t in self.texts] + ([self.upload.name] if self.upload else [])
        taken = [n for i, n in enumerate(names) if n in names[:i] or n == "decoding"]
        if taken:
            raise ValueError(
                f"{self.path}: field {taken[0]!r} named twice (decoding is the decoding options')"
            )

    @property
    def content_type(self) -> str:
        """What a request's ``Content-Type`` must be: JSON, or a multipart form with an
        upload."""
        return "application/json" if self.upload is None else "multipart/form-data"
