"""CRNN: output lengths, padding changes nothing, attention between the RNNs, both heads."""

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from attnkit.decoding import beam_search, greedy
from attnkit.models import CRNN
from tests.models.toy import assert_skipping_padding_changes_nothing

SMALL = dict(channels=(4, 4, 8, 8, 8), hidden=8, dropout=0.0)


def _lines(seed=0):
    g = torch.Generator().manual_seed(seed)
    images = torch.rand(3, 1, 32, 70, generator=g)
    widths = torch.tensor([70, 45, 9])
    return images, widths


@pytest.mark.parametrize("attention", [None, "global", "window"])
def test_padding_changes_nothing_and_steps_are_half_the_width(attention):
    torch.manual_seed(0)
    model = CRNN(12, attention=attention, window=4, **SMALL).double().eval()
    images, widths = _lines()
    images = images.double()
    log_probs, steps = model(images, widths)
    assert log_probs.shape == (3, 35, 12) and steps.tolist() == [35, 22, 4]
    for b in range(3):
        w = int(widths[b])
        alone, _ = model(images[b : b + 1, :, :, :w], widths[b : b + 1])
        torch.testing.assert_close(alone[0], log_probs[b, : w // 2])
    # what lies beyond a line's width (here: noise) is never seen
    noisy = images.clone()
    noisy[1, :, :, 45:] = torch.rand(1, 32, 25, dtype=torch.float64)
    torch.testing.assert_close(model(noisy, widths)[0][1, :22], log_probs[1, :22])


def _random_batch_norm(model):
    for m in model.modules():
        if isinstance(m, torch.nn.BatchNorm2d):
            m.running_mean.uniform_(-1, 1)
            m.running_var.uniform_(0.5, 2)
            m.weight.data.uniform_(-2, 2)
            m.bias.data.uniform_(-1, 1)


@settings(deadline=None, max_examples=20)
@given(b=st.integers(1, 5), width=st.integers(2, 50), seed=st.integers(0, 2**16), data=st.data())
def test_packed_cnn_equals_the_padded_cnn_in_eval_mode(b, width, seed, data):
    # The packed CNN (CPU) puts the lines side by side; the padded one is the reference (and
    # the path taken while exporting). Features and parameter gradients are the same.
    torch.manual_seed(seed)
    model = CRNN(12, **SMALL).double().eval()
    _random_batch_norm(model)
    widths = torch.tensor(data.draw(st.lists(st.integers(2, width), min_size=b, max_size=b)))
    x = torch.rand(b, 1, 32, width, dtype=torch.float64)
    got, want = model._cnn_packed(x, widths), model._cnn_padded(x, widths)
    torch.testing.assert_close(got, want)
    grad = torch.randn_like(want)
    params = list(model.blocks.parameters())
    torch.testing.assert_close(
        torch.autograd.grad(got, params, grad), torch.autograd.grad(want, params, grad)
    )


def test_packed_cnn_gradcheck_and_training_statistics_ignore_the_padded_width():
    torch.manual_seed(0)
    model = CRNN(12, channels=(2, 2, 3, 3, 3), hidden=4).double()
    images, widths = _lines()
    x = images.double()[:, :, :, :20]
    w = torch.tensor([20, 11, 7])
    torch.autograd.gradcheck(
        lambda inp: model._cnn_packed(inp, w), (x.requires_grad_(),), fast_mode=True
    )  # a random projection of the 1,920 inputs
    # In training, batch norm's statistics are over the lines, not the padded batch: the same
    # lines padded to twice the width give the same features (the padded CNN's differ).
    wider = torch.cat([x.detach(), torch.rand(3, 1, 32, 20, dtype=torch.float64)], dim=3)
    torch.testing.assert_close(model._cnn_packed(wider, w)[:, :10], model._cnn_packed(x, w))
    assert not torch.allclose(model._cnn_padded(wider, w)[:, :10], model._cnn_padded(x, w))


@pytest.mark.parametrize("attention", [None, "global", "window"])
def test_the_padding_skipping_paths_equal_the_padded_model(attention):
    # On CPU the model sorts the lines longest first, packs the CNN, runs the BiRNNs in time
    # segments and the attention in length groups. Eval mode (batch norm's running
    # statistics): the same outputs and gradients as the padded model.
    torch.manual_seed(0)
    model = CRNN(12, attention=attention, window=4, **SMALL).double().eval()
    _random_batch_norm(model)
    images = torch.rand(6, 1, 32, 60, dtype=torch.float64)
    widths = torch.tensor([31, 60, 2, 44, 60, 17])
    assert_skipping_padding_changes_nothing(lambda: model(images, widths), list(model.parameters()))


def test_attention_layer_sits_between_the_rnns_and_gets_gradients():
    torch.manual_seed(0)
    model = CRNN(12, attention="global", **SMALL)
    images, widths = _lines()
    log_probs, steps = model(images, widths)
    targets = torch.tensor([[5, 6, 7], [5, 5, 8], [9, 0, 0]])
    loss = torch.nn.functional.ctc_loss(
        log_probs.transpose(0, 1), targets, steps, torch.tensor([3, 3, 1])
    )
    loss.backward()
    assert all(p.grad is not None and p.grad.abs().sum() > 0 for p in model.attention.parameters())


def test_attention_head_steps_and_decoders():
    torch.manual_seed(0)
    model = CRNN(12, head="attention", dec_hidden=10, **SMALL).double().eval()
    images, widths = _lines()
    images = images.double()
    tgt_in = torch.tensor([[1, 5, 6], [1, 7, 7], [1, 8, 0]])
    logits, weights = model(images, widths, tgt_in)
    assert logits.shape == (3, 3, 12) and weights.shape == (3, 3, 35)
    assert weights[2, :, 4:].abs().max() == 0
    state = model.start(images, widths)
    lp, state, w = model.step(tgt_in[:, 0], state)
    torch.testing.assert_close(lp, logits[:, 0].log_softmax(-1))
    kw = dict(batch_size=3, bos=1, eos=2, pad=0, max_len=5)
    g = greedy(model.step, model.start(images, widths), **kw)
    b1 = beam_search(model.step, model.start(images, widths), beam_size=1, **kw)
    assert torch.equal(g.tokens, b1.tokens)
    with pytest.raises(ValueError, match="tgt_in: the attention head needs"):
        model(images, widths)


@pytest.mark.parametrize(
    "call, match",
    [
        (
            lambda m: m(torch.rand(2, 3, 32, 20), torch.tensor([20, 20])),
            r"images: expected \(B, 1, 32, W\)",
        ),
        (
            lambda m: m(torch.rand(2, 1, 32, 20), torch.tensor([20])),
            r"widths: expected shape \(2,\)",
        ),
        (
            lambda m: m(torch.rand(2, 1, 32, 20), torch.tensor([21, 5])),
            r"widths: expected values in \[2, 20\]",
        ),
    ],
)
def test_bad_input_names_the_argument(call, match):
    with pytest.raises(ValueError, match=match):
        call(CRNN(12, **SMALL))


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(channels=(4, 4)), "channels: expected 5 positive ints"),
        (dict(attention="local"), "attention: expected None, 'global' or 'window'"),
        (dict(head="rnnt"), "head: expected one of ctc, attention"),
        (
            dict(dec_alignment="monotonic"),
            "dec_score, dec_alignment, dec_alignment_options: only for head='attention'",
        ),
        (dict(head="attention", dec_alignment="mono"), "alignment: expected one of softmax"),
    ],
)
def test_bad_settings_name_the_argument(kw, match):
    with pytest.raises(ValueError, match=match):
        CRNN(12, **(SMALL | kw))


def test_auxiliary_ctc_head_of_the_attention_head():
    torch.manual_seed(0)
    model = CRNN(12, head="attention", dec_hidden=10, ctc=True, **SMALL).eval()
    images, widths = _lines()
    tgt_in = torch.tensor([[1, 5, 6], [1, 7, 7], [1, 8, 0]])
    logits, weights, (log_probs, steps) = model(images, widths, tgt_in, with_ctc=True)
    plain = model(images, widths, tgt_in)
    assert len(plain) == 2 and torch.equal(plain[0], logits)
    assert log_probs.shape == (3, 35, 12) and steps.tolist() == [35, 22, 4]
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(3, 35))
    with pytest.raises(ValueError, match="with_ctc: this model was built without a CTC head"):
        CRNN(12, head="attention", **SMALL)(images, widths, tgt_in, with_ctc=True)
    with pytest.raises(ValueError, match="ctc: an auxiliary CTC head is for head='attention'"):
        CRNN(12, head="ctc", ctc=True, **SMALL)
