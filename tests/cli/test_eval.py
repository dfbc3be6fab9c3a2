"""attnkit eval on checkpoints of every task (captions and answers on built-in scene splits and
the user's folders too), and the decoding options shared by translate, read, transcribe and
eval."""

import json
import re

import pytest
import torch
from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

from attnkit.cli import common
from attnkit.cli.main import build_parser, main
from attnkit.data import (
    generate_lines,
    generate_scenes,
    question_set,
    write_caption_folder,
    write_line_folder,
    write_question_folder,
)
from attnkit.tasks.evaluator import score_examples
from attnkit.tasks.loading import load_evaluator
from tests.cli.test_asr import TINY as ASR_TINY
from tests.cli.test_asr import _write_wav
from tests.cli.test_ocr import TINY as OCR_TINY

WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """Tiny checkpoints of each task (a few steps: the scores do not matter here)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    root = tmp_path_factory.mktemp("runs")
    tsv = root / "pairs.tsv"
    tsv.write_text("".join(f"<en> {w}\t{n}\n" for n, w in enumerate(WORDS)), encoding="utf-8")
    assert (
        main(
            [
                "train",
                "translate",
                "--train",
                str(tsv),
                "--valid",
                str(tsv),
                "--out",
                str(root / "nd"),
                "--steps",
                "30",
                "--eval-every",
                "30",
                "--batch-size",
                "8",
                "--lr",
                "1e-2",
                "--warmup",
                "5",
                "--hidden",
                "16",
                "--emb",
                "8",
                "--no-progress",
                "--plot",
                "0",
            ]
        )
        == 0
    )
    lines = write_line_folder(generate_lines(6, seed=1, max_chars=10), root / "lines").parent
    assert (
        main(
            [
                "train",
                "ocr",
                "--train",
                str(lines),
                "--out",
                str(root / "ocr"),
                "--steps",
                "2",
                "--eval-every",
                "2",
                "--attention",
                "global",
                "--plot",
                "0",
                *OCR_TINY,
            ]
        )
        == 0
    )
    for i, _ in enumerate(WORDS[:4]):
        _write_wav(root / f"w{i}.wav", 0.2 + 0.05 * i, 200 + 150 * i)
    manifest = root / "speech.tsv"
    manifest.write_text("".join(f"w{i}.wav\t{w}\n" for i, w in enumerate(WORDS[:4])))
    assert (
        main(
            [
                "train",
                "asr",
                "--train",
                str(manifest),
                "--out",
                str(root / "asr"),
                "--steps",
                "2",
                "--eval-every",
                "2",
                "--plot",
                "0",
                *ASR_TINY,
            ]
        )
        == 0
    )
    torch.set_num_threads(threads)
    return {
        "root": root,
        "tsv": tsv,
        "lines": lines,
        "manifest": manifest,
        **{task: str(root / task / "checkpoint") for task in ("nd", "ocr", "asr")},
    }


def _eval(capsys, *args) -> dict:
    assert main(["eval", *args, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.usefixtures("one_thread")
def test_eval_scores_every_task_from_its_checkpoint(runs, capsys):
    got = _eval(capsys, "--checkpoint", runs["nd"], "--data", str(runs["tsv"]))
    assert got["task"] == "translate" and got["examples"] == 8
    assert list(got["metrics"]) == ["exact", "cer", "bleu", "bleu_char", "chrf"]
    assert got["signatures"]["bleu"].startswith("nrefs:1|case:mixed|eff:no|tok:13a|")
    history = json.loads((runs["root"] / "nd" / "history.json").read_text())
    assert got["metrics"]["exact"] == pytest.approx(history[-1]["accuracy"])  # as validation
    assert got["metrics"]["cer"] == pytest.approx(history[-1]["cer"])
    for data in (runs["lines"], runs["lines"] / "labels.tsv"):  # the folder or its labels
        got = _eval(capsys, "--checkpoint", runs["ocr"], "--data", str(data))
        assert got["task"] == "ocr" and got["examples"] == 6
        assert list(got["metrics"]) == ["cer", "wer", "exact"]
    got = _eval(capsys, "--checkpoint", runs["asr"], "--data", str(runs["manifest"]))
    assert got["task"] == "asr" and got["examples"] == 4
    assert list(got["metrics"]) == ["cer", "wer", "exact"] and got["metrics"]["cer"] >= 0

    assert main(["eval", "--checkpoint", runs["asr"], "--data", str(runs["manifest"])]) == 0
    table = capsys.readouterr().out.splitlines()
    assert re.match(r".*asr/checkpoint \(asr\) on .*speech.tsv: 4 examples, greedy$", table[0])
    assert [line.split()[0] for line in table[1:]] == ["CER", "WER", "exact"]


def test_training_runs_write_tensorboard_events_with_attention_pictures(runs):
    for task, pictures in (("nd", 2), ("ocr", 2), ("asr", 2)):
        events = EventAccumulator(str(runs["root"] / task))
        events.Reload()
        tags = events.Tags()
        assert {"train/loss", "train/lr", "train/tokens_per_s"} <= set(tags["scalars"])
        assert any(tag.startswith("valid/") for tag in tags["scalars"])
        assert tags["images"] == [f"attention/example_{i}" for i in range(pictures)], task


@pytest.mark.usefixtures("one_thread")
def test_eval_pictures_the_worst_examples(runs, capsys, tmp_path):
    for task, data in (("nd", runs["tsv"]), ("ocr", runs["lines"]), ("asr", runs["manifest"])):
        got = _eval(
            capsys,
            "--checkpoint",
            runs[task],
            "--data",
            str(data),
            "--plot",
            str(tmp_path / task),
            "--worst",
            "2",
        )
        worst = got["worst"]
        assert len(worst) == 2 and worst[0]["cer"] >= worst[1]["cer"]
        for rank, w in enumerate(worst, start=1):
            assert w["picture"] == str(tmp_path / task / f"worst_{rank}.png")
            assert (tmp_path / task / f"worst_{rank}.png").read_bytes()[:4] == b"\x89PNG"
    assert (
        main(
            [
                "eval",
                "--checkpoint",
                runs["nd"],
                "--data",
                str(runs["tsv"]),
                "--plot",
                str(tmp_path / "t"),
                "--worst",
                "1",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    assert re.search(
        r"worst 1 by CER:\n  [\d.]+  .*pairs.tsv:\d: '.*' \(reference '\d'\)  -> "
        r".*worst_1.png",
        out,
    )


@pytest.mark.usefixtures("one_thread")
def test_decoding_options_mean_the_same_on_every_command(runs, capsys):
    ck = runs["nd"]
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                ck,
                "<en> two",
                "--beam",
                "3",
                "--n-best",
                "3",
                "--length-penalty",
                "0.6",
                "--no-repeat-ngram",
                "2",
            ]
        )
        == 0
    )
    assert len(capsys.readouterr().out.splitlines()) == 3  # the 3 best, best first
    draws = [
        "translate",
        "--checkpoint",
        ck,
        "<en> two",
        "<en> six",
        "--sample",
        "4",
        "--temperature",
        "3.0",
        "--seed",
        "2",
    ]
    assert main(draws) == 0
    every = capsys.readouterr().out.splitlines()
    assert len(every) == 8
    assert main(draws + ["--pick", "best"]) == 0
    assert capsys.readouterr().out.splitlines() == [every[0], every[4]]  # the most probable
    assert max(len(line) for line in every) > 2  # hot draws from a barely trained model
    assert main(draws + ["--max-len", "2"]) == 0  # 2 tokens, EOS included: 1 or 2 characters
    assert max(len(line) for line in capsys.readouterr().out.splitlines()) <= 2
    wav = str(runs["root"] / "w0.wav")
    assert (
        main(["transcribe", "--checkpoint", runs["asr"], wav, "--beam", "2", "--n-best", "2"]) == 0
    )
    assert len(capsys.readouterr().out.splitlines()) == 2
    assert (
        main(["transcribe", "--checkpoint", runs["asr"], wav, "--sample", "3", "--pick", "best"])
        == 0
    )
    assert len(capsys.readouterr().out.splitlines()) == 1
    scored = _eval(
        capsys,
        "--checkpoint",
        ck,
        "--data",
        str(runs["tsv"]),
        "--sample",
        "3",
        "--pick",
        "best",
        "--seed",
        "1",
    )
    assert scored["decoding"]["samples"] == 3 and scored["decoding"]["sample"]
    beam = _eval(
        capsys,
        "--checkpoint",
        ck,
        "--data",
        str(runs["tsv"]),
        "--beam",
        "3",
        "--coverage-penalty",
        "0.2",
        "--max-len",
        "4",
    )
    assert beam["decoding"]["beam"] == 3 and beam["decoding"]["max_len"] == 4


@pytest.mark.parametrize(
    "command, beam, length_penalty",
    [
        (["translate"], 5, 1.0),
        (["translate", "--beam", "1"], 1, 0.0),
        (["translate", "--beam", "3", "--length-penalty", "0"], 3, 0.0),
        (["eval", "--data", "x.tsv"], 1, 0.0),
        (["eval", "--data", "x.tsv", "--beam", "4"], 4, 1.0),
    ],
)
def test_a_beam_normalises_by_length_unless_told_otherwise(command, beam, length_penalty):
    args = build_parser().parse_args([*command, "--checkpoint", "ck"])
    chosen = common.decoding(args)
    assert (chosen.beam, chosen.length_penalty) == (beam, length_penalty)
    assert chosen.method == ("greedy" if beam == 1 else "beam")


@pytest.mark.parametrize("command", [["translate"], ["read"], ["transcribe"], ["eval"]])
def test_beam_stop_is_a_beam_option_of_every_command(command, capsys):
    base = [*command, "--checkpoint", "ck", *(["--data", "x.tsv"] if command == ["eval"] else [])]
    parse = build_parser().parse_args
    assert common.decoding(parse([*base, "--beam-stop", "best"])).beam_stop == "best"
    assert common.decoding(parse(base)).beam_stop == "bound"
    with pytest.raises(ValueError, match=r"^--beam-stop: a beam search option"):
        common.decoding(parse([*base, "--sample", "2", "--beam-stop", "best"]))
    with pytest.raises(SystemExit):
        parse([*base, "--beam-stop", "x"])
    assert "argument --beam-stop: invalid choice: 'x'" in capsys.readouterr().err


@pytest.mark.parametrize(
    "command, message",
    [
        (["--n-best", "5", "--beam", "2"], r"--n-best: expected at most --beam \(2\), got 5"),
        (["--n-best", "2"], r"--n-best: expected at most --beam \(1\), got 2"),
        (["--sample", "3", "--beam", "2"], r"--beam: a beam search option; --sample N draws"),
        (
            ["--sample", "3", "--pick", "best", "--length-penalty", "0.5"],
            r"--length-penalty: a beam search option",
        ),
        (["--top-p", "0.9"], r"--top-p: a sampling option; it needs --sample N"),
        (["--pick", "best"], r"--pick: a sampling option"),
        (["--sample", "3"], r"--sample: eval scores one output per input; add --pick best"),
        (["--beam", "3", "--n-best", "2"], r"--n-best: eval scores one output per input, got 2"),
    ],
)
def test_decoding_option_combinations_that_make_no_sense_are_refused(
    runs, capsys, command, message
):
    assert main(["eval", "--checkpoint", runs["nd"], "--data", str(runs["tsv"]), *command]) == 2
    err = capsys.readouterr().err
    assert re.fullmatch(rf"attnkit: {message}.*\n", err), err


@pytest.mark.usefixtures("one_thread")
def test_data_that_does_not_fit_the_checkpoint_is_named(runs, capsys, tmp_path):
    empty = tmp_path / "empty.tsv"
    empty.write_text("\n")
    cases = [
        (
            runs["nd"],
            empty,
            r"empty.tsv: no usable source<TAB>reference lines \(a checkpoint "
            r"of task 'translate' is scored on a TSV of source<TAB>reference "
            r"lines, or a Moses corpus",
        ),
        (runs["asr"], empty, r"empty.tsv: no usable"),
        (
            runs["nd"],
            runs["lines"],
            r"lines: not a regular file \(a folder\) \(a checkpoint "
            r"of task 'translate' is scored on a TSV",
        ),
        (
            runs["ocr"],
            runs["tsv"],
            r"pairs.tsv:1: image '<en> zero' not found in .*\(a "
            r"checkpoint of task 'ocr' is scored on a folder of line "
            r"images with labels.tsv",
        ),
        (runs["ocr"], tmp_path, r"labels.tsv: not found \(a checkpoint of task 'ocr'"),
        (
            runs["asr"],
            runs["tsv"],
            r"<en> zero: cannot read .*\(a checkpoint of task 'asr' is "
            r"scored on a manifest of wav_path<TAB>transcript",
        ),
        (runs["asr"], tmp_path / "missing.tsv", r"missing.tsv: cannot read"),
    ]
    for ck, data, message in cases:
        assert main(["eval", "--checkpoint", ck, "--data", str(data)]) == 2
        err = capsys.readouterr().err
        assert re.fullmatch(rf"attnkit: .*{message}.*\n", err), err
    assert (
        main(["eval", "--checkpoint", runs["ocr"], "--data", str(runs["lines"]), "--max-len", "2"])
        == 2
    )
    assert "max_len: a CTC head reads the best path or a prefix beam" in capsys.readouterr().err
    assert (
        main(
            [
                "read",
                "--checkpoint",
                runs["ocr"],
                str(runs["lines"] / "000000.png"),
                "--max-len",
                "3",
            ]
        )
        == 2
    )
    assert "max_len: a CTC head reads the best path or a prefix beam" in capsys.readouterr().err
    for beam in ("0", "-3", "257"):
        args = ["eval", "--checkpoint", runs["ocr"], "--data", str(runs["lines"]), "--beam", beam]
        try:
            code = main(args)
        except SystemExit as exc:  # argparse's refusal of a value its type rejects
            code = exc.code
        assert code == 2
        err = capsys.readouterr().err.strip().splitlines()[-1]
        assert "--beam" in err, err


@pytest.mark.usefixtures("one_thread")
def test_eval_scores_captions_on_built_in_splits_and_the_users_folder(
    tiny_captioner, capsys, tmp_path
):
    ck = str(tiny_captioner)
    got = _eval(capsys, "--checkpoint", ck, "--data", "scenes:heldout", "--limit", "6")
    assert got["task"] == "caption" and got["examples"] == 6
    assert list(got["metrics"]) == ["bleu", "chrf", "exact", "true_captions", "attention_on_object"]
    evaluator = load_evaluator(tiny_captioner)  # the figures come from the evaluator
    assert got["metrics"] == score_examples(evaluator, evaluator.read("scenes:heldout")[:6]).metrics
    scenes = generate_scenes(3, seed=4, size=32, max_objects=4)
    tsv = write_caption_folder(scenes, tmp_path / "pics")
    for data in (tsv.parent, tsv):
        got = _eval(
            capsys,
            "--checkpoint",
            ck,
            "--data",
            str(data),
            "--beam",
            "3",
            "--plot",
            str(tmp_path / "worst"),
            "--worst",
            "2",
        )
        assert got["examples"] == 3 and got["decoding"]["beam"] == 3
        assert list(got["metrics"]) == ["bleu", "chrf", "exact"]
        assert [w["picture"] for w in got["worst"]] == [
            str(tmp_path / "worst" / f"worst_{rank}.png") for rank in (1, 2)
        ]
        for w in got["worst"]:
            origin = next(
                s
                for s, name in zip(scenes, ("000000", "000001", "000002"))
                if w["origin"].endswith(f"{name}.png")
            )
            assert w["reference"] in origin.captions  # the closest of its references
    assert (tmp_path / "worst" / "worst_2.png").read_bytes()[:4] == b"\x89PNG"
    assert main(["eval", "--checkpoint", ck, "--data", "scenes:test", "--limit", "2"]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].endswith("(caption) on scenes:test: 2 examples, greedy")
    assert [line.split("  ")[1] for line in table[1:]] == [
        "BLEU",
        "chrF",
        "exact match",
        "true captions",
        "attention on object",
    ]


@pytest.mark.usefixtures("one_thread")
def test_eval_scores_answers_by_question_type(tiny_vqa, capsys, tmp_path):
    ck = str(tiny_vqa)
    got = _eval(
        capsys,
        "--checkpoint",
        ck,
        "--data",
        "scenes:test",
        "--limit",
        "40",
        "--plot",
        str(tmp_path / "worst"),
        "--worst",
        "1",
    )
    assert got["task"] == "vqa" and got["examples"] == 40
    metrics = got["metrics"]
    assert list(metrics)[0] == "accuracy" and {
        "accuracy_exist",
        "accuracy_count",
        "accuracy_relational",
    } <= set(metrics)
    [worst] = got["worst"]
    assert worst["cer"] > 0 and (tmp_path / "worst" / "worst_1.png").exists()  # a wrong answer
    images, questions = question_set(generate_scenes(2, seed=5, size=32, max_objects=4))
    tsv = write_question_folder(images, questions, tmp_path / "qs")
    assert main(["eval", "--checkpoint", ck, "--data", str(tsv.parent)]) == 0
    table = capsys.readouterr().out.splitlines()
    assert table[0].endswith(f"(vqa) on {tsv.parent}: {len(questions)} examples, greedy")
    assert [line.split("  ")[1] for line in table[1:]] == ["accuracy", "accuracy, user"]
    assert main(["eval", "--checkpoint", ck, "--data", str(tsv), "--beam", "3"]) == 2
    assert capsys.readouterr().err == (
        "attnkit: decoding: a VQA model answers with its most probable class; decoding options "
        "do not apply, got beam=3, length_penalty=1.0\n"
    )
