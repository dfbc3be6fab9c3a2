"""Speech corpora as they come, read into the :class:`~attnkit.data.SpeechSet` of attnkit's own
manifest: formats of task ``"asr"``.

===============  ===============================================================
``kaldi``        a Kaldi / ESPnet data directory: ``wav.scp``, ``text``, optional
                 ``segments`` and ``utt2spk``
``librispeech``  a folder of ``*.trans.txt`` transcripts beside their FLAC files
``jsonl``        a JSON-lines manifest (NeMo's ``audio_filepath``, ``text``,
                 ``duration``, ``offset``; key names are options)
``commonvoice``  a Common Voice TSV (``path`` and ``sentence`` columns) beside ``clips/``
``hf``           a Hugging Face dataset on disk, ``hf:PATH[:SPLIT]``: ``audio`` and
                 ``text`` columns (:mod:`attnkit.data.corpora.hf_formats`)
``manifest``     attnkit's own ``audio_path<TAB>transcript`` lines
===============  ===============================================================

Detection tries them in this order, after ``an4`` (CMU's AN4 as distributed, headerless ``.raw``
audio: :mod:`attnkit.data.corpora.an4_formats`). Every reader streams its files a line at a time
(gzip, bzip2 and xz decompressed, a byte-order mark and CRLF taken) and gathers utterances
through :class:`~attnkit.data.corpora.utterances.SpeechCorpus`: each audio file's header is
checked, features are computed when a batch needs them, unusable utterances are dropped and
counted up to ``max_unusable``, and every message names the file and line or the utterance id.
The Kaldi reader holds ``wav.scp``, ``segments`` and ``utt2spk`` in memory while it reads (their
entries are joined to ``text``), about 100 bytes per entry; the others hold nothing per
utterance beyond what the set keeps.

Options every reader takes: ``normalize`` (features normalised per utterance), ``max_seconds``,
``max_unusable``, ``min_frames``, ``transcripts`` (``"keep"`` or ``"normalize"``; the default
is ``"normalize"`` for every format but ``manifest``), ``alphabet`` (the characters a
transcript may hold: None for the default, :data:`~attnkit.data.corpora.utterances.SPEECH_ALPHABET`
when normalising and any when keeping; :data:`ANY` for any) and ``confine`` (only audio files
inside the corpus's folder are read: :func:`attnkit.data.paths.inside`; without it, relative
paths start from that folder and absolute ones are read where they are). Options of some:
``columns`` (``jsonl``, ``commonvoice``: the keys or columns read, ``"audio=...,text=..."``)
and ``audio_folder`` (``kaldi``: where relative ``wav.scp`` paths start; ``commonvoice``: the
clips).
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
from collections.abc import Collection, Iterable, Iterator
from pathlib import Path

from attnkit.checks import quoted
from attnkit.data.audio.files import MAX_SECONDS
from attnkit.data.corpora import hf_formats as hf
from attnkit.data.corpora.format_registry import Format, register
from attnkit.data.corpora.speech_sets import SpeechSet
from attnkit.data.corpora.text_files import json_value, text_lines
from attnkit.data.corpora.unusable import FIRST_FEW, MAX_UNUSABLE, listed_twice
from attnkit.data.corpora.utterances import SPEECH_ALPHABET, SpeechCorpus, read_manifest
from attnkit.data.paths import inside
from attnkit.errors import DataError

__all__ = [
    "ANY",
    "SPEECH_FORMATS",
    "read_commonvoice",
    "read_hf_speech",
    "read_jsonl",
    "read_kaldi",
    "read_librispeech",
]

log = logging.getLogger("attnkit")

ANY = "any"  # as ``alphabet``: a transcript may hold any character
TASK = "asr"
JSONL_KEYS = {
    "audio": "audio_filepath",
    "text": "text",
    "offset": "offset",
    "duration": "duration",
}  # NeMo's keys, by field
PIPE_HELP = (
    "attnkit runs no command named in a data file; convert the recordings once, e.g. "
    '`mkdir -p wav && while read -r id cmd; do sh -c "${cmd%|}" > wav/$id.wav; '
    "done < wav.scp`, then list `id wav/id.wav` in wav.scp"
)


def _corpus(
    source,
    transcripts: str | None,
    alphabet: str | None,
    max_seconds: float | None,
    max_unusable: float,
    min_frames: int,
    references: bool = True,
) -> SpeechCorpus:
    """The :class:`SpeechCorpus` of a reader, given the reader's options of the same names in
    this order (every reader here takes them; transcripts: ``"normalize"`` unless given)."""
    transcripts = transcripts or "normalize"
    if alphabet is None:
        alphabet = SPEECH_ALPHABET if transcripts == "normalize" else ANY
    return SpeechCorpus(
        source,
        max_unusable=max_unusable,
        max_seconds=max_seconds,
        min_frames=min_frames,
        transcripts=transcripts,
        alphabet=None if alphabet == ANY else alphabet,
        references=references,
    )


def _audio_inside(
    corpus: SpeechCorpus, folder: Path, name: str, where: str, confine: bool
) -> Path | None:
    """The audio file ``name`` of the utterance at ``where``, found inside ``folder`` as
    :func:`attnkit.data.paths.inside` finds it; None when it cannot be, the utterance counted
    unusable by ``corpus`` (kind ``"audio"``) with the reason."""
    try:
        return inside(folder, name, where, confine=confine)
    except DataError as exc:
        corpus.drop(str(exc), "audio")
        return None


def _fields(path: Path, lines: Iterator[tuple[int, str]]) -> Iterator[tuple[str, str, str]]:
    """``(where, key, rest)`` of each non-blank line ``key rest`` of a Kaldi-style file (the
    key, then white space, then the rest, which may be empty)."""
    for n, line in lines:
        parts = line.strip().split(maxsplit=1)
        if parts:
            yield f"{path}:{n}", parts[0], parts[1] if len(parts) > 1 else ""


def _table(path: Path) -> dict[str, tuple[str, str]]:
    """``key -> (where, rest)`` of a Kaldi-style file (``wav.scp``, ``segments``,
    ``utt2spk``).

    Raises:
        DataError: naming the file and both lines, for a key listed twice.
    """
    table: dict[str, tuple[str, str]] = {}
    for where, key, rest in _fields(path, text_lines(path)):
        if key in table:
            raise listed_twice(where, quoted(key), table[key][0].rsplit(":", 1)[1])
        table[key] = (where, rest)
    return table


def _kaldi_root(folder: Path) -> Path:
    """The folder a Kaldi data directory's relative paths start from: the recipe's folder
    (``egs/NAME/s5``) for ``.../data/NAME``, where Kaldi and ESPnet run their scripts;
    otherwise the data directory itself."""
    return folder.parent.parent if folder.parent.name == "data" else folder


def _recording(where: str, rxfile: str, root: Path, confine: bool) -> Path:
    """The audio file of a ``wav.scp`` entry.

    Raises:
        DataError: naming ``where``: a shell command (``... |``), a Kaldi archive offset
            (``file.ark:123``), a file outside ``root`` with ``confine``.
    """
    if rxfile.endswith("|"):
        raise DataError(
            f"{where}: the recording is a shell command ({rxfile[:120]!r}); {PIPE_HELP}"
        )
    if rxfile.startswith("-") or (":" in rxfile and rxfile.rsplit(":", 1)[1].isdigit()):
        raise DataError(
            f"{where}: {rxfile[:120]!r} is a Kaldi archive or stream, not an "
            "audio file; write the recordings out as files (Kaldi's wav-copy "
            "ark:... ark,scp:...) and list them"
        )
    return inside(root, rxfile, where, confine=confine)


def read_kaldi(
    path: str | Path,
    *,
    normalize: bool = False,
    max_seconds: float | None = MAX_SECONDS,
    max_unusable: float = MAX_UNUSABLE,
    min_frames: int = 1,
    transcripts: str | None = None,
    alphabet: str | None = None,
    confine: bool = False,
    audio_folder: str | Path | None = None,
    references: bool = True,
) -> SpeechSet:
    """The utterances of a Kaldi or ESPnet data directory, in the order of its ``text``
    (without ``references``, a directory without ``text`` is read too, to decode it: its
    utterances are those of ``segments``, or else of ``wav.scp``, in order, each with an
    empty transcript).

    ``text``: ``utt-id transcript`` lines. ``wav.scp``: ``recording-id audio-file`` lines
    (without ``segments``, the recording ids are the utterance ids). ``segments`` (optional):
    ``utt-id recording-id start end`` in seconds (``end`` -1: the recording's end), each
    utterance cut out of its recording (a segment ending up to 0.5 s past its recording is
    cut at the end, as Kaldi's ``extract-segments`` does). ``utt2spk`` (optional): the
    speaker, named in each origin. Relative audio paths start from ``audio_folder`` (default:
    the recipe folder for ``.../data/NAME``, else the directory itself); absolute paths are
    read where they are (with ``confine``, only inside that folder).

    An utterance of ``text`` with no ``segments`` or ``wav.scp`` entry is unusable (counted,
    see :class:`SpeechCorpus`); entries of ``wav.scp`` and ``segments`` that no transcript
    uses are counted in a warning. A ``wav.scp`` entry that is a shell command (``sox ... |``)
    or a Kaldi archive offset is refused: attnkit runs no command from a data file (the error
    says how to convert).

    Raises:
        DataError: naming the file and line or the utterance id.
    """
    folder = Path(path)
    has_text = (folder / "text").is_file()
    for name in ("wav.scp", "text") if references else ("wav.scp",):
        if not (folder / name).is_file():
            raise DataError(f"{folder}: not a Kaldi data directory (no {name})")
    root = Path(audio_folder) if audio_folder is not None else _kaldi_root(folder)
    corpus = _corpus(
        folder, transcripts, alphabet, max_seconds, max_unusable, min_frames, references
    )
    recordings = _table(folder / "wav.scp")
    segments = _table(folder / "segments") if (folder / "segments").is_file() else None
    speakers = _table(folder / "utt2spk") if (folder / "utt2spk").is_file() else {}
    used: set[str] = set()
    utterances: Iterable[tuple[str, str, str]]
    if has_text:
        utterances = _fields(folder / "text", text_lines(folder / "text"))
    else:  # decoding only: every utterance, without a transcript
        utterances = [(where, utt, "") for utt, (where, _) in (segments or recordings).items()]
    for where, utt, transcript in utterances:
        where = f"{where} ({utt})"
        start, end = 0.0, None
        if segments is not None:
            if utt not in segments:
                corpus.drop(f"{where}: no entry in {folder / 'segments'}", "no audio entry")
                continue
            seg_where, rest = segments.pop(utt)
            try:
                rec, start, end = _segment(seg_where, rest)
            except DataError as exc:
                corpus.drop(f"{where}: {exc}", "segment")
                continue
        else:
            rec = utt
        if rec not in recordings:
            corpus.drop(
                f"{where}: recording {rec!r} has no entry in {folder / 'wav.scp'}", "no audio entry"
            )
            continue
        rec_where, rxfile = recordings[rec]
        used.add(rec)
        try:
            audio = _recording(rec_where, rxfile, root, confine)
        except DataError as exc:
            if rxfile.endswith("|"):
                raise
            corpus.drop(f"{where}: {exc}", "audio")
            continue
        speaker = speakers.get(utt, (None, None))[1]
        origin = (
            f"{utt} ({audio}"
            + (
                f" {start:g}-{'end' if end is None else f'{end:g}'} s"
                if segments is not None
                else ""
            )
            + (f", speaker {speaker})" if speaker else ")")
        )
        corpus.add(where, audio, transcript, start=start, end=end, origin=origin)
    unused = [r for r in recordings if r not in used] if has_text else []
    if segments and has_text:
        _unused(folder / "segments", "segments entries", segments)
    _unused(
        folder / "wav.scp",
        "recordings",
        {r: recordings[r] for r in unused[:FIRST_FEW]},
        len(unused),
    )
    return corpus.finish(normalize=normalize)


def _segment(where: str, rest: str) -> tuple[str, float, float | None]:
    """``(recording id, start, end or None)`` of the rest of a ``segments`` line."""
    parts = rest.split()
    try:
        if len(parts) != 3:
            raise ValueError
        start, end = float(parts[1]), float(parts[2])
    except ValueError:
        raise DataError(
            f"{where}: expected 'utt-id recording-id start end' (seconds), got "
            f"{rest[:120]!r} after the id"
        ) from None
    return parts[0], start, None if end == -1 else end


def _unused(path: Path, what: str, entries: dict, count: int | None = None) -> None:
    """Warn that ``count`` (default: all ``entries``) of ``path`` have no transcript."""
    count = len(entries) if count is None else count
    if count:
        first = ", ".join(list(entries)[:FIRST_FEW])
        log.warning(
            "%s: %d %s have no transcript in text and are not used (the first: %s)",
            path,
            count,
            what,
            first,
        )


def read_librispeech(
    path: str | Path,
    *,
    normalize: bool = False,
    max_seconds: float | None = MAX_SECONDS,
    max_unusable: float = MAX_UNUSABLE,
    min_frames: int = 1,
    transcripts: str | None = None,
    alphabet: str | None = None,
    confine: bool = False,
    suffix: str = ".flac",
    speakers: Collection[str] | None = None,
) -> SpeechSet:
    """The utterances of a LibriSpeech folder (a split such as ``train-clean-100``, or any
    folder above its ``speaker/chapter/`` folders): each ``*.trans.txt`` (in sorted order)
    holds ``UTTERANCE-ID TRANSCRIPT`` lines, the audio of each is ``UTTERANCE-ID`` +
    ``suffix`` beside it. Transcripts (upper case) are normalised by default. ``speakers``:
    only theirs (the ids a transcript file's name starts with, ``SPEAKER-CHAPTER.trans.txt``).

    Raises:
        DataError: naming the folder when it holds no ``*.trans.txt``, or the transcript file
            and line of unusable utterances (see :class:`SpeechCorpus`).
    """
    folder = Path(path)
    if not folder.is_dir():
        raise DataError(f"{folder}: not a LibriSpeech folder (not a folder)")
    corpus = _corpus(folder, transcripts, alphabet, max_seconds, max_unusable, min_frames)
    files = sorted(folder.rglob("*.trans.txt"))
    if files and speakers is not None:
        files = [f for f in files if f.name.split("-", 1)[0] in speakers]
    if not files:
        raise DataError(f"{folder}: not a LibriSpeech folder (no *.trans.txt below it)")
    first: dict[str, str] = {}  # utterance id -> where it was listed
    for trans in files:
        for where, utt, transcript in _fields(trans, text_lines(trans)):
            if utt in first:
                raise listed_twice(where, quoted(utt), first[utt])
            first[utt] = where
            where = f"{where} ({utt})"
            name = str(trans.parent.relative_to(folder) / (utt + suffix))
            audio = _audio_inside(corpus, folder, name, where, confine)
            if audio is not None:
                corpus.add(where, audio, transcript)
    return corpus.finish(normalize=normalize)


def read_commonvoice(
    path: str | Path,
    *,
    normalize: bool = False,
    max_seconds: float | None = MAX_SECONDS,
    max_unusable: float = MAX_UNUSABLE,
    min_frames: int = 1,
    transcripts: str | None = None,
    alphabet: str | None = None,
    confine: bool = False,
    audio_folder: str | Path | None = None,
    columns: str | dict | None = None,
) -> SpeechSet:
    """The utterances of a Common Voice TSV (``train.tsv``, ``dev.tsv``, ``test.tsv``,
    ``validated.tsv``): a header line naming the columns, of which ``path`` (a clip's file
    name) and ``sentence`` are read (``columns``: ``{"audio": ..., "text": ...}`` or
    ``"audio=...,text=..."`` for others); clips are in ``audio_folder`` (default: the
    ``clips`` folder beside the TSV), MP3 as Common Voice ships them. Fields are split
    at tabs, quotes taken as written (Common Voice quotes nothing). Sentences are normalised
    by default.

    Raises:
        DataError: naming the TSV when its header lacks a column, or its lines of unusable
            utterances (see :class:`SpeechCorpus`).
    """
    path = Path(path)
    names = _columns(columns, {"audio": "path", "text": "sentence"}, "commonvoice")
    audio_column, text_column = names["audio"], names["text"]
    clips = Path(audio_folder) if audio_folder is not None else path.parent / "clips"
    corpus = _corpus(path, transcripts, alphabet, max_seconds, max_unusable, min_frames)
    lines = text_lines(path)
    header, n = None, 1
    # n names the line in the error below
    for n, line in lines:  # noqa: B007
        if line.strip():
            header = line.split("\t")
            break
    missing = [c for c in (audio_column, text_column) if c not in (header or [])]
    if missing:
        raise DataError(
            f"{path}:{n}: expected a header line with the columns "
            f"{audio_column!r} and {text_column!r}, got {header}"
        )
    assert header is not None  # else both columns are missing
    audio_at, text_at = header.index(audio_column), header.index(text_column)
    for n, line in lines:
        if not line.strip():
            continue
        where, fields = f"{path}:{n}", line.split("\t")
        if len(fields) != len(header):
            corpus.drop(
                f"{where}: expected {len(header)} tab-separated fields as the header "
                f"names, got {len(fields)}",
                "line",
            )
            continue
        audio = _audio_inside(corpus, clips, fields[audio_at], where, confine)
        if audio is not None:
            corpus.add(where, audio, fields[text_at])
    return corpus.finish(normalize=normalize)


def read_jsonl(
    path: str | Path,
    *,
    normalize: bool = False,
    max_seconds: float | None = MAX_SECONDS,
    max_unusable: float = MAX_UNUSABLE,
    min_frames: int = 1,
    transcripts: str | None = None,
    alphabet: str | None = None,
    confine: bool = False,
    columns: str | dict | None = None,
    references: bool = True,
) -> SpeechSet:
    """The utterances of a JSON-lines manifest (NeMo's layout): one JSON object per line with
    the audio file under ``audio_filepath`` (relative to the manifest's folder) and the
    transcript under ``text`` (without ``references``, to decode the audio, it may be
    missing); with an ``offset`` the utterance starts that many seconds into
    the file and lasts ``duration`` seconds (a segment), otherwise it is the whole file and its
    duration is read from the header. ``columns`` renames the keys (``{"audio": "path",
    "text": "sentence"}`` or ``"audio=path,text=sentence"``; also ``offset``, ``duration``).
    Transcripts are normalised by default.

    Raises:
        DataError: naming the manifest and line of unusable utterances (not a JSON object,
            a key missing, see :class:`SpeechCorpus`).
    """
    path = Path(path)
    keys = _columns(columns, JSONL_KEYS, "jsonl")
    audio_key, text_key = keys["audio"], keys["text"]
    offset_key, duration_key = keys["offset"], keys["duration"]
    corpus = _corpus(path, transcripts, alphabet, max_seconds, max_unusable, min_frames, references)
    for n, line in text_lines(path):
        if not line.strip():
            continue
        where = f"{path}:{n}"
        try:
            entry = json_value(line, where)
        except json.JSONDecodeError as exc:
            corpus.drop(f"{where}: not JSON ({exc.msg} at column {exc.colno})", "line")
            continue
        except DataError as exc:
            corpus.drop(str(exc), "line")
            continue
        if not references and isinstance(entry, dict):
            entry.setdefault(text_key, "")
        problem = _entry_problem(entry, audio_key, text_key)
        if problem:
            corpus.drop(f"{where}: {problem}", "line")
            continue
        start, end = 0.0, None
        if entry.get(offset_key) is not None:
            try:
                start = float(entry[offset_key])
                end = start + float(entry[duration_key])
            except (KeyError, TypeError, ValueError, OverflowError):
                start = end = math.nan
            if not (math.isfinite(start) and math.isfinite(end) and start >= 0):
                corpus.drop(
                    f"{where}: expected finite numbers under {offset_key!r} and "
                    f"{duration_key!r} (seconds) with {offset_key} >= 0, got "
                    f"{quoted(entry.get(offset_key))} and "
                    f"{quoted(entry.get(duration_key))}",
                    "line",
                )
                continue
        audio = _audio_inside(corpus, path.parent, entry[audio_key], where, confine)
        if audio is not None:
            corpus.add(where, audio, entry[text_key], start=start, end=end)
    return corpus.finish(normalize=normalize)


def read_hf_speech(
    path: str | Path,
    *,
    normalize: bool = False,
    max_seconds: float | None = MAX_SECONDS,
    max_unusable: float = MAX_UNUSABLE,
    min_frames: int = 1,
    transcripts: str | None = None,
    alphabet: str | None = None,
    confine: bool = False,
    columns: str | dict | None = None,
    split: str | None = None,
    role: str = "train",
    references: bool = True,
) -> SpeechSet:
    """The utterances of a Hugging Face dataset on disk, ``hf:PATH[:SPLIT]`` (its split as
    :func:`attnkit.data.corpora.hf_formats.open_dataset` chooses it): each row's ``audio`` (a
    ``datasets.Audio`` value: the file's bytes, written once into a temporary folder of this
    process that is removed at exit, or a path relative to the dataset's folder) and its
    ``text`` (without ``references`` it may be missing); ``columns`` renames them
    (``"audio=speech,text=sentence"``). Utterances are named ``hf:PATH:SPLIT:ROW``;
    transcripts are normalised by default.

    Raises:
        DataError: naming the dataset: missing, no such split or column (see
            :func:`attnkit.data.corpora.hf_formats.open_dataset`); and the rows of unusable
            utterances (see :class:`SpeechCorpus`).
    """
    dataset, source = hf.open_dataset(path, role, split)
    names = dataset.column_names
    # read only to be decoded (without references), a dataset needs no transcript column
    listed = names if references or "text" in names else [*names, "text"]
    chosen = hf.dataset_columns(columns, TASK, listed, source)
    folder = hf.parse_path(path)[0]
    store = Path(hf.cache_dir()) / hashlib.sha1(source.encode()).hexdigest()[:16]
    store.mkdir(exist_ok=True)
    corpus = _corpus(
        source, transcripts, alphabet, max_seconds, max_unusable, min_frames, references
    )
    read = [c for c in dict.fromkeys(chosen.values()) if c in names]
    for row, values in hf.dataset_rows(dataset, read):
        where = f"{source}:{row}"
        text = values.get(chosen["text"], "")
        if not isinstance(text, str):
            corpus.drop(
                f"{where}: expected a transcript under {chosen['text']!r}, got "
                f"{type(text).__name__}",
                "line",
            )
            continue
        try:
            audio = _dataset_audio(values[chosen["audio"]], where, row, folder, store, confine)
        except DataError as exc:
            corpus.drop(str(exc), "audio")
            continue
        corpus.add(where, audio, text, origin=where)
    return corpus.finish(normalize=normalize)


def _dataset_audio(value, where: str, row: int, folder: Path, store: Path, confine: bool) -> Path:
    """The file of a dataset's audio value: its bytes written into ``store`` (named by the
    row, with the suffix of the file they came from), or its path inside ``folder``."""
    if isinstance(value, dict) and value.get("bytes"):
        file = store / f"{row}{Path(value.get('path') or '').suffix.lower()}"
        file.write_bytes(value["bytes"])
        return file
    name = value.get("path") if isinstance(value, dict) else value
    if isinstance(name, str) and name:
        return inside(folder, name, where, confine=confine)
    raise DataError(f"{where}: no audio (expected a datasets.Audio value: bytes or a path)")


def _columns(given: str | dict | None, defaults: dict[str, str], fmt: str) -> dict[str, str]:
    """``defaults`` (field -> key or column) with the names ``given`` as a dict or as
    ``"field=name,..."`` (``--columns``).

    Raises:
        ValueError: naming ``--columns``: not ``field=name`` pairs, or a field the format
            does not have.
    """
    if given is None:
        return dict(defaults)
    if isinstance(given, str):
        pairs = [p.partition("=") for p in given.split(",") if p.strip()]
        if any(not sep or not k.strip() or not v.strip() for k, sep, v in pairs):
            raise ValueError(
                f"--columns: expected FIELD=NAME,... (e.g. audio=path,text=sentence), got {given!r}"
            )
        given = {k.strip(): v.strip() for k, _, v in pairs}
    unknown = sorted(set(given) - set(defaults))
    if unknown:
        raise ValueError(
            f"--columns: the {fmt} format's fields are {', '.join(defaults)}, "
            f"got {', '.join(unknown)}"
        )
    return {**defaults, **given}


def _entry_problem(entry, audio_key: str, text_key: str) -> str | None:
    """What is wrong with one JSON-lines entry, or None."""
    if not isinstance(entry, dict):
        return f"expected a JSON object, got {type(entry).__name__}"
    for key in (audio_key, text_key):
        if key not in entry:
            return f"no {key!r} key (keys: {', '.join(map(str, entry))})"
        if not isinstance(entry[key], str):
            return f"expected a string under {key!r}, got {type(entry[key]).__name__}"
    if "\x00" in entry[audio_key]:  # no file's name holds one
        return f"a NUL character in {audio_key!r}"
    return None


def _first_line(path: Path) -> str | None:
    """The first non-blank line of a text file, or None (not a file, unreadable, empty)."""
    if not path.is_file():
        return None
    try:
        for _, line in text_lines(path):
            if line.strip():
                return line
    except DataError:
        return None
    return None


def _is_kaldi(path: Path) -> bool:
    # without text too: a directory to decode (read_kaldi says what training needs)
    return path.is_dir() and (path / "wav.scp").is_file()


def _is_librispeech(path: Path) -> bool:
    return path.is_dir() and any(
        next(path.glob("*/" * depth + "*.trans.txt"), None) for depth in range(4)
    )


def _is_jsonl(path: Path) -> bool:
    line = _first_line(path)
    return line is not None and line.lstrip().startswith("{")


def _is_commonvoice(path: Path) -> bool:
    line = _first_line(path)
    return line is not None and {"path", "sentence"} <= set(line.split("\t"))


def _is_manifest(path: Path) -> bool:
    """A file whose first line is ``audio<TAB>transcript``; or a file without a line, or no
    file at all, whose reader then says what is wrong (no utterance, no such file)."""
    line = _first_line(path)
    return line.count("\t") == 1 if line is not None else not path.is_dir()


SPEECH_FORMATS = (
    Format(
        "hf",
        TASK,
        read_hf_speech,
        hf.is_hf,
        hf.SUMMARY,
        "hf:my-speech:train  (columns audio: a datasets.Audio, text)",
    ),
    Format(
        "kaldi",
        TASK,
        read_kaldi,
        _is_kaldi,
        "a Kaldi/ESPnet data directory: wav.scp, text, optional segments and utt2spk",
        "text: utt1 HELLO WORLD\nwav.scp: utt1 wav/utt1.flac",
    ),
    Format(
        "librispeech",
        TASK,
        read_librispeech,
        _is_librispeech,
        "a LibriSpeech folder: SPEAKER/CHAPTER/*.trans.txt beside the FLAC files",
        "19/198/19-198.trans.txt: 19-198-0001 HELLO WORLD\n19/198/19-198-0001.flac",
    ),
    Format(
        "jsonl",
        TASK,
        read_jsonl,
        _is_jsonl,
        "a JSON-lines manifest (NeMo): audio_filepath, text, duration, offset",
        '{"audio_filepath": "a.wav", "text": "hello world", "duration": 1.2}\n'
        '{"audio_filepath": "b.flac", "text": "good morning", "duration": 0.9}',
    ),
    Format(
        "commonvoice",
        TASK,
        read_commonvoice,
        _is_commonvoice,
        "a Common Voice TSV with path and sentence columns, clips/ beside it",
        "client_id\tpath\tsentence\n4f2e\tcommon_voice_en_1.mp3\tHello world.",
    ),
    Format(
        "manifest",
        TASK,
        read_manifest,
        _is_manifest,
        "attnkit's manifest: audio_path<TAB>transcript lines",
        "a.wav\thello world\nclips/b.flac\tgood morning",
    ),
)
for _fmt in SPEECH_FORMATS:
    register(_fmt)
