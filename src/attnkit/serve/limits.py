"""What a server takes at most (:class:`Limits`): read by the command line's options without
loading the HTTP stack."""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from attnkit.decoding import MAX_OUTPUT_TOKENS

__all__ = ["Limits"]


@dataclass(frozen=True)
class Limits:
    """What a server takes at most. Each is a positive number.

    Attributes:
        max_body_bytes: a request's body (the JSON, or the multipart upload) in bytes.
        max_chars: a text to translate, or a question, in characters.
        max_seconds: an audio file to transcribe, in seconds.
        max_pixels: an image (line, picture) as its file's header gives it, width x height.
        max_beam: a request's beam width, or its number of draws with ``sample``.
        max_len: a request's ``max_len`` (output tokens, EOS included).
        max_batch: requests decoded together.
        max_wait_ms: how long a request waits for others to join its batch.
        max_queue: requests waiting to be decoded; more are answered 503.
        timeout_s: a request's time from arrival to answer; later it is answered 504.
        read_timeout_s: the time a connection has to send a whole request (headers and
            body), from its opening or the previous answer; later it is closed unanswered.
        keep_alive_s: how long a connection may stay idle after an answer; later it is
            closed.
    """

    max_body_bytes: int = 10 * 2**20
    max_chars: int = 1000
    max_seconds: float = 30.0
    max_pixels: int = 4096 * 4096
    max_beam: int = 16
    max_len: int = 1000
    max_batch: int = 16
    max_wait_ms: float = 5.0
    max_queue: int = 256
    timeout_s: float = 30.0
    read_timeout_s: float = 30.0
    keep_alive_s: float = 5.0

    def __post_init__(self):
        for f in fields(self):
            value = getattr(self, f.name)
            integral = f.type in (int, "int")
            ok = (
                (isinstance(value, int) and not isinstance(value, bool))
                if integral
                else (
                    isinstance(value, (int, float))
                    and not isinstance(value, bool)
                    and math.isfinite(value)
                )
            )
            if not ok or value < 0 or (value == 0 and f.name != "max_wait_ms"):
                expected = "a positive int" if integral else "a finite positive number"
                raise ValueError(f"{f.name}: expected {expected}, got {value!r}")
        if self.max_len > MAX_OUTPUT_TOKENS:
            raise ValueError(
                f"max_len: expected at most {MAX_OUTPUT_TOKENS} (decoding's own "
                f"cap), got {self.max_len}"
            )
