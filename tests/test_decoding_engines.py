"""``python -m benchmarks.decoding_engines`` on a tiny randomly initialised translation
Transformer and a corpus in Multi30k's layout, written here: the table and JSON have a row per
engine, thread count, beam and batch; the engines translate as attnkit does where they decode
by the same rules (ONNX float32: greedy and beam search, any batch; CTranslate2 float32:
greedy, one sentence a call, no loop stop); an engine that cannot run is a row saying why;
bad arguments are one line naming the option."""

import gzip
import json

import pytest
import torch

from attnkit.data import SubwordVocab
from attnkit.models import Seq2Seq, Transformer, model_config
from attnkit.train import save_checkpoint
from benchmarks import decoding_engines as engines

pytest.importorskip("sentencepiece")

EN = [
    "A dog runs in the park.",
    "Two men sit on a bench.",
    "A girl sings a song.",
    "A black cat sleeps.",
    "People walk down the street.",
    "A boy plays with a red ball.",
    "The woman reads a book.",
    "Three children are swimming.",
]
DE = [
    "Ein Hund rennt im Park.",
    "Zwei Männer sitzen auf einer Bank.",
    "Ein Mädchen singt ein Lied.",
    "Eine schwarze Katze schläft.",
    "Leute gehen die Straße entlang.",
    "Ein Junge spielt mit einem roten Ball.",
    "Die Frau liest ein Buch.",
    "Drei Kinder schwimmen.",
]


def _write(folder, name, lines):
    with gzip.open(folder / name, "wt", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


def _checkpoint(folder, model, vocab):
    save_checkpoint(
        folder,
        model=model,
        config={"task": "translate", "model": model_config(model), "max_len_extra": 6},
        vocab={"src": vocab.to_json(), "tgt": vocab.to_json()},
    )
    return str(folder)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """``(data folder, checkpoint)``: the test set, and a random Transformer over a shared
    SentencePiece vocabulary, its weights moved off their initial values (varied outputs)."""
    root = tmp_path_factory.mktemp("m30k")
    _write(root, "test_2016_flickr.en.gz", EN)
    _write(root, "test_2016_flickr.de.gz", DE)
    vocab = SubwordVocab.build((EN + DE) * 4, size=60)
    torch.manual_seed(0)
    model = Transformer(len(vocab), len(vocab), d_model=16, heads=2, layers=2, ff=32, dropout=0.0)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return root, _checkpoint(root / "ck", model.eval(), vocab)


def test_table_and_json_have_a_row_per_configuration(corpus, tmp_path, capsys):
    data, checkpoint = corpus
    out = tmp_path / "engines.json"
    argv = ["--data", str(data), "--checkpoint", checkpoint, "--threads", "1"]
    argv += ["--beams", "1", "2", "--batches", "1", "3", "--json", str(out)]
    assert engines.main(argv) == 0
    printed = capsys.readouterr().out
    assert "| engine | threads | beam | batch | sentences/s | tokens/s | s | BLEU |" in printed
    report = json.loads(out.read_text())
    assert report["sentences"] == len(EN) and report["test_set"] == "test_2016_flickr"
    assert "nrefs:1|case:mixed" in report["bleu_signature"]
    rows = report["rows"]
    assert [(r["engine"], r["beam"], r["batch"]) for r in rows] == [
        (e, beam, batch) for e in engines.ENGINES for beam in (1, 2) for batch in (1, 3)
    ]
    for row in rows:
        assert row["status"] == "ok" and row["threads"] == 1, row
        assert row["sentences_per_s"] > 0 and row["target_tokens"] > 0
        assert row["tokens_per_s"] == pytest.approx(row["target_tokens"] / row["s"], rel=0.01)
        assert 0 <= row["bleu"] <= 100
        assert f"| {row['engine']} | 1 | {row['beam']} | {row['batch']} |" in printed
    # ONNX float32 decodes as attnkit: the same outputs, so the same target tokens
    pairs = {(r["engine"], r["beam"], r["batch"]): r["target_tokens"] for r in rows}
    for beam in (1, 2):
        for batch in (1, 3):
            assert pairs["onnx", beam, batch] == pairs["torch", beam, batch]
    assert any("CTranslate2 float32 / attnkit (PyTorch), beam 1" in t for t in report["targets"])


@pytest.fixture(scope="module")
def exports(corpus, tmp_path_factory):
    """Each engine's export of the corpus's checkpoint."""
    _, checkpoint = corpus
    tmp = tmp_path_factory.mktemp("exports")
    folders = {}
    for engine in engines.ENGINES:
        folder, why = engines.prepare(engine, checkpoint, tmp)
        assert why is None, why
        folders[engine] = folder
    return folders


def _translate(engine, corpus, exports, beam, batch, loop_stop=True):
    _, checkpoint = corpus
    return engines.open_engine(engine, checkpoint, exports[engine], loop_stop)(EN, beam, batch)


@pytest.mark.parametrize("beam, batch", [(1, 1), (1, 3), (3, 1), (3, 8)])
def test_onnx_float32_translates_as_attnkit(corpus, exports, beam, batch):
    ours = _translate("torch", corpus, exports, beam, batch)
    assert _translate("onnx", corpus, exports, beam, batch) == ours
    assert len({text for text, _ in ours}) >= 4  # outputs as varied as the inputs
    assert all(n > 0 for _, n in ours)


def test_ctranslate2_float32_greedy_is_attnkits(corpus, exports):
    # one sentence a call: CTranslate2's length limit is then the sentence's own, as attnkit's
    ours = _translate("torch", corpus, exports, 1, 1, loop_stop=False)
    assert _translate("ct2", corpus, exports, 1, 1) == ours
    # the int8 engines translate every sentence too (their rounding may change outputs)
    for engine in ("onnx-int8", "ct2-int8"):
        theirs = _translate(engine, corpus, exports, 1, 3)
        assert len(theirs) == len(EN) and all(n > 0 for _, n in theirs)


def test_an_engine_that_cannot_run_is_a_row_saying_why(tmp_path, corpus, capsys):
    data, _ = corpus
    vocab = SubwordVocab.build((EN + DE) * 4, size=60)
    rnn = _checkpoint(tmp_path / "rnn", Seq2Seq(len(vocab), len(vocab), emb=8, hidden=8), vocab)
    out = tmp_path / "engines.json"
    argv = ["--data", str(data), "--checkpoint", rnn, "--engines", "ct2", "ct2-int8"]
    assert engines.main([*argv, "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert [(r["engine"], r["status"]) for r in rows] == [
        ("ct2", "unavailable"),
        ("ct2-int8", "unavailable"),
    ]
    assert "takes the Transformer only, got a seq2seq model" in rows[0]["note"]
    assert (
        "| ct2 | | | | unavailable: attnkit export: model: CTranslate2" in capsys.readouterr().out
    )


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--beams", "0"], "--beams: expected ints in [1, 256], got '0'"),
        (["--beams", "5", "100000"], "--beams: expected ints in [1, 256], got '100000'"),
        (["--batches", "-1"], "--batches: expected ints in [1, 65536], got '-1'"),
        (["--batches", "x"], "--batches: expected ints in [1, 65536], got 'x'"),
        (["--threads", "9999"], "--threads: expected ints in [1, "),
        (["--limit", "0"], "--limit: expected ints in [1, "),
        (["--engines", "opennmt"], "--engines: expected some of torch, onnx"),
        (["--time-budget", "-5"], "--time-budget: expected ints in [1, "),
        (["--pair", "de-en"], "argument --pair: invalid choice: 'de-en'"),
    ],
)
def test_bad_arguments_are_one_line_naming_the_option(corpus, capsys, extra, message):
    data, checkpoint = corpus
    argv = ["--data", str(data), "--checkpoint", checkpoint, *extra]
    try:
        code = engines.main(argv)
    except SystemExit as exc:  # argparse's own checks
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err


def test_missing_data_and_checkpoint_are_named(tmp_path, corpus, capsys):
    data, checkpoint = corpus
    assert engines.main(["--data", str(tmp_path), "--checkpoint", checkpoint]) == 2
    assert "--data: no test_2016_flickr.en.gz in" in capsys.readouterr().err
    assert engines.main(["--data", str(data), "--checkpoint", str(tmp_path)]) == 2
    assert "--checkpoint: no checkpoint in" in capsys.readouterr().err
