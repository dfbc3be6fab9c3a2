"""Built-in translation tasks, generated offline and deterministically from a seed.

* **numbers**: ``<fr> vingt-trois mille quatre cent douze`` -> ``23412`` (num2words, 43
  languages; ``am`` and ``tet`` are left out: the first raises, the second is stateful in
  num2words 0.5.14);
* **dates**: ``<de> Samstag, 21. November 2026`` -> ``2026-11-21`` (babel's CLDR long and
  full formats, 20 locales).

Their words and formats are the data: it is defined by the versions of
:data:`DATA_VERSIONS` (the built-in model's training data and the scores published on it).
The dependencies take compatible ranges of both, so that attnkit installs beside other
packages; another version than the data's is named in a warning, once, as its numbers or
dates may be written otherwise.

``direction="reverse"`` swaps the sides (digits -> words is the harder, longer-output task).
Every example belongs to one split, chosen by a hash of its source text, so the same example
can never be in two splits.
"""

from __future__ import annotations

import datetime
import functools
import hashlib
import logging
import random
from importlib import metadata

__all__ = [
    "DATA_VERSIONS",
    "DATE_LOCALES",
    "NUMBER_LANGUAGES",
    "check_data_versions",
    "generate_pairs",
    "split_of",
]

log = logging.getLogger("attnkit")

DATA_VERSIONS = {"num2words": "0.5.14", "babel": "2.18.0"}
"""The versions of the libraries whose words and formats the built-in translation data is."""

NUMBER_LANGUAGES = (
    "ar",
    "az",
    "be",
    "bn",
    "ca",
    "ce",
    "cs",
    "cy",
    "da",
    "de",
    "en",
    "eo",
    "es",
    "fa",
    "fi",
    "fr",
    "he",
    "hu",
    "id",
    "is",
    "it",
    "ja",
    "kn",
    "ko",
    "kz",
    "lt",
    "lv",
    "nl",
    "no",
    "pl",
    "pt",
    "ro",
    "ru",
    "sk",
    "sl",
    "sr",
    "sv",
    "te",
    "tg",
    "th",
    "tr",
    "uk",
    "vi",
)
DATE_LOCALES = (
    "en",
    "de",
    "fr",
    "es",
    "it",
    "pt",
    "nl",
    "sv",
    "da",
    "nb",
    "fi",
    "pl",
    "cs",
    "ru",
    "uk",
    "tr",
    "ja",
    "zh",
    "ko",
    "el",
)
SPLITS = {"train": (0, 90), "valid": (90, 95), "test": (95, 100)}
TASKS = ("numbers", "dates")


def split_of(source: str) -> str:
    """The split an example belongs to, from a stable hash of its source text."""
    bucket = (
        int.from_bytes(hashlib.blake2b(source.encode("utf-8"), digest_size=4).digest(), "big") % 100
    )
    return next(name for name, (lo, hi) in SPLITS.items() if lo <= bucket < hi)


@functools.cache
def check_data_versions() -> None:
    """Warn, once, for each library of :data:`DATA_VERSIONS` installed at another version."""
    for name, wanted in DATA_VERSIONS.items():
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue  # the import that needs it says so
        if installed != wanted:
            log.warning(
                "the built-in translation data is defined with %s %s "
                "(attnkit.data.worlds.text_tasks.DATA_VERSIONS); %s is installed, whose "
                "words or formats may differ: the pairs, and scores on them, may not "
                "be those published (docs/models.md)",
                name,
                wanted,
                installed,
            )


def _number(rng: random.Random) -> tuple[str, str, str, str]:
    """(tag, words, digits, tag for the reverse direction)."""
    from num2words import num2words

    lang = rng.choice(NUMBER_LANGUAGES)
    digits = rng.randint(1, 7)  # lengths spread evenly: 1 to 7 digits
    value = rng.randrange(10 ** (digits - 1) if digits > 1 else 0, 10**digits)
    return f"<{lang}>", num2words(value, lang=lang), str(value), f"<{lang}>"


def _date(rng: random.Random) -> tuple[str, str, str, str]:
    """(tag, written date, ISO date, tag for the reverse direction, which names the format)."""
    from babel.dates import format_date

    locale = rng.choice(DATE_LOCALES)
    day = datetime.date(1900, 1, 1) + datetime.timedelta(days=rng.randrange(73049))  # to 2099
    fmt = rng.choice(("long", "full"))
    return (
        f"<{locale}>",
        format_date(day, format=fmt, locale=locale),
        day.isoformat(),
        f"<{locale}:{fmt}>",
    )


def generate_pairs(
    n: int,
    *,
    split: str = "train",
    seed: int = 0,
    tasks: tuple[str, ...] = TASKS,
    direction: str = "forward",
) -> list[tuple[str, str]]:
    """``n`` distinct (source, target) pairs of ``split``, the same for the same arguments.

    With ``direction="reverse"`` the tag stays first on the source side:
    ``<fr> 23412`` -> ``vingt-trois mille quatre cent douze``; date tags then name the format
    (``<de:full> 2026-11-21``) so that every source has one target.
    """
    if split not in SPLITS:
        raise ValueError(f"split: expected one of {', '.join(SPLITS)}, got {split!r}")
    if direction not in ("forward", "reverse"):
        raise ValueError(f"direction: expected 'forward' or 'reverse', got {direction!r}")
    unknown = [t for t in tasks if t not in TASKS]
    if unknown or not tasks:
        raise ValueError(f"tasks: expected a non-empty subset of {TASKS}, got {tasks!r}")
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n: expected a non-negative int, got {n!r}")
    check_data_versions()
    rng = random.Random(f"{seed}-{split}-{'-'.join(tasks)}")
    makers = {"numbers": _number, "dates": _date}
    seen: set[str] = set()
    out: list[tuple[str, str]] = []
    while len(out) < n:
        tag, words, canonical, reverse_tag = makers[rng.choice(tasks)](rng)
        source = f"{tag} {words}"
        if source in seen or split_of(source) != split:
            continue
        seen.add(source)
        out.append(
            (source, canonical) if direction == "forward" else (f"{reverse_tag} {canonical}", words)
        )
    return out
