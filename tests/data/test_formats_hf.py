"""Hugging Face datasets on disk (hf:PATH[:SPLIT]): saved with save_to_disk or as Parquet
files, made by the tests; the same examples as attnkit's own files for every task, training
and eval through the command line, splits, columns and what is unusable named."""

import io
import json
import logging
import shutil

import pytest
import torch
from PIL import Image

from attnkit.cli.main import main
from attnkit.data import DataError, generate_lines, generate_scenes, read_tsv
from attnkit.data.corpora.hf_formats import parse_path
from attnkit.data.corpora.reading import choose_format, read_corpus
from tests.cli.conftest import IMAGE_TINY
from tests.cli.test_ocr import TINY as OCR_TINY

datasets = pytest.importorskip(
    "datasets", reason="the datasets package is not installed (pip install -e '.[hf]')"
)

PAIRS = [
    ("Guten Morgen.", "Good morning."),
    ("Wie geht's?", "How are you?"),
    ("Ein Café, bitte.", "A coffee, please."),
    ("Danke!", "Thanks!"),
]
SIZE = 32


def _png(image: Image.Image) -> dict:
    out = io.BytesIO()
    image.save(out, format="PNG")
    return {"bytes": out.getvalue(), "path": None}


def _saved(root, name: str, splits: dict[str, dict], features=None):
    """A DatasetDict of ``splits`` (column -> values) saved with save_to_disk."""
    path = root / name
    datasets.DatasetDict(
        {
            split: datasets.Dataset.from_dict(columns, features=features)
            for split, columns in splits.items()
        }
    ).save_to_disk(str(path))
    return path


def test_translation_pairs_from_save_to_disk_and_parquet(tmp_path, caplog):
    columns = {"source": [s for s, _ in PAIRS], "target": [t for _, t in PAIRS]}
    saved = _saved(tmp_path, "pairs", {"train": columns, "validation": columns, "test": columns})
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS), encoding="utf-8")
    with caplog.at_level(logging.INFO, logger="attnkit"):
        found = read_corpus("translate", f"hf:{saved}:train")
    assert f"hf:{saved}:train: read as hf" in caplog.text
    assert found == read_tsv(tsv) and found.origin(2) == f"hf:{saved}:train:2"
    assert read_corpus("translate", f"hf:{saved}", role="valid") == PAIRS  # validation
    parquet = tmp_path / "parquet" / "data"
    parquet.mkdir(parents=True)
    datasets.Dataset.from_dict(columns).to_parquet(str(parquet / "train-00000-of-00001.parquet"))
    datasets.Dataset.from_dict({k: v[:2] for k, v in columns.items()}).to_parquet(
        str(parquet / "test-00000-of-00001.parquet")
    )
    assert read_corpus("translate", f"hf:{parquet.parent}") == PAIRS  # the role's: train
    assert list(read_corpus("translate", f"hf:{parquet.parent}:test")) == PAIRS[:2]
    wmt = _saved(
        tmp_path, "wmt", {"train": {"translation": [{"de": s, "en": t} for s, t in PAIRS]}}
    )
    assert read_corpus("translate", f"hf:{wmt}", src_lang="de", tgt_lang="en") == PAIRS
    with pytest.raises(
        DataError,
        match=r"a translation column \('translation'\); name its "
        r"keys with --src-lang and --tgt-lang",
    ):
        read_corpus("translate", f"hf:{wmt}")


def test_splits_columns_and_unusable_rows_are_named(tmp_path):
    saved = _saved(
        tmp_path,
        "pairs",
        {
            "train": {"de": ["eins", "", "drei"], "en": ["one", "two", "three"]},
            "dev": {"de": ["vier"], "en": ["four"]},
        },
    )
    with pytest.raises(
        DataError,
        match=r"pairs: no split 'test'; its splits: train, dev "
        r"\(name one: hf:.*pairs:SPLIT\)",
    ):
        read_corpus("translate", f"hf:{saved}:test")
    with pytest.raises(
        DataError,
        match=r"no column 'source' \(its columns: de, en\); name "
        r"them with --columns source=COLUMN,target=COLUMN",
    ):
        read_corpus("translate", f"hf:{saved}:train")
    with pytest.raises(
        DataError,
        match=rf"hf:{saved}:train: 1 of 3 pairs are unusable "
        rf"\(1 empty source\).*hf:{saved}:train:1: empty "
        r"source",
    ):
        read_corpus("translate", f"hf:{saved}:train", columns="source=de,target=en")
    found = read_corpus(
        "translate", f"hf:{saved}", split="train", max_unusable=0.5, columns="source=de,target=en"
    )
    assert list(found) == [("eins", "one"), ("drei", "three")]
    assert list(
        read_corpus("translate", f"hf:{saved}", role="valid", columns="source=de,target=en")
    ) == [("vier", "four")]
    with pytest.raises(
        ValueError,
        match=r"--columns: expected KEY=COLUMN,... with keys among "
        r"source, target, got 'source'",
    ):
        read_corpus("translate", f"hf:{saved}:train", columns="source")
    with pytest.raises(DataError, match=r"nowhere: not a folder"):
        read_corpus("translate", f"hf:{tmp_path / 'nowhere'}")
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(DataError, match=r"neither a dataset saved with save_to_disk"):
        read_corpus("translate", f"hf:{empty}")
    assert parse_path(f"hf:{saved}:dev") == (saved, "dev")
    assert parse_path(f"hf:{saved}") == (saved, None)


def test_speech_audio_as_paths_in_parquet_and_its_unusable_rows(tmp_path):
    import soundfile

    from tests.data.test_formats_speech import tone

    folder = tmp_path / "speech"
    (folder / "clips").mkdir(parents=True)
    for i in range(3):
        soundfile.write(folder / "clips" / f"{i}.wav", tone(i, 16000)[:, 0], 16000)
    (folder / "clips" / "bad.wav").write_bytes(b"RIFF not a wav")
    audio = [{"bytes": None, "path": f"clips/{i}.wav"} for i in range(3)] + [
        {"bytes": None, "path": "clips/bad.wav"},
        {"bytes": None, "path": "../outside.wav"},
    ]
    texts = ["one", "two", "three", "four", "five"]
    datasets.Dataset.from_dict({"audio": audio, "text": texts}).to_parquet(
        str(folder / "train.parquet")
    )
    path = f"hf:{folder}"
    with pytest.raises(DataError, match=rf"hf:{folder}:train: 2 of 5 utterances are unusable"):
        read_corpus("asr", path)
    found = read_corpus("asr", path, max_unusable=0.5)
    assert list(found.transcripts) == texts[:3]
    assert list(found.origins) == [f"hf:{folder}:train:{i}" for i in range(3)]
    with pytest.raises(DataError, match=r"no column 'speech' \(its columns: audio, text\)"):
        read_corpus("asr", path, columns="audio=speech")
    untranscribed = tmp_path / "untranscribed"
    untranscribed.mkdir()
    shutil.copytree(folder / "clips", untranscribed / "clips")
    datasets.Dataset.from_dict({"audio": audio[:3]}).to_parquet(str(untranscribed / "test.parquet"))
    with pytest.raises(DataError, match=r"no column 'text' \(its columns: audio\)"):
        read_corpus("asr", f"hf:{untranscribed}")
    decoded = read_corpus("asr", f"hf:{untranscribed}", references=False)
    assert len(decoded) == 3 and list(decoded.transcripts) == ["", "", ""]


def _lines(root):
    """Five generated lines as a dataset (images in several modes, as PNG bytes) and as a
    labels.tsv folder of the same PNGs."""
    lines = generate_lines(5, seed=2, min_chars=4, max_chars=8)
    native = root / "native"
    native.mkdir()
    images, rows = [], []
    for i, ((image, text), mode) in enumerate(zip(lines, ["L", "RGB", "RGBA", "P", "L"])):
        picture = Image.fromarray(image.numpy(), "L").convert(mode)
        images.append(_png(picture))
        picture.save(native / f"{i}.png")
        rows.append(f"{i}.png\t{text}\n")
    (native / "labels.tsv").write_text("".join(rows), encoding="utf-8")
    features = datasets.Features({"image": datasets.Image(), "text": datasets.Value("string")})
    texts = [text for _, text in lines]
    saved = _saved(
        root,
        "lines",
        {"train": {"image": images, "text": texts}, "test": {"image": images, "text": texts}},
        features,
    )
    return saved, native


def test_ocr_lines_caption_and_vqa_give_the_native_examples(tmp_path):
    saved, native = _lines(tmp_path)
    lines, own = read_corpus("ocr", f"hf:{saved}:train"), read_corpus("ocr", native)
    assert lines.texts == own.texts and lines.widths == own.widths
    assert all(torch.equal(a[0], b[0]) for a, b in zip(lines, own))
    assert lines.path(3) == f"hf:{saved}:train:3" and len(lines[1:3]) == 2
    scenes = generate_scenes(3, seed=4, size=SIZE, max_objects=4, captions=2)
    pictures = [Image.fromarray(s.image.permute(1, 2, 0).numpy()) for s in scenes]
    folder = tmp_path / "scenes"
    folder.mkdir()
    for i, picture in enumerate(pictures):
        picture.save(folder / f"{i}.png")
    (folder / "captions.tsv").write_text(
        "".join(f"{i}.png\t{c}\n" for i, s in enumerate(scenes) for c in s.captions[:2])
    )
    (folder / "questions.tsv").write_text(
        "".join(
            f"{i}.png\t{q.question}\t{q.answer}\n"
            for i, s in enumerate(scenes)
            for q in s.questions[:2]
        )
    )
    image = datasets.Features({"image": datasets.Image()})
    captioned = _saved(
        tmp_path,
        "captions",
        {
            "train": {
                "image": [_png(p) for p in pictures],
                "caption": [list(s.captions[:2]) for s in scenes],
            }
        },
        datasets.Features({**image, "caption": datasets.Sequence(datasets.Value("string"))}),
    )
    found, own = (
        read_corpus("caption", f"hf:{captioned}", size=SIZE),
        read_corpus("caption", folder, size=SIZE),
    )
    assert [c.captions for c in found] == [c.captions for c in own]
    assert all(torch.equal(a.image, b.image) for a, b in zip(found, own))
    rows = [(i, q) for i, s in enumerate(scenes) for q in s.questions[:2]]
    asked = _saved(
        tmp_path,
        "vqa",
        {
            "train": {
                "image": [_png(pictures[i]) for i, _ in rows],
                "question": [q.question for _, q in rows],
                "answers": [[{"answer": q.answer}] * 3 + [{"answer": "maybe"}] for _, q in rows],
            }
        },
    )
    (images, questions), (own_images, own_questions) = (
        read_corpus("vqa", f"hf:{asked}", size=SIZE, columns="answer=answers"),
        read_corpus("vqa", folder, size=SIZE),
    )
    assert len(images) == len(scenes)  # the rows' equal images read once
    assert [(q.image, q.question, q.answer) for q in questions] == [
        (q.image, q.question, q.answer) for q in own_questions
    ]
    assert all(torch.equal(a, b) for a, b in zip(images, own_images))
    assert choose_format("vqa", f"hf:{asked}").name == "hf"


def _eval(checkpoint, data: str, capsys) -> tuple[int, dict]:
    assert main(["eval", "--checkpoint", str(checkpoint), "--data", data, "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    return result["examples"], result["metrics"]


def test_train_and_eval_on_hf_datasets_through_the_command_line(tmp_path, capsys, one_thread):
    columns = {"source": [s for s, _ in PAIRS], "target": [t for _, t in PAIRS]}
    saved = _saved(tmp_path, "pairs", {"train": columns, "validation": columns, "test": columns})
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in PAIRS), encoding="utf-8")
    out = tmp_path / "translate"
    assert (
        main(
            [
                "train",
                "translate",
                "--train",
                f"hf:{saved}",
                "--valid",
                f"hf:{saved}",
                "--out",
                str(out),
                "--steps",
                "3",
                "--eval-every",
                "3",
                "--hidden",
                "8",
                "--emb",
                "8",
                "--batch-size",
                "4",
                "--no-progress",
                "--plot",
                "0",
            ]
        )
        == 0
    )
    assert "stopped after 3 steps" in capsys.readouterr().out
    ck = out / "checkpoint"
    assert _eval(ck, f"hf:{saved}", capsys) == _eval(ck, str(tsv), capsys)
    lines, native = _lines(tmp_path)
    out = tmp_path / "ocr"
    assert (
        main(
            [
                "train",
                "ocr",
                "--train",
                f"hf:{lines}:train",
                "--out",
                str(out),
                "--steps",
                "3",
                "--plot",
                "0",
                *OCR_TINY,
            ]
        )
        == 0
    )
    assert "stopped after 3 steps" in capsys.readouterr().out
    ck = out / "checkpoint"
    assert _eval(ck, f"hf:{lines}", capsys) == _eval(ck, str(native), capsys)
    scenes = generate_scenes(2, seed=4, size=SIZE, max_objects=4, captions=2)
    pictures = [_png(Image.fromarray(s.image.permute(1, 2, 0).numpy())) for s in scenes]
    captioned = _saved(
        tmp_path,
        "captions",
        {"train": {"image": pictures, "caption": [s.captions[0] for s in scenes]}},
        datasets.Features({"image": datasets.Image(), "caption": datasets.Value("string")}),
    )
    out = tmp_path / "caption"
    assert (
        main(
            [
                "train",
                "caption",
                "--train",
                f"hf:{captioned}",
                "--out",
                str(out),
                "--steps",
                "3",
                "--batch-size",
                "2",
                *IMAGE_TINY,
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert _eval(out / "checkpoint", f"hf:{captioned}", capsys)[0] == 2
    asked = _saved(
        tmp_path,
        "vqa",
        {
            "train": {
                "image": pictures,
                "question": [s.questions[0].question for s in scenes],
                "answer": [s.questions[0].answer for s in scenes],
            }
        },
        datasets.Features(
            {
                "image": datasets.Image(),
                "question": datasets.Value("string"),
                "answer": datasets.Value("string"),
            }
        ),
    )
    out = tmp_path / "vqa"
    assert (
        main(
            [
                "train",
                "vqa",
                "--train",
                f"hf:{asked}",
                "--out",
                str(out),
                "--steps",
                "3",
                "--batch-size",
                "2",
                *IMAGE_TINY,
            ]
        )
        == 0
    )
    capsys.readouterr()
    assert _eval(out / "checkpoint", f"hf:{asked}", capsys)[0] == 2


@pytest.mark.parametrize("state", ["{}", "[1]", '{"_data_files": 7}', "nested"])
def test_a_saved_dataset_with_a_broken_state_json_is_named(tmp_path, state):
    # a state.json of {} ended in a KeyError (a traceback)
    saved = _saved(tmp_path, "pairs", {"train": {"source": ["eins"], "target": ["one"]}})
    folder = saved / "train"
    (folder / "state.json").write_text("[" * 100_000 if state == "nested" else state)
    with pytest.raises(
        DataError,
        match=rf"^{folder}: not a dataset that save_to_disk wrote "
        r"\(its state.json or dataset_info.json cannot be read: ",
    ):
        read_corpus("translate", f"hf:{folder}")


def test_a_garbage_parquet_file_is_named(tmp_path):
    # a DatasetGenerationError traceback, naming no file, whatever --max-unusable said
    folder = tmp_path / "pq"
    folder.mkdir()
    datasets.Dataset.from_dict({"source": ["eins"], "target": ["one"]}).to_parquet(
        str(folder / "train-0.parquet")
    )
    (folder / "train-1.parquet").write_bytes(b"garbage" * 100)
    with pytest.raises(
        DataError,
        match=rf"^{folder / 'train-1.parquet'}: not a Parquet file "
        r"\(",
    ):
        read_corpus("translate", f"hf:{folder}", max_unusable=0.9)
