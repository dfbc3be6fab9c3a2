"""Listen, Attend and Spell: the pyramid's lengths and masking, step = forward, CTC, LM mode; the
causal listener and streaming."""

import copy

import pytest
import torch
import torch.nn.functional as F

from attnkit.models import LAS, CausalListener, Listener
from attnkit.models.las import HALVINGS
from tests.float32_bounds import assert_within_normwise, lstm_operations
from tests.models.toy import assert_skipping_padding_changes_nothing, streaming_las

F_DIM, V = 6, 9

pytestmark = pytest.mark.usefixtures("one_thread")


def _model(**kw):
    torch.manual_seed(0)
    return LAS(V, features=F_DIM, listener_hidden=8, hidden=12, emb=6, key_value_dim=8, **kw).eval()


def _listener_operations(listener, frames):
    """The longest chain of roundings through a listener over ``frames`` frames: its first
    (Bi)LSTM, then each halving's over half the steps, fed two steps of the layer below
    (a BiLSTM's two directions side by side), and the feature normalisation (2)."""
    width, hidden = listener.output_dim, listener.hidden
    return (
        2
        + lstm_operations(frames, listener.features, hidden)
        + sum(lstm_operations(frames >> k, 2 * width, hidden) for k in range(1, HALVINGS + 1))
    )


def _las_operations(model, frames, tokens):
    """The longest chain of roundings through ``tokens`` speller steps of ``model`` over
    ``frames`` frames: the listener's, the keys' and values' projections, then at each step
    (each fed the last) the cells, the attention (the query's projection, the location
    filters, the score's sums, the softmax's or the stops' and the context's over the
    listener's steps), the output layers and the log-softmax over the vocabulary, with a
    spare 8 roundings a step (biases, tanh, exp, log)."""
    speller, steps = model.speller, frames >> HALVINGS
    cells = sum(
        lstm_operations(1, cell.weight_ih.shape[1], speller.hidden) for cell in speller.cells
    )
    conv = getattr(getattr(speller.attention, "score", None), "conv", None)
    width = max(speller.hidden, speller.context_dim, model.listener.output_dim)
    attend = 3 * width + (0 if conv is None else sum(conv.weight.shape)) + 2 * steps
    out = 2 * speller.hidden + speller.context_dim + speller.out[-1].out_features
    return (
        _listener_operations(model.listener, frames)
        + model.listener.output_dim
        + tokens * (cells + attend + out + 8)
    )


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
    want, w_want = copy.deepcopy(model).double()(short[None].double(), torch.tensor([21]), tgt)
    assert w_alone.shape == (1, 5, 2) and w_batch.shape == (2, 5, 8)
    # alone and in the padded batch, both within a normwise bound of it alone in float64 (the
    # chain counted over the batch's 70 frames, the longer)
    assert_within_normwise(
        [want, w_want],
        _las_operations(model, 70, 5),
        alone=[alone, w_alone],
        batch=[batch[:1], w_batch[:1, :, :2]],
    )
    assert w_batch[0, :, 2:].abs().sum() == 0


def test_sorting_once_and_time_segments_equal_the_padded_listener():
    # On CPU the listener sorts its batch longest first and its BiRNNs run in time segments.
    torch.manual_seed(0)
    listener = Listener(5, 4).double()
    x = torch.randn(5, 41, 5, dtype=torch.float64, requires_grad=True)
    lengths = torch.tensor([17, 41, 8, 33, 40])
    assert_skipping_padding_changes_nothing(
        lambda: listener(x, lengths), [x, *listener.parameters()]
    )


def test_step_by_step_equals_forward():
    model = _model(layers=2)
    torch.manual_seed(2)
    x, lengths = torch.randn(3, 40, F_DIM), torch.tensor([40, 29, 8])
    tgt = torch.randint(3, V, (3, 6))
    logits, weights = model(x, lengths, tgt)
    logits64, weights64 = copy.deepcopy(model).double()(x.double(), lengths, tgt)
    state = model.start(x, lengths)
    # each step and the teacher-forced pass within a normwise bound of the pass in float64
    operations = _las_operations(model, 40, tgt.shape[1])
    for t in range(tgt.shape[1]):
        log_probs, state, w = model.step(tgt[:, t], state)
        assert_within_normwise(
            [F.log_softmax(logits64[:, t], -1), weights64[:, t]],
            operations,
            step=[log_probs, w],
            forward=[F.log_softmax(logits[:, t], -1), weights[:, t]],
        )
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 6))


@pytest.mark.parametrize("lengths, frames", [([8, 7], 8), ([3], 10)])
def test_too_short_utterances_are_a_clear_error(lengths, frames):
    model = _model()
    with pytest.raises(ValueError, match=r"lengths: utterances need at least 8 frames \(80 ms\)"):
        model(
            torch.randn(len(lengths), frames, F_DIM),
            torch.tensor(lengths),
            torch.ones(len(lengths), 2, dtype=torch.long),
        )


def test_bad_shapes_name_the_argument():
    with pytest.raises(ValueError, match=r"features: expected shape \(B, T, 6\), got \(2, 9, 5\)"):
        _model().start(torch.randn(2, 9, 5), torch.tensor([9, 9]))
    with pytest.raises(ValueError, match="lengths: expected at most 9"):
        _model().start(torch.randn(1, 9, F_DIM), torch.tensor([12]))


def test_ctc_head_gives_four_label_distributions_per_listener_step():
    model = _model(ctc=True)
    x, lengths = torch.randn(2, 50, F_DIM), torch.tensor([50, 33])
    logits, _, (log_probs, steps) = model(
        x, lengths, torch.ones(2, 3, dtype=torch.long), with_ctc=True
    )
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
    assert {"speller.embed.weight", "speller.cells.0.weight_ih", "speller.out.3.weight"} <= used
    assert not [
        n for n in used if not n.startswith(("speller.embed", "speller.cells", "speller.out"))
    ]


# ---------------------------------------------------------------- the causal listener, streaming


def test_causal_listener_streams_what_it_encodes_at_once():
    torch.manual_seed(3)
    listener = CausalListener(F_DIM, 7).eval()
    x, lengths = torch.randn(2, 70, F_DIM), torch.tensor([70, 45])
    out, out_len = listener(x, lengths)
    assert out.shape == (2, 8, 7) and out_len.tolist() == [8, 5] and out[1, 5:].eq(0).all()
    state, parts = listener.stream_start(), []
    for a, b in [(0, 5), (5, 6), (6, 22), (22, 22), (22, 39), (39, 70)]:  # odd and empty chunks
        steps, state = listener.stream(x[:, a:b], state)
        assert steps.shape[1] == b // 8 - sum(p.shape[1] for p in parts)  # each step once in
        parts.append(steps)
    # streamed, and the second row streamed alone to its own length: both within a normwise
    # bound of the padded batch encoded at once in float64, as the encoding at once is
    want, _ = copy.deepcopy(listener).double()(x.double(), lengths)
    alone, _ = listener.stream(x[1:, :45], listener.stream_start())
    assert_within_normwise(
        [want[0], want[1, :5]],
        _listener_operations(listener, 70),
        streamed=[torch.cat(parts, 1)[0], alone[0]],
        at_once=[out[0], out[1, :5]],
    )


def test_causal_listener_never_reads_ahead():
    torch.manual_seed(4)
    listener = CausalListener(F_DIM, 5).eval()
    x = torch.randn(1, 64, F_DIM)
    later = x.clone()
    later[:, 24:] = 100 * torch.randn(1, 40, F_DIM)  # frames of listener steps 3 and on
    out, _ = listener(x, torch.tensor([64]))
    changed, _ = listener(later, torch.tensor([64]))
    assert torch.equal(out[:, :3], changed[:, :3]) and not torch.equal(out[:, 3], changed[:, 3])


def test_causal_listener_normalises_with_the_statistics_it_stores():
    torch.manual_seed(5)
    listener = CausalListener(F_DIM, 5).eval()
    x = 3 + 2 * torch.randn(1, 40, F_DIM)
    plain, _ = listener((x - 3) / 2, torch.tensor([40]))
    want, _ = copy.deepcopy(listener).double()((x.double() - 3) / 2, torch.tensor([40]))
    listener.set_statistics(torch.full((F_DIM,), 3.0), torch.full((F_DIM,), 2.0))
    # normalised inside and before, both within a normwise bound of it in float64 (the
    # normalisation's two roundings are in the count)
    assert_within_normwise(
        [want],
        _listener_operations(listener, 40),
        plain=[plain],
        inside=[listener(x, torch.tensor([40]))[0]],
    )
    model = LAS(V, features=F_DIM, listener_hidden=5, hidden=8, emb=4, listener="uni")
    assert model.normalises_input and not _model().normalises_input
    assert {"listener.feature_mean", "listener.feature_std"} <= set(model.state_dict())
    assert "listener.feature_mean" not in _model().state_dict()
    with pytest.raises(ValueError, match=r"std: expected shape \(6,\), got \(5,\)"):
        listener.set_statistics(torch.zeros(F_DIM), torch.ones(5))
    with pytest.raises(ValueError, match="mean: expected finite values"):
        listener.set_statistics(torch.full((F_DIM,), float("nan")), torch.ones(F_DIM))


@pytest.mark.parametrize(
    "kw, missing",
    [
        (
            {},
            r"a unidirectional listener \(listener 'uni', got 'bi'\) and a hard monotonic "
            r"alignment \('monotonic' or 'mocha', got 'softmax'\)",
        ),
        ({"listener": "uni"}, r"a hard monotonic alignment .* got 'softmax'\)$"),
        ({"alignment": "mocha"}, r"a unidirectional listener \(listener 'uni', got 'bi'\)$"),
        (
            {
                "listener": "uni",
                "alignment": "monotonic",
                "alignment_options": {"inference": "soft"},
            },
            r"a hard monotonic alignment .* got "
            r"'monotonic'\)$",
        ),
        ({"listener": "uni", "alignment": "gmm"}, r"a hard monotonic alignment .* got 'gmm'\)$"),
    ],
)
def test_models_that_cannot_stream_say_what_they_lack(kw, missing):
    model = _model(**kw)
    with pytest.raises(ValueError, match=f"^model: streaming needs {missing}"):
        model.stream_start()
    with pytest.raises(ValueError, match="listener: expected one of bi, uni, got 'tri'"):
        _model(listener="tri")


@pytest.mark.parametrize("alignment", ["monotonic", "mocha"])
def test_streamed_steps_equal_steps_over_the_whole_utterance(alignment):
    model = streaming_las(alignment, features=F_DIM, vocab=V)
    x = torch.randn(1, 301, F_DIM, generator=torch.Generator().manual_seed(6))
    tokens = torch.randint(3, V, (40,), generator=torch.Generator().manual_seed(7))

    def whole_steps(model, x):
        whole, steps = model.start(x, torch.tensor([301])), []
        for t in tokens:
            log_probs, whole, w = model.step(t[None], whole)
            steps.append((log_probs, w))
        return steps

    # streamed steps and steps over the whole utterance, both within a normwise bound of the
    # steps over the whole utterance in float64
    operations = _las_operations(model, 301, len(tokens))
    with torch.no_grad():
        expected = whole_steps(model, x)
        want = whole_steps(copy.deepcopy(model).double(), x.double())
        state, i, early = model.stream_start(), 0, 0
        for start in range(0, 301, 13):
            state = model.stream_listen(x[:, start : start + 13], state)
            while (
                i < len(tokens)
                and (out := model.stream_step(tokens[i : i + 1], state, final=False)) is not None
            ):
                log_probs, state, w = out
                s = w.shape[-1]  # the listener steps so far
                assert s == min(301, start + 13) // 8 and expected[i][1][:, s:].eq(0).all()
                assert_within_normwise(
                    [want[i][0], want[i][1][:, :s]],
                    operations,
                    streamed=[log_probs, w],
                    whole=[expected[i][0], expected[i][1][:, :s]],
                )
                i, early = i + 1, early + (start + 13 < 301)
        while i < len(tokens):  # after the last frame: steps with no stop read nothing
            log_probs, state, w = model.stream_step(tokens[i : i + 1], state, final=True)
            assert_within_normwise(
                [want[i][0]], operations, streamed=[log_probs], whole=[expected[i][0]]
            )
            assert w.eq(0).all() and expected[i][1].eq(0).all()
            i += 1
    assert early >= 10  # most steps were decided before the audio ended
    with pytest.raises(ValueError, match="features: utterances need at least 8 frames"):
        model.stream_step(
            tokens[:1], model.stream_listen(x[:, :7], model.stream_start()), final=True
        )
