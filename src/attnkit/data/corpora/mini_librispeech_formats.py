"""Mini LibriSpeech (``train-clean-5``: 1,519 utterances of 28 LibriVox readers, a subset of
LibriSpeech's ``train-clean-100`` made for Kaldi's ``mini_librispeech`` recipe) split by
speaker: the format ``mini-librispeech`` of task ``"asr"``.

The path is the ``LibriSpeech`` folder (the one holding ``SPEAKERS.TXT`` and
``train-clean-5/``) or ``train-clean-5`` itself, read as
:func:`~attnkit.data.corpora.speech_formats.read_librispeech` reads it, keeping only the
speakers of one split, so that no speaker of the held-out splits is heard in training:

- ``test``: :data:`TEST_SPEAKERS`, ``valid``: :data:`VALID_SPEAKERS`, ``train``: every other
  speaker below the folder, ``all``: every speaker.
- The held-out speakers are fixed by a rule anyone can rerun on ``SPEAKERS.TXT``: of each sex
  (its ``SEX`` column), the speakers of ``train-clean-5`` in the order of their ids as numbers;
  the first two of each are the test speakers, the third of each the validation speakers. The
  rule balances the sexes and picks no speaker by how a model does on them.
- ``split`` (``--split``) or else the role's: ``--train`` reads ``train``, ``--valid``
  ``valid``, ``attnkit eval`` ``test``.

Transcripts are kept as LibriSpeech writes them, upper-case words
(``transcripts="normalize"``: lower case, numbers in words, as the ``librispeech`` format reads
them by default), in :data:`LIBRISPEECH_ALPHABET`. The format is taken when named
(``--format mini-librispeech``): a ``train-clean-5`` folder whose format is not named is
detected as ``librispeech`` and read whole.
"""

from __future__ import annotations

from pathlib import Path

from attnkit.data.audio.files import MAX_SECONDS
from attnkit.data.corpora.format_registry import Format, register
from attnkit.data.corpora.speech_formats import read_librispeech
from attnkit.data.corpora.speech_sets import SpeechSet
from attnkit.data.corpora.unusable import FIRST_FEW, MAX_UNUSABLE
from attnkit.errors import DataError

__all__ = [
    "LIBRISPEECH_ALPHABET",
    "MINI_LIBRISPEECH_SPLITS",
    "TEST_SPEAKERS",
    "VALID_SPEAKERS",
    "read_mini_librispeech",
]

LIBRISPEECH_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ' "  # what LibriSpeech's transcripts hold
FOLDER = "train-clean-5"
# of each sex in SPEAKERS.TXT, train-clean-5's speakers by numeric id: the first two of each
TEST_SPEAKERS = ("19", "32", "118", "163")  # F: 19, 32; M: 118, 163 (244 utterances)
VALID_SPEAKERS = ("226", "332")  # the third of each: F 226, M 332 (124 utterances)
MINI_LIBRISPEECH_SPLITS = ("train", "valid", "test", "all")
ROLE_SPLITS = {"train": "train", "valid": "valid", "test": "test"}


def split_speakers(present: list[str], split: str) -> list[str]:
    """The speakers of ``split`` among the speaker ids ``present`` (in their order)."""
    held_out = {"test": TEST_SPEAKERS, "valid": VALID_SPEAKERS}
    if split == "all":
        return present
    if split in held_out:
        return [s for s in present if s in held_out[split]]
    return [s for s in present if s not in TEST_SPEAKERS + VALID_SPEAKERS]


def read_mini_librispeech(
    path: str | Path,
    *,
    normalize: bool = False,
    max_seconds: float | None = MAX_SECONDS,
    max_unusable: float = MAX_UNUSABLE,
    min_frames: int = 1,
    transcripts: str | None = None,
    alphabet: str | None = None,
    confine: bool = False,
    split: str | None = None,
    role: str = "train",
) -> SpeechSet:
    """The utterances of one speaker split of Mini LibriSpeech (see the module docstring):
    ``split`` (:data:`MINI_LIBRISPEECH_SPLITS`; None: the role's), transcripts kept upper case
    unless ``transcripts="normalize"``.

    Raises:
        ValueError: naming ``--split`` when not one of :data:`MINI_LIBRISPEECH_SPLITS`.
        DataError: naming the folder when it is not ``train-clean-5`` (no speaker folders, or
            a held-out speaker missing), or as :func:`read_librispeech` raises.
    """
    root = Path(path)
    split = split or ROLE_SPLITS.get(role, role)
    if split not in MINI_LIBRISPEECH_SPLITS:
        raise ValueError(
            f"--split: expected one of {', '.join(MINI_LIBRISPEECH_SPLITS)} for "
            f"mini-librispeech, got {split!r}"
        )
    folder = root / FOLDER if (root / FOLDER).is_dir() else root
    present = (
        sorted((p.name for p in folder.iterdir() if p.is_dir() and p.name.isdigit()), key=int)
        if folder.is_dir()
        else []
    )
    missing = [s for s in TEST_SPEAKERS + VALID_SPEAKERS if s not in present]
    if missing:
        found = ", ".join(present[:FIRST_FEW]) + (", ..." if len(present) > FIRST_FEW else "")
        raise DataError(
            f"{root}: not Mini LibriSpeech's {FOLDER} (no folder of its held-out speakers "
            f"{', '.join(missing)}; speaker folders found: {found or 'none'})"
        )
    transcripts = transcripts or "keep"
    if alphabet is None and transcripts == "keep":
        alphabet = LIBRISPEECH_ALPHABET
    return read_librispeech(
        folder,
        normalize=normalize,
        max_seconds=max_seconds,
        max_unusable=max_unusable,
        min_frames=min_frames,
        transcripts=transcripts,
        alphabet=alphabet,
        confine=confine,
        speakers=frozenset(split_speakers(present, split)),
    )


def _is_mini_librispeech(path: Path) -> bool:
    return path.is_dir() and (path.name == FOLDER or (path / FOLDER).is_dir())


register(
    Format(
        "mini-librispeech",
        "asr",
        read_mini_librispeech,
        _is_mini_librispeech,
        "Mini LibriSpeech's train-clean-5 split by speaker (LibriSpeech's layout); "
        "--split train, valid, test or all",
        "train-clean-5/19/198/19-198.trans.txt: 19-198-0001 HELLO WORLD\n"
        "train-clean-5/19/198/19-198-0001.flac",
    )
)
