"""The inference verbs' ``--json`` (one JSON object per input) and ``-`` (inputs from standard
input, each printed as soon as it is decoded)."""

import io
import json
import select
import subprocess
import sys

import numpy as np
import pytest
import torch
from PIL import Image

from attnkit.cli import jsonlines
from attnkit.cli.main import main
from attnkit.data import generate_lines, write_wav
from attnkit.decoding import Decoding
from attnkit.tasks.loading import load_evaluator

KEYS = {"input", "text", "score", "outputs", "decoding", "time_ms", "batch_size"}


def _records(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def _stdin(data: bytes) -> io.TextIOWrapper:
    """Standard input holding ``data``, as Python opens it in the C locale (undecodable bytes
    kept as surrogates, for a reader of ``sys.stdin`` to pass on)."""
    return io.TextIOWrapper(io.BytesIO(data), encoding="utf-8", errors="surrogateescape")


def test_stdin_lines_that_are_not_utf8_are_refused_as_file_lines_are(capsys, monkeypatch):
    # latin-1 became <unk> in the translation and --json echoed the invalid bytes
    latin1 = "<fr> 5 août 2010\n".encode("latin-1")
    monkeypatch.setattr(
        sys, "stdin", _stdin("\ufeff<en> 3 March 2001\n".encode() + latin1 + b"<en> 9 May 1945\r\n")
    )
    assert main(["translate", "--checkpoint", "builtin:translate-dates", "--json", "-"]) == 2
    out = capsys.readouterr().out
    out.encode("utf-8")  # what is printed is UTF-8: no invalid bytes echoed
    first, bad, last = _records(out)
    assert (first["input"], first["text"]) == ("<en> 3 March 2001", "2001-03-03")  # no BOM
    assert bad == {"input": "<fr> 5 ao\ufffdt 2010", "error": "stdin:2: not valid UTF-8 (byte 9)"}
    assert (last["input"], last["text"]) == ("<en> 9 May 1945", "1945-05-09")
    monkeypatch.setattr(sys, "stdin", _stdin("<fr> 5 août 2010\n".encode("latin-1")))
    assert main(["translate", "--checkpoint", "builtin:translate-dates", "-"]) == 2
    assert capsys.readouterr() == ("\n", "attnkit translate: stdin:1: not valid UTF-8 (byte 9)\n")


def test_a_stdin_line_past_the_cap_is_refused_unread_and_not_echoed_whole(capsys, monkeypatch):
    # a 100 MB line took 0.9 GB and --json echoed it whole
    monkeypatch.setattr(jsonlines, "MAX_STDIN_LINE", 1000)
    monkeypatch.setattr(
        sys,
        "stdin",
        _stdin(b"<en> 3 March 2001\n" + b"9" * 5000 + b"\n" + b"9" * 1000 + b"\n<en> 9 May 1945"),
    )
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                "builtin:translate-dates",
                "--json",
                "--max-chars",
                "2000",
                "-",
            ]
        )
        == 2
    )
    first, long, at_cap, last = _records(capsys.readouterr().out)
    assert first["text"] == "2001-03-03" and last["text"] == "1945-05-09"
    assert long == {
        "input": "9" * 100 + "...",
        "error": "stdin:2: a line of more than 1,000 "
        "bytes; expected one input a line (a sentence, a question or a path)",
    }
    assert at_cap["input"] == "9" * 1000 and "text" in at_cap  # the cap itself is read


def test_translate_json_gives_each_input_its_outputs_scores_and_settings(capsys):
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                "builtin:translate-dates",
                "--json",
                "--n-best",
                "3",
                "<en> 3 March 2001",
                " ",
                "<de> 12. Mai 1999",
            ]
        )
        == 0
    )
    first, blank, last = _records(capsys.readouterr().out)
    alone = load_evaluator("builtin:translate-dates").decode(
        ["<en> 3 March 2001"], Decoding(beam=5, n_best=3)
    )[0]
    assert set(first) == KEYS and first["input"] == "<en> 3 March 2001"
    assert [o["text"] for o in first["outputs"]] == alone.texts
    assert [o["score"] for o in first["outputs"]] == pytest.approx(alone.scores, abs=1e-5)
    assert first["text"] == alone.text and first["score"] == first["outputs"][0]["score"]
    for output, tokens in zip(first["outputs"], alone.tokens, strict=True):  # EOS included
        assert [t["token"] for t in output["tokens"]] == [piece for piece, _ in tokens]
        assert [t["log_prob"] for t in output["tokens"]] == pytest.approx(
            [logp for _, logp in tokens], abs=1e-5
        )
        assert "".join(t["token"] for t in output["tokens"]) == output["text"] + "<eos>"
    greedy = load_evaluator("builtin:translate-dates").decode(["<en> 3 March 2001"])[0]
    assert sum(logp for _, logp in greedy.tokens[0]) == pytest.approx(greedy.scores[0])
    assert first["decoding"]["beam"] == 5 and first["decoding"]["n_best"] == 3
    assert first["batch_size"] == 2 and first["time_ms"] > 0
    assert blank["text"] == "" and blank["outputs"] == [] and last["text"] == "1999-05-12"


def test_translate_reads_stdin_and_prints_each_line_as_it_is_decoded():
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "attnkit",
            "translate",
            "--checkpoint",
            "builtin:translate-dates",
            "--beam",
            "1",
            "-",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        answers = []
        for text in ("<en> 3 March 2001", "<de> 12. Mai 1999"):
            proc.stdin.write(text + "\n")
            proc.stdin.flush()  # the next line is sent only once this one is answered
            ready, _, _ = select.select([proc.stdout], [], [], 60)
            assert ready, "no output before the input ended"
            answers.append(proc.stdout.readline().strip())
        proc.stdin.close()
        assert answers == ["2001-03-03", "1999-05-12"] and proc.wait(30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()


def test_read_takes_paths_from_stdin_and_goes_on_past_a_bad_one(tmp_path, capsys, monkeypatch):
    lines = generate_lines(2, split="test", seed=5, min_chars=5, max_chars=20)
    paths = []
    for i, (image, _) in enumerate(lines):
        paths.append(tmp_path / f"l{i}.png")
        Image.fromarray(image.numpy()).save(paths[-1])
    missing = tmp_path / "missing.png"
    monkeypatch.setattr(sys, "stdin", _stdin(f"{paths[0]}\n{missing}\n{paths[1]}\n".encode()))
    assert main(["read", "--checkpoint", "builtin:ocr-lines", "--json", "-"]) == 2
    good, bad, other = _records(capsys.readouterr().out)
    evaluator = load_evaluator("builtin:ocr-lines")
    expected = [o.text for o in evaluator.decode(evaluator.load_inputs(map(str, paths))[0])]
    assert [good["text"], other["text"]] == expected
    assert good["input"] == str(paths[0])
    assert good["score"] == good["outputs"][0]["score"] < 0  # CTC: its best path's log P
    assert bad == {"input": str(missing), "error": bad["error"]} and "missing.png" in bad["error"]


def test_stdin_is_refused_among_other_inputs_and_with_plots(tmp_path, capsys):
    assert main(["read", "--checkpoint", "builtin:ocr-lines", "-", str(tmp_path / "a.png")]) == 2
    assert "-: reads the inputs from standard input; expected it alone" in capsys.readouterr().err
    assert (
        main(["transcribe", "--checkpoint", "builtin:asr-digits", "--plot", str(tmp_path), "-"])
        == 2
    )
    assert "--plot and --html need them all at once" in capsys.readouterr().err


def test_transcribe_json_has_scores(tmp_path, capsys):
    t = torch.arange(12000) / 16000
    wav = write_wav(tmp_path / "a.wav", 0.3 * torch.sin(2 * torch.pi * 300 * t), 16000)
    assert (
        main(
            [
                "transcribe",
                "--checkpoint",
                "builtin:asr-digits",
                "--json",
                "--beam",
                "2",
                "--n-best",
                "2",
                str(wav),
            ]
        )
        == 0
    )
    (record,) = _records(capsys.readouterr().out)
    assert record["input"] == str(wav) and len(record["outputs"]) == 2
    assert all(isinstance(o["score"], float) for o in record["outputs"])


def test_caption_and_ask_json(tiny_captioner, tiny_vqa, tmp_path, capsys):
    picture = tmp_path / "p.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (32, 32, 3), np.uint8)).save(picture)
    assert main(["caption", "--checkpoint", str(tiny_captioner), "--json", str(picture)]) == 0
    (caption,) = _records(capsys.readouterr().out)
    assert set(caption) == KEYS and isinstance(caption["score"], float)
    evaluator = load_evaluator(tiny_vqa)
    question = " ".join(evaluator.words.symbols[4:6])
    assert main(["ask", "--checkpoint", str(tiny_vqa), "--json", str(picture), question]) == 0
    (answer,) = _records(capsys.readouterr().out)
    assert answer["input"] == question and answer["text"] in evaluator.answers
    assert answer["score"] <= 0  # the answer's log-probability


def test_ask_reads_questions_from_stdin_about_one_image(tiny_vqa, tmp_path, capsys, monkeypatch):
    picture = tmp_path / "p.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (32, 32, 3), np.uint8)).save(picture)
    evaluator = load_evaluator(tiny_vqa)
    question = " ".join(evaluator.words.symbols[4:6])
    monkeypatch.setattr(sys, "stdin", _stdin(f"{question}\nzzzunknownword\n{question}\n".encode()))
    assert main(["ask", "--checkpoint", str(tiny_vqa), "--json", str(picture), "-"]) == 2
    first, bad, last = _records(capsys.readouterr().out)
    assert first["input"] == last["input"] == question and first["text"] == last["text"]
    assert "zzzunknownword" in bad["error"]
    monkeypatch.setattr(sys, "stdin", _stdin(f"{question}\n".encode()))
    assert main(["ask", "--checkpoint", str(tiny_vqa), str(tmp_path / "none.png"), "-"]) != 0
    assert "none.png" in capsys.readouterr().err
