"""What a request may ask: the decoding options it may give (:class:`DecodingOptions`),
turned into a :class:`attnkit.decoding.Decoding` within the server's
:class:`~attnkit.serve.limits.Limits` (:func:`decoding_for`), and the error every refusal
raises (:class:`ApiError`)."""

from __future__ import annotations

from dataclasses import asdict

from pydantic import BaseModel, ConfigDict, ValidationError
from starlette.exceptions import HTTPException

from attnkit.checks import quoted
from attnkit.decoding import Decoding
from attnkit.serve.limits import Limits

__all__ = ["ApiError", "DecodingOptions", "decoding_for", "describe_decoding", "validation_error"]


class ApiError(HTTPException):
    """A request refused: HTTP ``status``, the ``field`` it is about (``"decoding.beam"``,
    ``"image"``, ``"body"``; None when no field is to blame) and a ``message`` naming the
    field, what was expected and what was given; ``headers`` go with the answer. An
    :class:`HTTPException`, so that one raised while the body is read reaches the server's
    handler as it is."""

    def __init__(
        self, status: int, field: str | None, message: str, headers: dict[str, str] | None = None
    ):
        super().__init__(status, message, headers or {})
        self.status, self.field, self.message = status, field, message


class DecodingOptions(BaseModel):
    """A request's decoding options, as the command line's (``attnkit translate --help``):
    beam search (``beam``, ``length_penalty``, ``coverage_penalty``, ``no_repeat_ngram``,
    ``n_best``, ``beam_stop``), or ``sample`` draws (``temperature``, ``top_k``, ``top_p``,
    ``seed``); for both ``max_len`` and ``loop_stop``. Unknown options are refused."""

    model_config = ConfigDict(extra="forbid", strict=True)

    beam: int | None = None
    length_penalty: float | None = None
    coverage_penalty: float | None = None
    no_repeat_ngram: int | None = None
    n_best: int | None = None
    beam_stop: str | None = None
    sample: int | None = None
    temperature: float | None = None
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    max_len: int | None = None
    loop_stop: bool | None = None


BEAM_ONLY = (
    "beam",
    "length_penalty",
    "coverage_penalty",
    "no_repeat_ngram",
    "n_best",
    "beam_stop",
)
SAMPLE_ONLY = ("temperature", "top_k", "top_p", "seed")


def validation_error(exc: ValidationError, prefix: str = "") -> ApiError:
    """The first error pydantic found, as a 422 naming the field (``prefix``: the name of
    the object validated, e.g. ``"decoding"``)."""
    error = exc.errors(include_url=False)[0]
    field = ".".join([prefix] * bool(prefix) + [str(p) for p in error["loc"]])
    got = error.get("input")
    if error["type"] == "extra_forbidden":
        known = ", ".join(DecodingOptions.model_fields) if prefix == "decoding" else None
        expected = f"; expected one of {known}" if known else ""
        return ApiError(422, field, f"{field}: not an option{expected}, got {quoted(got)}")
    if error["type"] == "json_invalid":
        reason = (error.get("ctx") or {}).get("error", error["msg"])
        return ApiError(
            422,
            field or prefix,
            f"{field or prefix}: expected a JSON object, got malformed JSON ({reason})",
        )
    if error["type"] == "missing":
        return ApiError(422, field, f"{field}: missing")
    expected = error["msg"].removeprefix("Input should be ").removeprefix("Value error, ")
    return ApiError(
        422,
        field or prefix or "body",
        f"{field or prefix or 'body'}: expected {expected}, got {quoted(got)}",
    )


def decoding_for(
    options: DecodingOptions | None, limits: Limits, *, default_beam: int = 1
) -> Decoding:
    """The :class:`Decoding` a request's ``options`` ask for: beam search of
    ``default_beam`` (at most ``limits.max_beam``) for what they do not say, as the command
    line decodes.

    Raises:
        ApiError: 422 naming the option: a beam or a number of draws above
            ``limits.max_beam``, a ``max_len`` above ``limits.max_len``, a beam search option
            with ``sample`` or a sampling option without it, a value :class:`Decoding`
            refuses.
    """
    given = {} if options is None else options.model_dump(exclude_none=True)
    for name, cap in (
        ("beam", limits.max_beam),
        ("sample", limits.max_beam),
        ("max_len", limits.max_len),
    ):
        if name in given and given[name] > cap:
            option = "--max-beam" if name != "max_len" else "--max-len"
            raise ApiError(
                422,
                f"decoding.{name}",
                f"decoding.{name}: expected at most {cap} "
                f"(the server's {option}), got {given[name]}",
            )
    if "sample" in given:
        wrong = [name for name in BEAM_ONLY if name in given]
        if wrong:
            raise ApiError(
                422,
                f"decoding.{wrong[0]}",
                f"decoding.{wrong[0]}: a beam search "
                f"option; sample draws outputs instead of searching, give one or "
                f"the other",
            )
        settings = {"sample": True, "samples": given.pop("sample"), "seed": 0, **given}
    else:
        wrong = [name for name in SAMPLE_ONLY if name in given]
        if wrong:
            raise ApiError(
                422,
                f"decoding.{wrong[0]}",
                f"decoding.{wrong[0]}: a sampling option; it needs sample (the number of draws)",
            )
        settings = {"beam": min(default_beam, limits.max_beam), **given}
    try:
        return Decoding(**settings)
    except ValueError as exc:
        name = str(exc).split(":", 1)[0]
        name = "sample" if name == "samples" else name
        raise ApiError(422, f"decoding.{name}", f"decoding.{exc}") from None


def describe_decoding(decoding: Decoding) -> dict:
    """``decoding``'s settings as JSON: every field of :class:`Decoding`."""
    return asdict(decoding)
