"""Mini LibriSpeech split by speaker (``--format mini-librispeech``): each role reads its own
speakers and no speaker is in two splits, transcripts stay upper case, and a folder that is not
train-clean-5 is refused naming the speakers it lacks."""

import numpy as np
import pytest
import soundfile

from attnkit.cli import recipes
from attnkit.data import DataError
from attnkit.data.corpora import mini_librispeech_formats as mini
from attnkit.data.corpora.mini_librispeech_formats import read_mini_librispeech
from attnkit.data.corpora.reading import choose_format, read_corpus
from attnkit.data.corpora.speech_formats import read_librispeech

RATE = 16000
# speaker -> (sex, transcripts of its one chapter): the held-out speakers' ids, and two others
SPEAKERS = {
    "19": ("F", ["HELLO WORLD", "GOOD MORNING"]),
    "32": ("F", ["ONE TWO"]),
    "118": ("M", ["I'LL GO"]),
    "163": ("M", ["THE END"]),
    "226": ("F", ["CHAPTER ONE"]),
    "332": ("M", ["YES"]),
    "460": ("M", ["A BOOK", "NO"]),
    "1088": ("F", ["READ IT"]),
}


def voice(i: int, seconds: float = 0.4) -> np.ndarray:
    """``(N,)`` float32: utterance ``i``'s tones."""
    t = np.arange(round(RATE * seconds)) / RATE
    return (0.3 * np.sin(2 * np.pi * (140 + 30 * i) * t)).astype(np.float32)


def write_mini_librispeech(root, speakers=SPEAKERS):
    """A ``LibriSpeech`` folder in its layout: ``SPEAKERS.TXT`` and
    ``train-clean-5/SPEAKER/CHAPTER/`` with a ``.trans.txt`` and 16 kHz FLAC files."""
    split = root / "train-clean-5"
    rows, i = [], 0
    for speaker, (sex, texts) in speakers.items():
        chapter = split / speaker / "100"
        chapter.mkdir(parents=True)
        lines = []
        for n, text in enumerate(texts):
            utt = f"{speaker}-100-{n:04d}"
            soundfile.write(chapter / f"{utt}.flac", voice(i), RATE, format="FLAC")
            lines.append(f"{utt} {text}\n")
            i += 1
        (chapter / f"{speaker}-100.trans.txt").write_text("".join(lines))
        rows.append(f"{speaker:<5}| {sex} | train-clean-100 | 25.00 | Reader {speaker}\n")
    (root / "SPEAKERS.TXT").write_text(
        ";ID  |SEX| SUBSET           |MINUTES| NAME\n" + "".join(rows)
    )
    return root


def speakers_of(corpus) -> set[str]:
    return {origin.rsplit("/", 1)[1].split("-")[0] for origin in corpus.origins}


def test_each_role_reads_its_own_speakers_and_none_is_in_two(tmp_path):
    root = write_mini_librispeech(tmp_path / "LibriSpeech")
    train, valid, test = (
        read_corpus("asr", root, format="mini-librispeech", role=role)
        for role in ("train", "valid", "test")
    )
    assert speakers_of(test) == {"19", "32", "118", "163"} == set(mini.TEST_SPEAKERS)
    assert speakers_of(valid) == {"226", "332"} == set(mini.VALID_SPEAKERS)
    assert speakers_of(train) == {"460", "1088"}
    assert list(test.transcripts) == [
        "I'LL GO",
        "THE END",
        "HELLO WORLD",
        "GOOD MORNING",
        "ONE TWO",
    ]
    every = read_mini_librispeech(root, split="all")
    assert len(every) == len(train) + len(valid) + len(test) == 10
    # the split named wins over the role; train-clean-5 itself is read the same
    assert list(
        read_mini_librispeech(root / "train-clean-5", split="valid", role="test").transcripts
    ) == [
        "CHAPTER ONE",
        "YES",
    ]
    assert list(
        read_mini_librispeech(root, split="train", transcripts="normalize").transcripts
    ) == [
        "read it",  # speaker 1088's folder sorts before 460's
        "a book",
        "no",
    ]


def test_the_held_out_speakers_follow_the_documented_rule_on_speakers_txt(tmp_path):
    """Of each sex, by numeric id: the first two are test speakers, the third validation."""
    root = write_mini_librispeech(tmp_path / "LibriSpeech")
    by_sex: dict[str, list[str]] = {"F": [], "M": []}
    for line in (root / "SPEAKERS.TXT").read_text().splitlines()[1:]:
        speaker, sex = (field.strip() for field in line.split("|")[:2])
        by_sex[sex].append(speaker)
    ordered = {sex: sorted(ids, key=int) for sex, ids in by_sex.items()}
    assert set(mini.TEST_SPEAKERS) == {s for ids in ordered.values() for s in ids[:2]}
    assert set(mini.VALID_SPEAKERS) == {ids[2] for ids in ordered.values()}


def test_only_named_is_it_split_detected_the_folder_is_librispeech_whole(tmp_path):
    root = write_mini_librispeech(tmp_path / "LibriSpeech")
    assert choose_format("asr", root / "train-clean-5").name == "librispeech"
    assert len(read_corpus("asr", root / "train-clean-5")) == 10
    assert mini._is_mini_librispeech(root) and not mini._is_mini_librispeech(root / "SPEAKERS.TXT")
    # the librispeech reader's speaker filter on its own
    kept = read_librispeech(root, speakers={"19", "460"}, transcripts="keep")
    assert list(kept.transcripts) == ["HELLO WORLD", "GOOD MORNING", "A BOOK", "NO"]


def test_a_folder_without_the_held_out_speakers_is_refused_naming_them(tmp_path):
    others = {k: v for k, v in SPEAKERS.items() if k not in ("32", "332")}
    root = write_mini_librispeech(tmp_path / "LibriSpeech", others)
    with pytest.raises(
        DataError, match=r"not Mini LibriSpeech's train-clean-5 .*speakers 32, 332;"
    ):
        read_mini_librispeech(root)
    with pytest.raises(DataError, match="speaker folders found: none"):
        read_mini_librispeech(tmp_path / "nowhere")


def test_a_split_that_is_not_one_of_its_own_is_refused(tmp_path):
    root = write_mini_librispeech(tmp_path / "LibriSpeech")
    with pytest.raises(
        ValueError, match="--split: expected one of train, valid, test, all .* got 'dev'"
    ):
        read_mini_librispeech(root, split="dev")


def test_the_recipe_reads_this_format_and_asks_for_the_corpus():
    recipe = recipes.RECIPES["mini-librispeech"]
    assert recipe.task == "asr" and "--ctc-weight" in recipe.options
    at = recipe.options.index("--format")
    assert recipe.options[at + 1] == "mini-librispeech"
    with pytest.raises(
        ValueError,
        match=r"--recipe mini-librispeech: give the corpus: --train LibriSpeech .*docs/speech.md",
    ):
        recipes.check_corpus("mini-librispeech", None)
