"""attnkit export --format ctranslate2: the folder ctranslate2.Translator loads decodes as
attnkit does (greedy and beam search token for token, log-probabilities within float32
tolerance), for every Transformer variant and both vocabulary kinds; int8; what is refused."""

import json
import math

import numpy as np
import pytest
import torch

from attnkit.cli.main import main
from attnkit.data import CharVocab, SubwordVocab, pad_batch
from attnkit.decoding import beam_search, greedy
from attnkit.models import CRNN, Seq2Seq, Transformer, model_config
from attnkit.tokens import BOS, EOS, PAD
from attnkit.train import save_checkpoint

ctranslate2 = pytest.importorskip(
    "ctranslate2", reason="ctranslate2 is not installed: pip install 'attnkit[export]'"
)

from attnkit.export import export_ctranslate2  # noqa: E402
from attnkit.export.ctranslate2_format import CT2_JSON, tokens_of  # noqa: E402

# Per-token log-probabilities, CTranslate2 against PyTorch, float32. Both compute the same
# sums in other orders (oneDNN/MKL GEMMs against PyTorch's): a dot product of n terms is
# exact to about n * u of the sum of its terms' magnitudes (u = 2^-24, Higham's bound),
# n <= ff = 64 here, so 4e-6 relative per product; through 2 + 2 layers of a few products
# each, on activations of order 1 to 10, that stays well under 1e-4 (seen: under 1e-6).
TOL = 1e-4
LETTERS = list("abcdefgh")
MAX_LEN = 20  # attnkit's max_len and CTranslate2's max_decoding_length: the same tokens


def _sources(n: int, vocab_size: int, seed: int) -> list[list[int]]:
    g = torch.Generator().manual_seed(seed)
    return [
        torch.randint(
            4, vocab_size, (int(torch.randint(1, 7, (1,), generator=g)),), generator=g
        ).tolist()
        for _ in range(n)
    ]


@pytest.fixture(scope="module")
def reverser():
    """A Transformer trained 120 steps to reverse strings of 1-6 letters, and its vocab."""
    torch.manual_seed(0)
    vocab = CharVocab(LETTERS)
    v = len(vocab)
    model = Transformer(v, v, d_model=32, heads=4, layers=2, ff=64, dropout=0.0)
    opt = torch.optim.Adam(model.parameters(), lr=3e-3)
    for step in range(120):
        srcs = _sources(32, v, seed=step)
        src, src_len = pad_batch(srcs)
        tgt, _ = pad_batch([[BOS, *s[::-1], EOS] for s in srcs])
        logits, _ = model(src, src_len, tgt[:, :-1])
        loss = torch.nn.functional.cross_entropy(
            logits.reshape(-1, v), tgt[:, 1:].reshape(-1), ignore_index=PAD
        )
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval(), vocab


def _translator(model, vocab, folder, quantize=None, tgt_vocab=None):
    export_ctranslate2(
        model, folder, src_vocab=vocab, tgt_vocab=tgt_vocab or vocab, quantize=quantize
    )
    return ctranslate2.Translator(str(folder), compute_type=quantize or "float32", intra_threads=1)


def _options(folder) -> dict:
    return json.loads((folder / CT2_JSON).read_text())["translate_batch"]


def _attnkit(model, srcs, beam):
    src, src_len = pad_batch(srcs)
    common = dict(batch_size=len(srcs), bos=BOS, eos=EOS, max_len=MAX_LEN, loop_stop=False)
    with torch.no_grad():
        if beam == 1:
            hyp = greedy(model.step, model.start(src, src_len), **common)
        else:  # no length normalisation: CTranslate2's length_penalty=0 is the same ranking
            hyp = beam_search(
                model.step, model.start(src, src_len), beam_size=beam, alpha=0.0, **common
            )
    out = []
    for row in hyp.tokens.tolist():
        ids = [i for i in row if i != PAD]
        out.append(ids[: ids.index(EOS)] if EOS in ids else ids)
    return out


def _ct2(translator, folder, tokens, srcs, beam, **extra):
    options = {**_options(folder), "beam_size": beam, **extra}
    if beam > 1:
        options["length_penalty"] = 0.0
    results = translator.translate_batch(
        [[tokens[i] for i in s] for s in srcs], max_decoding_length=MAX_LEN, **options
    )
    index = {t: i for i, t in enumerate(tokens)}
    return [[index[t] for t in r.hypotheses[0]] for r in results]


@pytest.mark.parametrize("beam", [1, 4])
def test_decodes_token_for_token_as_attnkit(reverser, tmp_path, beam):
    model, vocab = reverser
    translator = _translator(model, vocab, tmp_path / "ct2")
    srcs = _sources(40, len(vocab), seed=1000)
    ours = _attnkit(model, srcs, beam)
    theirs = _ct2(translator, tmp_path / "ct2", tokens_of(vocab), srcs, beam)
    assert theirs == ours
    # a model that reads its input: outputs as varied as the inputs, many right
    assert (
        len({tuple(o) for o in ours}) >= 25 and sum(o == s[::-1] for o, s in zip(ours, srcs)) >= 10
    )


def _log_probs(model, srcs, outs):
    """attnkit's teacher-forced log-probabilities of each output token and EOS."""
    src, src_len = pad_batch(srcs)
    tgt, _ = pad_batch([[BOS, *o, EOS] for o in outs])
    with torch.no_grad():
        logits, _ = model(src, src_len, tgt[:, :-1])
    chosen = torch.log_softmax(logits, -1).gather(2, tgt[:, 1:, None])[..., 0]
    return [chosen[i, : len(o) + 1] for i, o in enumerate(outs)]


def _check_log_probs(model, vocab, translator, folder, srcs):
    tokens = tokens_of(vocab)
    outs = _attnkit(model, srcs, 1)
    scored = translator.score_batch(
        [[tokens[i] for i in s] for s in srcs], [[tokens[i] for i in o] for o in outs]
    )
    for ours, theirs in zip(_log_probs(model, srcs, outs), scored):
        assert torch.tensor(theirs.log_probs) == pytest.approx(ours, abs=TOL)
    # The first step's whole distribution. CTranslate2 keeps no logits of a step that
    # ends with EOS, so EOS is barred there (min_decoding_length=1, its logit the lowest
    # float) and both sides are compared as log-probabilities over the other tokens.
    src, src_len = pad_batch(srcs)
    with torch.no_grad():
        first, _, _ = model.step(torch.full((len(srcs),), BOS), model.start(src, src_len))
    results = translator.translate_batch(
        [[tokens[i] for i in s] for s in srcs],
        beam_size=1,
        max_decoding_length=1,
        return_logits_vocab=True,
    )
    others = torch.arange(len(tokens)) != EOS
    for ours, r in zip(first, results):
        logits = torch.tensor(np.array(r.logits[0])[0])  # (V,): step 1 of hypothesis 1
        assert logits[EOS] < -1e38
        assert torch.log_softmax(logits[others], -1) == pytest.approx(
            torch.log_softmax(ours[others], -1), abs=TOL
        )


def test_log_probs_equal_within_float32_tolerance(reverser, tmp_path):
    model, vocab = reverser
    translator = _translator(model, vocab, tmp_path / "ct2")
    _check_log_probs(model, vocab, translator, tmp_path / "ct2", _sources(12, len(vocab), 7))


@pytest.mark.parametrize(
    "options",
    [
        {"shared_embeddings": True},
        {"heads": 1},  # no projections in attnkit: identities stand for them
        {"dec_layers": 3, "ff": 24},
    ],
)
def test_every_transformer_variant_exports_exactly(tmp_path, options):
    torch.manual_seed(3)
    vocab = CharVocab(LETTERS)
    settings = {"d_model": 16, "heads": 2, "layers": 2, "dropout": 0.0, **options}
    model = Transformer(len(vocab), len(vocab), **settings).eval()
    with torch.no_grad():  # away from the initial values (zero biases, unit norms)
        for p in model.parameters():
            p.add_(0.2 * torch.randn_like(p))
    translator = _translator(model, vocab, tmp_path / "ct2")
    srcs = _sources(8, len(vocab), seed=5)
    assert _ct2(translator, tmp_path / "ct2", tokens_of(vocab), srcs, 1) == _attnkit(model, srcs, 1)
    _check_log_probs(model, vocab, translator, tmp_path / "ct2", srcs)
    # equal source and target token lists: CTranslate2 writes them once
    assert (tmp_path / "ct2" / "shared_vocabulary.json").is_file()


def test_sentencepiece_models_tokenise_as_attnkit(tmp_path):
    spm = pytest.importorskip("sentencepiece")
    texts = ["<de> ein hund läuft", "<de> zwei katzen", "<de> ein kind spielt"] * 10
    src_vocab = SubwordVocab.build(texts, size=40, tags=["<de>"])
    tgt_vocab = SubwordVocab.build([t[5:].upper() for t in texts], size=36)
    torch.manual_seed(4)
    model = Transformer(len(src_vocab), len(tgt_vocab), d_model=16, heads=2, dropout=0.0).eval()
    folder = tmp_path / "ct2"
    translator = _translator(model, src_vocab, folder, tgt_vocab=tgt_vocab)
    meta = json.loads((folder / CT2_JSON).read_text())
    assert meta["tokenise"]["source"]["type"] == "sentencepiece"
    assert json.loads((folder / "target_vocabulary.json").read_text()) == tokens_of(tgt_vocab)
    sp_src = spm.SentencePieceProcessor(model_file=str(folder / "source.model"))
    sp_tgt = spm.SentencePieceProcessor(model_file=str(folder / "target.model"))
    text = "<de> zwei hunde"
    pieces = sp_src.encode(text, out_type=str)
    assert pieces == src_vocab.pieces(text) and pieces[0] == "<de>"
    (result,) = translator.translate_batch(
        [pieces], max_decoding_length=MAX_LEN, **meta["translate_batch"]
    )
    (ours,) = _attnkit(model, [src_vocab.encode(text)], 1)
    assert sp_tgt.decode(result.hypotheses[0]) == tgt_vocab.decode(ours)
    assert meta["specials"] == {"pad": "<pad>", "bos": "<s>", "eos": "</s>", "unk": "<unk>"}


def test_int8_export_translates_close_to_float32(reverser, tmp_path):
    model, vocab = reverser
    f32 = _translator(model, vocab, tmp_path / "f32")
    i8 = _translator(model, vocab, tmp_path / "i8", quantize="int8")
    size = {k: (tmp_path / k / "model.bin").stat().st_size for k in ("f32", "i8")}
    # 3 bytes saved per weight of every matrix (the position table stays float32)
    matrices = sum(p.numel() for p in model.parameters() if p.dim() == 2)
    assert size["f32"] - size["i8"] > 0.9 * 3 * matrices
    assert json.loads((tmp_path / "i8" / CT2_JSON).read_text())["compute_type"] == "int8"
    srcs = _sources(40, len(vocab), seed=1000)
    tokens = tokens_of(vocab)
    a = _ct2(f32, tmp_path / "f32", tokens, srcs, 1)
    b = _ct2(i8, tmp_path / "i8", tokens, srcs, 1)
    assert sum(x == y for x, y in zip(a, b)) >= 36  # int8 rounding may flip a close call


def test_refuses_what_ctranslate2_cannot_represent(tmp_path):
    vocab = CharVocab(LETTERS)
    n = len(vocab)
    with pytest.raises(ValueError, match=r"takes the Transformer only, got a seq2seq model"):
        export_ctranslate2(
            Seq2Seq(n, n, emb=8, hidden=8), tmp_path / "a", src_vocab=vocab, tgt_vocab=vocab
        )
    windowed = Transformer(n, n, d_model=16, heads=2)
    windowed.encoder[0].attn.window = (2, 2)
    with pytest.raises(ValueError, match=r"encoder\.0\.attn attends within a window"):
        export_ctranslate2(windowed, tmp_path / "b", src_vocab=vocab, tgt_vocab=vocab)
    eps = Transformer(n, n, d_model=16, heads=2)
    eps.decoder[1].norm3.eps = 1e-6
    with pytest.raises(ValueError, match=r"decoder\.1\.norm3 has LayerNorm epsilon 1e-06"):
        export_ctranslate2(eps, tmp_path / "c", src_vocab=vocab, tgt_vocab=vocab)
    gelu = Transformer(n, n, d_model=16, heads=2)
    gelu.decoder[0].ff[1] = torch.nn.GELU()
    with pytest.raises(ValueError, match=r"decoder\.0\.ff activates with GELU"):
        export_ctranslate2(gelu, tmp_path / "e", src_vocab=vocab, tgt_vocab=vocab)
    with pytest.raises(ValueError, match=r"quantize: expected one of int8 or None, got 'int4'"):
        export_ctranslate2(eps, tmp_path / "d", src_vocab=vocab, tgt_vocab=vocab, quantize="int4")
    assert not any(tmp_path.iterdir())  # nothing written


def _checkpoint(folder, model, vocab, task="translate"):
    save_checkpoint(
        folder,
        model=model,
        config={"task": task, "model": model_config(model)},
        vocab={"src": vocab.to_json(), "tgt": vocab.to_json()}
        if task == "translate"
        else vocab.to_json(),
    )
    return folder


def test_cli_writes_a_folder_ctranslate2_loads_and_refuses_bad_input(tmp_path, capsys):
    vocab = CharVocab(LETTERS)
    n = len(vocab)
    ck = _checkpoint(tmp_path / "ck", Transformer(n, n, d_model=16, heads=2), vocab)
    out = tmp_path / "ct2"
    for _ in range(2):  # the second replaces the first export
        args = ["export", "--checkpoint", str(ck), "--format", "ctranslate2", "--out", str(out)]
        assert main([*args, "--quantize", "int8"]) == 0
    assert "a CTranslate2 model, int8 weights" in capsys.readouterr().out
    meta = json.loads((out / CT2_JSON).read_text())
    assert meta["max_len"]["ratio"] == 3.0 and meta["compute_type"] == "int8"
    translator = ctranslate2.Translator(str(out), compute_type="int8")
    assert translator.translate_batch([["a", "b"]], max_decoding_length=3)[0].hypotheses
    bad = {
        "rnn": (
            _checkpoint(tmp_path / "rnn", Seq2Seq(n, n, emb=8, hidden=8), vocab),
            [],
            "takes the Transformer only, got a seq2seq model",
        ),
        "ocr": (
            _checkpoint(
                tmp_path / "ocr", CRNN(n, channels=(4, 4, 8, 8, 8), hidden=8), vocab, task="ocr"
            ),
            [],
            "a checkpoint of task 'ocr' cannot be exported as ctranslate2; expected translate",
        ),
        "beam": (ck, ["--beam", "4"], "--beam: a decoding option of --format onnx"),
    }
    for name, (checkpoint, extra, message) in bad.items():
        target = tmp_path / f"out-{name}"
        args = ["export", "--checkpoint", str(checkpoint), "--format", "ctranslate2"]
        assert main([*args, "--out", str(target), *extra]) == 2, name
        err = capsys.readouterr().err
        assert message in err and len(err.strip().splitlines()) == 1, err
        assert not target.exists()


def test_position_table_is_attnkits_sinusoids(reverser, tmp_path):
    """The table in the spec is attnkit's interleaved sinusoids, not CTranslate2's."""
    from attnkit.export.ctranslate2_format import transformer_spec

    model, _ = reverser
    spec = transformer_spec(model, positions=8)
    table = spec.encoder.position_encodings.encodings
    assert table.shape == (8, 32)
    assert table[3, 0] == pytest.approx(math.sin(3)) and table[3, 1] == pytest.approx(math.cos(3))
