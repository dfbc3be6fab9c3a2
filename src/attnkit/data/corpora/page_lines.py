"""A text line cut out of its page image (:func:`cut_line`) as the OCR task keeps its lines:
``(32, W)`` uint8 grey levels, 255 white paper, dark ink.

1. The line's outline (its polygon, or its box) must have three points or more, enclose some
   area and lie inside the page image: a point outside it (by more than :data:`EDGE` px, the
   rounding of a writer that puts the outline on the image's last edge) makes the line
   unusable, never a crop shifted or clipped to fit.
2. The outline's bounding box is cut out and every pixel outside the outline set to the
   line's paper, the median grey inside the outline (ink covers far less of a line than
   paper does).
3. With a baseline of two points or more, the cut is rotated about its centre so that the
   line from the baseline's first point to its last lies level (its direction ignored: a
   baseline drawn right to left is the same line; PIL's bilinear rotation, the corners
   filled with paper), and cut again to the rotated outline's box. A baseline steeper
   than :data:`MAX_SKEW` degrees (a vertical line, a page on its side) is refused: the
   recogniser reads left to right.
4. The line is padded left and right with paper, :data:`PAD_X` of its height on each side
   (attnkit's rendered training lines carry 2 px to one font size of margin each side,
   :func:`attnkit.data.worlds.lines.render_line`; a polygon from a segmenter hugs the ink),
   and scaled to height 32 keeping its aspect ratio, as
   :func:`~attnkit.data.corpora.line_folders.load_line_image` scales a line image.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import torch
from PIL import Image, ImageDraw

from attnkit.data.corpora.line_folders import HEIGHT, MIN_WIDTH
from attnkit.errors import DataError

__all__ = ["EDGE", "MAX_SKEW", "PAD_X", "cut_line"]

EDGE = 1.0  # px an outline may reach past the image's edge (the edge's own coordinate)
MAX_SKEW = 45.0  # degrees: a steeper baseline is not a line read left to right
PAD_X = 0.25  # paper on each side of a cut line, in line heights

Point = tuple[float, float]


def _area(points: np.ndarray) -> float:
    """The shoelace area of the polygon ``points`` ``(N, 2)``."""
    x, y = points[:, 0], points[:, 1]
    return 0.5 * abs(float(np.dot(x, np.roll(y, -1)) - np.dot(y, np.roll(x, -1))))


def _check_outline(outline: Sequence[Point], width: int, height: int) -> np.ndarray:
    points = np.asarray(outline, dtype=np.float64).reshape(-1, 2)  # (N, 2) x, y
    if len(points) < 3:
        raise DataError(
            f"an outline of {len(points)} point(s); a line's polygon needs at least three"
        )
    if _area(points) < 1.0:
        raise DataError(f"the outline {_shown(points)} encloses no area")
    outside = (
        (points[:, 0] < -EDGE)
        | (points[:, 1] < -EDGE)
        | (points[:, 0] > width + EDGE)
        | (points[:, 1] > height + EDGE)
    )
    if outside.any():
        x, y = points[int(np.argmax(outside))]
        raise DataError(
            f"coordinates outside the page image ({width} x {height} px): point "
            f"({x:g}, {y:g}) of {int(outside.sum())} outside; is the XML for another "
            "scan of the page (another size)?"
        )
    return np.clip(points, 0.0, [width, height])


def _shown(points: np.ndarray) -> str:
    return " ".join(f"{x:g},{y:g}" for x, y in points[:4]) + (" ..." if len(points) > 4 else "")


def _skew(baseline: Sequence[Point] | None) -> float:
    """The baseline's angle in degrees, clockwise as the image shows it (y grows down)."""
    if baseline is None or len(baseline) < 2:
        return 0.0
    (x0, y0), (x1, y1) = baseline[0], baseline[-1]
    if x0 == x1 and y0 == y1:
        return 0.0
    angle = math.degrees(math.atan2(y1 - y0, x1 - x0))
    angle = angle - 180.0 if angle > 90.0 else angle + 180.0 if angle < -90.0 else angle
    if abs(angle) > MAX_SKEW:
        raise DataError(
            f"a baseline at {angle:.0f} degrees (from {x0:g},{y0:g} to {x1:g},{y1:g}); "
            f"expected a line read left to right, within {MAX_SKEW:g} degrees of level"
        )
    return angle


def _bbox(mask: np.ndarray) -> tuple[int, int, int, int]:
    rows, cols = np.flatnonzero(mask.any(1)), np.flatnonzero(mask.any(0))
    return int(rows[0]), int(rows[-1]) + 1, int(cols[0]), int(cols[-1]) + 1


def cut_line(
    page: np.ndarray,
    outline: Sequence[Point],
    baseline: Sequence[Point] | None = None,
    *,
    max_width: int | None = None,
) -> torch.Tensor:
    """The line of ``outline`` (and ``baseline``) cut out of the grey ``page`` as the module
    docstring says.

    Shape:
        page: ``(H, W)`` float in ``[0, 1]`` (:func:`attnkit.data.corpora.image_folders.
        read_pixels` without colour); returns a uint8 tensor ``(32, W')``.

    Raises:
        DataError: why the line cannot be cut (no file named: the caller names the line):
            fewer than three points, no area, a point outside the page, a baseline too steep,
            or a line narrower than 2 px or wider than ``max_width`` at height 32.
    """
    height, width = page.shape
    points = _check_outline(outline, width, height)
    angle = _skew(baseline)
    x0, y0 = (int(math.floor(v)) for v in points.min(0))
    x1, y1 = (int(math.ceil(v)) for v in points.max(0))
    crop = page[y0:y1, x0:x1]  # (h, w)
    drawn = Image.new("L", (x1 - x0, y1 - y0), 0)
    ImageDraw.Draw(drawn).polygon([(x - x0, y - y0) for x, y in points], fill=255, outline=255)
    mask = np.asarray(drawn) > 0  # (h, w): inside the outline
    if not mask.any() or crop.size == 0:
        raise DataError(f"the outline {_shown(points)} covers no pixel")
    paper = float(np.median(crop[mask]))
    line = np.where(mask, crop, paper).astype(np.float32)  # (h, w)
    if angle:
        line = np.asarray(
            Image.fromarray(line, "F").rotate(
                angle, resample=Image.Resampling.BILINEAR, expand=True, fillcolor=paper
            )
        )
        mask = (
            np.asarray(
                Image.fromarray(mask.astype(np.uint8) * 255, "L").rotate(
                    angle, resample=Image.Resampling.NEAREST, expand=True
                )
            )
            > 0
        )
        if not mask.any():
            raise DataError(f"the outline {_shown(points)} covers no pixel once level")
        top, bottom, left, right = _bbox(mask)
        line = line[top:bottom, left:right]
    h = line.shape[0]
    pad = int(round(PAD_X * h))
    line = np.pad(line, ((0, 0), (pad, pad)), constant_values=paper)  # (h, w + 2 pad)
    scaled = round(line.shape[1] * HEIGHT / h)
    if scaled < MIN_WIDTH:
        raise DataError(
            f"{line.shape[1]} x {h} px is {scaled} px wide at height {HEIGHT}; expected at "
            f"least {MIN_WIDTH}"
        )
    if max_width is not None and scaled > max_width:
        raise DataError(
            f"{line.shape[1]} x {h} px is {scaled} px wide at height {HEIGHT}, more than "
            f"max_width={max_width}"
        )
    resized = Image.fromarray(line, "F").resize((scaled, HEIGHT), Image.Resampling.BILINEAR)
    return torch.from_numpy(np.round(np.clip(np.asarray(resized), 0, 1) * 255).astype(np.uint8))
