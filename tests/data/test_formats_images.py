"""Captioning and VQA corpora as COCO, Karpathy and VQA v2 ship them: the same examples as
attnkit's own captions.tsv / questions.tsv folders, images of every mode, JSON with a BOM or
gzipped, training and eval through the command line, and what is unusable named."""

import gzip
import json
import logging

import numpy as np
import pytest
import torch
from PIL import Image

from attnkit.cli.main import main
from attnkit.data import DataError, generate_scenes
from attnkit.data.corpora.image_formats import read_coco, read_karpathy, read_vqa2
from attnkit.data.corpora.reading import choose_format, read_corpus
from tests.cli.conftest import IMAGE_TINY

SIZE = 32
MODES = ["RGB", "RGBA", "P", "L", "I;16", "RGB"]


def _save(image: torch.Tensor, path, mode: str) -> None:
    """A scene ``(3, S, S)`` as a file of ``mode`` (some larger than the model's size)."""
    rgb = Image.fromarray(image.permute(1, 2, 0).numpy(), "RGB")
    if mode == "I;16":
        Image.fromarray(np.asarray(rgb.convert("L"), dtype=np.uint16) * 257).save(path)
    elif mode == "RGB" and path.suffix == ".jpg":
        rgb.resize((48, 40)).save(path, quality=95)
    else:
        rgb.convert(mode).save(path)


@pytest.fixture(scope="module")
def scenes():
    return generate_scenes(len(MODES), seed=5, size=SIZE, max_objects=4, captions=2)


def _coco(root, scenes):
    """The scenes as COCO captions (annotations/captions_train2017.json, gzipped with a BOM,
    images in train2017/) and as attnkit's captions.tsv in train2017/."""
    images = root / "train2017"
    images.mkdir(parents=True)
    (root / "annotations").mkdir()
    entries, annotations, rows = [], [], []
    for i, (scene, mode) in enumerate(zip(scenes, MODES)):
        name = f"{100 + i:012d}.png"
        _save(scene.image, images / name, mode)
        entries.append({"id": 100 + i, "file_name": name, "width": SIZE, "height": SIZE})
    for j in range(2):  # captions interleaved across images, as COCO lists them
        for i, scene in enumerate(scenes):
            annotations.append(
                {
                    "id": len(annotations),
                    "image_id": 100 + i,
                    "caption": scene.captions[j] + ("\n" if i == 1 else ""),
                }
            )
            rows.append(f"{100 + i:012d}.png\t{scene.captions[j]}\n")
    data = {"info": {}, "images": entries, "licenses": [], "annotations": annotations}
    path = root / "annotations" / "captions_train2017.json"
    path.write_bytes(gzip.compress(b"\xef\xbb\xbf" + json.dumps(data).encode()))
    (images / "captions.tsv").write_text("".join(rows), encoding="utf-8")
    return path, images


def _same_captions(a, b) -> None:
    assert [item.captions for item in a] == [item.captions for item in b]
    for x, y in zip(a, b):
        assert torch.equal(x.image, y.image)


def test_coco_gives_the_captions_of_the_native_folder(tmp_path, scenes, caplog):
    path, native = _coco(tmp_path, scenes)
    with caplog.at_level(logging.INFO, logger="attnkit"):
        found = read_corpus("caption", path, size=SIZE)
    assert f"{path}: read as coco" in caplog.text
    assert f"images read from {native}" in caplog.text
    _same_captions(found, read_corpus("caption", native, size=SIZE))
    assert found[0].captions == tuple(scenes[0].captions[:2])
    assert choose_format("caption", native).name == "captions"


KARPATHY_SPLITS = ["train", "restval", "val", "test", "train", "val"]


def _karpathy(root, scenes):
    """The scenes in Karpathy's split file (dataset_coco.json, images in train2017/ as
    :func:`_coco` writes them, splits :data:`KARPATHY_SPLITS`) and the native folder."""
    _, native = _coco(root, scenes)
    data = {
        "dataset": "coco",
        "images": [
            {
                "filepath": "train2017",
                "filename": f"{100 + i:012d}.png",
                "split": split,
                "imgid": i,
                "sentences": [{"raw": c, "tokens": c.lower().split()} for c in scene.captions[:2]],
            }
            for i, (scene, split) in enumerate(zip(scenes, KARPATHY_SPLITS))
        ],
    }
    path = root / "dataset_coco.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path, native


def test_karpathy_splits(tmp_path, scenes):
    path, native = _karpathy(tmp_path, scenes)
    assert choose_format("caption", path).name == "karpathy"
    everything = read_corpus("caption", native, size=SIZE)
    for role, kept in (("train", [0, 1, 4]), ("valid", [2, 5]), ("test", [3])):
        _same_captions(read_karpathy(path, size=SIZE, role=role), [everything[i] for i in kept])
    assert len(read_karpathy(path, size=SIZE, split="val,test")) == 3
    with pytest.raises(
        DataError,
        match=r"dataset_coco.json: no image of split dev; the file's "
        r"splits: train \(2\), val \(2\), restval \(1\), test "
        r"\(1\) \(--split names others\)",
    ):
        read_karpathy(path, size=SIZE, split="dev")


def _vqa(root, scenes):
    """The scenes' questions as VQA v2 (questions and annotations JSON, images
    COCO_train2014_*.jpg in train2014/) and as attnkit's questions.tsv in train2014/."""
    images = root / "train2014"
    images.mkdir(parents=True)
    questions, annotations, rows = [], [], []
    for i, (scene, _mode) in enumerate(zip(scenes, MODES)):
        name = f"COCO_train2014_{i + 1:012d}.jpg"
        _save(scene.image, images / name, "RGB")
        for k, q in enumerate(scene.questions[:2]):
            qid = 1000 * (i + 1) + k
            questions.append({"image_id": i + 1, "question": q.question, "question_id": qid})
            wrong = "maybe"
            answers = [q.answer] * 4 + [wrong] * 3 + ["blue"] * 3
            annotations.append(
                {
                    "question_id": qid,
                    "image_id": i + 1,
                    "answer_type": "other",
                    "multiple_choice_answer": wrong,
                    "answers": [
                        {"answer": a, "answer_confidence": "yes", "answer_id": n + 1}
                        for n, a in enumerate(answers)
                    ],
                }
            )
            rows.append(f"{name}\t{q.question}\t{q.answer}\n")
    qpath = root / "v2_OpenEnded_mscoco_train2014_questions.json"
    qpath.write_text(json.dumps({"data_subtype": "train2014", "questions": questions}))
    (root / "v2_mscoco_train2014_annotations.json").write_text(
        json.dumps({"annotations": annotations})
    )
    (images / "questions.tsv").write_text("".join(rows), encoding="utf-8")
    return qpath, images


def test_vqa2_gives_the_questions_of_the_native_folder(tmp_path, scenes):
    qpath, native = _vqa(tmp_path, scenes)
    assert choose_format("vqa", qpath).name == "vqa2"
    images, questions = read_corpus("vqa", qpath, size=SIZE)
    own_images, own_questions = read_corpus("vqa", native, size=SIZE)
    assert [(q.image, q.question, q.answer) for q in questions] == [
        (q.image, q.question, q.answer) for q in own_questions
    ]
    assert all(torch.equal(a, b) for a, b in zip(images, own_images))
    assert questions[0].origin == f"{qpath}: question 1000"


def test_the_most_common_answer_is_the_label(tmp_path, scenes):
    qpath, _ = _vqa(tmp_path, scenes)
    ann = tmp_path / "v2_mscoco_train2014_annotations.json"
    data = json.loads(ann.read_text())
    first = data["annotations"][0]
    first["answers"] = [{"answer": a} for a in ["two"] * 3 + ["2"] * 3 + ["three"] * 4]
    second = data["annotations"][1]
    second["answers"] = [{"answer": a} for a in ["no"] * 5 + ["yes"] * 5]
    second["multiple_choice_answer"] = "yes"  # a tie: the annotation's own choice
    ann.write_text(json.dumps(data))
    _, questions = read_vqa2(qpath, size=SIZE)
    assert [q.answer for q in questions[:2]] == ["three", "yes"]


def test_train_and_eval_on_coco_and_vqa2_through_the_command_line(
    tmp_path, scenes, capsys, one_thread
):
    coco, native_captions = _coco(tmp_path / "c", scenes)
    out = tmp_path / "caption"
    assert (
        main(
            [
                "train",
                "caption",
                "--train",
                str(coco),
                "--valid",
                str(coco),
                "--out",
                str(out),
                "--steps",
                "3",
                "--eval-every",
                "3",
                "--batch-size",
                "4",
                *IMAGE_TINY,
            ]
        )
        == 0
    )
    assert "stopped after 3 steps" in capsys.readouterr().out
    found = []
    for data in ([str(coco)], [str(native_captions)], [str(coco), "--format", "coco"]):
        assert (
            main(["eval", "--checkpoint", str(out / "checkpoint"), "--json", "--data", *data]) == 0
        )
        found.append(json.loads(capsys.readouterr().out)["metrics"])
    assert found[0] == found[1] == found[2]
    qpath, native_questions = _vqa(tmp_path / "v", scenes)
    out = tmp_path / "vqa"
    assert (
        main(
            [
                "train",
                "vqa",
                "--train",
                str(qpath),
                "--valid",
                str(qpath),
                "--out",
                str(out),
                "--steps",
                "3",
                "--batch-size",
                "8",
                *IMAGE_TINY,
            ]
        )
        == 0
    )
    assert "stopped after 3 steps" in capsys.readouterr().out
    found = []
    for data in (qpath, native_questions):
        assert (
            main(["eval", "--checkpoint", str(out / "checkpoint"), "--json", "--data", str(data)])
            == 0
        )
        result = json.loads(capsys.readouterr().out)
        assert result["examples"] == 2 * len(scenes)
        found.append(result["metrics"])
    assert found[0] == found[1]


def test_train_and_eval_on_karpathy_splits_through_the_command_line(
    tmp_path, scenes, capsys, one_thread
):
    path, native = _karpathy(tmp_path, scenes)
    out = tmp_path / "caption"
    assert (
        main(
            [
                "train",
                "caption",
                "--train",
                str(path),
                "--valid",
                str(path),
                "--out",
                str(out),
                "--steps",
                "3",
                "--eval-every",
                "3",
                "--batch-size",
                "4",
                *IMAGE_TINY,
            ]
        )
        == 0
    )  # train: train + restval; valid: val
    assert "stopped after 3 steps" in capsys.readouterr().out
    test = native / "test.tsv"  # the test split's one image (3) in attnkit's own format
    test.write_text(
        "".join(f"{103:012d}.png\t{c}\n" for c in scenes[3].captions[:2]), encoding="utf-8"
    )
    found = []
    for data in ([str(path)], [str(test)], [str(path), "--split", "val,test"]):
        assert (
            main(["eval", "--checkpoint", str(out / "checkpoint"), "--json", "--data", *data]) == 0
        )
        result = json.loads(capsys.readouterr().out)
        found.append((result["examples"], result["metrics"]))
    assert found[0] == found[1] and found[0][0] == 1  # eval reads the test split
    assert found[2][0] == 3


def test_a_coco_annotation_naming_a_missing_image_is_named(tmp_path, scenes, caplog):
    path, native = _coco(tmp_path, scenes)
    (native / f"{101:012d}.png").unlink()
    data = json.loads(gzip.decompress(path.read_bytes()).decode("utf-8-sig"))
    data["annotations"].append({"id": 99, "image_id": 7, "caption": "a lost caption"})
    data["annotations"].append({"id": 98, "image_id": 100, "caption": "  "})
    path.write_text(json.dumps(data))
    with pytest.raises(DataError) as caught:
        read_coco(path, size=SIZE)
    message = str(caught.value)
    assert message.startswith(
        f"{path}: 4 of 14 captions are unusable (2 image missing or "
        "unreadable, 1 unknown image_id, 1 empty), more than "
        "max_unusable=0.01 allows"
    )
    assert "annotations[12] (id 99): image_id 7 is not among the file's images" in message
    assert "annotations[13] (id 98): empty caption" in message
    assert f"image 101: image '000000000101.png' not found in {native}" in message
    with caplog.at_level(logging.WARNING, logger="attnkit"):
        assert len(read_coco(path, size=SIZE, max_unusable=0.3)) == len(scenes) - 1
    assert "dropped 4 of 14 captions as unusable" in caplog.text


def test_bad_json_and_missing_files_are_named(tmp_path, scenes):
    path, _ = _coco(tmp_path, scenes)
    path.write_text('{"images": [],\n "annotations": [}\n')
    with pytest.raises(
        DataError,
        match=r"captions_train2017.json:2: not valid JSON \(Expecting "
        r"value at column 18\)",
    ):
        read_coco(path, size=SIZE)
    path.write_text('{"images": []}')
    with pytest.raises(
        DataError,
        match=r"expected a list under 'annotations' \(keys found: "
        r"'images'\)",
    ):
        read_coco(path, size=SIZE)
    qpath, _ = _vqa(tmp_path / "v", scenes)
    (tmp_path / "v" / "v2_mscoco_train2014_annotations.json").unlink()
    with pytest.raises(
        DataError,
        match=r"its annotations file v2_mscoco_train2014_annotations"
        r".json is not beside it; name the annotations JSON "
        r"with --annotations",
    ):
        read_vqa2(qpath, size=SIZE)
    other = tmp_path / "answers.json"
    other.write_text(
        json.dumps({"annotations": [{"question_id": 1000, "answers": [{"answer": "yes"}]}]})
    )
    with pytest.raises(
        DataError,
        match=r"11 of 12 questions are unusable \(11 no annotation\)"
        r".*questions\[1\] \(question_id 1001\): no annotation "
        r"in .*answers.json",
    ):
        read_vqa2(qpath, size=SIZE, annotations=other)
    assert len(read_vqa2(qpath, size=SIZE, annotations=other, max_unusable=1.0)[1]) == 1


def _rewrite(path, edit) -> None:
    """Edit the JSON (maybe gzipped, with a BOM) of ``path`` in place."""
    raw = path.read_bytes()
    packed = raw[:2] == b"\x1f\x8b"
    data = json.loads((gzip.decompress(raw) if packed else raw).decode("utf-8-sig"))
    edit(data)
    text = json.dumps(data).encode()
    path.write_bytes(gzip.compress(text) if packed else text)


def test_a_coco_file_nested_deep_is_named_not_a_recursion_error(tmp_path):
    path = tmp_path / "captions_train2017.json"
    path.write_text("[" * 100_000 + "]" * 100_000)
    with pytest.raises(
        DataError,
        match=r"captions_train2017.json: JSON nested deeper than "
        r"Python reads \(about 1,000 levels\)",
    ):
        read_coco(path, size=SIZE)


def test_a_coco_image_id_listed_twice_is_refused_naming_both(tmp_path, scenes):
    # the later entry silently won: captions went with another image's file
    path, _ = _coco(tmp_path, scenes)
    _rewrite(
        path, lambda data: data["images"].append({**data["images"][0], "file_name": "other.png"})
    )
    with pytest.raises(
        DataError,
        match=r"captions_train2017.json: images\[6\]: id 100 is "
        r"listed twice \(first at images\[0\]\); expected one "
        r"entry per id",
    ):
        read_coco(path, size=SIZE)


@pytest.mark.parametrize("listed", ["questions", "annotations"])
def test_a_vqa_question_id_listed_twice_is_refused_naming_both(tmp_path, scenes, listed):
    # a repeated question was trained and scored twice; a repeated annotation replaced the
    # first answer
    qpath, _ = _vqa(tmp_path, scenes)
    path = qpath if listed == "questions" else tmp_path / "v2_mscoco_train2014_annotations.json"
    _rewrite(path, lambda data: data[listed].append(data[listed][1]))
    with pytest.raises(
        DataError,
        match=rf"{path.name}: {listed}\[12\]: question_id 1001 is "
        rf"listed twice \(first at {listed}\[1\]\); expected "
        r"one entry per id",
    ):
        read_vqa2(qpath, size=SIZE)


def test_a_coco_image_list_without_annotations_is_read_to_caption(tmp_path, scenes):
    # COCO's test image lists (image_info_test2014.json) have no annotations
    path, _ = _coco(tmp_path, scenes)
    data = json.loads(gzip.decompress(path.read_bytes()).decode("utf-8-sig"))
    listed = tmp_path / "annotations" / "image_info_train2017.json"
    listed.write_text(json.dumps({"images": data["images"]}))
    items = read_coco(listed, size=SIZE, references=False)
    assert [item.captions for item in items] == [()] * len(scenes)
    assert all(torch.equal(a.image, b.image) for a, b in zip(items, read_coco(path, size=SIZE)))
    with pytest.raises(DataError, match=r"image_info_train2017.json: .*annotations"):
        read_coco(listed, size=SIZE)


@pytest.fixture
def headers(monkeypatch):
    """The image files whose headers a reader checks, in order."""
    from attnkit.data.corpora import image_folders as images

    checked, check = [], images.image_header

    def counted(path, *args, **kwargs):
        checked.append(path.name)
        return check(path, *args, **kwargs)

    monkeypatch.setattr(images, "image_header", counted)
    return checked


def test_a_coco_limit_checks_and_keeps_only_the_first_images(tmp_path, scenes, headers):
    # eval --limit read the whole file and checked every image's header before the first N
    # were taken (~4.6 KB per reference)
    path, native = _coco(tmp_path, scenes)
    everything = read_coco(path, size=SIZE)
    assert len(headers) == len(scenes)
    headers.clear()
    found = read_corpus("caption", path, size=SIZE, limit=2)  # the option reaches the reader
    assert headers == [f"{100:012d}.png", f"{101:012d}.png"]
    _same_captions(found, everything[:2])
    assert found.origins == everything.origins[:2] and len(found.images) == 2
    # an image missing among the first is skipped as without a limit: the next one is read
    (native / f"{100:012d}.png").unlink()
    _rewrite(
        path,
        lambda data: data["annotations"].append(  # past the first images: unread
            {"id": 99, "image_id": 7, "caption": "a lost caption"}
        ),
    )
    headers.clear()
    found = read_coco(path, size=SIZE, limit=2, max_unusable=0.5)
    assert headers == [f"{101:012d}.png", f"{102:012d}.png"]
    assert found.origins == read_coco(path, size=SIZE, max_unusable=0.5).origins[:2]
    with pytest.raises(DataError, match=r"2 of 6 captions are unusable \(2 image missing"):
        read_coco(path, size=SIZE, limit=2, max_unusable=0)  # what was read is counted


def test_a_karpathy_or_vqa2_limit_checks_only_the_first_images(tmp_path, scenes, headers):
    path, _ = _karpathy(tmp_path / "k", scenes)
    everything = read_karpathy(path, size=SIZE)  # train: images 0, 1, 4
    headers.clear()
    found = read_karpathy(path, size=SIZE, limit=2)
    assert headers == [f"{100:012d}.png", f"{101:012d}.png"]
    _same_captions(found, everything[:2])
    with pytest.raises(DataError, match="no image of split dev"):  # all the splits counted
        read_karpathy(path, size=SIZE, split="dev", limit=2)
    qpath, _ = _vqa(tmp_path / "v", scenes)
    _, questions = read_vqa2(qpath, size=SIZE)
    headers.clear()
    images, found = read_corpus("vqa", qpath, size=SIZE, limit=3)
    assert headers == [f"COCO_train2014_{i:012d}.jpg" for i in (1, 2)]  # 2 questions each
    assert len(images) == 2
    assert [(q.image, q.question, q.answer, q.origin) for q in found] == [
        (q.image, q.question, q.answer, q.origin) for q in questions[:3]
    ]
