"""``--corpus``: the inference verbs decode the inputs of a corpus in any format train and eval
read, each output named by its origin."""

import json
import shutil

import pytest

from attnkit.cli.main import main
from attnkit.data import generate_lines, synthesize, write_wav

needs_espeak = pytest.mark.skipif(
    shutil.which("espeak-ng") is None, reason="espeak-ng not installed"
)


@needs_espeak
def test_transcribe_a_kaldi_data_directory(tmp_path, capsys):
    data = tmp_path / "kaldi"
    (data / "wav").mkdir(parents=True)
    said = {"utt1": "four two", "utt2": "seven"}
    for utt, text in said.items():
        write_wav(data / "wav" / f"{utt}.wav", *synthesize(text, voice="en-us", speed=150))
    (data / "wav.scp").write_text("".join(f"{u} wav/{u}.wav\n" for u in said))
    (data / "text").write_text("".join(f"{u} {t.upper()}\n" for u, t in said.items()))
    assert (
        main(
            [
                "transcribe",
                "--checkpoint",
                "builtin:asr-digits",
                "--corpus",
                str(data),
                "--beam",
                "1",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.strip().split("\n")
    assert [line.split(" ")[0] for line in lines] == ["utt1", "utt2"]  # "utt1 (its path)"
    assert [line.split("\t")[1] for line in lines] == ["four two", "seven"]
    assert (
        main(
            [
                "transcribe",
                "--checkpoint",
                "builtin:asr-digits",
                "--corpus",
                str(data),
                "--beam",
                "1",
                "--json",
            ]
        )
        == 0
    )
    records = [json.loads(line) for line in capsys.readouterr().out.strip().split("\n")]
    assert [r["input"].split(" ")[0] for r in records] == ["utt1", "utt2"]
    (data / "text").unlink()  # a directory to decode has no transcripts
    assert (
        main(
            [
                "transcribe",
                "--checkpoint",
                "builtin:asr-digits",
                "--corpus",
                str(data),
                "--beam",
                "1",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.strip().split("\n") == lines
    assert main(["eval", "--checkpoint", "builtin:asr-digits", "--data", str(data)]) == 2
    assert f"{data}: not a Kaldi data directory (no text)" in capsys.readouterr().err


def test_read_a_gt_txt_folder_and_refuse_both_inputs(tmp_path, capsys):
    folder = tmp_path / "lines"
    folder.mkdir()
    from PIL import Image

    for i, (image, text) in enumerate(generate_lines(2, split="test", seed=5, max_chars=12)):
        Image.fromarray(image.numpy()).save(folder / f"l{i}.png")
        (folder / f"l{i}.gt.txt").write_text(text + "\n")
    assert (
        main(
            [
                "read",
                "--checkpoint",
                "builtin:ocr-lines",
                "--corpus",
                str(folder),
                "--format",
                "gt-txt",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.strip().split("\n")
    assert len(lines) == 2 and [line.split("\t")[0] for line in lines] == [
        str(folder / "l0.png"),
        str(folder / "l1.png"),
    ]
    (folder / "l1.gt.txt").unlink()  # lines to read need no transcription
    assert (
        main(
            [
                "read",
                "--checkpoint",
                "builtin:ocr-lines",
                "--corpus",
                str(folder),
                "--format",
                "gt-txt",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.strip().split("\n") == lines
    assert (
        main(
            [
                "read",
                "--checkpoint",
                "builtin:ocr-lines",
                str(folder / "l0.png"),
                "--corpus",
                str(folder),
            ]
        )
        == 2
    )
    assert "--corpus: give it or inputs on the command line, not both" in capsys.readouterr().err
    assert main(["read", "--checkpoint", "builtin:ocr-lines"]) == 2
    assert "read: expected line images, - or --corpus, got none" in capsys.readouterr().err


def test_translate_the_source_side_of_a_moses_pair(tmp_path, capsys):
    sources = ["<it> 5 giugno 1933", "<en> March 3, 2001"]
    (tmp_path / "c.src").write_text("\n".join(sources) + "\n")
    (tmp_path / "c.tgt").write_text("x\ny\n")
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                "builtin:translate-dates",
                "--corpus",
                str(tmp_path / "c.src"),
                str(tmp_path / "c.tgt"),
                "--beam",
                "1",
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.strip().split("\n")
    assert [line.split("\t")[0] for line in lines] == [
        f"{tmp_path / 'c.src'}:1",
        f"{tmp_path / 'c.src'}:2",
    ]
    assert [line.split("\t")[1] for line in lines] == ["1933-06-05", "2001-03-03"]


def test_ask_the_questions_of_a_vqa2_corpus(tiny_vqa, tmp_path, capsys):
    from attnkit.data import generate_scenes
    from tests.data.test_formats_images import MODES, SIZE, _vqa

    questions, _ = _vqa(
        tmp_path, generate_scenes(len(MODES), seed=5, size=SIZE, max_objects=4, captions=2)
    )
    assert main(["ask", "--checkpoint", str(tiny_vqa), "--corpus", str(questions)]) == 0
    lines = capsys.readouterr().out.strip().split("\n")
    asked = json.loads(questions.read_text())["questions"]
    assert [line.split("\t")[0] for line in lines] == [
        f"{questions}: question {q['question_id']}" for q in asked
    ]
    assert all(line.split("\t")[1] for line in lines)  # an answer each
    annotations = questions.with_name("v2_mscoco_train2014_annotations.json")
    annotations.rename(tmp_path / "elsewhere.json")  # as VQA v2's test-dev: no annotations
    assert main(["ask", "--checkpoint", str(tiny_vqa), "--corpus", str(questions)]) == 0
    assert capsys.readouterr().out.strip().split("\n") == lines
    assert main(["eval", "--checkpoint", str(tiny_vqa), "--data", str(questions)]) == 2
    assert f"its annotations file {annotations.name} is not beside it" in capsys.readouterr().err
    assert (
        main(
            ["ask", "--checkpoint", str(tiny_vqa), "image.png", "what?", "--corpus", str(questions)]
        )
        == 2
    )
    assert (
        "--corpus: give it or inputs on the command line, not both (got 2 inputs as well)"
        in capsys.readouterr().err
    )
    assert main(["ask", "--checkpoint", str(tiny_vqa), "image.png"]) == 2
    assert capsys.readouterr().err == (
        "attnkit: ask: expected an image file and questions about "
        "it (or --corpus), got an image and no question\n"
    )


def test_caption_the_images_of_a_coco_image_list(tiny_captioner, tmp_path, capsys):
    import gzip

    from attnkit.data import generate_scenes
    from tests.data.test_formats_images import MODES, SIZE, _coco

    path, images = _coco(
        tmp_path, generate_scenes(len(MODES), seed=5, size=SIZE, max_objects=4, captions=2)
    )
    listed = path.with_name("image_info_train2017.json")  # as COCO's test lists: no captions
    listed.write_text(
        json.dumps(
            {"images": json.loads(gzip.decompress(path.read_bytes()).decode("utf-8-sig"))["images"]}
        )
    )
    assert (
        main(
            ["caption", "--checkpoint", str(tiny_captioner), "--corpus", str(listed), "--beam", "1"]
        )
        == 0
    )
    lines = capsys.readouterr().out.strip().split("\n")
    assert [line.split("\t")[0] for line in lines] == [
        str(images / f"{100 + i:012d}.png") for i in range(len(MODES))
    ]


@pytest.mark.parametrize("name", ["librispeech", "jsonl", "commonvoice", "hf"])
def test_transcribe_each_speech_format_as_its_native_manifest(tmp_path, capsys, name):
    from tests.data.test_formats_speech import CORPORA, OPTIONS

    corpus, native = CORPORA[name][0](tmp_path)
    options = [a for k, v in OPTIONS.get(name, {}).items() for a in (f"--{k}", v)]
    outputs = []
    for data, given in ((corpus, options), (native, [])):
        assert (
            main(
                [
                    "transcribe",
                    "--checkpoint",
                    "builtin:asr-digits",
                    "--corpus",
                    str(data),
                    "--beam",
                    "1",
                    *given,
                ]
            )
            == 0
        )
        outputs.append(
            [line.split("\t")[1] for line in capsys.readouterr().out.strip().split("\n")]
        )
    assert outputs[0] == outputs[1] and len(outputs[0]) == 4


def test_eval_limit_reads_only_the_first_images_of_a_coco_or_vqa2_file(
    tiny_captioner, tiny_vqa, tmp_path, capsys, monkeypatch
):
    from attnkit.data import generate_scenes
    from attnkit.data.corpora import image_folders as images
    from tests.data.test_formats_images import MODES, SIZE, _coco, _vqa

    checked, check = [], images.image_header
    monkeypatch.setattr(
        images,
        "image_header",
        lambda path, *a, **k: (checked.append(path.name), check(path, *a, **k))[1],
    )
    scenes = generate_scenes(len(MODES), seed=5, size=SIZE, max_objects=4, captions=2)
    coco, _ = _coco(tmp_path / "c", scenes)
    qpath, _ = _vqa(tmp_path / "v", scenes)
    for checkpoint, data, limit, read in ((tiny_captioner, coco, 2, 2), (tiny_vqa, qpath, 3, 2)):
        checked.clear()
        assert (
            main(
                [
                    "eval",
                    "--checkpoint",
                    str(checkpoint),
                    "--data",
                    str(data),
                    "--json",
                    "--limit",
                    str(limit),
                ]
            )
            == 0
        )
        assert json.loads(capsys.readouterr().out)["examples"] == limit
        assert len(checked) == read  # the headers of the images of the first examples only
