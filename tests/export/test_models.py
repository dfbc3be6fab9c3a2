"""Every model family exported: onnxruntime's encoder and decoder steps equal PyTorch's on
other batch sizes and lengths with padding, and the exported runner (numpy and the JSON only)
decodes through onnxruntime as attnkit does: greedy, beam search with its options, sampling's
restrictions, the stop of an output that loops, CTC best path."""

import dataclasses
import importlib.util
import json
import math

import numpy as np
import pytest
import torch

from attnkit.decoding import Decoding, ctc_greedy, decode
from attnkit.decoding.loops import MIN_SPAN, REPEATS
from attnkit.models import CRNN, LAS, Seq2Seq, Transformer
from attnkit.tokens import BOS, content_ids

ort = pytest.importorskip(
    "onnxruntime", reason="onnxruntime is not installed: pip install 'attnkit[export]'"
)

import onnx  # noqa: E402

from attnkit.export import JSON_FILE, RUNNER_FILE, decoding_json, export_onnx  # noqa: E402
from attnkit.export.decoder_state import flatten  # noqa: E402
from attnkit.export.graphs import model_inputs  # noqa: E402

TOL = 1e-4  # float32
# The output length limits: translation's capped to exercise "at_most"
MAX_LEN = {"input": "src_len", "ratio": 1.5, "extra": 3, "rounding": "ceil", "at_most": 14}
LAS_RULE = {"input": "lengths", "ratio": 0.3, "extra": 2, "rounding": "ceil", "at_most": None}
RULES = {
    "las": LAS_RULE,
    "las-uni": LAS_RULE,
    "crnn-attention": {
        "input": "state.lengths",
        "ratio": 0.5,
        "extra": 2,
        "rounding": "floor",
        "at_most": None,
    },
}
MODELS = {
    "bahdanau": lambda: Seq2Seq(20, 22, kind="bahdanau", emb=8, hidden=16),
    "luong": lambda: Seq2Seq(
        20, 22, kind="luong", score="general", input_feeding=True, emb=8, hidden=16
    ),
    "none": lambda: Seq2Seq(20, 22, kind="none", emb=8, hidden=16),
    "transformer": lambda: Transformer(20, 22, d_model=16, heads=2, layers=2, ff=32),
    "las": lambda: LAS(
        12, features=8, listener_hidden=8, hidden=16, emb=8, key_value_dim=8, layers=2
    ),
    "las-uni": lambda: LAS(
        12, features=8, listener_hidden=8, hidden=16, emb=8, key_value_dim=8, listener="uni"
    ),
    "crnn-ctc": lambda: CRNN(10, channels=(4, 4, 8, 8, 8), hidden=8, attention="window", window=3),
    "crnn-attention": lambda: CRNN(
        10, channels=(4, 4, 8, 8, 8), hidden=8, attention="global", head="attention", dec_hidden=16
    ),
}
LENGTHS = {
    "las": (41, [41, 33, 8]),
    "las-uni": (41, [41, 33, 8]),
    "crnn-ctc": (37, [37, 20, 2]),
    "crnn-attention": (37, [37, 20, 2]),
}  # (L, lengths) of the parity inputs


class Exported:
    """A model, its export and onnxruntime sessions."""

    def __init__(self, model, folder, max_len):
        self.model, self.folder = model.eval(), folder
        self.meta = export_onnx(self.model, folder, task="test", vocab={}, max_len=max_len)
        assert json.loads((folder / JSON_FILE).read_text()) == self.meta
        spec = importlib.util.spec_from_file_location(f"runner_{folder.name}", folder / RUNNER_FILE)
        self.runner = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(self.runner)  # the copy written next to the graphs
        self.encoder = ort.InferenceSession(str(folder / self.meta["encoder"]["file"]))
        step = self.meta.get("decoder_step")
        self.step = step and ort.InferenceSession(str(folder / step["file"]))

    def encode(self, x, lengths) -> dict:
        names = [i["name"] for i in self.meta["encoder"]["inputs"]]
        out = self.encoder.run(None, dict(zip(names, (x.numpy(), lengths.numpy()))))
        return {o["name"]: v for o, v in zip(self.meta["encoder"]["outputs"], out)}

    def run_step(self, tokens, state: dict) -> dict:
        feed = {i["name"]: state[i["name"]] for i in self.meta["decoder_step"]["inputs"][1:]}
        out = self.step.run(None, {"tokens": tokens, **feed})
        return {o["name"]: v for o, v in zip(self.meta["decoder_step"]["outputs"], out)}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """``exported(name)``: the model ``MODELS[name]`` (``LOOPING[name]``: made to loop),
    exported once per module."""
    cache = {}

    def get(name):
        if name not in cache:
            torch.manual_seed(0)
            model = LOOPING[name]() if name in LOOPING else MODELS[name]()
            if name in BIAS:
                parameter, token, shift = BIAS[name]
                with torch.no_grad():
                    model.get_parameter(parameter)[token] += shift
            cache[name] = Exported(model, tmp_path_factory.mktemp(name), RULES.get(name, MAX_LEN))
        return cache[name]

    return get


def _close(got: np.ndarray, want: torch.Tensor):
    assert got.shape == tuple(want.shape)
    torch.testing.assert_close(torch.from_numpy(got), want, atol=TOL, rtol=0)


@pytest.mark.parametrize("name", list(MODELS))
def test_encoder_and_decoder_steps_equal_pytorch(name, exported, one_thread):
    e = exported(name)
    length, lengths = LENGTHS.get(name, (11, [11, 6, 1]))
    x, _ = model_inputs(e.model).example(3, length, seed=7)  # not the export's sizes
    lengths = torch.tensor(lengths)
    state = e.encode(x, lengths)
    with torch.no_grad():
        if e.step is None:  # CTC: log-probs and steps
            for got, want in zip(state.values(), e.model(x, lengths)):
                _close(got, want)
            return
        want_state = e.model.start(x, lengths)
        for n, t in flatten(want_state).items():
            _close(state[n], t)
        tokens = torch.tensor([1, 1, 1])
        for _ in range(4):
            log_probs, want_state, weights = e.model.step(tokens, want_state)
            out = e.run_step(tokens.numpy(), state)
            _close(out["log_probs"], log_probs)
            if weights is not None:
                _close(out["weights"], weights)
            state.update({s["name"]: out[s["next"]] for s in e.meta["state"] if s["next"]})
            for n, t in flatten(want_state).items():
                _close(state[n], t)
            tokens = log_probs.argmax(-1)
    names = {s["name"] for s in e.meta["state"]}
    # the memories were checked once, by the encoder graph: no step zeroes their padding again
    memories = {n for n in names if n.endswith((".key_features", ".values"))}
    graph = onnx.load(str(e.folder / e.meta["decoder_step"]["file"])).graph
    assert not [n.name for n in graph.node if n.op_type == "Where" and memories & set(n.input)]
    # nor writes out the zeros that stand in for a memory's keys where only their shape is read
    made = {o: n.op_type for n in graph.node for o in n.output}
    read_by = {}
    for n in graph.node:
        for i in n.input:
            read_by.setdefault(i, set()).add(n.op_type)
    assert not [
        n.name
        for n in graph.node
        if n.op_type == "Expand"
        and made.get(n.input[0]) == "ConstantOfShape"
        and read_by[n.output[0]] == {"Shape"}
    ]
    assert set(flatten(want_state)) <= names
    for n in names - set(flatten(want_state)):  # the keys the encoder graph found non-finite
        assert n.endswith(".bad") and state[n].dtype == np.bool_ and not state[n].any()


def runner_decode(e: Exported, x, lengths, decoding: Decoding | None) -> list:
    """The runner's outputs for ``decoding`` (written into the JSON as the export writes it)."""
    rule = e.meta["decoding"].get("max_len")
    meta = {**e.meta, "decoding": decoding_json(decoding, rule, ctc=e.step is None)}
    return e.runner.decode(
        e.step,
        e.encode(x, lengths),
        meta,
        dict(zip([i["name"] for i in e.meta["encoder"]["inputs"]], (x.numpy(), lengths.numpy()))),
    )


def attnkit_decode(e: Exported, x, lengths, decoding: Decoding | None) -> list:
    """attnkit's outputs, as lists of ids per example (its n-best or samples, best first), the
    length limit computed by the JSON's rule in PyTorch."""
    with torch.no_grad():
        if e.step is None:
            return [[ids] for ids in ctc_greedy(*e.model(x, lengths)).ids]
        rule = e.meta["decoding"]["max_len"]
        values = {
            e.meta["encoder"]["inputs"][1]["name"]: lengths,
            **flatten(e.model.start(x, lengths)),
        }
        scaled = getattr(torch, rule["rounding"])(values[rule["input"]].float() * rule["ratio"])
        limit = scaled.long() + rule["extra"]
        if rule["at_most"] is not None:
            limit = limit.clamp(max=rule["at_most"])
        hyp = decode(e.model, x, lengths, max_len=limit, decoding=decoding)
    tokens = hyp.tokens if hyp.tokens.dim() == 3 else hyp.tokens[:, None]  # (B, n, T)
    return [[content_ids(row) for row in example] for example in tokens.tolist()]


# Output biases shifted before the export: towards EOS, so that decoding the randomly
# initialised translation models stops some examples at EOS, at different steps, and others
# at their limit (the Transformer does without); away from the blank, so that the CTC model
# emits ids.
BIAS = {
    "bahdanau": ("decoder.out.bias", 2, 0.3),
    "luong": ("decoder.out.bias", 2, 0.4),
    "crnn-ctc": ("classifier.bias", 0, -3.0),
}
STOPS = ("bahdanau", "luong", "transformer")
DECODERS = [name for name in MODELS if name != "crnn-ctc"]
DECODINGS = {
    "greedy": Decoding(),
    "beam": Decoding(beam=3, length_penalty=0.6),
    "beam-options": Decoding(
        beam=4, length_penalty=1.0, coverage_penalty=0.4, no_repeat_ngram=2, n_best=3
    ),
    "beam-max-len": Decoding(beam=2, max_len=5),
    "beam-stop-best": Decoding(beam=4, length_penalty=1.0, n_best=2, beam_stop="best"),
}


@pytest.mark.parametrize("how", list(DECODINGS))
@pytest.mark.parametrize("name", DECODERS)
def test_the_runner_decodes_through_onnxruntime_as_attnkit_does(name, how, exported, one_thread):
    e = exported(name)
    if name in LENGTHS:
        length, lengths = LENGTHS[name]
        x, lengths = model_inputs(e.model).example(3, length, seed=11)[0], torch.tensor(lengths)
    else:
        x, lengths = model_inputs(e.model).example(4, 9, seed=11)
    want = attnkit_decode(e, x, lengths, DECODINGS[how])
    assert runner_decode(e, x, lengths, DECODINGS[how]) == want
    assert [len(outputs) for outputs in want] == [DECODINGS[how].n_best] * len(lengths)
    if name in STOPS and how == "greedy":  # some examples stop at EOS, others at the limit
        limits = [min(math.ceil(1.5 * n) + 3, 14) for n in lengths.tolist()]
        stops = [len(outputs[0]) for outputs in want]
        assert any(n < m for n, m in zip(stops, limits)) and 14 in stops
        assert any(n == m for n, m in zip(stops, limits))


def test_the_runner_reads_the_ctc_best_path(exported, one_thread):
    e = exported("crnn-ctc")
    x, _ = model_inputs(e.model).example(3, 37, seed=3)
    lengths = torch.tensor([37, 20, 2])
    want = attnkit_decode(e, x, lengths, None)
    assert runner_decode(e, x, lengths, None) == want and any(o[0] for o in want)


def test_the_runner_samples_from_the_model_s_restricted_distribution(exported, one_thread):
    e = exported("bahdanau")
    x, lengths = model_inputs(e.model).example(2, 9, seed=5)
    greedy = runner_decode(e, x, lengths, Decoding())
    for narrow in (
        Decoding(sample=True, top_k=1, samples=2),
        Decoding(sample=True, top_p=1e-6, temperature=2.0),
    ):
        outputs = runner_decode(e, x, lengths, narrow)
        assert outputs == [[g[0]] * narrow.samples for g in greedy]
    wide = Decoding(sample=True, top_k=2, samples=40, max_len=1, seed=3)
    drawn = runner_decode(e, x, lengths, wide)
    assert drawn == runner_decode(e, x, lengths, wide)  # seeded: the same draws
    with torch.no_grad():
        log_probs, _, _ = e.model.step(torch.tensor([1, 1]), e.model.start(x, lengths))
    log_probs[:, :2] = -float("inf")  # never pad or bos
    for outputs, top2 in zip(drawn, log_probs.topk(2).indices.tolist()):
        first = {out[0] if out else 2 for out in outputs}  # an empty output: EOS drawn
        assert first == set(top2)  # only the two most probable, both drawn in 40 draws


def looping(kind: str) -> Seq2Seq:
    """A Seq2Seq that emits 8 7 8 7 ... whatever its input: each token is chosen by the
    previous one's embedding alone (ties broken by a bias growing with the id). Its additive
    attention has no query weights, so its weights depend on the keys alone and stand still."""
    model = Seq2Seq(20, 22, kind=kind, emb=8, hidden=16)
    with torch.no_grad():
        decoder = model.decoder
        decoder.embed.weight[[BOS, 7]] = torch.eye(8)[0]
        decoder.embed.weight[8] = torch.eye(8)[1]
        decoder.out.weight.zero_()  # its input: [h; (context;) embedding of the last token]
        decoder.out.weight[8, -8] = decoder.out.weight[7, -7] = 20.0
        decoder.out.bias.copy_(torch.arange(22) * 0.01)
        if kind == "bahdanau":
            decoder.attention.score.w_query.zero_()
    return model


LOOPING = {"looping": lambda: looping("bahdanau"), "looping-blind": lambda: looping("none")}
LOOP_DECODINGS = {
    "greedy": Decoding(max_len=30),
    "beam": Decoding(beam=3, length_penalty=1.0, n_best=2, max_len=30),
    "sample": Decoding(sample=True, top_k=1, samples=2, max_len=30),
}


@pytest.mark.parametrize("how", list(LOOP_DECODINGS))
def test_the_runner_stops_an_output_that_loops_where_attnkit_does(how, exported, one_thread):
    e = exported("looping")
    x, lengths = model_inputs(e.model).example(2, 9, seed=11)
    stop = 2 + max((REPEATS - 1) * 2, MIN_SPAN)  # the unit of 2 tokens, then its still repeats
    for decoding, size in (
        (LOOP_DECODINGS[how], stop),
        (dataclasses.replace(LOOP_DECODINGS[how], loop_stop=False), 30),
    ):
        want = attnkit_decode(e, x, lengths, decoding)
        assert runner_decode(e, x, lengths, decoding) == want
        assert [outputs[0] for outputs in want] == [[8, 7] * (size // 2)] * 2
        assert {len(o) for outputs in want for o in outputs} == {size}  # all stopped there
    # the same loop, without attention weights: never stopped
    blind = exported("looping-blind")
    want = attnkit_decode(blind, x, lengths, LOOP_DECODINGS[how])
    assert runner_decode(blind, x, lengths, LOOP_DECODINGS[how]) == want
    assert {len(o) for outputs in want for o in outputs} == {30}


def test_the_json_names_every_graph_input_and_output(exported):
    meta = exported("bahdanau").meta
    assert [i["name"] for i in meta["encoder"]["inputs"]] == ["src", "src_len"]
    state = [
        "state.h",
        "state.src_len",
        "state.memory.key_features",
        "state.memory.values",
        "state.memory.bad",
    ]
    assert [o["name"] for o in meta["encoder"]["outputs"]] == state
    assert [i["name"] for i in meta["decoder_step"]["inputs"]] == ["tokens", *state]
    assert [o["name"] for o in meta["decoder_step"]["outputs"]] == [
        "log_probs",
        "weights",
        "next.h",
    ]
    assert meta["state"][:2] == [
        {"name": "state.h", "next": "next.h"},
        {"name": "state.src_len", "next": None},
    ]
    assert meta["encoder"]["outputs"][2]["shape"] == ["B", 1, "S", 16]  # (B, H, S, A)
    assert meta["decoding"] | {"rule": ""} == {
        "method": "greedy",
        "bos": 1,
        "eos": 2,
        "pad": 0,
        "never_emit": [0, 1],
        "max_len": MAX_LEN,
        "max_tokens": None,
        "loop_stop": True,
        "loop": {"max_period": 64, "repeats": 3, "min_span": 16, "tolerance": 0.5},
        "rule": "",
    }
    assert meta["version"] == 3
    assert (meta["opset"], meta["model"]["name"]) == (17, "seq2seq")
    # a step that never reads an entry does not take it (the no-attention model's lengths)
    plain = exported("none").meta
    assert "state.src_len" not in [i["name"] for i in plain["decoder_step"]["inputs"]]
    assert "weights" not in [o["name"] for o in plain["decoder_step"]["outputs"]]
    inputs = {i["name"]: i for i in exported("transformer").meta["decoder_step"]["inputs"]}
    assert inputs["state.cache.0.key_features"]["shape"] == ["B", 2, "T", 8]
    assert inputs["state.cache.0.bad"]["shape"] == ["B", "T"]
    ctc = exported("crnn-ctc").meta
    assert "decoder_step" not in ctc and ctc["decoding"]["method"] == "ctc_best_path"
    assert [o["name"] for o in ctc["encoder"]["outputs"]] == ["log_probs", "steps"]


def test_export_refuses_bad_arguments_and_writes_nothing(tmp_path):
    model = MODELS["none"]().train()
    out = tmp_path / "out"
    with pytest.raises(ValueError, match=r"opset: expected one of 17, 18, got 16"):
        export_onnx(model, out, task="t", vocab={}, max_len=MAX_LEN, opset=16)
    with pytest.raises(ValueError, match="max_len: a token decoder needs its output length"):
        export_onnx(model, out, task="t", vocab={})
    (tmp_path / "file").write_text("")
    with pytest.raises(
        ValueError, match=r"out: expected a folder \(new or existing\), got the file"
    ):
        export_onnx(model, tmp_path / "file", task="t", vocab={}, max_len=MAX_LEN)
    with pytest.raises(
        ValueError, match="model: expected Seq2Seq, Transformer, LAS or CRNN, got Linear"
    ):
        export_onnx(torch.nn.Linear(2, 2), out, task="t", vocab={}, max_len=MAX_LEN)
    aligned = LAS(
        10, features=8, listener_hidden=8, hidden=16, emb=8, key_value_dim=8, alignment="monotonic"
    )
    with pytest.raises(
        ValueError, match="model: its decoder's monotonic alignment is not exported"
    ):
        export_onnx(aligned, out, task="t", vocab={}, max_len=MAX_LEN)
    assert not out.exists() and model.training
    export_onnx(model, out, task="t", vocab={}, max_len=MAX_LEN, opset=18)
    assert model.training  # the export leaves the model's mode as it was
    assert sorted(p.name for p in out.iterdir()) == [
        "attnkit.json",
        "attnkit_runner.py",
        "decoder_step.onnx",
        "encoder.onnx",
    ]
