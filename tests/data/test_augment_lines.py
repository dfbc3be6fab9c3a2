"""Line augmentations: each one's effect on a known image, their ranges, seeding, presets."""

import math

import numpy as np
import pytest
import torch

from attnkit.data import generate_lines
from attnkit.data.augment.augmentation import example_rng, from_config
from attnkit.data.augment.line_augment import (
    PRESETS,
    Baseline,
    Blur,
    Jpeg,
    LineAugment,
    Margins,
    Perspective,
    PixelNoise,
    Rotate,
    Scale,
    Shade,
    Shear,
    Stretch,
    Stroke,
    perspective_coefficients,
    preset,
)


class Fixed:
    """A generator stand-in whose draws are the given values: ``uniform`` gives ``u``,
    ``integers`` gives ``i`` (or each of them for a ``size``)."""

    def __init__(self, u=0.0, i=0):
        self.u, self.i = u, i

    def uniform(self, low=0.0, high=1.0, size=None):
        return self.u if size is None else np.full(size, self.u)

    def integers(self, low, high=None, size=None):
        return self.i if size is None else np.full(size, self.i)


def white(height=32, width=64):
    return np.ones((height, width), np.float32)


def dark_centre(image):
    """``(x, y)`` of the ink's centre of mass (ink = 1 - gray level)."""
    ink = 1.0 - image
    ys, xs = np.mgrid[0 : image.shape[0], 0 : image.shape[1]]
    return float((ink * xs).sum() / ink.sum()), float((ink * ys).sum() / ink.sum())


def test_rotation_moves_a_known_pixel_about_the_centre():
    image = white(32, 32)
    # a dot at pixels 25-26 x 15-16: index (25.5, 15.5), 10 px right of the centre (15.5, 15.5)
    image[15:17, 25:27] = 0.0
    out = Rotate(degrees=10.0).apply(image, Fixed(u=10.0))  # 10 degrees counter-clockwise
    x, y = dark_centre(out)
    a = math.radians(10.0)
    assert x == pytest.approx(15.5 + 10 * math.cos(a), abs=0.2)
    assert y == pytest.approx(15.5 - 10 * math.sin(a), abs=0.2)  # up: y grows downwards
    assert out.shape == image.shape


def test_rotation_of_a_long_line_is_clamped_so_its_ends_stay_inside():
    image = white(32, 640)
    image[15:17, 630:632] = 0.0
    out = Rotate(degrees=10.0).apply(image, Fixed(u=10.0))
    _, y = dark_centre(out)
    assert abs(y - 16) <= 32 / 8 + 0.5  # atan(H / 4W): the end moves <= H / 8
    assert out.min() < 0.5  # still in the line


def test_shear_slants_the_top_forward_and_widens_the_line():
    image = white(32, 40)
    image[0, 10] = 0.0  # top row
    image[31, 10] = 0.0  # bottom row
    out = Shear(slant=0.25).apply(image, Fixed(u=0.25))
    assert out.shape == (32, 40 + 2 * 4)  # ceil(0.25 * 32 / 2) = 4 columns each side
    assert out[0].argmin() == 10 + 4 + 4  # + s (H/2 - 0) + pad
    assert out[31].argmin() == pytest.approx(10 - 0.25 * 15 + 4, abs=1)


def test_stretch_and_scale_change_the_width_and_keep_the_height():
    image = white(32, 100)
    image[10:20, 40:60] = 0.0
    wide = Stretch(factor=(1.5, 1.5)).apply(image, Fixed(u=1.5))
    assert wide.shape == (32, 150)
    small = Scale(size=(0.5, 0.5)).apply(image, Fixed(u=0.5, i=3))
    assert small.shape == (32, 50)
    rows = np.flatnonzero((small < 0.5).any(1))
    assert rows.min() >= 3 + 4 and rows.max() <= 3 + 10  # rows 10-19 halved, from row 3 down


def test_margins_add_background_and_trim_only_blank_columns():
    image = np.full((32, 30), 0.9, np.float32)
    image[:, 5:11] = 0.1  # ink in columns 5-10
    wider = Margins(pixels=4).apply(image, Fixed(i=4))
    assert wider.shape == (32, 38) and (wider[:, :4] == np.float32(0.9)).all()
    for seed in range(20):
        out = Margins(pixels=40).apply(image, np.random.default_rng(seed))
        assert (out < 0.5).sum() == (image < 0.5).sum()  # no ink cut
        assert out.shape[1] >= 6


def test_stroke_dilates_or_erodes_the_ink():
    image = white(32, 32)
    image[:, 10:13] = 0.0  # a bar 3 px wide
    bold = Stroke(pixels=1).apply(image, Fixed(i=1))
    thin = Stroke(pixels=1).apply(image, Fixed(i=-1))
    assert (bold[16] < 0.5).sum() == 4 and (thin[16] < 0.5).sum() == 2
    light_on_dark = 1.0 - image
    bold = Stroke(pixels=1).apply(light_on_dark, Fixed(i=1))
    assert (bold[16] > 0.5).sum() == 4  # the ink is the light part there


def test_shade_redraws_paper_and_ink_levels():
    image = white(32, 64)
    image[10:20, 10:50] = 0.0
    out = Shade(paper=(0.7, 0.7), ink=(0.2, 0.2)).apply(image, np.random.default_rng(0))
    assert np.allclose(out[0, 0], 0.7) and np.allclose(out[15, 30], 0.2)
    with pytest.raises(ValueError, match=r"paper, ink: expected every ink gray level below"):
        Shade(paper=(0.3, 1.0), ink=(0.0, 0.4))


def test_blur_noise_and_jpeg_degrade_without_moving_anything():
    image = white(32, 64)
    image[8:24, 20:40] = 0.0
    blurred = Blur(sigma=(1.0, 1.0)).apply(image, Fixed(u=1.0))
    assert 0.0 < blurred[16, 20] < 1.0 and blurred.mean() == pytest.approx(image.mean(), abs=1e-3)
    noisy = PixelNoise(std=(0.05, 0.05)).apply(
        np.full((64, 64), 0.5, np.float32), np.random.default_rng(0)
    )
    assert noisy.std() == pytest.approx(0.05, rel=0.1)
    rough = Jpeg(quality=(5, 5)).apply(
        image + 0.3 * np.random.default_rng(0).random(image.shape).astype(np.float32) - 0.15,
        np.random.default_rng(0),
    )
    fine = Jpeg(quality=(95, 95)).apply(image, np.random.default_rng(0))
    assert rough.shape == fine.shape == image.shape
    assert np.abs(fine - image).mean() < 0.02
    assert dark_centre(fine) == pytest.approx(dark_centre(image), abs=0.2)


def test_perspective_maps_the_corners_it_is_given():
    corners = [(0, 0), (100, 0), (100, 32), (0, 32)]
    moved = [(2, 1), (97, -2), (103, 30), (-1, 33)]
    a, b, c, d, e, f, g, h = perspective_coefficients(corners, moved)
    for (x, y), (u, v) in zip(corners, moved):
        w = g * x + h * y + 1
        assert ((a * x + b * y + c) / w, (d * x + e * y + f) / w) == pytest.approx((u, v))
    image = white(32, 100)
    image[12:20, 45:55] = 0.0
    same = Perspective(distortion=0.0).apply(image, np.random.default_rng(0))
    assert np.abs(same - image).max() < 1e-5
    out = Perspective(distortion=0.2).apply(image, np.random.default_rng(1))
    assert out.shape == image.shape and not np.allclose(out, image)


def test_baseline_moves_columns_up_and_down_within_its_range():
    image = white(32, 200)
    image[16, :] = 0.0  # a horizontal rule
    out = Baseline(pixels=3.0).apply(image, np.random.default_rng(0))
    rows = (1.0 - out).argmax(0)  # each column's darkest row
    assert np.abs(rows - 16).max() <= 3 and len(set(rows.tolist())) > 1
    assert np.array_equal(Baseline(pixels=0.0).apply(image, np.random.default_rng(0)), image)


def test_line_augment_is_seeded_by_example_and_epoch_and_keeps_the_height():
    lines = generate_lines(6, seed=3, max_chars=30)
    chain = LineAugment(preset("strong"))
    for i, (image, _) in enumerate(lines):
        a = chain(image, example_rng(7, 2, i))
        b = chain(image, example_rng(7, 2, i))
        assert torch.equal(a, b) and a.dtype == torch.uint8 and a.shape[0] == 32
        assert a.shape[1] >= 2
    image = lines[0][0]
    draws = {chain(image, example_rng(7, epoch, 0)).numpy().tobytes() for epoch in range(4)}
    assert len(draws) == 4  # a new draw each epoch
    assert chain(image, example_rng(7, 2, 0)) is not image
    assert LineAugment([Blur(p=0.0)])(image, example_rng(0, 0, 0)) is image  # p = 0: unchanged


def test_an_augmentation_added_at_the_end_leaves_the_others_draws_alone():
    image = generate_lines(1, seed=4, max_chars=20)[0][0]
    first = [Rotate(p=1.0), Shade(p=1.0)]
    a = LineAugment(first)(image, example_rng(0, 0, 5))
    b = LineAugment([*first, Jpeg(p=0.0)])(image, example_rng(0, 0, 5))
    assert torch.equal(a, b)


def test_presets_round_trip_through_their_config():
    for _name, augmentations in PRESETS.items():
        chain = LineAugment(augmentations)
        config = chain.config()
        assert LineAugment.from_config(config) == chain
        assert all(isinstance(v, (str, int, float, list)) for c in config for v in c.values())


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: Blur(p=1.5), r"p: expected a probability in \[0, 1\] for blur, got 1.5"),
        (
            lambda: Blur(sigma=(2.0, 1.0)),
            r"sigma: expected \(low, high\) numbers with 0 <= low "
            r"<= high <= 8, got \(2.0, 1.0\)",
        ),
        (
            lambda: Rotate(degrees=-1.0),
            r"degrees: expected a number with 0 <= degrees <= 45, "
            r"got -1.0",
        ),
        (lambda: Jpeg(quality=(0, 50)), r"quality: expected \(low, high\) ints with 1 <= low"),
        (lambda: Stroke(pixels=1.5), r"pixels: expected an int with 0 <= pixels <= 4, got 1.5"),
    ],
)
def test_settings_out_of_range_are_refused_by_name(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_config_of_another_family_or_name_is_refused():
    import attnkit.data.augment.audio_augment  # noqa: F401  (registers speed)

    with pytest.raises(ValueError, match=r"augment\[0\]: speed augments audio, not lines"):
        from_config([{"name": "speed", "p": 1.0, "factors": [1.1]}], "lines")
    with pytest.raises(ValueError, match=r"augment\[0\]: expected a dict whose name is one of"):
        from_config([{"name": "swirl"}], "lines")
    with pytest.raises(ValueError, match=r"augment\[0\]: blur has no setting radius"):
        from_config([{"name": "blur", "radius": 2}], "lines")
