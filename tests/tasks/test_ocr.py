"""OcrTask: the joint CTC-attention loss, the guided attention loss and their settings."""

import pytest
import torch

from attnkit.data.lines import generate_lines
from attnkit.models import guided_attention_loss
from attnkit.tasks.ocr import OcrTask

MODEL = dict(channels=(4, 4, 8, 8, 8), hidden=8, dropout=0.0, head="attention", dec_hidden=8)


@pytest.fixture(scope="module")
def lines():
    return generate_lines(6, seed=3, max_chars=8)


def test_ctc_weight_mixes_the_two_losses(lines):
    tasks = {w: OcrTask(lines, lines[:2], model_config=MODEL, ctc_weight=w)
             for w in (0.0, 0.5, 1.0)}
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


@pytest.mark.parametrize("kw, match", [
    (dict(ctc_weight=1.5), r"ctc_weight: expected a number in \[0, 1\], got 1.5"),
    (dict(ctc_weight=0.3, model_config={**MODEL, "head": "ctc"}),
     "ctc_weight: only for the attention head"),
    (dict(guided_attention=-1.0), "guided_attention: expected a non-negative number, got -1.0"),
    (dict(guided_attention=1.0, model_config={**MODEL, "head": "ctc"}),
     "guided_attention: only for the attention head"),
])
def test_bad_ctc_weight(lines, kw, match):
    with pytest.raises(ValueError, match=match):
        OcrTask(lines, lines[:2], **{"model_config": MODEL, **kw})


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
    want = guided_attention_loss(weights, (batch["tgt_out"] != 0).sum(1),
                                 model.steps(batch["widths"]))
    torch.testing.assert_close(total, ce + 2.0 * want)
    assert want > 0
