"""Text-line images: generation, held-out fonts, the user's folder reader and batching."""

import os
import pickle
import subprocess
import sys
from pathlib import Path

import matplotlib
import numpy as np
import pytest
import torch
from PIL import Image

from attnkit.data import (
    ALPHABET,
    CharVocab,
    DataError,
    JoinedLines,
    LineFolder,
    available_fonts,
    generate_lines,
    iter_lines,
    load_line_image,
    pad_images,
    read_line_folder,
    render_line,
    write_line_folder,
)
from attnkit.data.worlds import lines as lines_module
from attnkit.data.worlds.lines import HELD_OUT_FAMILIES, font_family
from attnkit.tokens import UNK
from tests.data.images import png_header
from tests.needs import default_fonts, needs_fonts


@pytest.fixture(scope="module")
def train_lines():
    """60 training lines in the fonts make test installs, the same on a machine with more."""
    return generate_lines(60, seed=7, fonts=default_fonts("train"))


@needs_fonts
def test_lines_are_32_high_and_as_wide_as_their_text(train_lines):
    """Widths per character as DejaVu, Liberation and FreeFont draw them (a script or display
    face of another machine may fall outside)."""
    for image, text in train_lines:
        assert image.dtype == torch.uint8 and image.shape[0] == 32  # kept in 8 bits
        assert 5 <= len(text) <= 200
        assert 5 <= image.shape[1] / len(text) <= 30  # px per character
    widths = np.array([image.shape[1] for image, _ in train_lines])
    lengths = np.array([len(text) for _, text in train_lines])
    assert np.corrcoef(widths, lengths)[0, 1] > 0.8
    for image, text in generate_lines(
        4, seed=1, min_chars=200, max_chars=200, fonts=default_fonts("train")
    ):
        assert len(text) == 200 and image.shape[1] >= 1500


class _Noiseless:
    """A generator for :func:`render_line` that draws as ``np.random.Generator`` does but adds
    no noise, and keeps its uniform draws (the paper and ink shades, then the noise level, come
    last)."""

    def __init__(self, seed):
        self.rng, self.uniforms = np.random.default_rng(seed), []

    def integers(self, *args, **kwargs):
        return self.rng.integers(*args, **kwargs)

    def uniform(self, low, high, size=None):
        self.uniforms.append(self.rng.uniform(low, high, size))
        return self.uniforms[-1]

    def normal(self, loc, scale, size):
        return np.zeros(size)


def test_lines_have_ink_on_paper():
    """Every font a split draws from on this machine (whatever fonts it has), short and long
    lines: without the noise, the paper is the drawn paper shade (0.6-1.0) and some pixel is
    at least a quarter of the way to the drawn ink shade (0.0-0.4: at least 0.2 darker),
    whatever the blur; a thin font's short line may have few such pixels (a 1% quantile is no
    measure of them)."""
    fonts = sorted({f for group in available_fonts().values() for f in group})
    if not fonts:
        pytest.skip("no font covering the alphabet (make system installs fonts-liberation)")
    for i, font in enumerate(fonts):
        for j, text in enumerate(["turno", "il. ;", "A quick line, 1,234.5"]):
            rng = _Noiseless(100 * i + j)
            pixels = (
                np.asarray(
                    render_line(text, font=font, size=int(rng.integers(24, 48)), rng=rng),
                    dtype=np.float64,
                )
                / 255
            )
            paper, dark = rng.uniforms[-3:-1]  # then the noise level
            assert abs(pixels.max() - paper) <= 0.5 / 255 + 1e-9, (font, text)
            assert pixels.min() <= paper - 0.25 * (paper - dark) + 0.5 / 255, (font, text)


def test_generation_is_deterministic_per_seed_and_index(train_lines):
    again = generate_lines(60, seed=7)
    assert [t for _, t in again] == [t for _, t in train_lines]
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(again, train_lines))
    other = generate_lines(60, seed=8)
    assert len({t for _, t in other} & {t for _, t in train_lines}) == 0
    # example i does not depend on how many are generated
    assert generate_lines(3, seed=7)[2][1] == train_lines[2][1]


def test_texts_look_like_text_and_round_trip_through_char_vocab(train_lines):
    vocab = CharVocab(ALPHABET)
    words = set(lines_module._words())
    for _, text in train_lines:
        assert set(text) <= set(ALPHABET)
        assert text == text.strip() and "  " not in text
        ids = vocab.encode(text, eos=True)
        assert UNK not in ids and vocab.decode(ids) == text
    tokens = [w for _, t in train_lines for w in t.split()[:-1]]
    assert sum(w.strip(",.;:!?\"'()[]").lower() in words for w in tokens) > 0.6 * len(tokens)
    assert any(c.isdigit() for _, t in train_lines for c in t)
    assert any(c.isupper() for _, t in train_lines for c in t)


def test_splits_share_no_text_and_no_font(monkeypatch):
    used = []

    def recording_render(text, *, font, size, rng):
        used.append(font)
        return Image.new("L", (len(text), 32), 255)

    monkeypatch.setattr(lines_module, "render_line", recording_render)
    fonts = available_fonts()
    texts = {}
    for split in ("train", "valid", "test"):
        used.clear()
        texts[split] = {t for _, t in generate_lines(400, split=split, min_chars=5, max_chars=6)}
        # more than one font wherever the split has more (matplotlib's DejaVu alone gives
        # valid and test one face each)
        assert set(used) <= set(fonts[split]) and len(set(used)) >= min(2, len(fonts[split]))
    assert not texts["train"] & texts["valid"] and not texts["train"] & texts["test"]
    assert not texts["valid"] & texts["test"]
    assert not set(fonts["train"]) & set(fonts["valid"])
    assert not set(fonts["train"]) & set(fonts["test"])
    assert not set(fonts["valid"]) & set(fonts["test"])


def test_held_out_families_are_never_trained_on():
    families = {
        split: {font_family(p) for p in paths} for split, paths in available_fonts().items()
    }
    for split in ("valid", "test"):
        assert not families["train"] & set(HELD_OUT_FAMILIES[split])
        faces = generate_lines(1, split=split, fonts="faces")  # the in-family held-out faces
        assert len(faces) == 1
    assert font_family("/usr/share/fonts/truetype/lato/Lato-Bold.ttf") == "lato"
    assert font_family("/usr/share/fonts/truetype/karla-variable/Karla.ttf") == "karla"
    assert font_family("/usr/share/fonts/opentype/roboto/slab/RobotoSlab-Bold.otf") == "roboto"
    assert font_family("/usr/share/fonts/fonts-go/Go-Regular.ttf") == "go"
    installed = {font_family(p) for p in lines_module._font_files()}
    if installed & set(HELD_OUT_FAMILIES["test"]):  # make fonts installed them
        assert {font_family(p) for p in available_fonts()["test"]} >= (
            installed & set(HELD_OUT_FAMILIES["test"])
        )
        assert len(families["train"]) > 20
    with pytest.raises(ValueError, match="fonts: expected None, a list of font files or one of"):
        generate_lines(1, split="train", fonts="families")


def test_prose_lines_are_real_sentences_of_their_split():
    sentences = lines_module._sentences()
    assert min(len(v) for v in sentences.values()) > 50
    assert not set(sentences["train"]) & set(sentences["test"])
    lines = generate_lines(40, split="test", seed=4, min_chars=30, max_chars=60, prose=1.0)
    test_text = " ".join(sentences["test"])
    assert all(text in test_text and 1 <= len(text) <= 60 for _, text in lines)
    assert all(set(text) <= set(ALPHABET) and "  " not in text for _, text in lines)
    mixed = [t for _, t in generate_lines(60, seed=4, max_chars=60, prose=0.5)]
    in_prose = sum(t in " ".join(sentences["train"]) for t in mixed)
    assert 15 < in_prose < 45
    with pytest.raises(ValueError, match="prose: expected a probability in"):
        generate_lines(1, prose=1.5)


def test_matplotlib_dejavu_alone_serves_every_split(monkeypatch):
    monkeypatch.setattr(lines_module, "FONT_ROOT", Path("/nonexistent"))
    lines_module._fonts_by_split.cache_clear()
    try:
        fonts = available_fonts()
        assert all(fonts[split] for split in ("train", "valid", "test"))
        assert all(p.name.startswith("DejaVu") for paths in fonts.values() for p in paths)
        assert not any("Display" in p.name for paths in fonts.values() for p in paths)
        image, text = generate_lines(1, split="test", seed=2)[0]
        assert image.shape[0] == 32 and text
    finally:
        lines_module._fonts_by_split.cache_clear()


def test_render_line_checks_its_arguments():
    font = available_fonts()["train"][0]
    rng = np.random.default_rng(0)
    image = render_line("Hello, world 42!", font=font, size=24, rng=rng)
    assert image.mode == "L" and image.height == 32 and image.width > 100
    with pytest.raises(ValueError, match="text: expected one non-empty line"):
        render_line("", font=font, size=24, rng=rng)
    with pytest.raises(ValueError, match="text: expected one non-empty line"):
        render_line("two\nlines", font=font, size=24, rng=rng)
    with pytest.raises(ValueError, match="size: expected an int of at least 4 pixels, got 2"):
        render_line("x", font=font, size=2, rng=rng)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"split": "dev"}, "split: expected one of train, valid, test, got 'dev'"),
        ({"min_chars": 0}, "got 0 and 200"),
        ({"min_chars": 20, "max_chars": 10}, "got 20 and 10"),
    ],
)
def test_generate_lines_rejects_bad_arguments(kwargs, match):
    with pytest.raises(ValueError, match=match):
        generate_lines(1, **kwargs)


def test_written_lines_read_back_unchanged(tmp_path, train_lines):
    tsv = write_line_folder(train_lines[:10], tmp_path / "cache")
    back = read_line_folder(tmp_path / "cache", tsv, alphabet=ALPHABET)
    assert [t for _, t in back] == [t for _, t in train_lines[:10]]
    assert all(torch.equal(a, b) for (a, _), (b, _) in zip(back, train_lines))
    with pytest.raises(ValueError, match=r"lines\[1\]: text must be one non-empty line"):
        write_line_folder([train_lines[0], (train_lines[1][0], "a\tb")], tmp_path / "x")


def test_a_folder_of_lines_is_read_from_disk_when_indexed(tmp_path, train_lines):
    tsv = write_line_folder(iter(train_lines[:12]), tmp_path / "cache")  # any iterable
    lines = read_line_folder(tmp_path / "cache", tsv)
    assert isinstance(lines, LineFolder) and len(lines) == 12
    assert lines.widths == [image.shape[1] for image, _ in train_lines[:12]]
    assert lines.texts == [text for _, text in train_lines[:12]]
    # it holds names, widths and texts, not images: a few hundred bytes a line
    assert len(pickle.dumps(lines)) < 12 * 400 < sum(image.numel() for image, _ in lines)
    part = lines[3:5]
    assert isinstance(part, LineFolder) and part.texts == lines.texts[3:5]
    assert torch.equal(part[1][0], train_lines[4][0]) and part.path(1) == lines.path(4)
    (tmp_path / "cache" / "000004.png").write_bytes(b"overwritten after the folder was read")
    with pytest.raises(DataError, match="000004.png: cannot read image"):
        lines[4]  # read now, not before


def test_joined_lines_are_their_parts_one_after_another(tmp_path, train_lines):
    """Against the reference, the parts' lines in one list: every index (negative ones too),
    every slice of step 1 across the parts' bounds, widths, texts and the folder's paths."""
    tsv = write_line_folder(train_lines[:5], tmp_path / "cache")
    folder = read_line_folder(tmp_path / "cache", tsv)
    listed = list(train_lines[10:13])
    joined = JoinedLines([folder, [], listed])  # an empty part is skipped
    reference = [*train_lines[:5], *listed]
    assert len(joined) == 8 and joined.texts == [t for _, t in reference]
    assert joined.widths == [image.shape[1] for image, _ in reference]
    for i in range(-8, 8):
        image, text = joined[i]
        assert torch.equal(image, reference[i][0]) and text == reference[i][1]
    for start in range(9):
        for stop in range(start, 9):
            part = joined[start:stop]
            assert isinstance(part, JoinedLines) and part.texts == joined.texts[start:stop]
            assert all(torch.equal(a, b) for (a, _), (b, _) in zip(part, reference[start:stop]))
    assert [t for _, t in joined[::3]] == [t for _, t in reference[::3]]
    assert joined.path(4) == folder.path(4) and joined.path(5) == "part1[0]"
    with pytest.raises(IndexError, match="line 8 of 8"):
        joined[8]


def test_iter_lines_renders_generate_lines_one_at_a_time(train_lines):
    many = iter_lines(10**9, seed=7)  # nothing rendered yet
    first = [next(many) for _ in range(3)]
    assert all(torch.equal(a, b) and s == t for (a, s), (b, t) in zip(first, train_lines))
    with pytest.raises(ValueError, match="n: expected a non-negative int, got -1"):
        iter_lines(-1)  # checked on the call


def _folder(tmp_path, tsv_text):
    """A folder with a good 10x32 line image ``good.png`` and the TSV ``labels.tsv``."""
    Image.new("L", (10, 32), 200).save(tmp_path / "good.png")
    (tmp_path / "labels.tsv").write_text(tsv_text, encoding="utf-8")
    return tmp_path, tmp_path / "labels.tsv"


def test_reader_names_the_tsv_line_of_every_bad_image(tmp_path):
    folder, tsv = _folder(tmp_path, "good.png\tok\nmissing.png\tgone\n")
    with pytest.raises(DataError, match=r"labels.tsv:2: image 'missing.png' not found"):
        read_line_folder(folder, tsv)

    (folder / "corrupt.png").write_bytes(b"not an image at all")
    tsv.write_text("good.png\tok\n\ncorrupt.png\tbad\n")
    with pytest.raises(DataError, match=r"labels.tsv:3: .*corrupt.png: cannot read image"):
        read_line_folder(folder, tsv)

    Image.new("L", (400, 32), 0).save(folder / "cut.png")
    (folder / "cut.png").write_bytes((folder / "cut.png").read_bytes()[:60])
    tsv.write_text("cut.png\ttruncated\n")
    with pytest.raises(DataError, match=r"labels.tsv:1: .*cut.png: cannot read image"):
        read_line_folder(folder, tsv)

    (folder / "zero.png").write_bytes(png_header(0, 32))
    tsv.write_text("good.png\tok\nzero.png\tempty\n")
    with pytest.raises(DataError, match=r"labels.tsv:2: .*zero.png: cannot read image"):
        read_line_folder(folder, tsv)

    Image.new("L", (1, 1000), 0).save(folder / "thin.png")
    tsv.write_text("thin.png\tthin\n")
    with pytest.raises(DataError, match=r"labels.tsv:1: .*thin.png: 1 x 1000 pixels is 0 px wide"):
        read_line_folder(folder, tsv)

    Image.new("F", (20, 32), 0.5).save(folder / "float.tif")
    tsv.write_text("float.tif\tfloat\n")
    with pytest.raises(DataError, match=r"labels.tsv:1: .*float.tif: unsupported image mode 'F'"):
        read_line_folder(folder, tsv)


@pytest.mark.parametrize(
    ("tsv_text", "match"),
    [
        ("good.png\tok\ngood.png ok\n", r"labels.tsv:2: expected filename<TAB>text, found 0 tabs"),
        ("good.png\tok\n\tno name\n", r"labels.tsv:2: empty filename"),
        ("good.png\t \n", r"labels.tsv:1: empty text"),
        ("", r"labels.tsv: no usable filename<TAB>text lines"),
    ],
)
def test_reader_names_bad_tsv_lines(tmp_path, tsv_text, match):
    folder, tsv = _folder(tmp_path, tsv_text)
    with pytest.raises(DataError, match=match):
        read_line_folder(folder, tsv)


def test_reader_reports_every_label_outside_the_alphabet(tmp_path):
    folder, tsv = _folder(tmp_path, "good.png\tcafé\ngood.png\tfine\ngood.png\t5 €\n")
    with pytest.raises(
        DataError,
        match=r"labels.tsv: 2 labels use characters outside the "
        r"alphabet 'é€', on lines 1 \('é'\), 3 \('€'\)",
    ):
        read_line_folder(folder, tsv, alphabet=ALPHABET)
    assert [t for _, t in read_line_folder(folder, tsv)] == ["café", "fine", "5 €"]
    with pytest.raises(DataError, match="nowhere: not a folder"):
        read_line_folder(tmp_path / "nowhere", tsv)


def test_colour_alpha_16_bit_and_tall_images_are_converted(tmp_path):
    Image.new("RGB", (8, 32), (255, 0, 0)).save(tmp_path / "red.png")
    red = load_line_image(tmp_path / "red.png")
    assert red.shape == (32, 8) and red.dtype == torch.uint8 and torch.all(red == 76)

    rgba = Image.new("RGBA", (8, 32), (0, 0, 0, 255))
    rgba.paste((0, 0, 0, 0), (4, 0, 8, 32))  # right half fully transparent
    rgba.save(tmp_path / "alpha.png")
    alpha = load_line_image(tmp_path / "alpha.png")
    assert torch.all(alpha[:, :4] == 0) and torch.all(alpha[:, 4:] == 255)

    deep = np.full((32, 6), 65535, dtype=np.uint16)
    deep[:, :3] = 32768
    Image.fromarray(deep).save(tmp_path / "deep.png")
    assert Image.open(tmp_path / "deep.png").mode.startswith("I")
    wide = load_line_image(tmp_path / "deep.png")
    assert torch.all(wide[:, :3] == 128) and torch.all(wide[:, 3:] == 255)  # 8 bits kept

    tall = np.zeros((64, 100), dtype=np.uint8)
    tall[:, 50:] = 255
    Image.fromarray(tall).save(tmp_path / "tall.png")
    half = load_line_image(tmp_path / "tall.png")
    assert half.shape == (32, 50)
    assert torch.all(half[:, :24] == 0) and torch.all(half[:, 26:] == 255)


def test_pad_images_pads_with_the_background_and_returns_widths():
    a, b = torch.rand(32, 5), torch.rand(32, 3)
    batch, widths = pad_images([a, b])
    assert batch.shape == (2, 1, 32, 5) and widths.tolist() == [5, 3]
    assert widths.dtype == torch.long
    assert torch.equal(batch[0, 0], a) and torch.equal(batch[1, 0, :, :3], b)
    assert torch.all(batch[1, 0, :, 3:] == 1.0)
    dark, _ = pad_images([b, a], fill=0.0)
    assert torch.all(dark[0, 0, :, 3:] == 0.0)
    with pytest.raises(ValueError, match="images: expected at least one image"):
        pad_images([])
    with pytest.raises(
        ValueError,
        match=r"images\[1\]: expected shape \(H, W\) with W >= 1 and "
        r"H as in images\[0\] \(32\), got \(16, 3\)",
    ):
        pad_images([a, torch.rand(16, 3)])
    with pytest.raises(ValueError, match=r"images\[0\]: .* got \(1, 32, 5\)"):
        pad_images([a[None]])
    with pytest.raises(
        ValueError,
        match=r"^images\[1\]: expected dtype torch.float32 \(as "
        r"images\[0\]\), got torch.uint8",
    ):
        pad_images([a, torch.zeros(32, 3, dtype=torch.uint8)])


def test_pad_images_turns_8_bit_lines_into_float_per_batch():
    a = torch.randint(0, 256, (32, 5), dtype=torch.uint8)
    b = torch.randint(0, 256, (32, 3), dtype=torch.uint8)
    batch, widths = pad_images([a, b])
    assert batch.dtype == torch.float32 and widths.tolist() == [5, 3]
    assert torch.equal(batch[0, 0], a.float() / 255) and torch.equal(
        batch[1, 0, :, :3], b.float() / 255
    )
    assert torch.all(batch[1, 0, :, 3:] == 1.0)
    dark, _ = pad_images([b, a], fill=0.0)
    assert torch.all(dark[0, 0, :, 3:] == 0.0)


def test_huge_images_are_refused_from_their_header(tmp_path):
    bomb = tmp_path / "bomb.png"
    bomb.write_bytes(png_header(30_000, 30_000))  # Pillow's DecompressionBombError
    with pytest.raises(
        DataError,
        match=r"bomb.png: more pixels than Pillow reads safely "
        r"\(89,478,485\)",
    ):
        load_line_image(bomb)
    tall = tmp_path / "tall.png"
    tall.write_bytes(png_header(9_500, 9_500))  # Pillow's DecompressionBombWarning
    with pytest.raises(DataError, match="tall.png: more pixels than Pillow reads safely"):
        load_line_image(tall)
    wide = tmp_path / "wide.png"
    wide.write_bytes(png_header(200_000, 32))
    with pytest.raises(
        DataError,
        match=r"^[^:]*wide.png: 200000 x 32 pixels is 200000 px wide "
        r"at height 32, more than max_width=10000$",
    ):
        load_line_image(wide)
    with pytest.raises(DataError, match=r"wide.png: 200000 x 32 .* more than max_width=50"):
        load_line_image(tmp_path / "wide.png", max_width=50)


def test_attnkit_font_root_names_the_folder_fonts_are_found_in(tmp_path):
    # a font laid out as a Debian package installs it, in a folder that is not /usr/share/fonts
    dejavu = Path(matplotlib.get_data_path()) / "fonts" / "ttf" / "DejaVuSans.ttf"
    (tmp_path / "truetype" / "cantarell").mkdir(parents=True)
    (tmp_path / "truetype" / "cantarell" / "Unpacked-Regular.ttf").write_bytes(dejavu.read_bytes())
    code = (
        "from attnkit.data.worlds import lines as L; f = L.available_fonts(); "
        "print(L.FONT_ROOT); print(sorted({L.font_family(p) for p in f['test']})); "
        "print(any(p.name == 'Unpacked-Regular.ttf' for p in f['train']))"
    )
    env = {**os.environ, "ATTNKIT_FONT_ROOT": str(tmp_path)}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.splitlines()
    assert out == [str(tmp_path), "['cantarell', 'dejavu']", "False"]
