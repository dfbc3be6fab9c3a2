"""CMU's AN4 census database as distributed, read into a :class:`~attnkit.data.SpeechSet`: the
format ``an4`` of task ``"asr"``.

The folder (the one holding ``etc/`` and ``wav/``, e.g. ``an4/`` of CMU's ``an4_raw`` tarball)
has one transcript file per split, ``etc/an4_train.transcription`` and
``etc/an4_test.transcription``, of lines ``<s> WORDS </s> (UTTERANCE-ID)`` (the test file
without ``<s>`` and ``</s>``), and the recordings below ``wav/an4_clstk/`` (training) and
``wav/an4test_clstk/`` (test), one ``SPEAKER/UTTERANCE-ID.raw`` each: headerless 16-bit PCM
at 16 kHz, read as :class:`~attnkit.data.audio.files.RawPCM` says. Their byte order is
guessed from the samples (:func:`~attnkit.data.audio.files.guess_byte_order`) unless
``byte_order`` names it: AN4's files are big-endian, whatever its README says (docs/speech.md
says how that was found). A copy converted to ``.sph`` (ESPnet's download) or ``.wav`` is
read by the files' headers, which must say 16 kHz.

Splits (``split``, else the role's): ``train`` (948 utterances), ``test`` (130), and ESPnet's
``egs2/an4/asr1`` split of ``train``: ``train_dev``, the first 100 utterances in the order of
their ids written speaker first (``fash-an251-b``: ESPnet's utterance ids, in Kaldi's sorted
order), and ``train_nodev``, the other 848. ``--train`` reads ``train_nodev``, ``--valid``
``train_dev`` and ``eval`` ``test``.

``words`` picks utterances by their words: ``"all"`` (the default), ``"digits"`` (digit
strings: every word one of :data:`DIGIT_WORDS`, ZERO to NINE and OH) or ``"numbers"`` (every
word one of :data:`NUMBER_WORDS`: the digits, TEN to NINETEEN, the tens, HUNDRED, THOUSAND and
AND, as AN4's speakers read "FIFTY ONE FIFTY SIX"). The digits and numbers are the utterances
``builtin:asr-digits`` can write; in them OH is written ZERO, the one spelling of the digit 0
in attnkit's built-in speech. The other utterances are left out, not counted unusable, after
the split is drawn (so ``train_dev`` keeps ESPnet's speakers).

Transcripts are kept as AN4 writes them, upper-case words (``transcripts="normalize"``: lower
case, as the built-in speech), in :data:`AN4_ALPHABET` by default. Unusable utterances (a line
without its ``(id)``, an id whose audio is missing, a ``.raw`` file of an odd number of bytes,
an empty transcript or recording, a header of another sample rate) and recordings no line
transcribes are counted and named, up to ``max_unusable``
(:class:`~attnkit.data.corpora.utterances.SpeechCorpus`).
"""

from __future__ import annotations

import logging
import re
from pathlib import Path

from attnkit.checks import quoted
from attnkit.data.audio.features import SAMPLE_RATE
from attnkit.data.audio.files import MAX_SECONDS, RawPCM, guess_byte_order
from attnkit.data.corpora.format_registry import Format, register
from attnkit.data.corpora.speech_sets import SpeechSet
from attnkit.data.corpora.text_files import text_lines
from attnkit.data.corpora.unusable import MAX_UNUSABLE, listed_twice
from attnkit.data.corpora.utterances import SPEECH_ALPHABET, SpeechCorpus
from attnkit.errors import DataError

__all__ = ["AN4_ALPHABET", "AN4_SPLITS", "AN4_WORDS", "DIGIT_WORDS", "NUMBER_WORDS", "read_an4"]

log = logging.getLogger("attnkit")

AN4_ALPHABET = "ABCDEFGHIJKLMNOPQRSTUVWXYZ' "  # what AN4's transcripts are written in
# split -> (transcript file below etc/, recordings folder below wav/)
_FILES = {
    "train": ("an4_train.transcription", "an4_clstk"),
    "test": ("an4_test.transcription", "an4test_clstk"),
}
AN4_SPLITS = ("train", "test", "train_nodev", "train_dev")
ROLE_SPLITS: dict[str, str] = {"train": "train_nodev", "valid": "train_dev", "test": "test"}
DEV_UTTERANCES = 100  # ESPnet's egs2/an4 ndev_utt
AUDIO_SUFFIXES = (".raw", ".sph", ".wav")  # as CMU ships it, ESPnet's download, converted
BYTE_ORDERS = ("auto", "big", "little")
_LINE = re.compile(r"^(?P<words>.*?)\s*\((?P<id>[^()\s]+)\)\s*$")
_MARKS = frozenset({"<s>", "</s>", "<sil>"})
DIGIT_WORDS = frozenset("ZERO ONE TWO THREE FOUR FIVE SIX SEVEN EIGHT NINE OH".split())
NUMBER_WORDS = DIGIT_WORDS | frozenset(
    "TEN ELEVEN TWELVE THIRTEEN FOURTEEN FIFTEEN SIXTEEN SEVENTEEN EIGHTEEN NINETEEN "
    "TWENTY THIRTY FORTY FIFTY SIXTY SEVENTY EIGHTY NINETY HUNDRED THOUSAND AND".split()
)
# words= -> the words an utterance may hold (None: any)
AN4_WORDS: dict[str, frozenset[str] | None] = {
    "all": None,
    "digits": DIGIT_WORDS,
    "numbers": NUMBER_WORDS,
}


def _speaker_first(utt: str) -> str:
    """ESPnet's id of an AN4 utterance: ``an251-fash-b`` -> ``fash-an251-b``."""
    parts = utt.split("-")
    return "-".join([parts[1], parts[0], *parts[2:]]) if len(parts) >= 3 else utt


def _recordings(folder: Path) -> dict[str, Path]:
    """``utterance id -> audio file`` of every recording below ``folder`` (``.raw`` before
    ``.sph`` before ``.wav`` when one id has several)."""
    found: dict[str, Path] = {}
    for suffix in reversed(AUDIO_SUFFIXES):
        for path in sorted(folder.rglob("*" + suffix)):
            found[path.stem] = path
    return found


def read_an4(
    path: str | Path,
    *,
    normalize: bool = False,
    max_seconds: float | None = MAX_SECONDS,
    max_unusable: float = MAX_UNUSABLE,
    min_frames: int = 1,
    transcripts: str | None = None,
    alphabet: str | None = None,
    split: str | None = None,
    role: str = "train",
    byte_order: str = "auto",
    sample_rate: int = SAMPLE_RATE,
    references: bool = True,
    words: str = "all",
) -> SpeechSet:
    """The utterances of one split of an AN4 folder, in the order of its transcript file (see
    the module docstring): ``split`` (:data:`AN4_SPLITS`; None: ``train_nodev`` for the role
    ``train``, ``train_dev`` for ``valid``, ``test`` for ``test``), ``.raw`` files read at
    ``sample_rate`` in ``byte_order`` (``"auto"``: :func:`guess_byte_order` over the split's
    first 20 recordings, logged), headered ones checked to be at ``sample_rate``; only the
    utterances of ``words`` (:data:`AN4_WORDS`).

    Raises:
        ValueError: naming ``split``, ``byte_order`` or ``words`` when not one of theirs.
        DataError: naming the folder when it is not AN4's layout, a transcript line whose id is
            listed twice, or the first unusable utterances when more than ``max_unusable``.
    """
    root = Path(path)
    split = split or ROLE_SPLITS.get(role, role)
    if split not in AN4_SPLITS:
        raise ValueError(f"--split: expected one of {', '.join(AN4_SPLITS)} for an4, got {split!r}")
    if byte_order not in BYTE_ORDERS:
        raise ValueError(
            f"byte_order: expected one of {', '.join(BYTE_ORDERS)}, got {byte_order!r}"
        )
    if words not in AN4_WORDS:
        raise ValueError(f"--words: expected one of {', '.join(AN4_WORDS)} for an4, got {words!r}")
    name, folder_name = _FILES["test" if split == "test" else "train"]
    listing, folder = root / "etc" / name, root / "wav" / folder_name
    for needed in (listing, folder):
        if not needed.exists():
            raise DataError(
                f"{root}: not an AN4 folder (no {needed.relative_to(root)}); expected etc/ "
                "and wav/ as CMU's an4 tarball has them"
            )
    audio = _recordings(folder)
    raw = _raw_pcm(sorted(audio.values()), byte_order, sample_rate, folder)
    transcripts = transcripts or "keep"
    if alphabet is None:
        alphabet = AN4_ALPHABET if transcripts == "keep" else SPEECH_ALPHABET
    corpus = SpeechCorpus(
        f"{root} ({split})",
        max_unusable=max_unusable,
        max_seconds=max_seconds,
        min_frames=min_frames,
        transcripts=transcripts,
        alphabet=None if alphabet == "any" else alphabet,
        references=references,
        raw=raw,
    )
    lines = _transcript_lines(listing, corpus)
    for utt in sorted(set(audio) - {utt for _, utt, _ in lines}):
        corpus.drop(f"{audio[utt]}: no line of {listing} transcribes it", "no transcript")
    if split in ("train_dev", "train_nodev"):
        dev = set(sorted((_speaker_first(u) for _, u, _ in lines))[:DEV_UTTERANCES])
        wanted = split == "train_dev"
        lines = [line for line in lines if (_speaker_first(line[1]) in dev) == wanted]
    lines = _of_words(lines, AN4_WORDS[words])
    for where, utt, text in lines:
        if utt not in audio:
            corpus.drop(
                f"{where}: no recording {utt}.raw (nor .sph, .wav) below {folder}",
                "no audio",
            )
            continue
        corpus.add(where, audio[utt], text, origin=f"{utt} ({audio[utt]})", rate=sample_rate)
    return corpus.finish(normalize=normalize)


def _transcript_lines(listing: Path, corpus: SpeechCorpus) -> list[tuple[str, str, str]]:
    """``(where, utterance id, words)`` of each line of a transcript file, the sentence marks
    ``<s>``, ``</s>`` taken out; a line without its ``(id)`` is counted unusable."""
    lines: list[tuple[str, str, str]] = []
    first: dict[str, str] = {}
    for n, line in text_lines(listing):
        if not line.strip():
            continue
        where = f"{listing}:{n}"
        found = _LINE.match(line)
        if found is None:
            corpus.drop(f"{where}: expected 'WORDS (UTTERANCE-ID)', got {line[:80]!r}", "line")
            continue
        utt = found["id"]
        if utt in first:
            raise listed_twice(where, quoted(utt), first[utt])
        first[utt] = where
        words = " ".join(w for w in found["words"].split() if w.lower() not in _MARKS)
        lines.append((f"{where} ({utt})", utt, words))
    return lines


def _of_words(
    lines: list[tuple[str, str, str]], allowed: frozenset[str] | None
) -> list[tuple[str, str, str]]:
    """The ``lines`` whose words are all ``allowed`` (None: every line, unchanged), OH written
    ZERO in them."""
    if allowed is None:
        return lines
    return [
        (where, utt, " ".join("ZERO" if w == "OH" else w for w in words.split()))
        for where, utt, words in lines
        if words and set(words.split()) <= allowed
    ]


def _raw_pcm(paths: list[Path], byte_order: str, rate: int, root: Path) -> RawPCM:
    """How the ``.raw`` files among ``paths`` (of the recordings folder ``root``) are read: in
    ``byte_order``, or the one the samples of the first 20 say (logged)."""
    if byte_order != "auto":
        return RawPCM(rate, byte_order)
    raws = [p for p in paths if p.suffix.lower() == AUDIO_SUFFIXES[0]]
    if not raws:
        return RawPCM(rate, "big")
    order, big, little = guess_byte_order(raws)
    log.info(
        "%s: .raw files read as %s-endian 16-bit PCM (of the first %d, %d are smoother read "
        "big-endian, %d little-endian)",
        root,
        order,
        min(len(raws), 20),
        big,
        little,
    )
    return RawPCM(rate, order)


def _is_an4(path: Path) -> bool:
    return path.is_dir() and any((path / "etc" / name).is_file() for name, _ in _FILES.values())


register(
    Format(
        "an4",
        "asr",
        read_an4,
        _is_an4,
        "CMU's AN4 folder: etc/an4_{train,test}.transcription, wav/*/SPEAKER/*.raw "
        "(16 kHz 16-bit PCM); --split train_nodev, train_dev, train or test; "
        "--words all, digits or numbers",
        "etc/an4_train.transcription: <s> YES </s> (an251-fash-b)\n"
        "wav/an4_clstk/fash/an251-fash-b.raw",
    )
)
