"""Seq2seq models: step-by-step equals all-at-once, padding is ignored, decoding works."""

import copy

import pytest
import torch

from attnkit.decoding import beam_search, greedy
from attnkit.models import Seq2Seq, build_model, model_config
from tests.float32_bounds import assert_within_normwise
from tests.models.toy import seq2seq_operations, toy_batch

CONFIGS = [
    dict(kind="bahdanau"),
    dict(kind="luong", score="general"),
    dict(kind="luong", score="dot"),
    dict(kind="luong", score="additive", input_feeding=True),
    dict(kind="none"),
    dict(kind="luong", score="general", input_feeding=True, enc_hidden=5),
    dict(kind="bahdanau", enc_hidden=7),
]


def _model(cfg):
    torch.manual_seed(0)
    return Seq2Seq(11, 13, emb=8, hidden=12, **cfg).eval()


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def test_forward_equals_step_by_step(cfg):
    model = _model(cfg)
    src, src_len, tgt_in = toy_batch()
    logits, weights = model(src, src_len, tgt_in)
    logits64, weights64 = copy.deepcopy(model).double()(src, src_len, tgt_in)
    operations = seq2seq_operations(model, src.shape[1], tgt_in.shape[1])
    state = model.start(src, src_len)
    for t in range(tgt_in.shape[1]):
        lp, state, w = model.step(tgt_in[:, t], state)
        # each step and the teacher-forced pass within a normwise bound of the pass in float64
        want = [logits64[:, t].log_softmax(-1), None if weights is None else weights64[:, t]]
        assert_within_normwise(
            want,
            operations,
            step=[lp, w],
            forward=[logits[:, t].log_softmax(-1), None if weights is None else weights[:, t]],
        )
        if weights is not None:
            assert w[1, 4:].abs().max() == 0 and w[2, 1:].abs().max() == 0


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: "-".join(map(str, c.values())))
def test_source_padding_changes_nothing(cfg):
    model = _model(cfg)
    src, src_len, tgt_in = toy_batch()
    logits, _ = model(src, src_len, tgt_in)
    longer = torch.cat([src, torch.zeros(3, 4, dtype=torch.long)], dim=1)
    logits2, _ = model(longer, src_len, tgt_in)
    one, _ = model(src[1:2, :4], src_len[1:2], tgt_in[1:2])
    want, _ = copy.deepcopy(model).double()(src, src_len, tgt_in)
    # padded more, and one source alone: within a normwise bound of the batch in float64, as
    # the batch is
    operations = seq2seq_operations(model, longer.shape[1], tgt_in.shape[1])
    assert_within_normwise([want], operations, batch=[logits], longer=[logits2])
    assert_within_normwise([want[1]], operations, alone=[one[0]])


def test_decoders_run_on_the_models_step_and_teacher_forcing_ratio_trains():
    torch.manual_seed(0)
    model = Seq2Seq(11, 13, emb=8, hidden=12, kind="bahdanau")
    src, src_len, tgt_in = toy_batch()
    state = model.start(src, src_len)
    g = greedy(model.step, state, batch_size=3, bos=1, eos=2, max_len=6)
    b = beam_search(model.step, state, batch_size=3, beam_size=1, bos=1, eos=2, max_len=6)
    assert torch.equal(g.tokens, b.tokens)
    assert g.weights.shape[:2] == g.tokens.shape and g.weights.shape[-1] == 7
    logits, _ = model(
        src, src_len, tgt_in, teacher_forcing=0.5, generator=torch.Generator().manual_seed(0)
    )
    logits.sum().backward()
    assert model.encoder.embed.weight.grad.abs().max() > 0


@pytest.mark.parametrize("kind", ["bahdanau", "luong", "none"])
def test_the_encoder_takes_its_own_size(kind):
    model = Seq2Seq(11, 13, emb=8, hidden=12, kind=kind, enc_hidden=5)
    src, src_len, tgt_in = toy_batch()
    outputs, final = model.encoder(src, src_len)
    assert outputs.shape == (3, 7, 10) and final.shape == (3, 10)
    logits, _ = model(src, src_len, tgt_in)
    assert logits.shape == (3, 5, 13)
    again = build_model(model_config(model))
    assert model_config(again)["enc_hidden"] == 5
    assert again.load_state_dict(model.state_dict()) is not None
    with pytest.raises(ValueError, match=r"enc_hidden: expected a positive int, got 0"):
        Seq2Seq(11, 13, kind=kind, enc_hidden=0)


def test_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="^kind: expected one of bahdanau, luong, none, got 'x'"):
        Seq2Seq(5, 5, kind="x")


def test_luong_takes_only_its_scores():
    with pytest.raises(ValueError, match="^score: Luong attention takes dot, general or additive"):
        Seq2Seq(5, 5, kind="luong", score="location")
