"""OcrTask: the joint CTC-attention loss and its settings; lines read from disk."""

import pytest
import torch

from attnkit.data import DataError, read_line_folder, write_line_folder
from attnkit.data.lines import generate_lines
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
])
def test_bad_ctc_weight(lines, kw, match):
    with pytest.raises(ValueError, match=match):
        OcrTask(lines, lines[:2], **{"model_config": MODEL, **kw})


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
