"""The user's own text lines: a folder of line images and a ``filename<TAB>text`` TSV
(:func:`read_line_folder`), read as a :class:`LineFolder` whose images stay on disk until
indexed (memory holds their names, widths and texts only, however many lines there are);
:func:`write_line_folder` writes lines in that form (the built-in ones,
:mod:`attnkit.data.worlds.lines`, to reuse them as a cache).

Every line image is a ``torch.uint8`` tensor ``(32, W)`` of gray levels 0-255 (255 = white
paper, dark ink), :data:`HEIGHT` pixels high and as wide as its text needs;
:func:`pad_images` makes a batch of them float32 in ``[0, 1]``.
"""

from __future__ import annotations

import bisect
import functools
from collections.abc import Iterable, Sequence
from pathlib import Path

import numpy as np
import torch
from PIL import Image

from attnkit.data.corpora.image_folders import image_header, read_pixels
from attnkit.data.corpora.tsv import read_tsv_rows
from attnkit.data.corpora.unusable import Unusable
from attnkit.data.paths import inside, not_found
from attnkit.errors import DataError

__all__ = [
    "HEIGHT",
    "MAX_WIDTH",
    "JoinedLines",
    "LineFolder",
    "line_width",
    "load_line_image",
    "pad_images",
    "read_line_folder",
    "write_line_folder",
]

HEIGHT = 32
# Widest line read by default, in pixels at HEIGHT (about 800 characters): the work of the
# CNN, the RNNs and the attention grows with the width.
MAX_WIDTH = 10_000
# Narrowest line, in pixels at HEIGHT: the CRNN halves the width, and a line needs one step.
MIN_WIDTH = 2


def load_line_image(path: str | Path, *, max_width: int | None = MAX_WIDTH) -> torch.Tensor:
    """Read a line image as grayscale, scaled to height 32 keeping its aspect ratio.

    Colour is converted to luminance, transparency is laid over white, and integer images (mode
    ``"I"`` or ``"I;16"``: 16-bit PNG or TIFF) are scaled from ``[0, 65535]``; the result is
    rounded to 8 bits, as every line is kept. An unreadable file, a floating-point image, one
    that would be 0 px wide or more than ``max_width`` px wide at height 32 (None: no limit),
    or one of more pixels than Pillow's ``Image.MAX_IMAGE_PIXELS`` (a decompression bomb)
    raises a :class:`DataError` naming the file; the sizes are read from the file's header,
    before its pixels are decoded.

    Shape:
        returns a uint8 tensor ``(32, W)``.
    """
    pixels = read_pixels(
        path,
        colour=False,  # (h, w) in [0, 1]
        check_size=functools.partial(_check_size, max_width=max_width),
    )
    height = pixels.shape[0]
    width = _scaled_width(path, pixels.shape[1], height)
    if height != HEIGHT:
        pixels = np.array(
            Image.fromarray(pixels, "F").resize((width, HEIGHT), Image.Resampling.BILINEAR)
        )
    return torch.from_numpy(np.round(pixels * 255.0).astype(np.uint8))  # (32, W)


def line_width(path: str | Path, *, max_width: int | None = MAX_WIDTH) -> int:
    """The width at height 32 of the line image ``path`` (as :func:`load_line_image` gives
    it), from the file's header alone: checked as :func:`load_line_image` checks it before
    decoding (:func:`attnkit.data.corpora.image_folders.image_header`), its pixels not read.

    Raises:
        DataError: naming the file, as :func:`load_line_image` before decoding.
    """
    width, height = image_header(path, functools.partial(_check_size, max_width=max_width))
    return _scaled_width(path, width, height)


def _scaled_width(path: str | Path, width: int, height: int) -> int:
    """``width`` at height 32; a line narrower than :data:`MIN_WIDTH` there refused."""
    scaled = round(width * HEIGHT / height) if height else 0
    if scaled < MIN_WIDTH:
        raise DataError(
            f"{path}: {width} x {height} pixels is {scaled} px wide at height "
            f"{HEIGHT}; a line image must be at least {MIN_WIDTH} px wide there "
            "(a line of text is wider than it is tall)"
        )
    return scaled


def _check_size(path: Path, width: int, height: int, *, max_width: int | None) -> None:
    scaled = round(width * HEIGHT / height) if height else 0
    if max_width is not None and scaled > max_width:
        raise DataError(
            f"{path}: {width} x {height} pixels is {scaled} px wide at "
            f"height {HEIGHT}, more than max_width={max_width}"
        )


class LineFolder(Sequence):
    """Labelled line images in a folder, each read from disk when indexed.

    ``lines[i]`` is ``(image (32, W_i) uint8, text)``, the image decoded then by
    :func:`load_line_image`; so memory holds the lines' file names, widths and texts (a few
    hundred bytes a line), not their images, and a training batch decodes only its own lines
    (in the DataLoader's worker processes with ``--workers-data``). ``widths`` and ``texts``
    are known without decoding an image. A slice is a :class:`LineFolder` of those lines.
    Made by :func:`read_line_folder`, which has read and checked every image once.

    Shape:
        ``lines[i][0]``: a uint8 tensor ``(32, widths[i])``.
    """

    def __init__(
        self, folder: Path, rows: Sequence[tuple[str, int, str]], *, max_width: int | None
    ):
        self.folder, self.rows, self.max_width = Path(folder), rows, max_width

    @property
    def widths(self) -> list[int]:
        return [width for _, width, _ in self.rows]

    @property
    def texts(self) -> list[str]:
        return [text for _, _, text in self.rows]

    def path(self, i: int) -> str | Path:
        """The image file of line ``i`` (a subclass's name for it: a str)."""
        return self.folder / self.rows[i][0]

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i):
        if isinstance(i, slice):
            return LineFolder(self.folder, self.rows[i], max_width=self.max_width)
        name, _, text = self.rows[i]
        return load_line_image(self.folder / name, max_width=self.max_width), text


class JoinedLines(LineFolder):
    """Several sequences of lines one after another, as one: the lines of ``parts[0]``, then
    those of ``parts[1]``, ... (``attnkit train ocr --synthetic-share``: the user's lines,
    then built-in ones). A part is a :class:`LineFolder` (its images read when indexed) or a
    list of ``(image, text)``; ``widths`` and ``texts`` are known without decoding an image,
    and a slice is a :class:`JoinedLines` of the parts' slices.

    Shape:
        ``lines[i][0]``: a uint8 tensor ``(32, widths[i])``.
    """

    def __init__(self, parts: Sequence[Sequence[tuple[torch.Tensor, str]]]):
        self.parts = [part for part in parts if len(part)]
        rows: list[tuple[str, int, str]] = []
        self.starts: list[int] = []  # the index of each part's first line
        for k, part in enumerate(self.parts):
            self.starts.append(len(rows))
            if isinstance(part, LineFolder):
                names = [str(part.path(i)) for i in range(len(part))]
                rows += zip(names, part.widths, part.texts)
            else:
                rows += ((f"part{k}[{i}]", im.shape[-1], t) for i, (im, t) in enumerate(part))
        super().__init__(Path("."), rows, max_width=None)

    def _find(self, i: int) -> tuple[Sequence[tuple[torch.Tensor, str]], int]:
        """The part holding line ``i`` and the line's index in it."""
        if not -len(self) <= i < len(self):
            raise IndexError(f"line {i} of {len(self)}")
        i %= len(self)
        k = bisect.bisect_right(self.starts, i) - 1
        return self.parts[k], i - self.starts[k]

    def path(self, i: int) -> str | Path:
        part, j = self._find(i)
        return part.path(j) if isinstance(part, LineFolder) else self.rows[i][0]

    def __getitem__(self, i):
        if isinstance(i, slice):
            start, stop, step = i.indices(len(self))
            if step != 1:
                return [self[j] for j in range(start, stop, step)]
            ends = [*self.starts[1:], len(self)]
            return JoinedLines(
                [
                    part[max(start - s, 0) : max(min(stop, e) - s, 0)]
                    for part, s, e in zip(self.parts, self.starts, ends)
                ]
            )
        part, j = self._find(i)
        return part[j]


def read_line_folder(
    folder: str | Path,
    tsv: str | Path,
    *,
    alphabet: str | None = None,
    max_width: int | None = MAX_WIDTH,
    confine: bool = False,
    max_unusable: float | None = None,
) -> LineFolder:
    """The user's lines: ``(image (32, W), text)`` for each ``filename<TAB>text`` line of
    ``tsv``, as a :class:`LineFolder` (each image read when indexed).

    File names are relative to ``folder`` or absolute; with ``confine``, only files inside it
    are taken (:func:`attnkit.data.paths.inside`). Every image is read here once, with
    :func:`load_line_image` (at most ``max_width`` px wide at height 32), to check it and learn
    its width, and dropped: it is read again when its line is indexed. A bad TSV line, a
    missing or unreadable image raises a :class:`DataError` naming the TSV file and line. With
    ``alphabet``, labels using other characters raise one :class:`DataError` that lists those
    characters and the lines they are on. With ``max_unusable`` (a share), a bad line and a
    line whose image is missing or unreadable are dropped and counted instead, up to that
    share (:mod:`attnkit.data.corpora.unusable`).

    Shape:
        each image is a uint8 tensor ``(32, W)``.
    """
    folder, tsv = Path(folder), Path(tsv)
    if not folder.is_dir():
        raise DataError(f"{folder}: not a folder of line images")
    unusable = (
        None if max_unusable is None else Unusable(tsv, max_unusable=max_unusable, what="lines")
    )
    rows = read_tsv_rows(tsv, columns=("filename", "text"), unusable=unusable)
    if alphabet is not None:
        allowed = set(alphabet)
        unknown = {n: sorted(set(text) - allowed) for n, _, text in rows if set(text) - allowed}
        if unknown:
            chars = "".join(sorted(set().union(*unknown.values())))
            where = ", ".join(f"{n} ({''.join(c)!r})" for n, c in list(unknown.items())[:5])
            raise DataError(
                f"{tsv}: {len(unknown)} labels use characters outside the alphabet "
                f"{chars!r}, on lines {where}" + (" and more" if len(unknown) > 5 else "")
            )
    lines = []
    for n, name, text in rows:
        name = name.strip()
        try:
            path = inside(folder, name, f"{tsv}:{n}", confine=confine)
            if not path.exists():  # anything else but a regular file is refused by the reader
                raise DataError(f"image {not_found(name, folder)}")
            lines.append((name, load_line_image(path, max_width=max_width).shape[1], text))
        except DataError as exc:
            problem = str(exc) if str(exc).startswith(f"{tsv}:") else f"{tsv}:{n}: {exc}"
            if unusable is None:
                raise DataError(problem) from None
            unusable.drop(problem, "images")
    if unusable is not None:
        unusable.check(len(lines))
    return LineFolder(folder, lines, max_width=max_width)


def write_line_folder(lines: Iterable[tuple[torch.Tensor, str]], folder: str | Path) -> Path:
    """Write ``(image (H, W), text)`` lines as ``folder/000000.png ...`` and ``labels.tsv``
    (written last), one line at a time (``lines`` may be :func:`iter_lines`).

    Images (uint8, or float in ``[0, 1]``) are stored as 8-bit grayscale PNG, so lines from
    :func:`generate_lines` read back unchanged with :func:`read_line_folder`. Returns the TSV's
    path.
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, (image, text) in enumerate(lines):
        if not text or "\t" in text or "\n" in text or "\r" in text:
            raise ValueError(
                f"lines[{i}]: text must be one non-empty line without tabs, got {text!r}"
            )
        if image.dim() != 2:
            raise ValueError(
                f"lines[{i}]: expected an image (H, W), got shape {tuple(image.shape)}"
            )
        name = f"{i:06d}.png"
        pixels = image.detach().cpu().numpy()
        if image.dtype != torch.uint8:
            pixels = np.round(np.clip(pixels, 0, 1) * 255).astype(np.uint8)
        Image.fromarray(pixels, "L").save(folder / name, compress_level=1)
        rows.append(f"{name}\t{text}\n")
    tsv = folder / "labels.tsv"
    tsv.write_text("".join(rows), encoding="utf-8")
    return tsv


def pad_images(
    images: Sequence[torch.Tensor],
    *,
    fill: float = 1.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Batch line images of one height, padded on the right with ``fill`` (white paper).

    uint8 images (gray levels 0-255, as lines are kept) come out as float32 in ``[0, 1]``;
    float images keep their values and dtype. All images share one dtype.

    Shape:
        images: ``B`` tensors ``(H, W_b)``;
        returns ``(batch (B, 1, H, Wmax), widths (B,))`` with ``widths`` as ``torch.long``.
    """
    if not images:
        raise ValueError("images: expected at least one image")
    height, dtype = images[0].shape[0], images[0].dtype
    for i, image in enumerate(images):
        if image.dim() != 2 or image.shape[0] != height or image.shape[1] == 0:
            raise ValueError(
                f"images[{i}]: expected shape (H, W) with W >= 1 and H as in "
                f"images[0] ({height}), got {tuple(image.shape)}"
            )
        if image.dtype != dtype:
            raise ValueError(
                f"images[{i}]: expected dtype {dtype} (as images[0]), got {image.dtype}"
            )
    widths = torch.tensor([image.shape[1] for image in images], dtype=torch.long)
    gray = dtype == torch.uint8
    batch = torch.full(
        (len(images), 1, height, int(widths.max())),
        round(fill * 255) if gray else fill,
        dtype=dtype,
    )  # (B, 1, H, Wmax)
    for i, image in enumerate(images):
        batch[i, 0, :, : image.shape[1]] = image
    return (batch.float().div_(255.0) if gray else batch), widths
