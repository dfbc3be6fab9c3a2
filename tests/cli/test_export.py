"""attnkit export: train a tiny model with the CLI, export it, run the graphs with
onnxruntime; the docs/deploy.md example decodes like `attnkit translate`; bad input."""

import json
import re
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

from attnkit.cli.main import main
from attnkit.data import CharVocab
from attnkit.models import CRNN, LAS, model_config
from attnkit.train import save_checkpoint

ort = pytest.importorskip(
    "onnxruntime", reason="onnxruntime is not installed: pip install 'attnkit[export]'"
)

DEPLOY = Path(__file__).resolve().parents[2] / "docs" / "deploy.md"
WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven"]


def _train(tmp_path, capsys, *model_args) -> Path:
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"<en> {n}\t{w}\n" for n, w in enumerate(WORDS)), encoding="utf-8")
    out = tmp_path / "run"
    emb = [] if "transformer" in model_args else ["--emb", "8"]  # an RNN model's option
    assert (
        main(
            [
                "train",
                "translate",
                "--train",
                str(tsv),
                "--out",
                str(out),
                "--steps",
                "3",
                "--eval-every",
                "3",
                "--batch-size",
                "8",
                "--hidden",
                "16",
                *emb,
                "--no-progress",
                "--plot",
                "0",
                *model_args,
            ]
        )
        == 0
    )
    capsys.readouterr()
    return out / "checkpoint"


def _run_deploy_example(monkeypatch, capsys) -> dict:
    """Run the docs/deploy.md example in the current folder; its variables."""
    monkeypatch.setattr(sys, "path", list(sys.path))  # the example adds the export's folder
    monkeypatch.delitem(sys.modules, "attnkit_runner", raising=False)
    block = re.search(r"```python\n(.*?)```", DEPLOY.read_text(), flags=re.S).group(1)
    assert len([line for line in block.splitlines() if line.strip()]) <= 18
    namespace = {}
    exec(compile(block, "docs/deploy.md", "exec"), namespace)
    sys.modules.pop("attnkit_runner", None)
    return namespace


@pytest.mark.parametrize(
    "options",
    [
        [],
        ["--beam", "1"],
        ["--beam", "3", "--n-best", "3"],
        [
            "--beam",
            "4",
            "--length-penalty",
            "0",
            "--no-repeat-ngram",
            "2",
            "--coverage-penalty",
            "0.5",
        ],
        ["--max-len", "4"],
    ],
)
def test_the_deploy_example_decodes_like_attnkit_translate(
    options, tmp_path, monkeypatch, capsys, one_thread
):
    checkpoint = _train(tmp_path, capsys)
    monkeypatch.chdir(tmp_path)
    assert main(["export", "--checkpoint", str(checkpoint), "--out", "numbers-onnx", *options]) == 0
    assert re.match(
        r"wrote numbers-onnx/encoder.onnx, numbers-onnx/decoder_step.onnx, "
        r"numbers-onnx/attnkit.json, numbers-onnx/attnkit_runner.py \(ONNX opset "
        r"17, [0-9.]+ MiB; decoding: ",
        capsys.readouterr().out,
    )
    meta = json.loads(Path("numbers-onnx/attnkit.json").read_text())
    assert meta["task"] == "translate" and meta["decoding"]["max_len"]["ratio"] == 3.0
    assert meta["decoding"]["max_len"]["extra"] == 10 + int(1.5 * 5)  # longest target: 5
    namespace = _run_deploy_example(monkeypatch, capsys)
    printed = capsys.readouterr().out
    assert main(["translate", "--checkpoint", str(checkpoint), *options, namespace["text"]]) == 0
    assert printed == capsys.readouterr().out
    assert printed.count("\n") == (3 if "--n-best" in options else 1)
    assert namespace["out"]  # it decoded tokens (an untrained model: to a loop or the limit)


def test_the_task_s_decoding_is_written_by_default_and_options_change_it(
    tmp_path, capsys, one_thread
):
    checkpoint = _train(tmp_path, capsys)
    settings = {}
    for name, options in {
        "default": [],
        "greedy": ["--beam", "1", "--no-loop-stop"],
        "sample": ["--sample", "2", "--top-k", "3", "--temperature", "0.5"],
    }.items():
        assert (
            main(
                ["export", "--checkpoint", str(checkpoint), "--out", str(tmp_path / name), *options]
            )
            == 0
        )
        settings[name] = json.loads((tmp_path / name / "attnkit.json").read_text())["decoding"]
    assert "decoding: beam=5, length_penalty=1.0)" in capsys.readouterr().out
    assert {
        k: settings["default"][k]
        for k in ("method", "beam", "length_penalty", "n_best", "max_tokens")
    } == {"method": "beam", "beam": 5, "length_penalty": 1.0, "n_best": 1, "max_tokens": None}
    assert settings["greedy"]["method"] == "greedy" and "beam" not in settings["greedy"]
    assert [settings[name]["loop_stop"] for name in settings] == [True, False, True]
    assert {
        k: settings["sample"][k]
        for k in ("method", "samples", "top_k", "top_p", "temperature", "seed")
    } == {
        "method": "sample",
        "samples": 2,
        "top_k": 3,
        "top_p": None,
        "temperature": 0.5,
        "seed": 0,
    }


def test_a_transformer_exports_at_opset_18_and_its_graphs_equal_pytorch(
    tmp_path, capsys, one_thread
):
    from attnkit.export.decoder_state import flatten
    from attnkit.tasks.loading import load_task_model

    checkpoint = _train(tmp_path, capsys, "--model", "transformer", "--heads", "2", "--layers", "1")
    out = tmp_path / "onnx"
    assert (
        main(["export", "--checkpoint", str(checkpoint), "--opset", "18", "--out", str(out)]) == 0
    )
    meta = json.loads((out / "attnkit.json").read_text())
    assert (meta["opset"], meta["model"]["name"]) == (18, "transformer")
    model, _ = load_task_model(checkpoint, "translate")
    model.eval()
    src, src_len = torch.tensor([[4, 5, 6, 7], [5, 6, 0, 0]]), torch.tensor([4, 2])
    encoder = ort.InferenceSession(str(out / "encoder.onnx"))
    step = ort.InferenceSession(str(out / "decoder_step.onnx"))
    values = encoder.run(None, {"src": src.numpy(), "src_len": src_len.numpy()})
    state = {o.name: v for o, v in zip(encoder.get_outputs(), values)}
    tokens = torch.tensor([1, 1])
    with torch.no_grad():
        want = model.start(src, src_len)
        for _ in range(3):
            log_probs, want, _ = model.step(tokens, want)
            feed = {i.name: state[i.name] for i in step.get_inputs() if i.name != "tokens"}
            got = dict(
                zip(
                    [o.name for o in step.get_outputs()],
                    step.run(None, {"tokens": tokens.numpy(), **feed}),
                )
            )
            np.testing.assert_allclose(got["log_probs"], log_probs.numpy(), atol=1e-4)
            state.update({s["name"]: got[s["next"]] for s in meta["state"] if s["next"]})
            tokens = log_probs.argmax(-1)
    for name, tensor in flatten(want).items():
        np.testing.assert_allclose(state[name], tensor.numpy(), atol=1e-4)


@pytest.mark.parametrize("kind", ["ocr-ctc", "ocr-attention", "asr"])
def test_ocr_and_speech_checkpoints_export_with_their_tasks_rules(kind, tmp_path, capsys):
    torch.manual_seed(0)
    vocab = CharVocab(list("abc "))
    if kind == "asr":
        model = LAS(len(vocab), features=8, listener_hidden=8, hidden=16, emb=8, key_value_dim=8)
    else:
        model = CRNN(
            len(vocab),
            channels=(4, 4, 8, 8, 8),
            hidden=8,
            head="ctc" if kind == "ocr-ctc" else "attention",
            dec_hidden=16,
        )
    task = kind.split("-")[0]
    save_checkpoint(
        tmp_path / "ck",
        model=model,
        config={"task": task, "model": model_config(model)},
        vocab=vocab.to_json(),
    )
    assert (
        main(["export", "--checkpoint", str(tmp_path / "ck"), "--out", str(tmp_path / "onnx")]) == 0
    )
    meta = json.loads((tmp_path / "onnx" / "attnkit.json").read_text())
    assert meta["vocab"] == {"tgt": vocab.to_json()} and meta["task"] == task
    rules = {
        "ocr-ctc": None,
        "ocr-attention": {
            "input": "state.lengths",
            "ratio": 0.5,
            "extra": 2,
            "rounding": "floor",
            "at_most": 10_000,
        },
        "asr": {
            "input": "lengths",
            "ratio": 0.3,
            "extra": 10,
            "rounding": "ceil",
            "at_most": 10_000,
        },
    }
    assert meta["decoding"].get("max_len") == rules[kind]
    methods = {"ocr-ctc": "ctc_best_path", "ocr-attention": "greedy", "asr": "beam"}
    assert meta["decoding"]["method"] == methods[kind]  # what read and transcribe do
    if kind == "ocr-attention":  # the rule names a tensor the encoder outputs
        assert "state.lengths" in [o["name"] for o in meta["encoder"]["outputs"]]


@pytest.mark.parametrize(
    "task, alignment, refused",
    [
        ("caption", "softmax", {"onnx", "checkpoint"}),
        ("vqa", "softmax", {"onnx", "checkpoint"}),
        ("lm", "softmax", {"onnx", "checkpoint"}),
        ("ocr", "monotonic", {"onnx"}),
        ("ocr", "softmax", set()),
    ],
)
def test_what_exports_is_what_docs_deploy_md_says(tmp_path, capsys, task, alignment, refused):
    """docs/deploy.md's "What exports" table: caption, VQA and LM checkpoints are refused by
    task in both formats; a decoder with an alignment module in ONNX only."""
    vocab = CharVocab(list("ab"))
    model = CRNN(
        len(vocab),
        channels=(4, 4, 8, 8, 8),
        hidden=8,
        head="attention",
        dec_hidden=8,
        dec_alignment=alignment,
    )
    ck = tmp_path / "ck"
    save_checkpoint(
        ck, model=model, config={"task": task, "model": model_config(model)}, vocab=vocab.to_json()
    )
    for fmt in ("onnx", "checkpoint"):
        status = main(
            ["export", "--checkpoint", str(ck), "--format", fmt, "--out", str(tmp_path / fmt)]
        )
        err = capsys.readouterr().err
        assert status == (2 if fmt in refused else 0), err
        assert (tmp_path / fmt).exists() == (fmt not in refused)
        if fmt in refused:
            assert (
                f"a checkpoint of task {task!r} cannot be exported; expected one of "
                "translate, ocr, asr" in err
                if task != "ocr"
                else "its decoder's monotonic alignment is not exported" in err
            )
    text = " ".join(DEPLOY.read_text(encoding="utf-8").split())
    assert "| caption, VQA, LM (`train lm`) | refused | refused |" in text
    assert "`--alignment local_p`, `gmm`, `monotonic` or `mocha` | refused | written |" in text


def test_bad_input_gives_one_line_errors_and_writes_nothing(tmp_path, capsys):
    vocab = CharVocab(list("ab"))
    model = CRNN(len(vocab), channels=(4, 4, 8, 8, 8), hidden=8)
    good = tmp_path / "ck"
    save_checkpoint(
        good,
        model=model,
        config={"task": "ocr", "model": model_config(model)},
        vocab=vocab.to_json(),
    )
    save_checkpoint(
        tmp_path / "lm",
        model=model,
        config={"task": "asr-speller-lm", "model": model_config(model)},
        vocab=vocab.to_json(),
    )
    (tmp_path / "file").write_text("")
    out = tmp_path / "out"
    cases = [
        (
            ["--checkpoint", str(good), "--format", "tflite", "--out", str(out)],
            "format: expected one of onnx, ctranslate2, checkpoint, got 'tflite'",
        ),
        (
            ["--checkpoint", str(good), "--opset", "16", "--out", str(out)],
            "opset: expected one of 17, 18, got 16",
        ),
        (
            ["--checkpoint", str(tmp_path / "missing"), "--out", str(out)],
            "missing: no such checkpoint directory",
        ),
        (
            ["--checkpoint", str(tmp_path / "lm"), "--out", str(out)],
            "a checkpoint of task 'asr-speller-lm' cannot be exported; expected one of "
            "translate, ocr, asr",
        ),
        (
            ["--checkpoint", str(good), "--out", str(tmp_path / "file")],
            "out: expected a folder (new or existing), got the file",
        ),
        (
            ["--checkpoint", str(good), "--beam", "3", "--out", str(out)],
            "decoding: a CTC model decodes by best path only, not beam (beam=3",
        ),
        (
            [
                "--checkpoint",
                str(good),
                "--format",
                "checkpoint",
                "--top-k",
                "2",
                "--sample",
                "2",
                "--out",
                str(out),
            ],
            "--sample: a decoding option, written by --format onnx only",
        ),
        (
            [
                "--checkpoint",
                str(good),
                "--format",
                "checkpoint",
                "--no-loop-stop",
                "--out",
                str(out),
            ],
            "--no-loop-stop: a decoding option, written by --format onnx only",
        ),
        (
            ["--checkpoint", str(good), "--top-k", "2", "--out", str(out)],
            "--top-k: a sampling option; it needs --sample N",
        ),
    ]
    for args, message in cases:
        assert main(["export", *args]) == 2
        err = capsys.readouterr().err
        assert message in err and err.count("\n") == 1, err
    assert not out.exists() and (tmp_path / "file").read_text() == ""


def test_int8_weights_are_a_fraction_of_the_size_and_decode_the_same(
    tmp_path, monkeypatch, capsys, one_thread
):
    import onnx

    monkeypatch.chdir(tmp_path)
    args = ["export", "--checkpoint", "builtin:translate-dates", "--beam", "1"]
    assert main([*args, "--out", "f32"]) == 0
    assert main([*args, "--out", "numbers-onnx", "--quantize", "int8"]) == 0
    assert "int8 weights" in capsys.readouterr().out
    meta = json.loads(Path("numbers-onnx/attnkit.json").read_text())
    assert meta["quantize"] == "int8"
    assert meta["session_config"] == {"session.disable_quant_qdq": "1"}
    assert json.loads(Path("f32/attnkit.json").read_text())["session_config"] == {}
    sizes = {
        f: sum(Path(f, g).stat().st_size for g in ("encoder.onnx", "decoder_step.onnx"))
        for f in ("f32", "numbers-onnx")
    }
    assert sizes["numbers-onnx"] < sizes["f32"] / 3
    ops = {n.op_type for n in onnx.load("numbers-onnx/decoder_step.onnx").graph.node}
    assert ops & {"MatMulInteger", "DynamicQuantizeLinear", "DynamicQuantizeMatMul"}
    encoder = onnx.load("numbers-onnx/encoder.onnx").graph
    assert {"GRU", "DequantizeLinear"} <= {n.op_type for n in encoder.node}
    dequantized = {n.output[0] for n in encoder.node if n.op_type == "DequantizeLinear"}
    grus = [n for n in encoder.node if n.op_type == "GRU"]
    assert grus and all({n.input[1], n.input[2]} <= dequantized for n in grus)  # W, R: int8
    namespace = _run_deploy_example(monkeypatch, capsys)  # the deploy example, unchanged
    printed = capsys.readouterr().out
    assert (
        main(
            [
                "translate",
                "--checkpoint",
                "builtin:translate-dates",
                "--beam",
                "1",
                namespace["text"],
            ]
        )
        == 0
    )
    assert capsys.readouterr().out == printed  # the int8 graphs decode as PyTorch does
    assert (
        main(
            [
                "export",
                "--checkpoint",
                "builtin:translate-dates",
                "--format",
                "checkpoint",
                "--quantize",
                "int8",
                "--out",
                "ck",
            ]
        )
        == 2
    )
    assert "--quantize: int8 is not a choice of --format checkpoint" in capsys.readouterr().err
