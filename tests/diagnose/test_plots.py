"""plot_attention: writes an image, crops to the true lengths, creates folders, rejects bad
input."""

from __future__ import annotations

import numpy as np
import pytest
import torch

pytest.importorskip("matplotlib")

from matplotlib.axes import Axes  # noqa: E402
from matplotlib.image import imread  # noqa: E402

from attnkit import plot_attention  # noqa: E402

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"


def _weights(tq=4, tk=6):
    torch.manual_seed(0)
    return torch.softmax(torch.randn(tq, tk), dim=-1)


@pytest.fixture
def drawn(monkeypatch):
    """Record every array handed to ``imshow`` and the axes it was drawn on."""
    calls = []
    original = Axes.imshow

    def imshow(self, X, *args, **kwargs):
        calls.append((self, np.array(X, copy=True), kwargs))
        return original(self, X, *args, **kwargs)

    monkeypatch.setattr(Axes, "imshow", imshow)
    return calls


def _assert_png(path):
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC
    image = imread(path)
    assert image.ndim == 3 and image.shape[0] > 50 and image.shape[1] > 50
    # A heat-map with a colour bar is not a blank canvas.
    assert image[..., :3].std() > 0.05


def test_writes_png_from_tensor(tmp_path, drawn):
    w = _weights()
    path = tmp_path / "w.png"
    returned = plot_attention(w, list("abcdef"), list("wxyz"), path, title="t")
    assert returned == path
    _assert_png(path)
    ((_, arr, _),) = drawn
    np.testing.assert_allclose(arr, w.numpy(), rtol=0, atol=0)


def test_accepts_numpy_array_and_str_path(tmp_path, drawn):
    w = _weights().numpy().astype(np.float64)
    path = plot_attention(w, None, None, str(tmp_path / "np.png"))
    assert path == tmp_path / "np.png"
    _assert_png(path)
    ((_, arr, _),) = drawn
    np.testing.assert_allclose(arr, w, rtol=1e-6)


def test_accepts_tensor_that_requires_grad_and_half_precision(tmp_path, drawn):
    w = _weights().requires_grad_()
    plot_attention(w * 1, None, None, tmp_path / "grad.png")
    plot_attention(w.detach().to(torch.bfloat16), None, None, tmp_path / "bf16.png")
    _assert_png(tmp_path / "grad.png")
    _assert_png(tmp_path / "bf16.png")
    np.testing.assert_allclose(drawn[1][1], w.detach().to(torch.bfloat16).float().numpy())


def test_crops_to_label_lengths(tmp_path, drawn):
    torch.manual_seed(1)
    w = torch.rand(5, 7)
    w[3:, :] = 100.0  # padded queries
    w[:, 4:] = 100.0  # padded keys
    x_labels, y_labels = ["k0", "k1", "k2", "k3"], ["q0", "q1", "q2"]
    plot_attention(w, x_labels, y_labels, tmp_path / "crop.png")
    ((ax, arr, kwargs),) = drawn
    np.testing.assert_array_equal(arr, w[:3, :4].numpy())
    assert kwargs["vmax"] == pytest.approx(float(w[:3, :4].max()))  # colour scale ignores padding
    assert [t.get_text() for t in ax.get_xticklabels()] == x_labels
    assert [t.get_text() for t in ax.get_yticklabels()] == y_labels


def test_explicit_lengths_override_label_counts(tmp_path, drawn):
    w = _weights(5, 7)
    plot_attention(w, list("abcdefg"), list("vwxyz"), tmp_path / "len.png", x_len=2, y_len=3)
    ((ax, arr, _),) = drawn
    np.testing.assert_array_equal(arr, w[:3, :2].numpy())
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b"]
    assert [t.get_text() for t in ax.get_yticklabels()] == ["v", "w", "x"]


def test_lengths_without_labels_crop_too(tmp_path, drawn):
    w = _weights(5, 7)
    plot_attention(w, None, None, tmp_path / "nolabels.png", x_len=3, y_len=1)
    ((_, arr, _),) = drawn
    np.testing.assert_array_equal(arr, w[:1, :3].numpy())


def test_no_labels_no_lengths_draws_everything(tmp_path, drawn):
    w = _weights(3, 9)
    plot_attention(w, None, None, tmp_path / "full.png")
    ((_, arr, _),) = drawn
    assert arr.shape == (3, 9)
    np.testing.assert_array_equal(arr, w.numpy())


def test_creates_parent_folders(tmp_path):
    path = tmp_path / "a" / "b" / "c" / "w.png"
    assert not path.parent.exists()
    assert plot_attention(_weights(), None, None, path) == path
    _assert_png(path)


def test_format_follows_extension(tmp_path):
    svg = plot_attention(_weights(), None, None, tmp_path / "w.svg")
    text = svg.read_text()
    assert "<svg" in text
    assert not svg.read_bytes().startswith(PNG_MAGIC)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(x_len=7), r"^x_len: expected an int in \[1, 6\], got 7"),
        (dict(x_len=0), r"^x_len: expected an int in \[1, 6\], got 0"),
        (dict(y_len=5), r"^y_len: expected an int in \[1, 4\], got 5"),
        (dict(y_len=-1), r"^y_len: expected an int in \[1, 4\], got -1"),
        (dict(x_len=2.0), r"^x_len: expected an int in \[1, 6\], got 2\.0"),
        (dict(x_labels=["a"], x_len=3), r"^x_labels: expected at least x_len = 3 labels, got 1"),
        (
            dict(y_labels=["a", "b"], y_len=3),
            r"^y_labels: expected at least y_len = 3 labels, got 2",
        ),
        # More labels than keys: the default x_len = len(x_labels) exceeds Tk.
        (dict(x_labels=list("abcdefgh")), r"^x_labels: expected 1 to 6 labels .*got 8"),
    ],
    ids=[
        "x_len>Tk",
        "x_len=0",
        "y_len>Tq",
        "y_len<0",
        "x_len-float",
        "few-x-labels",
        "few-y-labels",
        "too-many-x-labels",
    ],
)
def test_rejects_bad_lengths_and_labels(tmp_path, kwargs, match):
    kwargs = dict(kwargs)
    x_labels = kwargs.pop("x_labels", None)
    y_labels = kwargs.pop("y_labels", None)
    path = tmp_path / "bad.png"
    with pytest.raises(ValueError, match=match):
        plot_attention(_weights(4, 6), x_labels, y_labels, path, **kwargs)
    assert not path.exists()


@pytest.mark.parametrize(
    "weights, shape",
    [
        (torch.rand(2, 4, 6), r"\(2, 4, 6\)"),
        (torch.rand(6), r"\(6,\)"),
        (np.zeros((1, 2, 3, 4)), r"\(1, 2, 3, 4\)"),
    ],
    ids=["3-D", "1-D", "4-D numpy"],
)
def test_rejects_weights_that_are_not_2d(tmp_path, weights, shape):
    with pytest.raises(
        ValueError, match=rf"^weights: expected a 2-D \(Tq, Tk\) array, got shape {shape}"
    ):
        plot_attention(weights, None, None, tmp_path / "bad.png")
    assert not (tmp_path / "bad.png").exists()


def test_plot_alignment_over_an_image_and_a_spectrogram(tmp_path):
    from attnkit.diagnose.plots import plot_alignment

    weights = torch.softmax(torch.randn(5, 20), -1)
    png = plot_alignment(
        weights,
        torch.rand(32, 160),
        list("abcde"),
        tmp_path / "a" / "x.png",
        steps=18,
        marked=[0, 4],
        title="abcde",
    )
    assert png.exists() and png.read_bytes()[:4] == b"\x89PNG"
    spec = plot_alignment(weights, torch.randn(80, 300), None, tmp_path / "s.png", origin="lower")
    assert spec.exists()
    with pytest.raises(ValueError, match="labels: expected 5 labels"):
        plot_alignment(weights, torch.rand(32, 160), list("abc"), tmp_path / "y.png")
    with pytest.raises(ValueError, match=r"marked: expected output positions in \[0, 5\)"):
        plot_alignment(weights, torch.rand(32, 160), None, tmp_path / "y.png", marked=[7])
    with pytest.raises(ValueError, match=r"x_len: expected an int in \[1, 20\], got 21"):
        plot_alignment(weights, torch.rand(32, 160), None, tmp_path / "y.png", steps=21)
    with pytest.raises(ValueError, match="background: expected a 2-D"):
        plot_alignment(weights, torch.rand(1, 32, 160), None, tmp_path / "y.png")


def test_plot_alignment_draws_the_self_attention_under_the_image(tmp_path, drawn):
    from attnkit.diagnose.plots import plot_alignment

    weights = torch.softmax(torch.randn(3, 10), -1)
    own = torch.softmax(torch.randn(10, 10), -1)
    path = plot_alignment(
        weights, torch.rand(32, 80), list("abc"), tmp_path / "x.png", steps=8, self_attention=own
    )
    _assert_png(path)
    image, self_map, outputs = drawn  # top to bottom
    assert image[1].shape == (32, 80)
    np.testing.assert_allclose(self_map[1], own[:8, :8].numpy())
    np.testing.assert_allclose(outputs[1], weights[:, :8].numpy())
    assert self_map[0].get_position().y0 > outputs[0].get_position().y0
    assert self_map[0].get_position().y1 < image[0].get_position().y0 + 1e-6
    drawn.clear()  # no output token (a CTC head that read nothing): image and self-attention
    plot_alignment(
        torch.zeros(0, 10), torch.rand(32, 80), [], tmp_path / "y.png", self_attention=own
    )
    assert [a[1].shape for a in drawn] == [(32, 80), (10, 10)]
    with pytest.raises(
        ValueError,
        match=r"self_attention: expected shape \(10, 10\) \(the "
        r"weights' S steps\), got \(9, 9\)",
    ):
        plot_alignment(
            weights, torch.rand(32, 80), None, tmp_path / "z.png", self_attention=own[:9, :9]
        )


def test_plot_image_attention_lights_where_each_output_looked(tmp_path, drawn):
    from attnkit.diagnose.plots import plot_image_attention

    image = torch.full((3, 16, 16), 200, dtype=torch.uint8)  # (3, H, W)
    maps = torch.zeros(2, 4, 4)
    maps[0, 0, 0] = 1.0  # looks at the top-left cell
    maps[1, 3, 3] = 0.5  # at the bottom-right cell
    path = plot_image_attention(
        image, maps, ["red", "circle"], tmp_path / "a" / "cap.png", title="a red circle", columns=2
    )
    _assert_png(path)
    assert len(drawn) == 3  # the image, then one panel per word
    np.testing.assert_allclose(drawn[0][1], np.full((16, 16, 3), 200 / 255), rtol=1e-6)
    first, second = drawn[1][1], drawn[2][1]  # (H, W, 3): the image lit by the map
    assert first[1, 1, 0] > 0.6 and first[14, 14, 0] < 0.2
    assert second[14, 14, 0] > 0.6 and second[1, 1, 0] < 0.2  # each map to its own peak


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (
            dict(image=np.zeros((4, 4))),
            r"image: expected a \(3, H, W\) or \(H, W, 3\) RGB image, "
            r"got shape \(4, 4\)",
        ),
        (
            dict(maps=np.zeros((4, 4))),
            r"maps: expected a 3-D \(N, h, w\) array, got shape \(4, 4\)",
        ),
        (dict(maps=np.full((2, 2, 2), np.nan)), "maps: expected finite values, got 8 NaN"),
        (dict(labels=["x"]), r"labels: expected 2 labels \(one per map\), got 1"),
        (dict(columns=0), "columns: expected a positive int, got 0"),
    ],
)
def test_plot_image_attention_rejects_bad_input(tmp_path, kwargs, match):
    from attnkit.diagnose.plots import plot_image_attention

    args = {
        "image": np.zeros((8, 8, 3), np.uint8),
        "maps": np.ones((2, 2, 2)),
        "labels": ["a", "b"],
        **kwargs,
    }
    columns = args.pop("columns", 6)
    with pytest.raises(ValueError, match=match):
        plot_image_attention(
            args["image"], args["maps"], args["labels"], tmp_path / "x.png", columns=columns
        )
