"""Transformer: cached steps equal the teacher-forced pass, causality, padding, decoding."""

import pytest
import torch

from attnkit.attention import Attention
from attnkit.decoding import beam_search, greedy
from attnkit.models import Transformer, sinusoids
from tests.float32_bounds import gamma
from tests.models.toy import toy_batch


def _model(**kw):
    torch.manual_seed(0)
    cfg = dict(d_model=16, heads=2, layers=2, dropout=0.0) | kw
    return Transformer(11, 13, **cfg).double().eval()


def test_cached_steps_equal_the_teacher_forced_pass():
    model = _model(dec_layers=3)
    src, src_len, tgt_in = toy_batch(t=6)
    logits, weights = model(src, src_len, tgt_in, need_weights=True)
    assert weights.shape == (3, 6, 7)
    state = model.start(src, src_len)
    for t in range(tgt_in.shape[1]):
        lp, state, w = model.step(tgt_in[:, t], state)
        torch.testing.assert_close(lp, logits[:, t].log_softmax(-1))
        torch.testing.assert_close(w, weights[:, t])
        assert w[1, 4:].abs().max() == 0 and w[2, 1:].abs().max() == 0
        torch.testing.assert_close(w.sum(-1), torch.ones(3, dtype=torch.float64))
    assert state["cache"][0].key_features.shape[2] == tgt_in.shape[1]


def test_causal_later_tokens_change_nothing_before_them():
    model = _model()
    src, src_len, tgt_in = toy_batch(t=6)
    logits, _ = model(src, src_len, tgt_in)
    changed = tgt_in.clone()
    changed[:, 4:] = 5
    logits2, _ = model(src, src_len, changed)
    torch.testing.assert_close(logits2[:, :4], logits[:, :4])
    assert not torch.allclose(logits2[:, 4:], logits[:, 4:])


def test_source_padding_changes_nothing():
    model = _model()
    src, src_len, tgt_in = toy_batch(t=6)
    logits, _ = model(src, src_len, tgt_in)
    longer = torch.cat([src, torch.zeros(3, 4, dtype=torch.long)], dim=1)
    torch.testing.assert_close(model(longer, src_len, tgt_in)[0], logits)
    one, _ = model(src[1:2, :4], src_len[1:2], tgt_in[1:2])
    torch.testing.assert_close(one[0], logits[1])


def test_sinusoids_match_the_formula():
    pe = sinusoids(torch.arange(50), 8)
    pos, i = 37, 3
    angle = torch.tensor(pos / 10000 ** (2 * i / 8))
    torch.testing.assert_close(pe[pos, 2 * i], angle.sin())
    torch.testing.assert_close(pe[pos, 2 * i + 1], angle.cos())


def test_extend_equals_prepare_on_the_concatenation():
    torch.manual_seed(0)
    attn = Attention(8, heads=2).double()
    keys, values = torch.randn(2, 5, 8).double(), torch.randn(2, 5, 8).double()
    cache = attn.extend(None, keys[:, :2], values[:, :2])
    cache = attn.extend(cache, keys[:, 2:], values[:, 2:])
    whole = attn.prepare(keys, values)
    for a, b in zip(cache[:4], whole[:4]):
        torch.testing.assert_close(a, b)
    with pytest.raises(ValueError, match="another Attention"):
        Attention(8, heads=2).double().extend(cache, keys)
    with pytest.raises(ValueError, match="batch size 2"):
        attn.extend(cache, keys[:1])


def test_decoding_caches_keep_only_the_prepared_keys_and_values():
    """Without gradients a step's self-attention cache holds the keys as given as zeros that
    store one element (nothing reads them); with gradients it keeps them. The steps agree."""
    model = _model()
    src, src_len, tgt_in = toy_batch(t=6)
    kept = model.start(src, src_len)
    with torch.no_grad():
        state = model.start(src, src_len)
    for t in range(tgt_in.shape[1]):
        lp, kept, w = model.step(tgt_in[:, t], kept)
        with torch.no_grad():
            lp_, state, w_ = model.step(tgt_in[:, t], state)
        torch.testing.assert_close(lp_, lp.detach())
        torch.testing.assert_close(w_, w.detach())
    for cache, full in zip(state["cache"], kept["cache"], strict=True):
        assert cache.value is cache.key and cache.key.shape == full.key.shape == (3, 6, 16)
        assert not any(cache.key.stride()) and not cache.key.any()
        assert all(full.key.stride()) and full.key.requires_grad
        torch.testing.assert_close(cache.key_features, full.key_features.detach())


def test_beam_search_reorders_placeholder_caches_as_kept_ones():
    """Beam search over caches without the keys as given returns what it returns over caches
    that keep them (gradients on: nothing is dropped)."""
    model = _model()
    src, src_len, _ = toy_batch(t=6)
    kw = dict(batch_size=3, bos=1, eos=2, pad=0, max_len=8, beam_size=4, n_best=4)
    kept = beam_search(model.step, model.start(src, src_len), **kw)
    with torch.no_grad():
        light = beam_search(model.step, model.start(src, src_len), **kw)
    assert torch.equal(light.tokens, kept.tokens) and torch.equal(light.lengths, kept.lengths)
    torch.testing.assert_close(light.scores, kept.scores.detach())


def test_beam_one_equals_greedy_and_beam_reorders_the_cache():
    model = _model()
    src, src_len, _ = toy_batch(t=6)
    kw = dict(batch_size=3, bos=1, eos=2, pad=0, max_len=8)
    g = greedy(model.step, model.start(src, src_len), **kw)
    b1 = beam_search(model.step, model.start(src, src_len), beam_size=1, **kw)
    assert torch.equal(g.tokens, b1.tokens)
    b4 = beam_search(model.step, model.start(src, src_len), beam_size=4, n_best=4, **kw)
    # Each returned hypothesis, rescored by the teacher-forced pass, has the score beam found.
    for b in range(3):
        for k in range(4):
            toks = b4.tokens[b, k]
            n = int(b4.lengths[b, k])
            tgt_in = torch.cat([torch.tensor([1]), toks[: n - 1]])[None]
            lp = model(src[b : b + 1, : src_len[b]], src_len[b : b + 1], tgt_in)[0]
            lp = lp.detach().log_softmax(-1)[0].gather(1, toks[:n, None])
            # Beam search keeps scores in float32 (the float64 model's log-probabilities
            # rounded, then added up one step at a time; with alpha = 0 the length penalty
            # divides by 1 exactly): n terms each rounded once and n - 1 additions, within
            # gamma(n + 1) sum |lp| of the float64 sum, whose own rounding is far below
            bound = gamma(n + 1) * float(lp.abs().sum())
            assert abs(float(b4.scores[b, k].detach()) - float(lp.sum())) <= bound


def test_scheduled_sampling_and_training_reduce_the_loss():
    torch.manual_seed(0)
    model = Transformer(11, 13, d_model=16, heads=2, layers=1, dropout=0.1)
    src, src_len, tgt_in = toy_batch(t=6)
    target = torch.cat([tgt_in[:, 1:], torch.full((3, 1), 2)], dim=1)
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    losses = []
    g = torch.Generator().manual_seed(0)
    for _ in range(60):
        logits, _ = model(src, src_len, tgt_in, teacher_forcing=0.8, generator=g)
        loss = torch.nn.functional.cross_entropy(logits.flatten(0, 1), target.flatten())
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.3 * losses[0]


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(d_model=10, heads=3), "d_model: expected a multiple of heads"),
        (dict(d_model=9, heads=1), "d_model: expected an even size"),
        (dict(layers=0), "layers: expected a positive int"),
        (dict(dropout=1.0), "dropout: expected a probability"),
    ],
)
def test_bad_settings_name_the_argument(kw, match):
    with pytest.raises(ValueError, match=match):
        Transformer(5, 5, **kw)


def test_shared_embeddings_are_one_tensor_and_need_one_vocabulary():
    model = Transformer(12, 12, d_model=8, heads=2, layers=1, shared_embeddings=True)
    assert [k for k in model.state_dict() if "embed" in k] == ["tgt_embed.weight"]
    assert model.source_embedding() is model.tgt_embed
    with pytest.raises(ValueError, match=r"shared_embeddings: expected one vocabulary "):
        Transformer(12, 13, d_model=8, heads=2, layers=1, shared_embeddings=True)
