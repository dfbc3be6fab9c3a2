"""Every model family trains and decodes under bfloat16 autocast on CPU (``--precision bf16``).

Autocast hands attention mixed dtypes (a linear layer's bfloat16 output as the query, an RNN's
float32 output as the keys); attention takes them in float32. The checks: the forward pass runs,
its log-probabilities stay near float32's (bfloat16 keeps 8 significant bits), the gradients
reach every parameter in float32, and greedy decoding runs.
"""

import pytest
import torch

from attnkit.decoding import decode
from attnkit.models import build_model

pytestmark = pytest.mark.usefixtures("one_thread")

B, S, U = 3, 9, 5
MODELS = {
    "bahdanau": dict(name="seq2seq", kind="bahdanau", src_vocab=12, tgt_vocab=10, emb=8, hidden=16),
    "luong-feeding": dict(
        name="seq2seq",
        kind="luong",
        src_vocab=12,
        tgt_vocab=10,
        emb=8,
        hidden=16,
        score="additive",
        input_feeding=True,
    ),
    "transformer": dict(
        name="transformer", src_vocab=12, tgt_vocab=10, d_model=16, heads=2, layers=1, dropout=0.0
    ),
    "crnn-ctc-window": dict(
        name="crnn",
        vocab=10,
        channels=[4, 4, 8, 8, 8],
        hidden=8,
        attention="window",
        window=4,
        dropout=0.0,
    ),
    "crnn-attention": dict(
        name="crnn",
        vocab=10,
        channels=[4, 4, 8, 8, 8],
        hidden=8,
        head="attention",
        dec_hidden=8,
        ctc=True,
        dropout=0.0,
    ),
    "las-location": dict(
        name="las",
        vocab=10,
        features=6,
        listener_hidden=8,
        hidden=16,
        emb=8,
        key_value_dim=8,
        score="location",
        ctc=True,
    ),
    "las-mocha": dict(
        name="las",
        vocab=10,
        features=6,
        listener_hidden=8,
        hidden=16,
        emb=8,
        key_value_dim=8,
        alignment="mocha",
        alignment_options={"noise": 0.0, "chunk": 2},
    ),
}


def _inputs(name):
    g = torch.Generator().manual_seed(0)
    tgt = torch.randint(4, 10, (B, U), generator=g)
    if name.startswith("crnn"):
        widths = torch.tensor([60, 48, 40])
        return torch.rand(B, 1, 32, 60, generator=g), widths, tgt
    if name.startswith("las"):
        return torch.randn(B, 64, 6, generator=g), torch.tensor([64, 50, 40]), tgt
    return torch.randint(4, 12, (B, S), generator=g), torch.tensor([9, 6, 4]), tgt


def _log_probs(model, name, x, lengths, tgt):
    if name == "crnn-ctc-window":
        return model(x, lengths)[0]  # CTC log-probabilities (B, T, V)
    kw = {"with_ctc": True} if name in ("crnn-attention", "las-location") else {}
    return model(x, lengths, tgt, **kw)[0].float().log_softmax(-1)


@pytest.mark.parametrize("name", MODELS)
def test_bf16_autocast_stays_near_float32_and_trains_in_float32(name):
    torch.manual_seed(0)
    model = build_model(MODELS[name])
    x, lengths, tgt = _inputs(name)
    want = _log_probs(model, name, x, lengths, tgt)
    want.sum().backward()
    learning = {n for n, p in model.named_parameters() if p.grad is not None}
    model.zero_grad(set_to_none=True)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        got = _log_probs(model, name, x, lengths, tgt)
    gap = float((got.detach().float() - want.detach()).abs().max())
    assert torch.isfinite(got).all() and 0 < gap < 0.05, gap  # measured: 0.001-0.016
    got.float().sum().backward()
    grads = {n: p.grad for n, p in model.named_parameters() if p.grad is not None}
    assert set(grads) == learning and len(learning) > 5
    assert all(g.dtype == torch.float32 and torch.isfinite(g).all() for g in grads.values())
    if name != "crnn-ctc-window":  # decoded token by token
        model.eval()
        with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
            steps = model.steps(lengths) if name == "crnn-attention" else lengths
            hyp = decode(model, x, lengths, max_len=steps // 2 + 2)
        assert hyp.tokens.shape[0] == B


@pytest.mark.parametrize(
    "config",
    [
        dict(
            name="vqa",
            words=12,
            answers=5,
            image_size=16,
            channels=[4, 8],
            emb=8,
            hidden=8,
            attn_dim=8,
        ),
        dict(
            name="vqa",
            words=12,
            answers=5,
            image_size=16,
            channels=[4, 8],
            emb=8,
            hidden=8,
            attn_dim=8,
            kind="relational",
        ),
        dict(name="char_lm", vocab=10, emb=8, hidden=16, layers=2),
    ],
    ids=["vqa", "vqa-relational", "char-lm"],
)
def test_models_reading_embeddings_with_an_lstm_train_under_bf16_autocast(config):
    torch.manual_seed(0)
    model = build_model(config)
    words = torch.randint(1, 10, (B, S))
    inputs = (
        (torch.rand(B, 3, 16, 16), words, torch.tensor([9, 6, 4]))
        if config["name"] == "vqa"
        else (words,)
    )
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = model(*inputs)
    logits = out.logits if config["name"] == "vqa" else out
    assert torch.isfinite(logits).all()
    logits.float().sum().backward()
    assert all(p.grad is None or p.grad.dtype == torch.float32 for p in model.parameters())
