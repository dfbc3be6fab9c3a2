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

from attnkit.cli.main import main
from attnkit.data import generate_lines, write_wav
from attnkit.decoding import Decoding
from attnkit.tasks.loading import load_evaluator

KEYS = {"input", "text", "score", "outputs", "decoding", "time_ms", "batch_size"}


def _records(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines()]


def test_translate_json_gives_each_input_its_outputs_scores_and_settings(capsys):
    assert main(["translate", "--checkpoint", "builtin:translate-dates", "--json",
                 "--n-best", "3", "<en> 3 March 2001", " ", "<de> 12. Mai 1999"]) == 0
    first, blank, last = _records(capsys.readouterr().out)
    alone = load_evaluator("builtin:translate-dates").decode(["<en> 3 March 2001"],
                                                             Decoding(beam=5, n_best=3))[0]
    assert set(first) == KEYS and first["input"] == "<en> 3 March 2001"
    assert [o["text"] for o in first["outputs"]] == alone.texts
    assert [o["score"] for o in first["outputs"]] == pytest.approx(alone.scores, abs=1e-5)
    assert first["text"] == alone.text and first["score"] == first["outputs"][0]["score"]
    for output, tokens in zip(first["outputs"], alone.tokens, strict=True):  # EOS included
        assert [t["token"] for t in output["tokens"]] == [piece for piece, _ in tokens]
        assert [t["log_prob"] for t in output["tokens"]] == pytest.approx(
            [logp for _, logp in tokens], abs=1e-5)
        assert "".join(t["token"] for t in output["tokens"]) == output["text"] + "<eos>"
    greedy = load_evaluator("builtin:translate-dates").decode(["<en> 3 March 2001"])[0]
    assert sum(logp for _, logp in greedy.tokens[0]) == pytest.approx(greedy.scores[0])
    assert first["decoding"]["beam"] == 5 and first["decoding"]["n_best"] == 3
    assert first["batch_size"] == 2 and first["time_ms"] > 0
    assert blank["text"] == "" and blank["outputs"] == [] and last["text"] == "1999-05-12"


def test_translate_reads_stdin_and_prints_each_line_as_it_is_decoded():
    proc = subprocess.Popen([sys.executable, "-m", "attnkit", "translate", "--checkpoint",
                             "builtin:translate-dates", "--beam", "1", "-"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
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


def test_read_takes_paths_from_stdin_and_goes_on_past_a_bad_one(tmp_path, capsys,
                                                                 monkeypatch):
    lines = generate_lines(2, split="test", seed=5, min_chars=5, max_chars=20)
    paths = []
    for i, (image, _) in enumerate(lines):
        paths.append(tmp_path / f"l{i}.png")
        Image.fromarray(image.numpy()).save(paths[-1])
    missing = tmp_path / "missing.png"
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{paths[0]}\n{missing}\n{paths[1]}\n"))
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
    assert main(["transcribe", "--checkpoint", "builtin:asr-digits", "--plot", str(tmp_path),
                 "-"]) == 2
    assert "--plot and --html need them all at once" in capsys.readouterr().err


def test_transcribe_json_has_scores(tmp_path, capsys):
    t = torch.arange(12000) / 16000
    wav = write_wav(tmp_path / "a.wav", 0.3 * torch.sin(2 * torch.pi * 300 * t), 16000)
    assert main(["transcribe", "--checkpoint", "builtin:asr-digits", "--json", "--beam", "2",
                 "--n-best", "2", str(wav)]) == 0
    (record,) = _records(capsys.readouterr().out)
    assert record["input"] == str(wav) and len(record["outputs"]) == 2
    assert all(isinstance(o["score"], float) for o in record["outputs"])


def test_caption_and_ask_json(tiny_captioner, tiny_vqa, tmp_path, capsys):
    picture = tmp_path / "p.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (32, 32, 3), np.uint8)).save(
        picture)
    assert main(["caption", "--checkpoint", str(tiny_captioner), "--json", str(picture)]) == 0
    (caption,) = _records(capsys.readouterr().out)
    assert set(caption) == KEYS and isinstance(caption["score"], float)
    evaluator = load_evaluator(tiny_vqa)
    question = " ".join(evaluator.words.symbols[4:6])
    assert main(["ask", "--checkpoint", str(tiny_vqa), "--json", str(picture), question]) == 0
    (answer,) = _records(capsys.readouterr().out)
    assert answer["input"] == question and answer["text"] in evaluator.answers
    assert answer["score"] <= 0  # the answer's log-probability


def test_ask_reads_questions_from_stdin_about_one_image(tiny_vqa, tmp_path, capsys,
                                                        monkeypatch):
    picture = tmp_path / "p.png"
    Image.fromarray(np.random.default_rng(1).integers(0, 255, (32, 32, 3), np.uint8)).save(
        picture)
    evaluator = load_evaluator(tiny_vqa)
    question = " ".join(evaluator.words.symbols[4:6])
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{question}\nzzzunknownword\n{question}\n"))
    assert main(["ask", "--checkpoint", str(tiny_vqa), "--json", str(picture), "-"]) == 2
    first, bad, last = _records(capsys.readouterr().out)
    assert first["input"] == last["input"] == question and first["text"] == last["text"]
    assert "zzzunknownword" in bad["error"]
    monkeypatch.setattr(sys, "stdin", io.StringIO(f"{question}\n"))
    assert main(["ask", "--checkpoint", str(tiny_vqa), str(tmp_path / "none.png"), "-"]) != 0
    assert "none.png" in capsys.readouterr().err
