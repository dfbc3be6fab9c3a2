"""benchmarks.opennmt_py_training: the recipe in OpenNMT-py's options, the files it trains on,
the checkpoints by age and attnkit's validation curve beside them."""

import gzip
import json
import os
from pathlib import Path

import pytest
import torch
import yaml

from attnkit.data import SubwordVocab
from attnkit.models import Seq2Seq, Transformer
from benchmarks import opennmt_py_training as T
from tests.test_opennmt_py_benchmark import save_translation

EN = ["A dog runs in the park.", "Two men sit on a bench.", "A girl sings a song."]
DE = ["Ein Hund rennt im Park.", "Zwei Männer sitzen auf einer Bank.", "Ein Mädchen singt."]


def _write(folder: Path, name: str, lines: list[str]) -> None:
    with gzip.open(folder / name, "wt", encoding="utf-8") as f:
        f.write("".join(f"{x}\n" for x in lines))


def test_the_config_is_the_recipe_in_opennmt_py_options():
    cfg = yaml.safe_load(T.config(250))
    assert (cfg["hidden_size"], cfg["heads"], cfg["enc_layers"], cfg["dec_layers"]) == (
        256,
        4,
        3,
        3,
    )
    assert cfg["transformer_ff"] == 1024 and cfg["dropout"] == [0.2]
    assert cfg["batch_size"] == 128 and cfg["batch_type"] == "sents"
    assert cfg["label_smoothing"] == 0.1 and cfg["max_grad_norm"] == 1.0
    assert cfg["share_embeddings"] and cfg["share_decoder_embeddings"]
    assert cfg["save_checkpoint_steps"] == 250 and cfg["keep_checkpoint"] == -1
    # noam: lr * d^-0.5 * min(step^-0.5, step * warmup^-1.5): 1e-3 at the warm-up's end
    lr, d, w = cfg["learning_rate"], cfg["hidden_size"], cfg["warmup_steps"]
    assert cfg["decay_method"] == "noam" and w == 400
    assert lr * d**-0.5 * w**-0.5 == pytest.approx(1e-3, rel=1e-5)


def test_the_rnn_config_is_the_rnn_recipe_with_the_same_training_options():
    rnn, transformer = (yaml.safe_load(T.config(250, m)) for m in ("rnn", "transformer"))
    assert (rnn["encoder_type"], rnn["decoder_type"], rnn["rnn_type"]) == ("brnn", "rnn", "GRU")
    assert rnn["global_attention"] == "general" and rnn["input_feed"] == 1 and rnn["bridge"]
    assert (rnn["hidden_size"], rnn["word_vec_size"], rnn["dropout"]) == (256, 256, [0.3])
    assert not rnn["share_embeddings"] and "heads" not in rnn
    same = ("batch_size", "learning_rate", "decay_method", "warmup_steps", "label_smoothing")
    assert all(rnn[k] == transformer[k] for k in same)


@pytest.mark.parametrize("model", ["transformer", "rnn"])
def test_prepare_writes_the_corpus_the_pieces_and_the_config(tmp_path, model):
    """Either recipe's checkpoint gives the vocabulary (the RNN run's own, for --model rnn)."""
    vocab = SubwordVocab.build(EN + DE, size=60)
    torch.manual_seed(0)
    v = len(vocab)
    if model == "rnn":
        net = Seq2Seq(v, v, kind="luong", emb=8, hidden=8, input_feeding=True)
    else:
        net = Transformer(v, v, d_model=16, heads=2, layers=1, ff=32, shared_embeddings=True)
    ckpt = save_translation(tmp_path / "ckpt", net, vocab)
    data = tmp_path / "data"
    data.mkdir()
    for part in ("train", "val"):
        _write(data, f"{part}.en.gz", EN)
        _write(data, f"{part}.de.gz", DE)
    out = tmp_path / "onmt"
    T.prepare(out, data, ckpt, 100, model)
    assert (out / "train.de").read_text("utf-8").splitlines() == DE
    assert (out / T.SUBWORDS).read_bytes() == vocab.model
    pieces = [line.split("\t") for line in (out / T.VOCAB).read_text("utf-8").splitlines()]
    assert all(count == "1" and piece.split() == [piece] for piece, count in pieces)
    specials = {"<s>", "</s>", "<unk>", "<pad>"}
    assert len(pieces) == sum(vocab.sp.id_to_piece(i) not in specials for i in range(v))
    options = yaml.safe_load((out / T.CONFIG).read_text())
    assert options["save_checkpoint_steps"] == 100
    assert options["encoder_type"] == {"rnn": "brnn", "transformer": "transformer"}[model]


def test_checkpoints_are_timed_from_the_start_and_picked_before_each_mark(tmp_path):
    (tmp_path / "run").mkdir()
    start = 1_000_000.0
    (tmp_path / T.START).write_text(json.dumps({"start": start, "budget_s": 600}))
    for step, age in ((500, 190.0), (250, 100.0), (750, 290.0)):
        path = tmp_path / "run" / f"model_step_{step}.pt"
        path.write_bytes(b"")
        os.utime(path, (start + age, start + age))
    (tmp_path / "run" / "other.pt").write_bytes(b"")
    saved = T.checkpoints(tmp_path)
    assert [(round(s), step) for s, step, _ in saved] == [(100, 250), (190, 500), (290, 750)]


def test_attnkit_curve_times_each_validation_and_when_bleu_was_reached(tmp_path):
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(str(tmp_path))
    for step in range(1, 4):
        writer.add_scalar("train/loss", 1.0, step, walltime=100.0 + 60 * step)
    writer.close()
    history = [{"step": 1, "bleu": 20.0}, {"step": 2, "bleu": 31.5}, {"step": 3, "bleu": 36.0}]
    (tmp_path / "history.json").write_text(json.dumps(history))
    curve = T.attnkit_curve(tmp_path)
    assert curve == [(0.0, 1, 20.0), (60.0, 2, 31.5), (120.0, 3, 36.0), (120.0, 3, None)]
    assert T.reached(curve[:-1], 30) == 1.0 and T.reached(curve[:-1], 35) == 2.0
    assert T.reached(curve[:-1], 40) is None


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--threads", "0"], "--threads, --save-every, --time-budget: expected positive"),
        (["--time-budget", "nan"], "--threads, --save-every, --time-budget: expected positive"),
        ([], "--checkpoint: expected the attnkit checkpoint of the vocabulary"),
    ],
)
def test_bad_arguments_give_one_line(argv, message, tmp_path, capsys):
    assert T.main(["--data", str(tmp_path), "--out", str(tmp_path / "o"), *argv]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {message}") and err.count("\n") == 1


def test_scoring_a_folder_without_checkpoints_names_it(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(T, "check_install", lambda folder: None)
    (tmp_path / "run").mkdir()
    (tmp_path / T.START).write_text(json.dumps({"start": 0.0, "budget_s": 1}))
    assert T.main(["--data", str(tmp_path), "--out", str(tmp_path), "--score"]) == 2
    assert "no OpenNMT-py checkpoint in" in capsys.readouterr().err


def _scorable(tmp_path):
    """The corpus and an OpenNMT-py folder with checkpoints of steps 250 and 500, saved 100
    and 400 s after its start."""
    data = tmp_path / "data"
    data.mkdir()
    for name in ("val", *T.TEST_SETS):
        _write(data, f"{name}.en.gz", EN)
        _write(data, f"{name}.de.gz", DE)
    out = tmp_path / "onmt"
    (out / "run").mkdir(parents=True)
    (out / T.START).write_text(json.dumps({"start": 1000.0, "budget_s": 600}))
    for step, age in ((250, 100.0), (500, 400.0)):
        path = out / "run" / f"model_step_{step}.pt"
        path.write_bytes(b"")
        os.utime(path, (1000 + age, 1000 + age))
    return data, out


def test_scoring_picks_the_checkpoint_before_each_mark_and_keeps_what_it_scored(
    tmp_path, monkeypatch
):
    data, out = _scorable(tmp_path)
    calls = []

    def fake(onmt, model, folder, texts, beam, threads):
        calls.append((model.name, beam))
        return DE if model.name.endswith("500.pt") else ["Nichts."] * len(texts)

    monkeypatch.setattr(T, "check_install", lambda folder: None)
    monkeypatch.setattr(T, "translate", fake)
    report = tmp_path / "r.json"
    argv = ["--data", str(data), "--out", str(out), "--score", "--minutes", "1", "5", "9"]
    assert T.main([*argv, "--json", str(report)]) == 0
    rows = json.loads(report.read_text())["rows"]
    assert [r["opennmt_py"]["step"] for r in rows] == [250, 500]  # nothing before 1 minute
    assert rows[1]["opennmt_py"]["test_2016_flickr_bleu"] == 100.0
    assert len(calls) == 2 + 3 * 2  # validation of both, the test sets of both
    data_json = json.loads(report.read_text())
    assert data_json["reach_valid_bleu_min"]["opennmt_py"] == {"30": 6.7, "35": 6.7}
    calls.clear()
    assert T.main([*argv, "--json", str(report)]) == 0
    assert calls == []  # all kept in scores.json


def test_attnkit_is_read_at_each_mark_its_run_reached(tmp_path, monkeypatch):
    # a run whose budget is the 5-minute mark ends a moment before it, and is read there
    data, out = _scorable(tmp_path)
    curve = [(60.0, 100, 20.0), (298.0, 200, 25.0), (299.5, 210, None)]
    monkeypatch.setattr(T, "check_install", lambda folder: None)
    monkeypatch.setattr(T, "translate", lambda onmt, model, folder, texts, beam, threads: DE)
    monkeypatch.setattr(T, "attnkit_curve", lambda run: curve)
    report = tmp_path / "r.json"
    argv = ["--data", str(data), "--out", str(out), "--score", "--minutes", "2", "5", "9"]
    assert T.main([*argv, "--attnkit", str(tmp_path), "--json", str(report)]) == 0
    rows = json.loads(report.read_text())["rows"]
    assert [r.get("attnkit") for r in rows] == [
        {"step": 100, "valid_bleu_greedy": 20.0},
        {"step": 200, "valid_bleu_greedy": 25.0},
        None,  # past the run's end
    ]
