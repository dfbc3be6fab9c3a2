"""Text-line images for OCR: the built-in rendered lines (the user's own folder of images is
read by :mod:`attnkit.data.corpora.line_folders`).

Every line image is a ``torch.uint8`` tensor ``(32, W)`` of gray levels 0-255 (255 = white
paper, dark ink), 32 pixels high and as wide as its text needs (about 12 px per character at the
usual sizes, so a 200-character line is 2,000-3,000 px wide);
:func:`~attnkit.data.corpora.line_folders.pad_images` makes a batch of them float32 in ``[0, 1]``.

**Built-in lines** (:func:`generate_lines`) are 5-200 characters of :data:`ALPHABET`: common
English words (SCOWL size 10, shipped as ``words_en.txt``), numbers, codes and punctuation, or
with probability ``prose`` a stretch of real English sentences (the prose of Python's own
reference documentation, ``pydoc_data.topics``, which every Python installation has: the
sentences made only of :data:`ALPHABET`), rendered with Pillow in a random font and size, then
lightly rotated, blurred, noised and given a random paper and ink shade. Example ``index`` of
``split`` draws everything from its own seed, derived from ``(seed, split, index)``, so the same
arguments give the same text and image on the same machine (pixels may differ across
Pillow/FreeType versions and with the fonts installed). A text, and a sentence, belongs to one
split only, chosen by a hash of it (as in :mod:`attnkit.data.worlds.text_tasks`), so splits never
share a text.

**Fonts** are found at run time: matplotlib's DejaVu fonts (always there) and every TrueType
and OpenType file under ``/usr/share/fonts`` (the Makefile's ``make fonts`` installs the
Debian font packages attnkit trains on: serif, sans, mono, condensed, slab, handwriting-like and
script families with their italic and bold faces), or under the folder the environment variable
``ATTNKIT_FONT_ROOT`` names (:data:`FONT_ROOT`: laid out as ``/usr/share/fonts`` is, for example
the packages unpacked with ``dpkg-deb -x`` where installing them is not wanted). Fonts missing
any character of :data:`ALPHABET`, and those that draw no text (:data:`NOT_TEXT`), are left
out. A font's **family** (:func:`font_family`) is its package's folder
(``/usr/share/fonts/*/NAME/``; DejaVu for matplotlib's). Two kinds of fonts are held out of
training:

* whole families (:data:`HELD_OUT_FAMILIES`, for valid and test), for figures on designs
  never seen;
* single faces of training families (:data:`HELD_OUT_FONTS`), for in-family figures.

A split's fonts (:func:`available_fonts`) are both kinds; ``fonts=`` narrows a call to some of
them (``fonts="families"`` or ``"faces"``, or a list of files).

:func:`~attnkit.data.corpora.line_folders.write_line_folder` writes generated lines as the user's
own folder of images and ``filename<TAB>text`` TSV once, to reuse them as a cache
(:func:`iter_lines` renders them one at a time, so a large cache is written without holding its
images).

Labels go through :class:`~attnkit.data.vocab.vocabularies.CharVocab`; for CTC its ``<pad>`` id 0
serves as the blank:

    >>> from attnkit.data import CharVocab
    >>> vocab = CharVocab(ALPHABET)
    >>> vocab.decode(vocab.encode("Total: 12.50 (net)"))
    'Total: 12.50 (net)'
"""

from __future__ import annotations

import functools
import os
import re
import string
from collections.abc import Iterator, Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image, ImageDraw, ImageFilter, ImageFont

from attnkit.data.corpora.line_folders import HEIGHT
from attnkit.data.worlds.text_tasks import SPLITS, split_of
from attnkit.errors import DataError

__all__ = [
    "ALPHABET",
    "HELD_OUT_FAMILIES",
    "HELD_OUT_FONTS",
    "available_fonts",
    "font_family",
    "generate_lines",
    "iter_lines",
    "render_line",
]

ALPHABET = string.ascii_letters + string.digits + string.punctuation + " "
HELD_OUT_FONTS = {
    "valid": (
        "DejaVuSerif-Italic.ttf",
        "LiberationSerif-Italic.ttf",
        "LiberationSansNarrow-Bold.ttf",
        "FreeSerifBold.ttf",
        "FreeMonoOblique.ttf",
    ),
    "test": (
        "DejaVuSans-BoldOblique.ttf",
        "LiberationSans-BoldItalic.ttf",
        "LiberationMono-Regular.ttf",
        "FreeSans.ttf",
        "FreeSerifBoldItalic.ttf",
    ),
}
HELD_OUT_FAMILIES = {
    "valid": ("cabin", "fanwood", "anonymous-pro", "comic-neue", "averia-gwf", "jura"),
    "test": ("cantarell", "ebgaramond", "hack", "roboto", "charis", "courier-prime"),
}
# where the system's fonts are; ATTNKIT_FONT_ROOT (read once, at import) names another folder
FONT_ROOT = Path(os.environ.get("ATTNKIT_FONT_ROOT") or "/usr/share/fonts")
# font files that pass the alphabet check but draw keycaps, initials or mathematics, or
# capitals for the lower case (Humor Sans: no line of it can be read with its case)
NOT_TEXT = ("LinBiolinum_K", "LinLibertine_I", "DejaVuMathTeXGyre", "Humor-Sans")
# reserved for checks made outside the project: never rendered, even where installed
RESERVED = ("urw-base35", "Carlito", "NotoMono", "NotoSansMono")
SIZES = (18, 36)  # font sizes drawn from, in pixels, before scaling the line to HEIGHT
PUNCT_AFTER = ",.;:!?"
PAIRS = ('""', "()", "''", "[]")


def _font_files() -> list[Path]:
    """DejaVu from matplotlib, then every font file under :data:`FONT_ROOT`, one per name,
    sorted by path."""
    import matplotlib

    found: dict[str, Path] = {}
    mpl = Path(matplotlib.get_data_path()) / "fonts" / "ttf"
    system = (
        sorted(
            p for p in FONT_ROOT.rglob("*") if p.suffix.lower() in (".ttf", ".otf") and p.is_file()
        )
        if FONT_ROOT.is_dir()
        else []
    )
    for path in [*sorted(mpl.glob("DejaVu*.ttf")), *system]:
        if any(r in str(path) for r in RESERVED) or path.stem.startswith(NOT_TEXT):
            continue
        found.setdefault(path.name, path)
    return list(found.values())


def font_family(path: str | Path) -> str:
    """The family a font file belongs to, as the splits hold families out: the folder of its
    package (``/usr/share/fonts/truetype/lato/Lato-Bold.ttf``: ``"lato"``; the variable or
    sub-folders of a package count as the package), ``"dejavu"`` for matplotlib's DejaVu."""
    path = Path(path)
    try:
        parts = path.relative_to(FONT_ROOT).parts
    except ValueError:
        return "dejavu" if path.name.startswith("DejaVu") else path.parent.name
    folder = parts[1] if parts[0] in ("truetype", "opentype") and len(parts) > 2 else parts[0]
    return folder.removesuffix("-variable").removeprefix("fonts-")


def _covers_alphabet(path: Path) -> bool:
    from matplotlib.ft2font import FT2Font

    try:
        font = FT2Font(str(path))
    except (OSError, RuntimeError):
        return False
    return all(font.get_char_index(ord(c)) for c in ALPHABET)


@functools.lru_cache(maxsize=1)
def _fonts_by_split() -> dict[str, dict[str, tuple[Path, ...]]]:
    """``{split: {"families": fonts of its held-out families, "faces": its held-out faces}}``,
    and for train ``{"all": every other font}``."""
    usable = [p for p in _font_files() if _covers_alphabet(p)]
    faces = {name for names in HELD_OUT_FONTS.values() for name in names}
    families = {name for names in HELD_OUT_FAMILIES.values() for name in names}
    out = {
        split: {
            "families": tuple(p for p in usable if font_family(p) in HELD_OUT_FAMILIES[split]),
            "faces": tuple(p for p in usable if p.name in HELD_OUT_FONTS[split]),
        }
        for split in HELD_OUT_FONTS
    }
    out["train"] = {
        "all": tuple(p for p in usable if p.name not in faces and font_family(p) not in families)
    }
    return {split: out[split] for split in SPLITS}


def available_fonts() -> dict[str, list[Path]]:
    """The font files of each split (``train``, ``valid``, ``test``) on this machine: a held-out
    split's families, then its faces."""
    return {
        split: [p for group in groups.values() for p in group]
        for split, groups in _fonts_by_split().items()
    }


def _split_fonts(split: str, fonts) -> tuple[Path, ...]:
    """The fonts ``generate_lines(split=split, fonts=fonts)`` draws from."""
    groups = _fonts_by_split()[split]
    if fonts is None:
        return tuple(p for group in groups.values() for p in group)
    if isinstance(fonts, str):
        if fonts not in groups:
            raise ValueError(
                f"fonts: expected None, a list of font files or one of "
                f"{', '.join(groups)} for split {split!r}, got {fonts!r}"
            )
        return groups[fonts]
    return tuple(Path(f) for f in fonts)


@functools.cache
def _words() -> tuple[str, ...]:
    text = (Path(__file__).with_name("words_en.txt")).read_text(encoding="utf-8")
    return tuple(w for w in text.split("\n") if w and not w.startswith("#"))


def _token(rng: np.random.Generator) -> str:
    """One word, number, code or punctuation mark, as it could appear in running text."""
    kind = rng.random()
    if kind < 0.76:
        word = _words()[rng.integers(len(_words()))]
        case = rng.random()
        word = word.capitalize() if case < 0.15 else word.upper() if case < 0.2 else word
        shape = rng.random()
        if shape < 0.15:
            return word + PUNCT_AFTER[rng.integers(len(PUNCT_AFTER))]
        if shape < 0.18:
            pair = PAIRS[rng.integers(len(PAIRS))]
            return pair[0] + word + pair[1]
        return word
    if kind < 0.88:
        value = int(rng.integers(10 ** int(rng.integers(1, 7))))
        form = rng.random()
        if form < 0.15:
            return f"{value:,}"
        if form < 0.3:
            return f"{value / 100:.2f}"
        if form < 0.4:
            return f"{value % 100}%"
        if form < 0.5:
            return f"{value % 24:02d}:{value % 60:02d}"
        return str(value)
    if kind < 0.95:
        chars = string.ascii_uppercase + string.digits + "-/#"
        return "".join(chars[i] for i in rng.integers(len(chars), size=int(rng.integers(2, 9))))
    return string.punctuation[rng.integers(len(string.punctuation))]


@functools.cache
def _sentences() -> dict[str, tuple[str, ...]]:
    """The sentences of Python's reference documentation made only of :data:`ALPHABET`
    (code, tables and prompts left out), by split (a hash of each sentence)."""
    from pydoc_data.topics import topics

    prose = re.sub(r"\s+", " ", " ".join(topics[k] for k in sorted(topics)))
    allowed = set(ALPHABET)
    out: dict[str, list[str]] = {split: [] for split in SPLITS}
    for sentence in re.split(r"(?<=[.!?]) ", prose):
        if (
            20 <= len(sentence) <= 400
            and set(sentence) <= allowed
            and not re.search(r"[=_*`|]{2,}|>>>|\.\.\.|[{}]", sentence)
        ):
            out[split_of(sentence)].append(sentence)
    return {split: tuple(found) for split, found in out.items()}


def _prose(rng: np.random.Generator, n_chars: int, split: str) -> str:
    """About ``n_chars`` characters of running prose of ``split``: consecutive sentences from
    a drawn one, cut at word boundaries (exactly ``n_chars`` when a word ends there)."""
    sentences = _sentences()[split]
    start = int(rng.integers(len(sentences)))
    text = " ".join(sentences[start : start + 1 + n_chars // 20])
    words = text.split(" ")
    first = int(rng.integers(max(1, len(words) // 3))) if rng.random() < 0.5 else 0
    out = ""
    for word in words[first:]:
        if len(out) + len(word) + 1 > n_chars and out:
            break
        out = f"{out} {word}" if out else word
    return out[:n_chars]


def _random_text(rng: np.random.Generator, n_chars: int) -> str:
    """Exactly ``n_chars`` characters of :data:`ALPHABET`, single spaces, none at either end."""
    tokens, length = [], -1
    while length < n_chars:
        tokens.append(_token(rng))
        length += len(tokens[-1]) + 1
    text = " ".join(tokens)[:n_chars]
    if text.endswith(" "):
        text = text[:-1] + string.ascii_lowercase[rng.integers(26)]
    return text


@functools.lru_cache(maxsize=256)
def _font(path: str, size: int) -> ImageFont.FreeTypeFont:
    return ImageFont.truetype(path, size)


def render_line(text: str, *, font: str | Path, size: int, rng: np.random.Generator) -> Image.Image:
    """Render one line of ``text`` as a grayscale image ``HEIGHT`` (32) pixels high.

    The text is drawn at ``size`` pixels in ``font`` with random margins, rotated by a small angle
    (smaller for longer lines, so the ends stay inside the line), blurred, scaled to height 32
    keeping the aspect ratio, shaded (paper 0.6-1.0, ink 0.0-0.4) and given Gaussian noise. All
    randomness comes from ``rng``.

    Shape:
        returns a mode ``"L"`` image of size ``(W, 32)`` (PIL's ``(width, height)``), ``W >= 1``.
    """
    if not text or "\n" in text or "\t" in text:
        raise ValueError(f"text: expected one non-empty line without tabs, got {text!r}")
    if not isinstance(size, int) or size < 4:
        raise ValueError(f"size: expected an int of at least 4 pixels, got {size!r}")
    face = _font(str(font), size)
    ascent, descent = face.getmetrics()
    pad_top, pad_bottom = (int(v) for v in rng.integers(0, size // 4 + 1, size=2))
    pad_x = int(rng.integers(2, size + 1))
    width = int(np.ceil(face.getlength(text))) + 2 * pad_x
    height = ascent + descent + pad_top + pad_bottom
    ink = Image.new("L", (width, height), 0)  # ink coverage: 255 where the glyphs are
    ImageDraw.Draw(ink).text((pad_x, pad_top), text, font=face, fill=255)
    max_angle = min(2.0, np.degrees(np.arctan(0.1 * height / width)))
    ink = ink.rotate(float(rng.uniform(-max_angle, max_angle)), resample=Image.Resampling.BILINEAR)
    ink = ink.filter(ImageFilter.GaussianBlur(float(rng.uniform(0.0, 0.05 * size))))
    ink = ink.resize((max(1, round(width * HEIGHT / height)), HEIGHT), Image.Resampling.BILINEAR)
    paper, dark = rng.uniform(0.6, 1.0), rng.uniform(0.0, 0.4)
    cover = np.asarray(ink, dtype=np.float32) / 255.0
    pixels = paper + (dark - paper) * cover  # (32, W)
    pixels += rng.normal(0.0, rng.uniform(0.0, 0.06), size=pixels.shape)
    return Image.fromarray(np.round(np.clip(pixels, 0.0, 1.0) * 255).astype(np.uint8), "L")


def _to_tensor(image: Image.Image) -> torch.Tensor:
    """``(32, W)`` uint8 from an 8-bit grayscale image."""
    return torch.from_numpy(np.array(image, dtype=np.uint8))


def generate_lines(
    n: int,
    *,
    split: str = "train",
    seed: int = 0,
    min_chars: int = 5,
    max_chars: int = 200,
    prose: float = 0.0,
    fonts: str | Sequence[str | Path] | None = None,
) -> list[tuple[torch.Tensor, str]]:
    """``n`` rendered lines of ``split`` as ``(image (32, W), text)``, the same for the same args.

    Text lengths are uniform in ``[min_chars, max_chars]``; each line is real prose with
    probability ``prose``, else random tokens. Font (from :func:`available_fonts` for
    ``split``; ``fonts`` narrows them: ``"families"`` or ``"faces"`` of a held-out split, or a
    list of files: a family drawn uniformly, then one of its files) and size are drawn per
    line. Lines can repeat a text only within a split.

    Shape:
        each image is a uint8 tensor ``(32, W)``, ``W`` growing with the text.
    """
    return list(
        iter_lines(
            n,
            split=split,
            seed=seed,
            min_chars=min_chars,
            max_chars=max_chars,
            prose=prose,
            fonts=fonts,
        )
    )


def iter_lines(
    n: int,
    *,
    split: str = "train",
    seed: int = 0,
    min_chars: int = 5,
    max_chars: int = 200,
    prose: float = 0.0,
    fonts: str | Sequence[str | Path] | None = None,
) -> Iterator[tuple[torch.Tensor, str]]:
    """The lines of :func:`generate_lines`, rendered one at a time as they are iterated.

    Raises (on the call, before any line is rendered):
        ValueError: a bad ``split``, ``n``, character range, ``prose`` or ``fonts``.
        DataError: none of the split's fonts is installed.
    """
    if split not in SPLITS:
        raise ValueError(f"split: expected one of {', '.join(SPLITS)}, got {split!r}")
    if not isinstance(n, int) or n < 0:
        raise ValueError(f"n: expected a non-negative int, got {n!r}")
    if not 1 <= min_chars <= max_chars:
        raise ValueError(
            f"min_chars, max_chars: expected 1 <= min_chars <= max_chars, "
            f"got {min_chars} and {max_chars}"
        )
    if not 0.0 <= prose <= 1.0:
        raise ValueError(f"prose: expected a probability in [0, 1], got {prose!r}")
    chosen = _split_fonts(split, fonts)
    if not chosen:
        raise DataError(
            f"split {split!r}: none of its fonts ({fonts or 'all'}) is installed; "
            "make fonts installs them"
        )
    return _render(n, split, seed, min_chars, max_chars, prose, chosen)


def _render(
    n: int,
    split: str,
    seed: int,
    min_chars: int,
    max_chars: int,
    prose: float,
    fonts: Sequence[Path],
) -> Iterator[tuple[torch.Tensor, str]]:
    # a family first, then one of its faces: a family of 40 files is drawn as often as one of 1
    by_family: dict[str, list[Path]] = {}
    for font in fonts:
        by_family.setdefault(font_family(font), []).append(font)
    families = [tuple(by_family[name]) for name in sorted(by_family)]
    split_id = list(SPLITS).index(split)
    for index in range(n):
        rng = np.random.default_rng([seed, split_id, index])
        n_chars = int(rng.integers(min_chars, max_chars + 1))
        if prose and rng.random() < prose:
            text = _prose(rng, n_chars, split)
        else:
            text = _random_text(rng, n_chars)
            while split_of(text) != split:
                text = _random_text(rng, n_chars)
        family = families[rng.integers(len(families))]
        font = family[rng.integers(len(family))]
        size = int(rng.integers(SIZES[0], SIZES[1] + 1))
        yield _to_tensor(render_line(text, font=font, size=size, rng=rng)), text
