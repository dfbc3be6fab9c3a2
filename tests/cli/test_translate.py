"""train translate -> translate -> eval, end to end on tiny data, and bad files."""

import errno
import json
import os
import re

import pytest

from attnkit.cli.main import main
from attnkit.train import load_checkpoint


def test_train_translate_eval_and_resume(tmp_path, capsys):
    tsv = tmp_path / "pairs.tsv"
    pairs = [
        (f"<en> {w}", str(n))
        for n, w in enumerate(["zero", "one", "two", "three", "four", "five", "six", "seven"])
    ]
    tsv.write_text("".join(f"{s}\t{t}\n" for s, t in pairs), encoding="utf-8")
    out = tmp_path / "run"
    args = [
        "train",
        "translate",
        "--train",
        str(tsv),
        "--valid",
        str(tsv),
        "--out",
        str(out),
        "--steps",
        "60",
        "--eval-every",
        "30",
        "--checkpoint-every",
        "30",
        "--batch-size",
        "8",
        "--lr",
        "1e-2",
        "--warmup",
        "5",
        "--hidden",
        "32",
        "--emb",
        "16",
        "--no-progress",
        "--plot",
        "2",
    ]
    assert main(args) == 0
    text = capsys.readouterr().out
    assert re.search(r"stopped after 60 steps \(max_steps\); held-out: accuracy", text)
    assert (out / "attention_0.png").exists() and (out / "history.json").exists()
    assert main(args[:-2] + ["--steps", "90", "--resume"]) == 0
    assert "stopped after 90 steps" in capsys.readouterr().out
    ck = str(out / "checkpoint")
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                ck,
                "<en> three",
                "<en> seven",
                "--beam",
                "2",
                "--plot",
                str(tmp_path / "plots"),
            ]
        )
        == 0
    )
    lines = capsys.readouterr().out.splitlines()
    assert len([ln for ln in lines if not ln.startswith("  wrote")]) == 2
    assert (tmp_path / "plots" / "attention_1.png").exists()
    assert main(["eval", "--checkpoint", ck, "--data", str(tsv), "--json"]) == 0
    scores = json.loads(capsys.readouterr().out)["metrics"]
    assert set(scores) == {"exact", "cer", "bleu", "bleu_char", "chrf"} and 0 <= scores["cer"]


def test_bad_files_give_messages_not_tracebacks(tmp_path, capsys):
    bad = tmp_path / "bad.tsv"
    bad.write_text("one 1\n", encoding="utf-8")
    assert main(["train", "translate", "--train", str(bad), "--out", str(tmp_path / "r")]) == 2
    assert "bad.tsv:1: expected source<TAB>target" in capsys.readouterr().err
    (tmp_path / "ck").mkdir()
    (tmp_path / "ck" / "config.json").write_text("{}")
    assert main(["translate", "--checkpoint", str(tmp_path / "ck"), "x"]) == 2
    assert "not an attnkit checkpoint" in capsys.readouterr().err


def test_cli_refuses_to_overwrite_a_run_and_bad_arguments(tmp_path, capsys):
    import pytest

    (tmp_path / "run" / "checkpoint").mkdir(parents=True)
    assert main(["train", "translate", "--out", str(tmp_path / "run"), "--n-train", "10"]) == 2
    assert "already holds a checkpoint; pass --resume" in capsys.readouterr().err
    for bad in (["--tasks", "poems"], ["--steps", "0"], ["--batch-size", "-1"]):
        with pytest.raises(SystemExit) as exc:
            main(["train", "translate", "--out", str(tmp_path / "x"), *bad])
        assert exc.value.code == 2
    assert "invalid positive int value: '-1'" in capsys.readouterr().err


def test_reverse_outputs_have_room_for_the_longest_targets():
    from attnkit.data import generate_pairs
    from attnkit.tasks.translate import TranslateTask

    train = generate_pairs(2000, seed=0, direction="reverse")
    task = TranslateTask(train, train[:10], model_config={"kind": "none"})
    longest = max(len(t) for _, t in train)
    shortest_source = min(len(task.src_vocab.encode(s)) for s, _ in train)
    assert 3 * shortest_source + task.max_len_extra >= longest + 1  # + EOS


def test_transformer_with_subwords_and_scheduled_sampling_then_sampled_outputs(tmp_path, capsys):
    tsv = tmp_path / "pairs.tsv"
    words = ["zero", "one", "two", "three", "four", "five", "six", "seven"]
    tsv.write_text("".join(f"<en> {w}\t{n}\n" for n, w in enumerate(words)), encoding="utf-8")
    out = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "translate",
                "--model",
                "transformer",
                "--train",
                str(tsv),
                "--out",
                str(out),
                "--steps",
                "40",
                "--eval-every",
                "20",
                "--batch-size",
                "8",
                "--hidden",
                "32",
                "--heads",
                "2",
                "--layers",
                "1",
                "--teacher-forcing",
                "1.0",
                "--teacher-forcing-end",
                "0.7",
                "--teacher-forcing-steps",
                "30",
                "--vocab",
                "bpe",
                "--vocab-size",
                "40",
                "--no-progress",
                "--plot",
                "1",
            ]
        )
        == 0
    )
    assert "stopped after 40 steps" in capsys.readouterr().out
    assert (out / "attention_0.png").exists()
    config = json.loads((out / "checkpoint" / "config.json").read_text())["config"]
    assert config["model"]["name"] == "transformer"
    vocab = json.loads((out / "checkpoint" / "vocab.json").read_text())
    assert vocab["src"]["type"] == vocab["tgt"]["type"] == "sentencepiece"
    assert config["batching"]["teacher_forcing"] == {
        "start": 1.0,
        "end": 0.7,
        "steps": 30,
        "shape": "linear",
    }
    ck = str(out / "checkpoint")
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                ck,
                "<en> three",
                "--sample",
                "4",
                "--temperature",
                "1.5",
                "--seed",
                "3",
            ]
        )
        == 0
    )
    first = capsys.readouterr().out.splitlines()
    assert len(first) == 4
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                ck,
                "<en> three",
                "--sample",
                "4",
                "--temperature",
                "1.5",
                "--seed",
                "3",
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.splitlines() == first  # seeded
    assert (
        main(["translate", "--checkpoint", ck, "<en> three", "--sample", "2", "--top-p", "1.5"])
        == 2
    )
    assert "--top-p: expected a probability in (0, 1]" in capsys.readouterr().err
    assert (
        main(
            [
                "train",
                "translate",
                "--train",
                str(tsv),
                "--out",
                str(tmp_path / "r2"),
                "--teacher-forcing-end",
                "1.2",
            ]
        )
        == 2
    )
    assert "teacher forcing end: expected a probability in [0, 1]" in capsys.readouterr().err


def test_a_picture_that_cannot_be_written_is_one_line(
    tiny_translator, tmp_path, capsys, monkeypatch
):
    # a full disk under --plot (or demo-out) was an OSError traceback
    from matplotlib.figure import Figure

    def full(self, path, **kwargs):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC), str(path))

    monkeypatch.setattr(Figure, "savefig", full)
    plots = tmp_path / "plots"
    assert (
        main(
            ["translate", "--checkpoint", str(tiny_translator), "<en> three", "--plot", str(plots)]
        )
        == 2
    )
    assert capsys.readouterr().err == (
        f"attnkit: {plots / 'attention_0.png'}: No space left on device\n"
    )


def test_training_breaks_ties_of_exact_match_by_cer(tiny_translator):
    # exact match stayed 0 while CER fell 4.67 -> 0.86, and checkpoint-best kept the first
    state = json.loads((tiny_translator / "trainer.json").read_text())
    assert state["train_config"]["metric"] == "accuracy"
    assert state["train_config"]["tiebreak"] == "-cer"
    best = json.loads((tiny_translator.parent / "checkpoint-best" / "trainer.json").read_text())
    assert best["tiebreak"] == "-cer" and best["tiebreak_value"] <= 0


@pytest.mark.parametrize(
    ("best_by", "metric", "tiebreak"),
    [(None, "bleu", "chrf"), ("loss", "-loss", None), ("chrf", "chrf", "bleu")],
)
def test_checkpoint_best_is_chosen_by_bleu_on_a_corpus_unless_told(
    tmp_path, tsv, best_by, metric, tiebreak
):
    out = tmp_path / "run"
    options = [] if best_by is None else ["--best-by", best_by]
    argv = ["train", "translate", "--train", str(tsv), "--out", str(out), "--steps", "4"]
    argv += ["--eval-every", "2", "--hidden", "8", "--emb", "8", "--no-progress", "--plot", "0"]
    assert main(argv + options) == 0
    state = json.loads((out / "checkpoint" / "trainer.json").read_text())
    assert (state["train_config"]["metric"], state["train_config"]["tiebreak"]) == (
        metric,
        tiebreak,
    )
    history = json.loads((out / "history.json").read_text())
    best = json.loads((out / "checkpoint-best" / "trainer.json").read_text())
    sign, name = (-1, metric[1:]) if metric.startswith("-") else (1, metric)
    assert best["value"] == max(sign * h[name] for h in history)
    assert {"bleu", "chrf", "loss", "accuracy", "cer"} <= set(history[0])


def test_unlikelihood_is_an_option_kept_in_the_checkpoint(tmp_path, tsv, capsys):
    out = tmp_path / "run"
    argv = ["train", "translate", "--train", str(tsv), "--out", str(out), "--steps", "2"]
    argv += ["--hidden", "8", "--emb", "8", "--no-progress", "--plot", "0"]
    assert main([*argv, "--unlikelihood", "0.3"]) == 0
    assert load_checkpoint(out / "checkpoint").config["batching"]["unlikelihood"] == 0.3
    with pytest.raises(SystemExit):
        main([*argv, "--unlikelihood", "-1"])
    assert "--unlikelihood: invalid non-negative number value: '-1'" in capsys.readouterr().err


def test_a_shared_vocabulary_ties_the_transformers_embeddings(tmp_path, tsv):
    out = tmp_path / "run"
    argv = ["train", "translate", "--train", str(tsv), "--out", str(out), "--steps", "2"]
    argv += ["--model", "transformer", "--hidden", "8", "--heads", "2", "--layers", "1"]
    argv += ["--vocab", "unigram", "--vocab-size", "40", "--shared-vocab", "--no-progress"]
    assert main([*argv, "--plot", "0"]) == 0
    ck = load_checkpoint(out / "checkpoint")
    assert ck.vocab["src"] == ck.vocab["tgt"]
    assert ck.config["model"]["shared_embeddings"] is True
    assert [k for k in ck.model_state if "embed" in k] == ["tgt_embed.weight"]
    assert main(["translate", "--checkpoint", str(out / "checkpoint"), "<en> three"]) == 0


def test_a_corpus_recipe_without_its_corpus_is_refused(tmp_path, capsys):
    assert main(["train", "translate", "--recipe", "multi30k-en-de", "--out", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        "attnkit: --recipe multi30k-en-de: give the corpus: --train train.en.gz train.de.gz "
        "(and --valid: docs/translation.md)\n"
    )
