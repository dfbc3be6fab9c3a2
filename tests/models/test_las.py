"""Listen, Attend and Spell: the pyramid's lengths and masking, step = forward, CTC, LM mode."""

import pytest
import torch
import torch.nn.functional as F

from attnkit.models import LAS, Listener

F_DIM, V = 6, 9

pytestmark = pytest.mark.usefixtures("one_thread")


def _model(**kw):
    torch.manual_seed(0)
    return LAS(V, features=F_DIM, listener_hidden=8, hidden=12, emb=6, key_value_dim=8,
               **kw).eval()


def test_each_halving_floors_the_length_and_zeroes_the_rest():
    torch.manual_seed(0)
    lengths = torch.tensor([8, 9, 15, 16, 17, 23, 33])
    out, out_len = Listener(F_DIM, 5)(torch.randn(7, 33, F_DIM), lengths)
    assert out.shape == (7, 33 // 8, 10)
    assert out_len.tolist() == [1, 1, 1, 2, 2, 2, 4]  # 17 -> 8 -> 4 -> 2; 23 -> 11 -> 5 -> 2
    for row, n in zip(out, out_len):
        assert row[:n].abs().sum(-1).gt(0).all() and row[n:].abs().sum() == 0


def test_padding_never_changes_an_utterance():
    model = _model()
    torch.manual_seed(1)
    short, long = torch.randn(21, F_DIM), torch.randn(70, F_DIM)  # odd: frames dropped
    tgt = torch.randint(3, V, (1, 5))
    alone, w_alone = model(short[None], torch.tensor([21]), tgt)
    padded = torch.stack([torch.cat([short, 1e3 * torch.randn(49, F_DIM)]), long])
    batch, w_batch = model(padded, torch.tensor([21, 70]), tgt.repeat(2, 1))
    torch.testing.assert_close(batch[:1], alone)
    assert w_alone.shape == (1, 5, 2) and w_batch.shape == (2, 5, 8)
    torch.testing.assert_close(w_batch[:1, :, :2], w_alone)
    assert w_batch[0, :, 2:].abs().sum() == 0


def test_step_by_step_equals_forward():
    model = _model(layers=2)
    torch.manual_seed(2)
    x, lengths = torch.randn(3, 40, F_DIM), torch.tensor([40, 29, 8])
    tgt = torch.randint(3, V, (3, 6))
    logits, weights = model(x, lengths, tgt)
    state = model.start(x, lengths)
    for t in range(tgt.shape[1]):
        log_probs, state, w = model.step(tgt[:, t], state)
        torch.testing.assert_close(log_probs, F.log_softmax(logits[:, t], -1))
        torch.testing.assert_close(w, weights[:, t])
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 6))


@pytest.mark.parametrize("lengths, frames", [([8, 7], 8), ([3], 10)])
def test_too_short_utterances_are_a_clear_error(lengths, frames):
    model = _model()
    with pytest.raises(ValueError, match=r"lengths: utterances need at least 8 frames \(80 ms\)"):
        model(torch.randn(len(lengths), frames, F_DIM), torch.tensor(lengths),
              torch.ones(len(lengths), 2, dtype=torch.long))


def test_bad_shapes_name_the_argument():
    with pytest.raises(ValueError, match=r"features: expected shape \(B, T, 6\), got \(2, 9, 5\)"):
        _model().start(torch.randn(2, 9, 5), torch.tensor([9, 9]))
    with pytest.raises(ValueError, match="lengths: expected at most 9"):
        _model().start(torch.randn(1, 9, F_DIM), torch.tensor([12]))


def test_ctc_head_gives_four_label_distributions_per_listener_step():
    model = _model(ctc=True)
    x, lengths = torch.randn(2, 50, F_DIM), torch.tensor([50, 33])
    logits, _, (log_probs, steps) = model(x, lengths, torch.ones(2, 3, dtype=torch.long),
                                          with_ctc=True)
    assert logits.shape == (2, 3, V) and log_probs.shape == (24, 2, V)  # 4 per listener step
    assert steps.tolist() == [24, 16]
    torch.testing.assert_close(log_probs.exp().sum(-1), torch.ones(24, 2))
    loss = F.ctc_loss(log_probs, torch.tensor([[4, 5], [6, 0]]), steps, torch.tensor([2, 1]))
    assert torch.isfinite(loss)
    with pytest.raises(ValueError, match="with_ctc: this model was built without a CTC head"):
        _model()(x, lengths, torch.ones(2, 3, dtype=torch.long), with_ctc=True)


def test_language_model_mode_uses_only_the_speller():
    model = _model().train()
    tgt = torch.randint(3, V, (4, 7))
    logits = model.language_model(tgt)
    assert logits.shape == (4, 7, V)
    logits.square().mean().backward()
    used = {n for n, p in model.named_parameters() if p.grad is not None and p.grad.any()}
    assert {"speller.embed.weight", "speller.cells.0.weight_ih",
            "speller.out.3.weight"} <= used
    assert not [n for n in used if not n.startswith(("speller.embed", "speller.cells",
                                                     "speller.out"))]
