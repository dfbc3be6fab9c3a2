"""VQA: the stacked attention network's hops are the paper's equations, the relational
reader is its documented equations, padding a question changes nothing, the baseline has no
attention, bad input is refused by name."""

import copy

import pytest
import torch
from torch import nn

from attnkit.models import VQA
from tests.float32_bounds import assert_within_normwise, lstm_operations
from tests.models.toy import grid_operations

TINY = dict(image_size=16, channels=(4, 8), emb=6, hidden=5, attn_dim=7)


def _model(**kw):
    torch.manual_seed(0)
    return VQA(12, 9, **{**TINY, **kw}).eval()


def _inputs():
    g = torch.Generator().manual_seed(1)
    images = torch.rand(3, 3, 16, 16, generator=g)
    questions = torch.tensor([[4, 5, 6, 7], [8, 9, 0, 0], [10, 0, 0, 0]])
    return images, questions, torch.tensor([4, 2, 1])


def _operations(model, words):
    """The longest chain of dependent roundings through ``model`` over a question of
    ``words`` words (for :func:`tests.float32_bounds.normwise_bound`), counted generously from
    its widest layer ``W``: the grid and the question's BiLSTM; at each hop two additive
    attentions (the words' and the cells', the relational reader's; a projection of each side
    and the score's sum, ``3 W``; the softmax's and the read's sums over ``L`` cells, and the
    relational reader's positions and gates, ``2 L`` more), and the answer layers, with a
    spare 8 a layer."""
    widths = [m.in_features for m in model.modules() if isinstance(m, nn.Linear)]
    cells, width = model.encoder.coords.shape[0], max(widths)
    question = lstm_operations(words, model.embed.embedding_dim, model.hidden)
    hop = 2 * (3 * width + 2 * cells + 8) + 2 * cells
    return (
        grid_operations(model.encoder) + question + model.hops * hop + sum(widths) + 8 * len(widths)
    )


def _assert_equations(model, images, run):
    """``run(model, images)`` -> ``(the model's results, the same written out)``: equal to
    float64's rounding in float64; in float32, both within a normwise bound of the equations
    in float64."""
    with torch.no_grad():
        got, equations = run(model, images)
        got64, want = run(copy.deepcopy(model).double(), images.double())
    torch.testing.assert_close(got64, want)
    assert_within_normwise(want, _operations(model, 4), model=got, equations=equations)


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_each_hop_is_the_papers_equations(hops):
    model = _model(hops=hops)
    images, questions, lengths = _inputs()

    def hops_and_equations(model, images):
        out = model(images, questions, lengths)
        v = torch.tanh(model.regions[0](model.encoder(images)))  # (B, L, 2H)
        u = model.question(questions, lengths)  # (B, 2H)
        weights = []
        for attention in model.attention:
            score = attention.score
            h = torch.tanh((u @ score.w_query[0])[:, None] + v @ score.w_key[0])  # (B, L, A)
            p = torch.softmax(h @ score.v[0], -1)  # (B, L)
            weights.append(p)
            u = u + (p[..., None] * v).sum(1)  # u_k = u_{k-1} + v~_k
        return [out.weights, out.logits], [torch.stack(weights, 1), model.answer(u)]

    _assert_equations(model, images, hops_and_equations)
    assert model(images, questions, lengths).weights.shape == (3, hops, 16)


def _additive(score, query, key):
    """The additive score's weights ``(B, Tk)`` of ``query (B, Dq)`` over ``key (B, Tk, Dk)``,
    written out (Bahdanau et al. 2015)."""
    return torch.tanh((query @ score.w_query[0])[:, None] + key @ score.w_key[0]) @ score.v[0]


@pytest.mark.parametrize("hops", [1, 2, 3])
def test_the_relational_reader_is_its_equations(hops):
    model = _model(kind="relational", hops=hops)
    images, questions, lengths = _inputs()

    def reader_and_equations(model, images):
        out = model(images, questions, lengths)
        a = model.encoder(images)  # (B, L, D)
        v = torch.tanh(model.regions[0](a))  # (B, L, 2H)
        u0 = model.question(questions, lengths)  # (B, 2H)
        h = model.rnn(model.embed(questions), lengths)  # (B, T, 2H)
        side = 4  # 16 px, two halvings
        centres = torch.tensor(
            [
                [-1 + 2 * col / (side - 1), -1 + 2 * row / (side - 1)]
                for row in range(side)
                for col in range(side)
            ],
            dtype=a.dtype,
        )  # (L, 2)
        pos = centres + torch.tanh(model.offset(a)) / (side - 1)  # (B, L, 2)
        padded = torch.arange(questions.shape[1]) >= lengths[:, None]  # (B, T)
        read, key, weights = [u0], v, []
        for k in range(hops):
            words = torch.softmax(
                _additive(model.control[k].score, u0, h).masked_fill(padded, float("-inf")), -1
            )  # (B, T)
            assert (words[padded] == 0).all()
            query = torch.cat([(words[..., None] * h).sum(1), u0], -1)  # [q_k; u_0]
            p = torch.softmax(_additive(model.attention[k].score, query, key), -1)  # (B, L)
            weights.append(p)
            g = torch.sigmoid(
                model.gate[k](
                    torch.tanh(model.gate_query[k](query)[:, None] + model.gate_key[k](key))
                )
            ).squeeze(-1)
            where = sum(p[:, i, None] * pos[:, i] for i in range(side**2))  # (B, 2): X_k
            gated = sum(g[:, i, None] * pos[:, i] for i in range(side**2)) / (
                g.sum(1, keepdim=True) + 1e-3
            )  # (B, 2): G_k
            read += [
                (p[..., None] * v).sum(1),
                where,
                gated,
                g.sum(1, keepdim=True),
                g.max(1, keepdim=True).values,
            ]
            rel = torch.stack(
                [
                    torch.stack(
                        [
                            torch.cat(
                                [
                                    pos[b, i] - where[b],
                                    ((pos[b, i] - where[b]) ** 2).sum()[None],
                                    g[b, i, None],
                                ]
                            )
                            for i in range(side**2)
                        ]
                    )
                    for b in range(3)
                ]
            )
            key = torch.cat([v, rel], -1)  # (B, L, 2H + 4)
        expected = model.answer(torch.cat(read, -1))
        return [out.weights, out.logits], [torch.stack(weights, 1), expected]

    _assert_equations(model, images, reader_and_equations)
    assert model(images, questions, lengths).weights.shape == (3, hops, 16)


def test_the_relational_positions_move_within_their_cells():
    """``p_i`` is the cell's centre moved by at most half the spacing of the centres (1/3
    on a 4 x 4 grid): the answer layer reads ``X_1`` over the moved centres."""
    model = _model(kind="relational", hops=1)
    images, questions, lengths = _inputs()
    seen = []
    model.answer.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    d = 2 * TINY["hidden"]
    with torch.no_grad():
        model.offset.weight.zero_()
        for bias, shift in ((100.0, 1 / 3), (-100.0, -1 / 3), (0.0, 0.0)):
            model.offset.bias.fill_(bias)
            out = model(images, questions, lengths)
            expected = out.weights[:, 0] @ (model.encoder.coords + shift)  # (B, 2)
            torch.testing.assert_close(seen[-1][:, 2 * d : 2 * d + 2], expected)


def test_the_relational_gates_are_unnormalised_and_counted():
    """Each cell's presence gate is its own sigmoid (no softmax over cells): all open, the
    answer layer reads the number of cells and 1; all shut, 0 and 0."""
    model = _model(kind="relational", hops=1)
    images, questions, lengths = _inputs()
    seen = []
    model.answer.register_forward_pre_hook(lambda module, args: seen.append(args[0]))
    with torch.no_grad():
        model.gate[0].weight.zero_()
        for bias, count, peak in ((50.0, 16.0, 1.0), (-50.0, 0.0, 0.0)):
            model.gate[0].bias.fill_(bias)
            model(images, questions, lengths)
            torch.testing.assert_close(seen[-1][:, -2:], torch.tensor([[count, peak]] * 3))


def test_the_question_is_read_to_its_length():
    model = _model()
    images, questions, lengths = _inputs()
    with torch.no_grad():
        padded = model(images, questions, lengths)
        alone = model(images[1:2], questions[1:2, :2], lengths[1:2])
        other_padding = model(images[1:2], torch.tensor([[8, 9, 3, 3]]), lengths[1:2])
        want = copy.deepcopy(model).double()(images[1:2].double(), questions[1:2, :2], lengths[1:2])
    # padded, alone and padded otherwise: each within a normwise bound of the question alone
    # in float64
    assert_within_normwise(
        [want.logits],
        _operations(model, questions.shape[1]),
        padded=[padded.logits[1:2]],
        alone=[alone.logits],
        other_padding=[other_padding.logits],
    )


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
        assert all(
            p.grad is not None and p.grad.abs().sum() > 0
            for p in part.parameters()
            if p.requires_grad
        ), part


def test_relational_gradients_reach_every_part():
    model = _model(kind="relational", hops=2).train()
    images, questions, lengths = _inputs()
    model(images, questions, lengths).logits.sum().backward()
    for part in (
        model.encoder,
        model.embed,
        model.rnn,
        model.regions,
        model.control,
        model.attention,
        model.offset,
        model.gate_query,
        model.gate_key,
        model.gate,
        model.answer,
    ):
        assert all(
            p.grad is not None and p.grad.abs().sum() > 0
            for p in part.parameters()
            if p.requires_grad
        ), part


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(kind="rn"), "kind: expected one of san, relational, none, got 'rn'"),
        (dict(hops=0), "hops: expected a positive int, got 0"),
        (dict(cell_features=0), "cell_features: expected a positive int, got 0"),
    ],
)
def test_bad_arguments(kw, match):
    with pytest.raises(ValueError, match=match):
        VQA(12, 9, **{**TINY, **kw})


def test_bad_inputs():
    model = _model()
    images, questions, lengths = _inputs()
    with pytest.raises(
        ValueError,
        match=r"lengths: expected 3 lengths in \[1, 4\], got "
        r"\[4, 0, 1\]",
    ):
        model(images, questions, torch.tensor([4, 0, 1]))
    with pytest.raises(TypeError, match="questions: expected an integer tensor"):
        model(images, questions.float(), lengths)
    with pytest.raises(ValueError, match=r"images: expected shape \(B, 3, 16, 16\)"):
        model(images[:, :1], questions, lengths)


@pytest.mark.parametrize("kind", ["san", "relational", "none"])
def test_questions_share_their_images_encoding(kind):
    """``image_index`` answers each question about its image, as one image per question."""
    model = _model(kind=kind)
    images, questions, lengths = _inputs()
    index = torch.tensor([1, 0, 1])
    with torch.no_grad():
        shared = model(images[:2], questions, lengths, index)
        each = model(images[index], questions, lengths)
    torch.testing.assert_close(shared.logits, each.logits)
    with pytest.raises(
        ValueError,
        match=r"image_index: expected 3 indices in \[0, 2\), got "
        r"\[1, 0, 2\]",
    ):
        model(images[:2], questions, lengths, torch.tensor([1, 0, 2]))
    with pytest.raises(ValueError, match=r"images: expected one per question \(3\), got 2"):
        model(images[:2], questions, lengths)
