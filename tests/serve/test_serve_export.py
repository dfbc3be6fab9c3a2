"""Serving an ONNX export (float32 and int8): ``export.ExportedModel`` behind the task's
evaluator decodes as the checkpoint does, with per-request decoding options, and ``serve``
answers from it over real HTTP."""

import json

import httpx
import pytest
import torch

from attnkit.cli.main import main
from attnkit.data import generate_lines
from attnkit.decoding import Decoding
from attnkit.export import ExportedModel
from attnkit.serve import Limits
from attnkit.serve.server import exported_evaluator, serve_checkpoint
from attnkit.tasks.loading import load_evaluator
from tests.serve.test_serve import TEXTS, concurrently, serving

pytest.importorskip("onnxruntime")


@pytest.fixture(scope="module")
def exports(tmp_path_factory):
    """builtin:translate-dates exported in float32 and int8, builtin:ocr-lines (CTC) in
    float32."""
    folder = tmp_path_factory.mktemp("exports")
    for name, model, extra in (
        ("translate", "translate-dates", []),
        ("translate-int8", "translate-dates", ["--quantize", "int8"]),
        ("ocr", "ocr-lines", []),
    ):
        assert (
            main(
                [
                    "export",
                    "--checkpoint",
                    f"builtin:{model}",
                    "--format",
                    "onnx",
                    "--out",
                    str(folder / name),
                    *extra,
                ]
            )
            == 0
        )
    return folder


@pytest.fixture(scope="module")
def translator():
    return load_evaluator("builtin:translate-dates")


@pytest.mark.parametrize(
    "decoding",
    [Decoding(), Decoding(beam=4, n_best=3), Decoding(beam=2, max_len=6)],
    ids=["greedy", "beam 4, n-best 3", "beam 2, max_len 6"],
)
def test_an_export_decodes_as_its_checkpoint(exports, translator, decoding):
    exported = exported_evaluator(exports / "translate")
    assert isinstance(exported.model, ExportedModel)
    got, want = exported.decode(TEXTS, decoding), translator.decode(TEXTS, decoding)
    assert [o.texts for o in got] == [o.texts for o in want]
    for g, w in zip(got, want, strict=True):
        assert g.scores == pytest.approx(w.scores, abs=1e-4)
        assert [[p for p, _ in t] for t in g.tokens] == [[p for p, _ in t] for t in w.tokens]


def test_a_ctc_export_reads_lines_as_its_checkpoint(exports):
    exported, reference = exported_evaluator(exports / "ocr"), load_evaluator("builtin:ocr-lines")
    images = [image for image, _ in generate_lines(4, split="test", seed=5, max_chars=30)]
    got, want = exported.decode(images), reference.decode(images)
    assert [o.texts for o in got] == [o.texts for o in want]
    assert [o.scores[0] for o in got] == pytest.approx([o.scores[0] for o in want], abs=1e-3)


def test_the_state_a_step_does_not_change_is_handed_back_as_it_was(exports):
    model = ExportedModel(exports / "translate")
    src = torch.tensor([[5, 6, 7, 8], [5, 9, 10, 0]])
    state = model.start(src, torch.tensor([4, 3]))
    log_probs, after, weights = model.step(torch.tensor([1, 1]), state)
    vocab = len(model.meta["vocab"]["tgt"]["symbols"]) + 4  # and <pad> <bos> <eos> <unk>
    assert log_probs.shape == (2, vocab) and weights.shape[0] == 2
    changed = {s["name"] for s in model.meta["state"] if s["next"]}
    assert changed and all((after[n] is state[n]) == (n not in changed) for n in state)


def test_serve_answers_from_an_int8_export(exports, translator):
    evaluator = exported_evaluator(exports / "translate-int8")
    limits = Limits(max_wait_ms=100, max_batch=8, max_beam=8)
    with serving(evaluator, limits, name="translate-int8", runtime="onnxruntime (int8)") as url:
        health = httpx.get(f"{url}/health").json()
        assert health["runtime"] == "onnxruntime (int8)" and health["task"] == "translate"
        alone = [
            httpx.post(f"{url}/translate", json={"text": t, "decoding": {"beam": 3}}).json()
            for t in TEXTS[:4]
        ]
        together = concurrently(
            [
                lambda t=t: httpx.post(
                    f"{url}/translate", json={"text": t, "decoding": {"beam": 3}}
                ).json()
                for t in TEXTS[:4]
            ]
        )
        refused = httpx.post(f"{url}/translate", json={"text": TEXTS[0], "decoding": {"beam": 9}})
    # int8 activations are quantised with one scale per tensor of the batch: the requests
    # decoded together move the scores a little, not the outputs
    assert [a["text"] for a in alone] == [b["text"] for b in together]
    assert [a["outputs"][0]["score"] for a in alone] == pytest.approx(
        [b["outputs"][0]["score"] for b in together], abs=1e-2
    )
    exact = [
        a["text"] == w.text for a, w in zip(alone, translator.decode(TEXTS[:4], Decoding(beam=3)))
    ]
    assert sum(exact) >= 3  # int8 weights: the same dates but for rounding near a tie
    assert refused.status_code == 422 and refused.json()["field"] == "decoding.beam"


def test_an_export_is_served_on_the_cpu_only(exports):
    with pytest.raises(ValueError, match="device: an ONNX export is served on the CPU"):
        serve_checkpoint(exports / "translate", device="cuda")


def test_a_folder_that_is_not_an_export_is_named(tmp_path):
    (tmp_path / "attnkit.json").write_text(json.dumps({"format": "something-else"}))
    with pytest.raises(ValueError, match=r"attnkit.json: expected format 'attnkit-onnx'"):
        exported_evaluator(tmp_path)
    (tmp_path / "attnkit.json").write_text("{not json")
    with pytest.raises(ValueError, match="attnkit.json: cannot read an export's description"):
        exported_evaluator(tmp_path)
