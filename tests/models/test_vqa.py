"""VQA: the stacked attention network's hops are the paper's equations, the relational
reader is its documented equations, padding a question changes nothing, the baseline has no
attention, bad input is refused by name."""

import pytest
import torch

from attnkit.models import VQA

TINY = dict(image_size=16, channels=(4, 8), emb=6, hidden=5, attn_dim=7)


def _model(**kw):
    torch.manual_seed(0)
    return VQA(12, 9, **{**TINY, **kw}).eval()


def _inputs():
    g = torch.Generator().manual_seed(1)
    images = torch.rand(3, 3, 16, 16, generator=g)
    questions = torch.tensor([[4, 5, 6, 7], [8, 9, 0, 0], [10, 0, 0, 0]])
    return images, questions, torch.tensor([4, 2, 1])


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_each_hop_is_the_papers_equations(hops):
    model = _model(hops=hops)
    images, questions, lengths = _inputs()
    with torch.no_grad():
        out = model(images, questions, lengths)
        v = torch.tanh(model.regions[0](model.encoder(images)))  # (B, L, 2H)
        u = model.question(questions, lengths)  # (B, 2H)
        for k, attention in enumerate(model.attention):
            score = attention.score
            h = torch.tanh((u @ score.w_query[0])[:, None] + v @ score.w_key[0])  # (B, L, A)
            p = torch.softmax(h @ score.v[0], -1)  # (B, L)
            torch.testing.assert_close(out.weights[:, k], p, atol=1e-6, rtol=1e-5)
            u = u + (p[..., None] * v).sum(1)  # u_k = u_{k-1} + v~_k
        expected = model.answer(u)
    assert out.weights.shape == (3, hops, 16)
    torch.testing.assert_close(out.logits, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_the_relational_reader_is_its_equations(hops):
    model = _model(kind="relational", hops=hops)
    images, questions, lengths = _inputs()
    with torch.no_grad():
        out = model(images, questions, lengths)
        v = torch.tanh(model.regions[0](model.encoder(images)))  # (B, L, 2H)
        u0 = u = model.question(questions, lengths)  # (B, 2H)
        side = 4  # 16 px, two halvings
        centres = torch.tensor([[-1 + 2 * col / (side - 1), -1 + 2 * row / (side - 1)]
                                for row in range(side) for col in range(side)])  # (L, 2)
        read, key = [u0], v
        for k, attention in enumerate(model.attention):
            score = attention.score
            h = torch.tanh((u @ score.w_query[0])[:, None] + key @ score.w_key[0])
            p = torch.softmax(h @ score.v[0], -1)  # (B, L)
            torch.testing.assert_close(out.weights[:, k], p, atol=1e-6, rtol=1e-5)
            context = (p[..., None] * v).sum(1)
            where = sum(p[:, i, None] * centres[i] for i in range(side ** 2))  # (B, 2)
            rel = torch.stack([torch.stack([
                torch.cat([c - where[b], ((c - where[b]) ** 2).sum()[None]])
                for c in centres]) for b in range(3)])  # (B, L, 3)
            key = torch.cat([v, rel], -1)
            u = u + context
            read += [context, where]
        g = torch.sigmoid(model.gate(torch.tanh(model.gate_query(u0)[:, None]
                                                + model.gate_key(v)))).squeeze(-1)
        expected = model.answer(torch.cat(read + [g.sum(1, keepdim=True),
                                                  g.max(1, keepdim=True).values], -1))
    assert out.weights.shape == (3, hops, 16)
    torch.testing.assert_close(out.logits, expected, atol=1e-5, rtol=1e-5)


def test_the_relational_gates_are_unnormalised_and_counted():
    """Each cell's presence gate is its own sigmoid (no softmax over cells): all open, the
    answer layer reads the number of cells and 1; all shut, 0 and 0."""
    model = _model(kind="relational")
    images, questions, lengths = _inputs()
    seen = []
    model.answer.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    with torch.no_grad():
        model.gate.weight.zero_()
        for bias, count, peak in ((50.0, 16.0, 1.0), (-50.0, 0.0, 0.0)):
            model.gate.bias.fill_(bias)
            model(images, questions, lengths)
            torch.testing.assert_close(seen[-1][:, -2:], torch.tensor([[count, peak]] * 3))


def test_the_question_is_read_to_its_length():
    model = _model()
    images, questions, lengths = _inputs()
    with torch.no_grad():
        padded = model(images, questions, lengths)
        alone = model(images[1:2], questions[1:2, :2], lengths[1:2])
        other_padding = model(images[1:2], torch.tensor([[8, 9, 3, 3]]), lengths[1:2])
    torch.testing.assert_close(padded.logits[1:2], alone.logits, atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(other_padding.logits, alone.logits, atol=1e-6, rtol=1e-5)


def test_the_baseline_has_no_attention_but_sees_where_things_are():
    model = _model(kind="none")
    images, questions, lengths = _inputs()
    out = model(images, questions, lengths)
    assert out.weights is None and out.logits.shape == (3, 9) and model.hops == 0
    flipped = model(images.flip(-1), questions, lengths)  # a mirrored image
    assert not torch.allclose(out.logits, flipped.logits)


def test_gradients_reach_the_image_and_question_encoders():
    model = _model().train()
    images, questions, lengths = _inputs()
    model(images, questions, lengths).logits.sum().backward()
    for part in (model.encoder, model.embed, model.rnn, model.regions, model.attention):
        assert all(p.grad is not None and p.grad.abs().sum() > 0
                   for p in part.parameters() if p.requires_grad), part


def test_relational_gradients_reach_every_part():
    model = _model(kind="relational", hops=2).train()
    images, questions, lengths = _inputs()
    model(images, questions, lengths).logits.sum().backward()
    for part in (model.encoder, model.embed, model.rnn, model.regions, model.attention,
                 model.gate_query, model.gate_key, model.gate, model.answer):
        assert all(p.grad is not None and p.grad.abs().sum() > 0
                   for p in part.parameters() if p.requires_grad), part


@pytest.mark.parametrize("kw, match", [
    (dict(kind="rn"), "kind: expected one of san, relational, none, got 'rn'"),
    (dict(hops=0), "hops: expected a positive int, got 0"),
    (dict(cell_features=0), "cell_features: expected a positive int, got 0"),
])
def test_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        VQA(12, 9, **{**TINY, **kw})


def test_bad_inputs():
    model = _model()
    images, questions, lengths = _inputs()
    with pytest.raises(ValueError, match=r"lengths: expected 3 lengths in \[1, 4\], got "
                                         r"\[4, 0, 1\]"):
        model(images, questions, torch.tensor([4, 0, 1]))
    with pytest.raises(TypeError, match="questions: expected an integer tensor"):
        model(images, questions.float(), lengths)
    with pytest.raises(ValueError, match=r"images: expected shape \(B, 3, 16, 16\)"):
        model(images[:, :1], questions, lengths)
