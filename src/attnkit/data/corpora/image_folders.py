"""Image files of any size and mode, and the user's folders of images with captions or
questions.

Every picture of a scene is kept as a ``torch.uint8`` tensor ``(3, S, S)`` (RGB, ``S`` pixels
square, the model's ``image_size``): a quarter of float32's memory; :func:`stack_images` makes a
batch of them float32 in ``[0, 1]``.

**Reading a file** (:func:`read_pixels`, :func:`load_image`): palette, greyscale, CMYK and
other 8-bit modes are converted to RGB (or luminance), transparency is laid over white, and
16-bit greyscale (mode ``"I;16"``, ``"I"``) is scaled from ``[0, 65535]``; an image of another
shape than ``S x S`` is resized to it (bilinear, not keeping the aspect ratio). An unreadable,
empty or non-image file, a floating-point image, or one of more pixels than Pillow's
``Image.MAX_IMAGE_PIXELS`` (a decompression bomb, refused from its header) raises a
:class:`DataError` naming the file.

**The user's folders**: images plus

* ``captions.tsv``: ``filename<TAB>caption`` lines, several lines per image allowed
  (:func:`read_caption_folder`);
* ``questions.tsv``: ``filename<TAB>question<TAB>answer`` lines (:func:`read_question_folder`).

File names are relative to the folder. A bad line, a missing or unreadable image raises a
:class:`DataError` naming the TSV file and line. :func:`write_caption_folder` and
:func:`write_question_folder` write data in these forms (e.g. built-in scenes, to inspect or
reuse them).
"""

from __future__ import annotations

import collections
import os
import struct
import warnings
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NamedTuple

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError

from attnkit.data.corpora.tsv import read_tsv_rows
from attnkit.data.corpora.unusable import Unusable
from attnkit.data.paths import inside, not_found, regular_file
from attnkit.errors import DataError

__all__ = [
    "CAPTIONS",
    "QUESTIONS",
    "CaptionedImage",
    "CaptionedImages",
    "ImageFiles",
    "ImageQuestion",
    "image_header",
    "load_image",
    "read_caption_folder",
    "read_pixels",
    "read_question_folder",
    "stack_images",
    "write_caption_folder",
    "write_question_folder",
]

CAPTIONS, QUESTIONS = "captions.tsv", "questions.tsv"  # a folder's data files, by default


class CaptionedImage(NamedTuple):
    """An image ``(3, S, S)`` uint8 with its reference captions, and where it came from."""

    image: torch.Tensor
    captions: tuple[str, ...]
    origin: str


class ImageQuestion(NamedTuple):
    """A question about image number ``image`` of a list of images, its answer and its type
    (a :data:`attnkit.data.worlds.scenes.QUESTION_TYPES` name for built-in scenes; ``"user"`` for
    the user's questions), and where it came from."""

    image: int
    question: str
    answer: str
    type: str
    origin: str


def read_pixels(
    path: str | Path, *, colour: bool, check_size: Callable[[Path, int, int], None] | None = None
) -> np.ndarray:
    """An image file's pixels as float32 in ``[0, 1]``: ``(H, W, 3)`` RGB with ``colour``,
    else ``(H, W)`` luminance (see the module docstring for the modes read).

    ``check_size(path, W, H)``, when given, is called with the sizes from the file's header
    before its pixels are decoded, and raises a :class:`DataError` to refuse them.

    Raises:
        DataError: naming the file, when it cannot be read as an image, holds floats, has more
            pixels than Pillow's ``Image.MAX_IMAGE_PIXELS`` (a decompression bomb), or is
            refused by ``check_size``.
    """
    image = _open(path, check_size, decode=True)
    if image.mode.startswith("I"):  # "I", "I;16", "I;16B", ...: 16-bit greyscale
        grey = np.clip(np.asarray(image, dtype=np.float32) / 65535.0, 0.0, 1.0)  # (H, W)
        return np.repeat(grey[..., None], 3, axis=-1) if colour else grey
    if image.has_transparency_data:
        white = Image.new("RGBA", image.size, (255, 255, 255, 255))
        image = Image.alpha_composite(white, image.convert("RGBA"))
    return np.asarray(image.convert("RGB" if colour else "L"), dtype=np.float32) / 255.0


def image_header(
    path: str | Path,
    check_size: Callable[[Path, int, int], None] | None = None,
) -> tuple[int, int]:
    """An image file's ``(width, height)`` from its header alone, checked as
    :func:`read_pixels` checks it before decoding (a file Pillow identifies, not a
    decompression bomb, not floating point, ``check_size``); its pixels are not read.

    Raises:
        DataError: naming the file, as :func:`read_pixels`.
    """
    image = _open(path, check_size, decode=False)
    return image.width, image.height


def _open(
    path: str | Path, check_size: Callable[[Path, int, int], None] | None, *, decode: bool
) -> Image.Image:
    """The image file ``path`` opened (its pixels decoded with ``decode``) and checked; a
    binary file object (an image stored in a dataset) is read as it is, errors naming it by
    its ``str``."""
    path = regular_file(path) if isinstance(path, (str, os.PathLike)) else path
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            with Image.open(path) as image:
                if check_size is not None:
                    check_size(path, image.width, image.height)
                if decode:
                    image.load()
                    if image.format == "PNG":
                        _check_png_rows(path, image.width, image.height)
    except DataError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning):
        raise DataError(
            f"{path}: more pixels than Pillow reads safely ({Image.MAX_IMAGE_PIXELS:,})"
        ) from None
    except (OSError, UnidentifiedImageError, SyntaxError, ValueError) as exc:
        raise DataError(f"{path}: cannot read image ({exc})") from None
    if image.mode == "F":
        raise DataError(
            f"{path}: unsupported image mode 'F' (floating point); expected "
            f"8- or 16-bit greyscale or colour"
        )
    return image


# Channels per PNG colour type (greyscale, RGB, palette, grey + alpha, RGBA), and the Adam7
# interlacing passes (x0, y0, dx, dy): PNG specification, sections 6.1 and 8.2.
_PNG_CHANNELS = {0: 1, 2: 3, 3: 1, 4: 2, 6: 4}
_ADAM7 = (
    (0, 0, 8, 8),
    (4, 0, 8, 8),
    (0, 4, 4, 8),
    (2, 0, 4, 4),
    (0, 2, 2, 4),
    (1, 0, 2, 2),
    (0, 1, 1, 2),
)


def _png_data_size(width: int, height: int, depth: int, colour: int, interlace: int) -> int:
    """The bytes a PNG's image data decompress to: one filter byte and the packed pixels per
    row, for each interlacing pass."""
    bits = _PNG_CHANNELS.get(colour, 4) * depth
    passes = _ADAM7 if interlace else ((0, 0, 1, 1),)
    size = 0
    for x0, y0, dx, dy in passes:
        cols, rows = -(-max(width - x0, 0) // dx), -(-max(height - y0, 0) // dy)
        if cols and rows:
            size += rows * (1 + (cols * bits + 7) // 8)
    return size


def _check_png_rows(source, width: int, height: int) -> None:
    """Refuse a PNG whose image data (its zlib stream, which may end early and still be
    well formed) hold fewer bytes than its header's ``width x height`` need: Pillow decodes
    such a file without an error, the missing rows black. The stream is inflated a block at a
    time and only counted."""
    f = open(source, "rb") if isinstance(source, (str, os.PathLike)) else source
    try:
        f.seek(8)  # the PNG signature
        inflate, got, need = zlib.decompressobj(), 0, None
        while need is None or got < need:
            head = f.read(8)
            if len(head) < 8:
                break
            length, kind = struct.unpack(">I4s", head)
            data = f.read(length)
            f.seek(4, os.SEEK_CUR)  # the chunk's CRC, which Pillow has checked
            if kind == b"IHDR":
                need = _png_data_size(width, height, data[8], data[9], data[12])
            elif kind == b"IDAT":
                while data and got < (need or 0):
                    got += len(inflate.decompress(data, 1 << 20))
                    data = inflate.unconsumed_tail
            elif kind == b"IEND":
                break
    finally:
        if f is not source:
            f.close()
    if need is not None and got < need:
        raise DataError(
            f"{source}: its header says {width} x {height} pixels, but its image "
            f"data hold only {got:,} of the {need:,} bytes those need (a PNG cut "
            "short or damaged)"
        )


# An image to caption or ask about has at most this many pixels (a 4096 x 4096 photograph):
# its pixels decode to float32 RGB before they are resized, 12 bytes each.
MAX_PIXELS = 4096 * 4096


def _check_pixels(path: Path, width: int, height: int) -> None:
    if width * height > MAX_PIXELS:
        raise DataError(
            f"{path}: {width} x {height} pixels, more than the {MAX_PIXELS:,} an "
            f"image may have here; scale it down first"
        )


def load_image(path: str | Path, size: int) -> torch.Tensor:
    """An image file as RGB ``(3, size, size)`` uint8, resized to ``size`` x ``size``; at most
    :data:`MAX_PIXELS` pixels, checked from its header before it is decoded.

    Raises:
        DataError: naming the file (see :func:`read_pixels`), or its size past
            :data:`MAX_PIXELS`.
    """
    pixels = np.round(read_pixels(path, colour=True, check_size=_check_pixels) * 255.0).astype(
        np.uint8
    )  # (H, W, 3)
    image = Image.fromarray(pixels, "RGB")
    if image.size != (size, size):
        image = image.resize((size, size), Image.Resampling.BILINEAR)
    return torch.from_numpy(np.array(image, dtype=np.uint8)).permute(2, 0, 1).contiguous()


class ImageFiles(Sequence):
    """Image files of one ``size``, each read when indexed as :func:`load_image` reads it:
    ``(3, size, size)`` uint8. Memory holds their paths, never their pixels, so a corpus of
    any number of images fits. :meth:`add` checks a file from its header (missing, not an
    image Pillow identifies, a decompression bomb, past :data:`MAX_PIXELS`), so a corpus's
    unusable images are named when it is read; a file whose pixels cannot be decoded is named
    when its batch reads it. The last :attr:`RECENT` images read are kept (the same tensor
    for the questions of one image)."""

    RECENT = 32  # images kept once read: the questions of one image come together

    def __init__(self, size: int, paths: Sequence[Path] = ()):
        self.size, self.paths = size, list(paths)
        self._recent: collections.OrderedDict[int, torch.Tensor] = collections.OrderedDict()

    def add(self, path: Path, file=None) -> int:
        """Check the image from its header and keep ``path``; its index. ``file``: where the
        header is read when it is not ``path`` itself (a dataset's bytes, for a subclass
        whose :meth:`read` finds the image by ``path``).

        Raises:
            DataError: naming the file.
        """
        image_header(path if file is None else file, _check_pixels)
        self.paths.append(path)
        return len(self.paths) - 1

    def read(self, path) -> torch.Tensor:
        """The image of ``path``, ``(3, size, size)`` uint8 (:func:`load_image`)."""
        return load_image(path, self.size)

    def subset(self, paths: list) -> ImageFiles:
        """The images of ``paths``, read as these are."""
        return ImageFiles(self.size, paths)

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return self.subset(self.paths[i])
        i = range(len(self.paths))[i]  # an IndexError past the end, as a list's
        if i in self._recent:
            self._recent.move_to_end(i)
        else:
            self._recent[i] = self.read(self.paths[i])
            if len(self._recent) > self.RECENT:
                self._recent.popitem(last=False)
        return self._recent[i]


class CaptionedImages(Sequence):
    """:class:`CaptionedImage` items whose images are :class:`ImageFiles`, each read when its
    item is indexed: ``images[index[i]]`` with ``captions[i]`` and ``origins[i]``."""

    # the public name shadows Sequence.index, which this class does not offer
    index: list[int]  # type: ignore[assignment]

    def __init__(
        self,
        images: ImageFiles,
        index: Sequence[int],
        captions: Sequence[tuple[str, ...]],
        origins: Sequence[str],
    ):
        self.images, self.index = images, list(index)
        self.captions, self.origins = list(captions), list(origins)

    @property
    def size(self) -> int:
        """The side of every image, in pixels."""
        return self.images.size

    def __len__(self) -> int:
        return len(self.index)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return CaptionedImages(self.images, self.index[i], self.captions[i], self.origins[i])
        return CaptionedImage(self.images[self.index[i]], self.captions[i], self.origins[i])


def stack_images(images: Sequence[torch.Tensor]) -> torch.Tensor:
    """A batch ``(B, 3, S, S)`` float32 in ``[0, 1]`` of uint8 images ``(3, S, S)`` of one size.

    Raises:
        ValueError: no image, or one of another shape or dtype than ``images[0]``.
    """
    if not images:
        raise ValueError("images: expected at least one image")
    shape = tuple(images[0].shape)
    for i, image in enumerate(images):
        if image.dtype != torch.uint8 or tuple(image.shape) != shape or len(shape) != 3:
            raise ValueError(
                f"images[{i}]: expected a uint8 (3, S, S) tensor shaped like "
                f"images[0] {shape}, got {image.dtype} {tuple(image.shape)}"
            )
    return torch.stack(list(images)).float().div_(255.0)


def _folder_images(
    folder: Path,
    tsv: Path,
    rows: list[tuple],
    size: int,
    confine: bool = False,
    unusable: Unusable | None = None,
) -> tuple[ImageFiles, dict[str, int], list[tuple]]:
    """The images named in ``rows`` (``(line, filename, ...)``), each checked once from its
    header (:class:`ImageFiles`), their index by name, and the rows whose image was found;
    names relative to ``folder`` or absolute, and with ``confine`` inside it
    (:func:`attnkit.data.paths.inside`). An
    image missing or unreadable raises, or with ``unusable`` drops every row naming it, each
    counted there."""
    if not folder.is_dir():
        raise DataError(f"{folder}: not a folder of images")
    files = ImageFiles(size)
    images, failed, kept = {}, {}, []
    for n, name, *rest in rows:
        name = name.strip()
        if name not in images and name not in failed:
            try:
                path = inside(folder, name, f"{tsv}:{n}", confine=confine)
                if not path.exists():  # anything else but a regular file: refused when read
                    raise DataError(f"image {not_found(name, folder)}")
                images[name] = files.add(path)
            except DataError as exc:
                if unusable is None:
                    raise DataError(
                        str(exc) if str(exc).startswith(f"{tsv}:") else f"{tsv}:{n}: {exc}"
                    ) from None
                failed[name] = str(exc).removeprefix(f"{tsv}:{n}: ")
        if name in failed:
            assert unusable is not None  # else the failure was raised
            unusable.drop(f"{tsv}:{n}: {failed[name]}", "images")
        else:
            kept.append((n, name, *rest))
    return files, images, kept


def _read_folder(
    folder: Path,
    tsv: str | Path | None,
    default: str,
    columns: tuple[str, ...],
    *,
    size: int,
    confine: bool,
    max_unusable: float | None,
) -> tuple[ImageFiles, dict[str, int], list[tuple]]:
    """The images and usable rows of the TSV ``tsv`` (default ``folder/default``) of a folder
    of images, whose rows are ``columns`` (each a ``(line, *fields)``, the file name stripped);
    with ``max_unusable``, what cannot be used is dropped and counted up to that share (rows
    counted as ``columns[1]`` plural: captions, questions)."""
    tsv = Path(tsv) if tsv is not None else folder / default
    unusable = (
        None
        if max_unusable is None
        else Unusable(tsv, max_unusable=max_unusable, what=f"{columns[1]}s")
    )
    rows = read_tsv_rows(tsv, columns=columns, unusable=unusable)
    files, images, rows = _folder_images(folder, tsv, rows, size, confine, unusable)
    if unusable is not None:
        unusable.check(len(rows))
    return files, images, rows


def read_caption_folder(
    folder: str | Path,
    tsv: str | Path | None = None,
    *,
    size: int,
    confine: bool = False,
    max_unusable: float | None = None,
) -> CaptionedImages:
    """The user's captioned images: one :class:`CaptionedImage` per image named in ``tsv``
    (default ``folder/captions.tsv``; ``filename<TAB>caption`` lines, several per image), in
    the order of their first line; images read when indexed, resized to ``size`` (see
    :func:`load_image`).

    Raises:
        DataError: naming the TSV file and line (a bad or empty line, a missing or unreadable
            image); with ``max_unusable`` (a share), those captions are dropped and counted
            instead, up to that share (:mod:`attnkit.data.corpora.unusable`).
    """
    folder = Path(folder)
    files, images, rows = _read_folder(
        folder,
        tsv,
        CAPTIONS,
        ("filename", "caption"),
        size=size,
        confine=confine,
        max_unusable=max_unusable,
    )
    captions: dict[str, list[str]] = {}
    for _, name, caption in rows:
        captions.setdefault(name, []).append(caption.strip())
    return CaptionedImages(
        files,
        [images[name] for name in captions],
        [tuple(texts) for texts in captions.values()],
        [f"{folder / name}" for name in captions],
    )


def read_question_folder(
    folder: str | Path,
    tsv: str | Path | None = None,
    *,
    size: int,
    confine: bool = False,
    max_unusable: float | None = None,
) -> tuple[ImageFiles, list[ImageQuestion]]:
    """The user's questions: the images ``(3, size, size)`` uint8 (each once, in the order of
    their first line; read when indexed) and one :class:`ImageQuestion` (type ``"user"``,
    origin ``file:line``) per ``filename<TAB>question<TAB>answer`` line of ``tsv`` (default
    ``folder/questions.tsv``).

    Raises:
        DataError: naming the TSV file and line (a bad or empty field, a missing or unreadable
            image); with ``max_unusable`` (a share), those questions are dropped and counted
            instead, up to that share (:mod:`attnkit.data.corpora.unusable`).
    """
    folder = Path(folder)
    tsv = Path(tsv) if tsv is not None else folder / QUESTIONS
    files, index, rows = _read_folder(
        folder,
        tsv,
        QUESTIONS,
        ("filename", "question", "answer"),
        size=size,
        confine=confine,
        max_unusable=max_unusable,
    )
    questions = [
        ImageQuestion(index[name], question.strip(), answer.strip(), "user", f"{tsv}:{n}")
        for n, name, question, answer in rows
    ]
    return files, questions


def _check_field(where: str, text: str) -> None:
    if not text.strip() or "\t" in text or "\n" in text or "\r" in text:
        raise ValueError(f"{where}: expected one non-empty line without tabs, got {text!r}")


def _write_images(images: Sequence[torch.Tensor], folder: Path) -> list[str]:
    """Save ``(3, S, S)`` uint8 images as ``folder/000000.png ...``; returns their names."""
    folder.mkdir(parents=True, exist_ok=True)
    names = []
    for i, image in enumerate(images):
        if image.dtype != torch.uint8 or image.dim() != 3 or image.shape[0] != 3:
            raise ValueError(
                f"images[{i}]: expected a uint8 (3, H, W) tensor, got "
                f"{image.dtype} {tuple(image.shape)}"
            )
        names.append(f"{i:06d}.png")
        Image.fromarray(image.permute(1, 2, 0).numpy(), "RGB").save(
            folder / names[-1], compress_level=1
        )
    return names


def write_caption_folder(items: Sequence, folder: str | Path) -> Path:
    """Write items with ``.image`` ``(3, S, S)`` uint8 and ``.captions`` (a
    :class:`CaptionedImage` or a built-in :class:`attnkit.data.worlds.scenes.Scene`) as
    ``folder/000000.png ...`` and ``captions.tsv``; returns the TSV's path."""
    folder = Path(folder)
    for i, item in enumerate(items):
        for caption in item.captions:
            _check_field(f"items[{i}].captions", caption)
    names = _write_images([item.image for item in items], folder)
    tsv = folder / CAPTIONS
    tsv.write_text(
        "".join(
            f"{name}\t{caption}\n" for name, item in zip(names, items) for caption in item.captions
        ),
        encoding="utf-8",
    )
    return tsv


def write_question_folder(
    images: Sequence[torch.Tensor], questions: Sequence[ImageQuestion], folder: str | Path
) -> Path:
    """Write ``images`` and their ``questions`` as ``folder/000000.png ...`` and
    ``questions.tsv`` (types are not written); returns the TSV's path."""
    folder = Path(folder)
    for i, q in enumerate(questions):
        if not 0 <= q.image < len(images):
            raise ValueError(
                f"questions[{i}].image: expected an index in [0, {len(images)}), got {q.image}"
            )
        _check_field(f"questions[{i}].question", q.question)
        _check_field(f"questions[{i}].answer", q.answer)
    names = _write_images(images, folder)
    tsv = folder / QUESTIONS
    tsv.write_text(
        "".join(f"{names[q.image]}\t{q.question}\t{q.answer}\n" for q in questions),
        encoding="utf-8",
    )
    return tsv
