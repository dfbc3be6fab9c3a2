"""``python -m benchmarks.opennmt_py``: attnkit's Transformer converted to OpenNMT-py gives the
same teacher-forced log-probabilities under OpenNMT-py's own loader (one head and several,
shared and separate embeddings), the benchmark runs end to end on a tiny corpus, and bad
arguments give one-line errors. The tests that run OpenNMT-py skip where its private folder
(``python -m benchmarks.opennmt_py --install build/onmt-py``) is absent, as in CI."""

import gzip
import json
import math
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from attnkit.data import SubwordVocab, pad_batch
from attnkit.models import Transformer, model_config
from attnkit.models.registry import Model
from attnkit.tokens import BOS, EOS
from attnkit.train import save_checkpoint
from benchmarks import opennmt_py

ONMT = Path(__file__).resolve().parents[1] / "build" / "onmt-py"
needs_onmt = pytest.mark.skipif(
    not (ONMT / "onmt").is_dir(),
    reason=f"OpenNMT-py is not installed in {ONMT}: python -m benchmarks.opennmt_py "
    "--install build/onmt-py",
)
EN = ["A dog runs in the park.", "Two men sit on a bench.", "A girl sings a song."]
DE = ["Ein Hund rennt im Park.", "Zwei Männer sitzen auf einer Bank.", "Ein Mädchen singt."]
# Per-token log-probabilities, OpenNMT-py against attnkit, float32: the same operations in
# other groupings (fused attention kernels against OpenNMT-py's matmuls), so each dot product
# of n <= 48 terms is exact to about n * 2^-24 of its terms' magnitudes; through 2 + 2 layers
# on activations of order 1 to 10 that stays well under 1e-4 (seen: under 1e-5).
TOL = 1e-4


@pytest.fixture(scope="module")
def vocab():
    return SubwordVocab.build(EN + DE, size=60)


def save_translation(path: Path, model: Model, vocab) -> Path:
    """``model`` saved at ``path`` as a translation checkpoint with ``vocab`` on both sides."""
    save_checkpoint(
        path,
        model=model,
        config={"task": "translate", "model": model_config(model)},
        vocab={"src": vocab.to_json(), "tgt": vocab.to_json()},
    )
    return path


def _model(vocab, *, heads: int, shared: bool, seed: int) -> Transformer:
    torch.manual_seed(seed)
    v = len(vocab)
    model = Transformer(
        v, v, d_model=16, heads=heads, layers=2, ff=48, dropout=0.0, shared_embeddings=shared
    )
    with torch.no_grad():  # random LayerNorms and output bias: every tensor is checked
        for name, p in model.named_parameters():
            if "norm" in name or name == "out_bias":
                p.add_(0.3 * torch.randn_like(p))
    return model.eval()


def test_onmt_names_replace_the_special_tokens_only(vocab):
    tokens = opennmt_py.onmt_tokens(vocab)
    assert tokens[:4] == ["<blank>", "<s>", "</s>", "<unk>"]
    assert tokens[4:] == [vocab.sp.id_to_piece(i) for i in range(4, len(vocab))]


def test_the_converted_state_names_every_weight_once(vocab):
    model = _model(vocab, heads=2, shared=True, seed=0)
    state, generator = opennmt_py.onmt_state(model)
    assert torch.equal(generator["weight"], model.tgt_embed.weight)
    assert torch.equal(generator["bias"], model.out_bias)
    q = state["decoder.transformer_layers.1.context_attn.linear_query.weight"]
    assert torch.equal(q, model.decoder[1].cross_attn.q_proj.weight)
    pe = state["encoder.embeddings.make_embedding.pe.pe"]
    assert pe.shape == (opennmt_py.PE_ROWS, 1, 16)
    # OpenNMT-py's interleaved sinusoids: sin, cos of position / 10000^(2i/D)
    assert torch.allclose(pe[1, 0, :2], torch.tensor([math.sin(1.0), math.cos(1.0)]))


@needs_onmt
@pytest.mark.parametrize("heads,shared", [(2, True), (1, False)])
def test_opennmt_py_gives_attnkit_log_probs(vocab, tmp_path, heads, shared):
    model = _model(vocab, heads=heads, shared=shared, seed=heads)
    path = opennmt_py.convert(model, vocab, tmp_path / "onmt")
    src = [vocab.encode(s) for s in EN]
    tgt = [[BOS, *vocab.encode(t), EOS] for t in DE]
    theirs = opennmt_py.onmt_log_probs(ONMT, path, src, tgt)
    (s, s_len), (t, _) = pad_batch(src), pad_batch(tgt)
    with torch.no_grad():
        ours = F.log_softmax(model(s, s_len, t[:, :-1])[0], dim=-1)  # (B, T - 1, V)
    for i, row in enumerate(tgt):
        assert theirs[i].shape == (len(row) - 1, len(vocab))
        torch.testing.assert_close(theirs[i], ours[i, : len(row) - 1], atol=TOL, rtol=0)
    # not vacuous: the rows differ from one another and are not uniform
    assert (ours[0, 0] - ours[1, 0]).abs().max() > 1e-2 and ours[0, 0].std() > 1e-2


def _write(folder: Path, name: str, lines: list[str]) -> None:
    with gzip.open(folder / name, "wt", encoding="utf-8") as f:
        f.write("".join(line + "\n" for line in lines))


@needs_onmt
def test_the_benchmark_decodes_with_both_engines(vocab, tmp_path, capsys):
    ckpt = save_translation(tmp_path / "ckpt", _model(vocab, heads=2, shared=True, seed=3), vocab)
    _write(tmp_path, "test_2016_flickr.en.gz", EN)
    _write(tmp_path, "test_2016_flickr.de.gz", DE)
    report = tmp_path / "r.json"
    argv = ["--checkpoint", str(ckpt), "--data", str(tmp_path), "--onmt", str(ONMT)]
    argv += ["--beam", "2", "--batch", "2", "--max-length", "6", "--threads", "1"]
    assert opennmt_py.main([*argv, "--json", str(report)]) == 0
    assert "| OpenNMT-py 3.5.1 |" in capsys.readouterr().out
    data = json.loads(report.read_text())
    assert [r["sentences"] for r in data["rows"]] == [3, 3, 3]
    assert [r["engine"].split(", ")[-1] for r in data["rows"][1:]] == [
        "beam_stop bound",
        "beam_stop best",
    ]
    assert data["versions"]["OpenNMT-py"] == "3.5.1" and data["beam"] == 2
    # the same model, search and limit: the same outputs, unless scores tie
    assert data["rows"][2]["identical"] >= 2


@pytest.mark.parametrize(
    "argv,message",
    [
        (["--beam", "0"], "--beam: expected an int in [1, 64], got 0"),
        (["--batch", "-3"], "--batch: expected an int in [1, 1024], got -3"),
        (["--threads", "0"], "--threads: expected an int in [1, 256], got 0"),
        (["--max-length", "100000"], "--max-length: expected an int in [1, 1024], got 100000"),
        (["--limit", "0"], "--limit: expected a positive int, got 0"),
    ],
)
def test_bad_arguments_give_one_line(argv, message, capsys):
    assert opennmt_py.main(["--checkpoint", "x", *argv]) == 2
    err = capsys.readouterr().err
    assert err == f"error: {message}\n"


def test_missing_inputs_are_named(tmp_path, capsys):
    assert opennmt_py.main(["--beam", "5"]) == 2
    assert (
        capsys.readouterr().err == "error: --checkpoint: expected a checkpoint (or --install DIR)\n"
    )
    argv = ["--checkpoint", "x", "--data", str(tmp_path), "--onmt", str(tmp_path / "none")]
    assert opennmt_py.main(argv) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: --onmt: no OpenNMT-py installed in {tmp_path / 'none'}")
    assert err.count("\n") == 1
    assert opennmt_py.main(["--checkpoint", str(tmp_path / "nothing"), "--convert", "o"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and str(tmp_path / "nothing") in err and err.count("\n") == 1
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "x.txt").write_text("x")
    assert opennmt_py.main(["--install", str(tmp_path / "other")]) == 2
    assert "holds other files" in capsys.readouterr().err
