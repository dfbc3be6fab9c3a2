"""Text-line augmentation: the changes a scanner, a camera, a printer or a typeface make.

Every augmentation takes a line image ``(H, W)`` as a float32 numpy array of gray levels in
``[0, 1]`` (1 = white) and returns one of the same height ``H`` (the CRNN reads lines 32 pixels
high) and a width ``W'`` that only :class:`Scale`, :class:`Stretch`, :class:`Shear` and
:class:`Margins` change. Where a change uncovers pixels (rotation, shear, perspective, a
shifted baseline, margins), they take the line's background: its median gray level, which is
the paper on a line that is mostly paper (dark ink on light paper or light on dark, either).

* geometry: :class:`Scale` (the text's size within the line), :class:`Stretch` (its width),
  :class:`Rotate`, :class:`Shear` (italic slant), :class:`Perspective`, :class:`Baseline`
  (a wavy baseline), :class:`Margins`;
* strokes and shades: :class:`Stroke` (erode/dilate the ink), :class:`Shade` (paper and ink
  gray levels: contrast, background, ink colour);
* degradations: :class:`Blur`, :class:`PixelNoise`, :class:`Jpeg` (Pillow's encoder).

:class:`LineAugment` composes them over the uint8 tensors ``(32, W)`` the line readers make;
:data:`PRESETS` are the sets ``attnkit train ocr --augment`` names.

Example:
    >>> import torch
    >>> from attnkit.data.augment.augmentation import example_rng
    >>> line = torch.full((32, 100), 255, dtype=torch.uint8)
    >>> LineAugment([Stretch(p=1.0, factor=(1.5, 1.5))])(line, example_rng(0, 0, 0)).shape
    torch.Size([32, 150])
"""

from __future__ import annotations

import dataclasses
import io
import math
from typing import ClassVar

import numpy as np
import torch
from PIL import Image
from scipy import ndimage

from attnkit.data.augment.augmentation import (
    Augmentation,
    Compose,
    number_check,
    range_check,
)

__all__ = [
    "PRESETS",
    "Baseline",
    "Blur",
    "Jpeg",
    "LineAugment",
    "LineAugmentation",
    "Margins",
    "Perspective",
    "PixelNoise",
    "Rotate",
    "Scale",
    "Shade",
    "Shear",
    "Stretch",
    "Stroke",
    "preset",
]


@dataclasses.dataclass(frozen=True)
class LineAugmentation(Augmentation):
    """The base of line augmentations: ``apply(image (H, W) float32 in [0, 1], rng)``."""

    family: ClassVar[str] = "lines"


def background(image: np.ndarray) -> float:
    """The gray level of a line's paper: the median of its pixels."""
    return float(np.median(image))


def _check_image(image) -> np.ndarray:
    if not isinstance(image, np.ndarray) or image.ndim != 2 or min(image.shape) < 1:
        raise ValueError(
            f"image: expected a (H, W) numpy array, got {getattr(image, 'shape', type(image))}"
        )
    return image.astype(np.float32, copy=False)


def _pil(image: np.ndarray) -> Image.Image:
    return Image.fromarray(np.ascontiguousarray(image, dtype=np.float32), "F")


def _array(image: Image.Image) -> np.ndarray:
    return np.clip(np.asarray(image, dtype=np.float32), 0.0, 1.0)


def _resize(image: np.ndarray, width: int, height: int) -> np.ndarray:
    return _array(_pil(image).resize((max(1, width), max(1, height)), Image.Resampling.BILINEAR))


@dataclasses.dataclass(frozen=True)
class Scale(LineAugmentation, name="scale"):
    """The text scaled by ``s ~ U[size]`` (both axes) inside a line of the same height: the
    line ``(H, W)`` is resized to ``(round(s H), round(s W))`` and placed at a uniform height
    on the background. ``s <= 1``: a line never grows past its height.

    Shape: ``(H, W)`` -> ``(H, round(s W))``.
    """

    p: float = 0.3
    size: tuple[float, float] = (0.75, 1.0)

    checks = {"size": range_check(0.3, 1.0)}

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        image = _check_image(image)
        s = rng.uniform(*self.size)
        height, width = image.shape
        small = _resize(image, round(s * width), round(s * height))
        out = np.full((height, small.shape[1]), background(image), dtype=np.float32)
        top = int(rng.integers(height - small.shape[0] + 1))
        out[top : top + small.shape[0]] = small
        return out


@dataclasses.dataclass(frozen=True)
class Stretch(LineAugmentation, name="stretch"):
    """The line's width scaled by ``f ~ U[factor]`` (narrow or wide typefaces, another
    resolution across than along).

    Shape: ``(H, W)`` -> ``(H, max(2, round(f W)))``.
    """

    p: float = 0.3
    factor: tuple[float, float] = (0.8, 1.2)

    checks = {"factor": range_check(0.25, 4.0)}

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        image = _check_image(image)
        height, width = image.shape
        return _resize(image, max(2, round(rng.uniform(*self.factor) * width)), height)


@dataclasses.dataclass(frozen=True)
class Rotate(LineAugmentation, name="rotate"):
    """The line rotated about its centre by ``a ~ U[-degrees, degrees]`` (counter-clockwise
    for ``a > 0``), bilinear, in a frame of the same size: ``a`` is clamped to
    ``atan(H / (4 W))`` so that the ends of a long line move by at most an eighth of its
    height and stay inside it.

    Shape: ``(H, W)`` -> ``(H, W)``.
    """

    p: float = 0.3
    degrees: float = 2.0

    checks = {"degrees": number_check(0.0, 45.0)}

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        image = _check_image(image)
        height, width = image.shape
        limit = min(self.degrees, math.degrees(math.atan(height / (4 * width))))
        angle = rng.uniform(-self.degrees, self.degrees)
        angle = max(-limit, min(limit, angle))
        return _array(
            _pil(image).rotate(
                angle, resample=Image.Resampling.BILINEAR, fillcolor=background(image)
            )
        )


@dataclasses.dataclass(frozen=True)
class Shear(LineAugmentation, name="shear"):
    """A horizontal shear by ``s ~ U[-slant, slant]``: row ``y`` moves ``s (H/2 - y)`` pixels
    right, so ``s > 0`` slants the text forward as italic type does (``s = tan`` of the
    slant; italic faces lean 0.15-0.3) and ``s < 0`` backward. The line widens by
    ``ceil(|s| H / 2)`` at each side, so no ink leaves it.

    Shape: ``(H, W)`` -> ``(H, W + 2 ceil(|s| H / 2))``.
    """

    p: float = 0.3
    slant: float = 0.3

    checks = {"slant": number_check(0.0, 1.0)}

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        image = _check_image(image)
        s = rng.uniform(-self.slant, self.slant)
        height, width = image.shape
        pad = math.ceil(abs(s) * height / 2)
        # output (x, y) reads input (x + s y - s H / 2 - pad, y)
        coefficients = (1.0, s, -s * height / 2 - pad, 0.0, 1.0, 0.0)
        return _array(
            _pil(image).transform(
                (width + 2 * pad, height),
                Image.Transform.AFFINE,
                coefficients,
                resample=Image.Resampling.BILINEAR,
                fillcolor=background(image),
            )
        )


def perspective_coefficients(corners_out, corners_in) -> tuple[float, ...]:
    """The 8 coefficients of Pillow's ``PERSPECTIVE`` transform taking each of the four output
    points ``corners_out[k] = (x, y)`` to the input point ``corners_in[k]``."""
    rows, values = [], []
    for (x, y), (u, v) in zip(corners_out, corners_in):
        rows.append([x, y, 1, 0, 0, 0, -u * x, -u * y])
        rows.append([0, 0, 0, x, y, 1, -v * x, -v * y])
        values += [u, v]
    return tuple(float(c) for c in np.linalg.solve(np.array(rows, float), np.array(values)))


@dataclasses.dataclass(frozen=True)
class Perspective(LineAugmentation, name="perspective"):
    """A perspective view, as of a page photographed at an angle: each corner of the line
    moves by up to ``distortion * H`` pixels in each direction (uniform draws), the inside
    following the projective map of the four corners, in a frame of the same size.

    Shape: ``(H, W)`` -> ``(H, W)``.
    """

    p: float = 0.2
    distortion: float = 0.1

    checks = {"distortion": number_check(0.0, 0.5)}

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        image = _check_image(image)
        height, width = image.shape
        corners = np.array([(0, 0), (width, 0), (width, height), (0, height)], float)
        moved = corners + rng.uniform(-1, 1, size=(4, 2)) * self.distortion * height
        coefficients = perspective_coefficients(corners, moved)
        return _array(
            _pil(image).transform(
                (width, height),
                Image.Transform.PERSPECTIVE,
                coefficients,
                resample=Image.Resampling.BILINEAR,
                fillcolor=background(image),
            )
        )


@dataclasses.dataclass(frozen=True)
class Baseline(LineAugmentation, name="baseline"):
    """A wavy baseline: each column moves vertically by ``d(x)``, linear between values drawn
    uniformly from ``[-pixels, pixels]`` every ``H`` columns (bilinear; uncovered pixels take
    the background).

    Shape: ``(H, W)`` -> ``(H, W)``.
    """

    p: float = 0.3
    pixels: float = 1.5

    checks = {"pixels": number_check(0.0, 16.0)}

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        image = _check_image(image)
        height, width = image.shape
        knots = np.arange(0, width + height, height)  # every H columns, past the last one
        shift = np.interp(
            np.arange(width), knots, rng.uniform(-self.pixels, self.pixels, size=knots.size)
        )  # (W,)
        ys, xs = np.mgrid[0:height, 0:width].astype(np.float64)
        return ndimage.map_coordinates(
            image, [ys - shift[None, :], xs], order=1, mode="constant", cval=background(image)
        ).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class Margins(LineAugmentation, name="margins"):
    """The left and right margins each changed by ``m ~ U{-pixels, ..., pixels}`` columns:
    ``m > 0`` adds background columns, ``m < 0`` removes columns, but only blank ones (no
    pixel further than a quarter of the line's contrast from its background), so no ink is
    cut.

    Shape: ``(H, W)`` -> ``(H, W')``, ``W' >= 2``.
    """

    p: float = 0.3
    pixels: int = 8

    checks = {"pixels": number_check(0, 1000, integer=True)}

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        image = _check_image(image)
        left, right = (int(m) for m in rng.integers(-self.pixels, self.pixels + 1, size=2))
        paper = background(image)
        far = np.abs(image - paper)
        blank = far.max(0) <= 0.25 * max(float(far.max()), 1e-6)  # (W,)
        inked = np.flatnonzero(~blank)
        first, last = (inked[0], inked[-1]) if inked.size else (image.shape[1] // 2,) * 2
        start = min(-left, first) if left < 0 else 0
        stop = image.shape[1] - (min(-right, image.shape[1] - 1 - last) if right < 0 else 0)
        if stop - start < 2:
            start, stop = 0, image.shape[1]
        core = image[:, start:stop]
        height = image.shape[0]
        return np.concatenate(
            [
                np.full((height, max(left, 0)), paper, np.float32),
                core,
                np.full((height, max(right, 0)), paper, np.float32),
            ],
            axis=1,
        )


def _dark_ink(image: np.ndarray) -> bool:
    """Whether the ink is darker than the paper: the mean lies on the ink's side of the
    median (a line holds more paper than ink)."""
    return float(image.mean()) <= background(image)


@dataclasses.dataclass(frozen=True)
class Stroke(LineAugmentation, name="stroke"):
    """Stroke width: the ink dilated (bolder) or eroded (lighter) by ``k ~ U{-pixels, ...,
    pixels}`` pixels with a ``(|k| + 1) x (|k| + 1)`` square (gray-level morphology: a
    minimum filter grows dark ink, a maximum filter thins it; the other way round for light
    ink on dark paper).

    Shape: ``(H, W)`` -> ``(H, W)``.
    """

    p: float = 0.3
    pixels: int = 1

    checks = {"pixels": number_check(0, 4, integer=True)}

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        image = _check_image(image)
        k = int(rng.integers(-self.pixels, self.pixels + 1))
        if k == 0:
            return image
        bolder = (k > 0) == _dark_ink(image)  # grow the dark pixels
        grow = ndimage.grey_erosion if bolder else ndimage.grey_dilation
        return grow(image, size=(abs(k) + 1, abs(k) + 1), mode="nearest")


@dataclasses.dataclass(frozen=True)
class Shade(LineAugmentation, name="shade"):
    """Contrast, background and ink colour: each pixel's ink coverage ``c`` (0 on the paper's
    gray level, the median; 1 on the ink's, the 1st percentile for dark ink or the 99th for
    light ink) is drawn again with paper ``P ~ U[paper]`` and ink ``I ~ U[ink]``: ``P + (I -
    P) c``, so the line keeps its shapes and noise in new gray levels (a colour scan reads
    as its luminance). A blank line (ink within 0.05 of the paper) is left as it is.

    Shape: ``(H, W)`` -> ``(H, W)``.
    """

    p: float = 0.5
    paper: tuple[float, float] = (0.6, 1.0)
    ink: tuple[float, float] = (0.0, 0.4)

    checks = {"paper": range_check(0.0, 1.0), "ink": range_check(0.0, 1.0)}

    def __post_init__(self):
        super().__post_init__()
        if self.ink[1] >= self.paper[0]:
            raise ValueError(
                f"paper, ink: expected every ink gray level below every paper one "
                f"(ink high < paper low), got paper {self.paper!r}, ink "
                f"{self.ink!r}"
            )

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        image = _check_image(image)
        paper = background(image)
        ink = float(np.percentile(image, 1 if _dark_ink(image) else 99))
        new_paper, new_ink = rng.uniform(*self.paper), rng.uniform(*self.ink)
        if abs(paper - ink) < 0.05:
            return image
        cover = np.clip((paper - image) / (paper - ink), 0.0, 1.0)
        return (new_paper + (new_ink - new_paper) * cover).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class Blur(LineAugmentation, name="blur"):
    """Gaussian blur of a standard deviation drawn uniformly from ``sigma`` pixels (focus,
    a low scan resolution).

    Shape: ``(H, W)`` -> ``(H, W)``.
    """

    p: float = 0.3
    sigma: tuple[float, float] = (0.3, 1.2)

    checks = {"sigma": range_check(0.0, 8.0)}

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        image = _check_image(image)
        return ndimage.gaussian_filter(image, rng.uniform(*self.sigma), mode="nearest")


@dataclasses.dataclass(frozen=True)
class PixelNoise(LineAugmentation, name="pixel_noise"):
    """Gaussian noise per pixel of a standard deviation drawn uniformly from ``std`` (in gray
    levels, 1 = white), clipped to ``[0, 1]`` (sensor noise, paper grain).

    Shape: ``(H, W)`` -> ``(H, W)``.
    """

    p: float = 0.3
    std: tuple[float, float] = (0.01, 0.08)

    checks = {"std": range_check(0.0, 0.5)}

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        image = _check_image(image)
        noise = rng.normal(0.0, rng.uniform(*self.std), size=image.shape)
        return np.clip(image + noise, 0.0, 1.0).astype(np.float32)


@dataclasses.dataclass(frozen=True)
class Jpeg(LineAugmentation, name="jpeg"):
    """JPEG artefacts: the line encoded by Pillow's JPEG encoder at a quality drawn uniformly
    from ``quality`` (1-95) and decoded (8 x 8 blocks, ringing around the strokes).

    Shape: ``(H, W)`` -> ``(H, W)``.
    """

    p: float = 0.2
    quality: tuple[int, int] = (20, 80)

    checks = {"quality": range_check(1, 95, integer=True)}

    def apply(self, image: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        image = _check_image(image)
        quality = int(rng.integers(self.quality[0], self.quality[1] + 1))
        gray = Image.fromarray(np.round(np.clip(image, 0, 1) * 255).astype(np.uint8), "L")
        buffer = io.BytesIO()
        gray.save(buffer, format="JPEG", quality=quality)
        buffer.seek(0)
        with Image.open(buffer) as decoded:
            return np.asarray(decoded.convert("L"), dtype=np.float32) / 255.0


class LineAugment(Compose):
    """Line augmentations applied in order (:class:`attnkit.data.augment.augmentation.Compose`) to a
    line as the readers keep it.

    Called with an image ``(H, W)`` (uint8 gray levels, or float in ``[0, 1]``) and a
    generator; returns the changed line as uint8 ``(H, W')`` (the image itself when nothing
    changed it).

    Raises:
        TypeError: an augmentation that is not a line one.
    """

    family = "lines"

    takes = LineAugmentation
    takes_name = "a line augmentation"

    def __call__(self, image: torch.Tensor, rng: np.random.Generator) -> torch.Tensor:
        if not isinstance(image, torch.Tensor) or image.dim() != 2:
            raise ValueError(
                f"image: expected a (H, W) tensor, got {getattr(image, 'shape', type(image))}"
            )
        own = self.generators(rng)
        chosen = [(a, g) for a, g in zip(self.augmentations, own) if a.applies(g)]
        if not chosen:
            return image
        x = image.numpy().astype(np.float32)
        x = x / 255.0 if image.dtype == torch.uint8 else x
        for augmentation, g in chosen:
            x = augmentation.apply(x, g)
        return torch.from_numpy(np.round(np.clip(x, 0.0, 1.0) * 255.0).astype(np.uint8))


_GEOMETRY = (Scale(), Stretch(), Rotate(degrees=1.0), Shear(slant=0.25), Baseline(), Margins())
PRESETS: dict[str, tuple[LineAugmentation, ...]] = {
    "none": (),
    # the geometry, shades and degradations of scans and screenshots of printed lines
    "light": (
        *_GEOMETRY,
        Stroke(p=0.2),
        Shade(),
        Blur(sigma=(0.3, 0.8)),
        PixelNoise(std=(0.01, 0.04)),
        Jpeg(quality=(40, 90)),
    ),
    # and photographs: perspective, heavier blur, noise and compression
    "strong": (
        Scale(p=0.5, size=(0.6, 1.0)),
        Stretch(p=0.5, factor=(0.7, 1.3)),
        Rotate(p=0.5, degrees=2.0),
        Shear(p=0.5, slant=0.35),
        Perspective(),
        Baseline(p=0.5, pixels=2.0),
        Margins(p=0.5, pixels=12),
        Stroke(p=0.3),
        Shade(p=0.7),
        Blur(p=0.4),
        PixelNoise(p=0.4),
        Jpeg(p=0.3),
    ),
}


def preset(name: str) -> list[LineAugmentation]:
    """The augmentations of preset ``name`` (:data:`PRESETS`)."""
    if name not in PRESETS:
        raise ValueError(f"name: expected one of {', '.join(PRESETS)}, got {name!r}")
    return list(PRESETS[name])
