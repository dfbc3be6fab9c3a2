"""OcrTask: the joint CTC-attention loss, the guided attention loss and their settings;
lines read from disk; read_lines' self-attention maps."""

import pytest
import torch

from attnkit.data import (
    ALPHABET,
    CharVocab,
    DataError,
    pad_images,
    read_line_folder,
    write_line_folder,
)
from attnkit.data.worlds.lines import generate_lines
from attnkit.models import CRNN, guided_attention_loss
from attnkit.tasks.ocr import OcrTask, plot_line, read_lines

CHARS = CharVocab(list(ALPHABET))
MODEL = dict(channels=(4, 4, 8, 8, 8), hidden=8, dropout=0.0, head="attention", dec_hidden=8)


@pytest.fixture(scope="module")
def lines():
    return generate_lines(6, seed=3, max_chars=8)


def test_ctc_weight_mixes_the_two_losses(lines):
    tasks = {
        w: OcrTask(lines, lines[:2], model_config=MODEL, ctc_weight=w) for w in (0.0, 0.5, 1.0)
    }
    assert "ctc" not in tasks[0.0].model_config and tasks[0.5].model_config["ctc"] is True
    assert "ctc_weight" not in tasks[0.0].config()["batching"]
    assert tasks[0.5].config()["batching"]["ctc_weight"] == 0.5
    torch.manual_seed(0)
    model = tasks[0.5].build_model()
    batch = tasks[0.5].batches(0)[0]
    assert {"targets", "target_lengths", "tgt_in", "tgt_out"} <= set(batch)
    ce, n = tasks[0.0].loss(model, batch)
    ctc, _ = tasks[1.0].loss(model, batch)
    mixed, n_mixed = tasks[0.5].loss(model, batch)
    torch.testing.assert_close(mixed, 0.5 * ce + 0.5 * ctc)
    assert n == n_mixed and torch.isfinite(mixed)
    mixed.backward()
    assert model.classifier.weight.grad.abs().sum() > 0  # the auxiliary head learns


@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(ctc_weight=1.5), r"ctc_weight: expected a number in \[0, 1\], got 1.5"),
        (
            dict(ctc_weight=0.3, model_config={**MODEL, "head": "ctc"}),
            "ctc_weight: only for the attention head",
        ),
        (dict(guided_attention=-1.0), "guided_attention: expected a non-negative number, got -1.0"),
        # a task's settings come from a run's files too: a value is quoted, never echoed whole
        (
            dict(ctc_weight="x" * 10**6),
            r"^ctc_weight: expected a number in \[0, 1\], got 'x{200}'"
            r"\.\.\. \(1,000,000 characters\)$",
        ),
        (
            dict(batch_size="8" * 10**6),
            r"^batch_size: expected a positive int, got '8{200}'\.\.\. "
            r"\(1,000,000 characters\)$",
        ),
        (
            dict(guided_attention=1.0, model_config={**MODEL, "head": "ctc"}),
            "guided_attention: only for the attention head",
        ),
    ],
)
def test_bad_ctc_weight(lines, kw, match):
    with pytest.raises(ValueError, match=match):
        OcrTask(lines, lines[:2], **{"model_config": MODEL, **kw})


@pytest.mark.usefixtures("one_thread")
@pytest.mark.parametrize("head, heads", [("ctc", 1), ("ctc", 2), ("attention", 2)])
def test_the_self_attention_maps_come_from_the_reading_pass_and_only_when_asked(lines, head, heads):
    torch.manual_seed(0)
    model = CRNN(
        len(CHARS),
        channels=(4, 4, 8, 8, 8),
        hidden=8,
        attention="window",
        window=3,
        score="scaled_dot",
        heads=heads,
        head=head,
        dec_hidden=8,
    ).eval()
    images = [image for image, _ in lines[:3]]
    calls = []  # (need_weights asked, weights returned) of every self-attention call
    model.attention.attention.register_forward_hook(
        lambda m, args, kwargs, out: calls.append((kwargs["need_weights"], out.weights)),
        with_kwargs=True,
    )
    plain = read_lines(model, CHARS, images)
    assert all(r.self_attention is None for r in plain)
    # one batch, no weights (on CPU the layer attends its rows in groups of similar length)
    assert calls and all(not asked and weights is None for asked, weights in calls)
    calls.clear()
    readings = read_lines(model, CHARS, images, weights=True)
    assert [r.texts for r in readings] == [r.texts for r in plain]
    assert len(calls) == 1 and calls[0][0]  # one encoding of the batch, asked for weights
    seen = []  # the self-attention layer's inputs (RNN1's output, steps) of one line
    model.attention.register_forward_hook(lambda m, args, out: seen.append(args))
    for image, r in zip(images, readings):
        seen.clear()
        model.encode(*pad_images([image]))
        want = model.attention.with_weights(*seen[0]).weights[0]  # ([H,] T, T)
        want = want if heads > 1 else want[None]
        assert r.self_attention.shape == (heads, r.steps, r.steps)
        torch.testing.assert_close(r.self_attention, want, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(r.self_attention.sum(-1), torch.ones(heads, r.steps))
        if head == "ctc":  # the characters' rows: the self-attention where each was emitted
            assert r.weights.shape == (len(r.texts[0]), r.steps)
        else:  # the decoder's weights, over the batch's padded steps
            assert (r.weights[:, r.steps :] == 0).all()


def test_guided_attention_adds_its_loss(lines):
    plain = OcrTask(lines, lines[:2], model_config=MODEL)
    guided = OcrTask(lines, lines[:2], model_config=MODEL, guided_attention=2.0)
    assert guided.config()["batching"]["guided_attention"] == 2.0
    assert "guided_attention" not in plain.config()["batching"]
    torch.manual_seed(0)
    model = plain.build_model()
    batch = plain.batches(0)[0]
    ce, _ = plain.loss(model, batch)
    total, _ = guided.loss(model, batch)
    _, weights = model(batch["images"], batch["widths"], batch["tgt_in"])
    want = guided_attention_loss(
        weights, (batch["tgt_out"] != 0).sum(1), model.steps(batch["widths"])
    )
    torch.testing.assert_close(total, ce + 2.0 * want)
    assert want > 0


def test_lines_of_a_folder_are_read_per_batch_and_batch_as_in_memory(lines, tmp_path):
    tsv = write_line_folder(lines, tmp_path / "lines")
    on_disk = read_line_folder(tmp_path / "lines", tsv)
    ctc = {**MODEL, "head": "ctc"}
    in_memory = OcrTask(lines, lines[:2], model_config=ctc, batch_size=2)
    task = OcrTask(on_disk, on_disk[:2], model_config=ctc, batch_size=2)
    assert task.train is on_disk  # not copied into memory
    for a, b in zip(in_memory.batches(1), task.batches(1), strict=True):
        assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    batches = task.batches(0)
    for path in (tmp_path / "lines").glob("*.png"):
        path.write_bytes(b"gone")
    with pytest.raises(DataError, match="cannot read image"):
        batches[0]  # the images are read when the batch is built
    assert len(task.evaluate(task.build_model())) == 3  # validation lines were read up front


@pytest.mark.usefixtures("one_thread")
def test_pictures_of_lines_read_in_one_batch_of_several_widths(lines, tmp_path):
    """The attention head's weights span the batch's padded steps; each line's picture, with
    its self-attention map, is cropped to the line's own steps."""
    torch.manual_seed(0)
    model = CRNN(
        len(CHARS),
        channels=(4, 4, 8, 8, 8),
        hidden=8,
        attention="window",
        window=3,
        head="attention",
        dec_hidden=8,
    ).eval()
    images = [image for image, _ in lines[:4]]
    assert len({image.shape[1] for image in images}) > 1
    readings = read_lines(model, CHARS, images, weights=True)
    for i, (image, r) in enumerate(zip(images, readings)):
        path = plot_line(
            image,
            r.texts[0],
            r.weights,
            r.steps,
            tmp_path / f"{i}.png",
            eos=True,
            self_attention=r.self_attention,
        )
        assert path.stat().st_size > 0


def test_sortagrad_epochs_take_the_narrowest_lines_first(lines):
    task = OcrTask(lines, lines[:2], model_config=MODEL, batch_size=3, sortagrad=1)
    first = [b["widths"].tolist() for b in task.batches(0)]
    assert [w for b in first for w in sorted(b)] == sorted(
        image.shape[-1] for image, _ in lines
    )  # every line, narrowest first
    assert task.config()["batching"]["sortagrad"] == 1
    plain = OcrTask(lines, lines[:2], model_config=MODEL, batch_size=3)
    assert [b["widths"].tolist() for b in task.batches(1)] == [
        b["widths"].tolist() for b in plain.batches(1)
    ]  # then shuffled as without it
    assert "sortagrad" not in plain.config()["batching"]
    with pytest.raises(
        ValueError,
        match=r"sortagrad: expected a non-negative int \(epochs\), "
        "got True",
    ):
        OcrTask(lines, lines[:2], model_config=MODEL, sortagrad=True)


def test_every_reading_has_its_score(lines):
    # the CTC head: the best path's log-probability; the attention head: the search's scores
    from attnkit.decoding import Decoding

    torch.manual_seed(0)
    images = [image for image, _ in lines]
    ctc = CRNN(vocab=len(CHARS), **{**MODEL, "head": "ctc"}).eval()
    batch, widths = pad_images(images)
    with torch.no_grad():
        log_probs, steps = ctc(batch, widths)
    for j, reading in enumerate(read_lines(ctc, CHARS, images)):
        best = log_probs[j, : int(steps[j])].max(-1).values.sum()
        assert reading.scores == pytest.approx([float(best)], abs=1e-4)
    attention = CRNN(vocab=len(CHARS), **MODEL).eval()
    readings = read_lines(attention, CHARS, images, decoding=Decoding(beam=3, n_best=2))
    for reading in readings:
        assert len(reading.scores) == len(reading.texts) == 2
        assert reading.scores[0] >= reading.scores[1] and all(s < 0 for s in reading.scores)


def test_the_ctc_heads_beam_1_is_the_best_path_and_a_wider_beam_ranks_labellings(lines):
    from attnkit.decoding import Decoding, ctc_greedy

    torch.manual_seed(0)
    images = [image for image, _ in lines]
    ctc = CRNN(vocab=len(CHARS), **{**MODEL, "head": "ctc"}).eval()
    batch, widths = pad_images(images)
    with torch.no_grad():
        log_probs, steps = ctc(batch, widths)
    paths = ctc_greedy(log_probs, steps)
    want = [CHARS.decode(ids) for ids in paths.ids]
    assert [r.texts[0] for r in read_lines(ctc, CHARS, images)] == want
    assert [r.texts[0] for r in read_lines(ctc, CHARS, images, decoding=Decoding(beam=1))] == want
    wide = read_lines(ctc, CHARS, images, decoding=Decoding(beam=4, n_best=2, length_penalty=0))
    for j, reading in enumerate(wide):
        assert len(reading.texts) == 2 and reading.scores[0] >= reading.scores[1]
        # a labelling's probability sums its paths: at least its best path's
        best_path = float(log_probs[j, : int(steps[j])].max(-1).values.sum())
        assert reading.scores[0] >= best_path - 1e-4
    with pytest.raises(ValueError, match="sample: a CTC head reads the best path or a prefix"):
        read_lines(ctc, CHARS, images, decoding=Decoding(sample=True))
