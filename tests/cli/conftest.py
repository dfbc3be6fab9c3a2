import struct

import pytest

from attnkit.cli.main import main

WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven"]


def float_wav_bytes(samples: list[float], rate: int) -> bytes:
    """A mono 32-bit IEEE float WAV of ``samples`` (values no writer would refuse: NaN, 1e30)."""
    data = struct.pack(f"<{len(samples)}f", *samples)
    fmt = struct.pack("<HHIIHH", 3, 1, rate, rate * 4, 4, 32)  # IEEE float, mono, 32-bit
    return (
        b"RIFF"
        + struct.pack("<I", 36 + len(data))
        + b"WAVEfmt "
        + struct.pack("<I", 16)
        + fmt
        + b"data"
        + struct.pack("<I", len(data))
        + data
    )


@pytest.fixture
def tsv(tmp_path):
    """The pairs ``tiny_translator`` is trained on: ``<en> WORD<TAB>DIGIT``, 8 lines."""
    path = tmp_path / "pairs.tsv"
    path.write_text("".join(f"<en> {w}\t{n}\n" for n, w in enumerate(WORDS)), encoding="utf-8")
    return path


@pytest.fixture(scope="session")
def tiny_translator(tmp_path_factory):
    """A translate checkpoint trained for 2 steps on 8 number words (hidden size 8), its best
    chosen by exact match; copy it before changing it."""
    folder = tmp_path_factory.mktemp("tiny_translator")
    tsv = folder / "pairs.tsv"
    tsv.write_text("".join(f"<en> {w}\t{n}\n" for n, w in enumerate(WORDS)), encoding="utf-8")
    assert (
        main(
            [
                "train",
                "translate",
                "--train",
                str(tsv),
                "--out",
                str(folder / "run"),
                "--steps",
                "2",
                "--batch-size",
                "4",
                "--hidden",
                "8",
                "--emb",
                "8",
                "--best-by",
                "exact",
                "--no-progress",
                "--plot",
                "0",
            ]
        )
        == 0
    )
    return folder / "run" / "checkpoint"


IMAGE_TINY = [
    "--image-size",
    "32",
    "--channels",
    "4,8",
    "--hidden",
    "8",
    "--emb",
    "8",
    "--attn-dim",
    "8",
    "--no-progress",
    "--plot",
    "0",
    "--max-objects",
    "4",
]


@pytest.fixture(scope="session")
def tiny_captioner(tmp_path_factory):
    """A caption checkpoint (soft attention, 32 px images, an 8 x 8 grid) trained for 2 steps
    on 6 built-in scenes of 3-4 objects; copy it before changing it."""
    folder = tmp_path_factory.mktemp("tiny_captioner")
    assert (
        main(
            [
                "train",
                "caption",
                "--out",
                str(folder / "run"),
                "--n-train",
                "6",
                "--n-valid",
                "2",
                "--steps",
                "2",
                "--batch-size",
                "4",
                *IMAGE_TINY,
            ]
        )
        == 0
    )
    return folder / "run" / "checkpoint"


@pytest.fixture(scope="session")
def tiny_vqa(tmp_path_factory):
    """A VQA checkpoint (stacked attention, 2 hops, 32 px images) trained for 2 steps on the
    questions of 6 built-in scenes of 3-4 objects; copy it before changing it."""
    folder = tmp_path_factory.mktemp("tiny_vqa")
    assert (
        main(
            [
                "train",
                "vqa",
                "--out",
                str(folder / "run"),
                "--n-train",
                "6",
                "--n-valid",
                "2",
                "--steps",
                "2",
                "--batch-size",
                "8",
                *IMAGE_TINY,
            ]
        )
        == 0
    )
    return folder / "run" / "checkpoint"
