"""Every model family exported: onnxruntime's encoder and decoder steps equal PyTorch's on
other batch sizes and lengths with padding, and greedy decoding through onnxruntime (numpy and
the JSON only) gives attnkit's tokens."""

import json

import numpy as np
import pytest
import torch

from attnkit.decoding import decode
from attnkit.models import CRNN, LAS, Seq2Seq, Transformer

ort = pytest.importorskip("onnxruntime", reason="onnxruntime is not installed: "
                          "pip install 'attnkit[export]'")

from attnkit.export import JSON_FILE, export_onnx  # noqa: E402
from attnkit.export.graphs import model_inputs  # noqa: E402
from attnkit.export.state import flatten  # noqa: E402

TOL = 1e-4  # float32
MAX_LEN = {"input": "src_len", "ratio": 1.5, "extra": 3, "rounding": "ceil"}
MODELS = {
    "bahdanau": lambda: Seq2Seq(20, 22, kind="bahdanau", emb=8, hidden=16),
    "luong": lambda: Seq2Seq(20, 22, kind="luong", score="general", input_feeding=True, emb=8,
                             hidden=16),
    "none": lambda: Seq2Seq(20, 22, kind="none", emb=8, hidden=16),
    "transformer": lambda: Transformer(20, 22, d_model=16, heads=2, layers=2, ff=32),
    "las": lambda: LAS(12, features=8, listener_hidden=8, hidden=16, emb=8, key_value_dim=8,
                       layers=2),
    "las-uni": lambda: LAS(12, features=8, listener_hidden=8, hidden=16, emb=8,
                           key_value_dim=8, listener="uni"),
    "crnn-ctc": lambda: CRNN(10, channels=(4, 4, 8, 8, 8), hidden=8, attention="window",
                             window=3),
    "crnn-attention": lambda: CRNN(10, channels=(4, 4, 8, 8, 8), hidden=8,
                                   attention="global", head="attention", dec_hidden=16),
}
LENGTHS = {"las": (41, [41, 33, 8]), "las-uni": (41, [41, 33, 8]), "crnn-ctc": (37, [37, 20, 2]),
           "crnn-attention": (37, [37, 20, 2])}  # (L, lengths) of the parity inputs


class Exported:
    """A model, its export and onnxruntime sessions."""

    def __init__(self, name, folder):
        torch.manual_seed(0)
        self.model = MODELS[name]().eval()
        if name in EOS_BIAS:
            with torch.no_grad():
                model = self.model
                (model.out_bias if name == "transformer" else model.decoder.out.bias)[2] += \
                    EOS_BIAS[name]
        self.meta = export_onnx(self.model, folder, task="test", vocab={}, max_len=MAX_LEN)
        assert json.loads((folder / JSON_FILE).read_text()) == self.meta
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
    cache = {}

    def get(name):
        if name not in cache:
            cache[name] = Exported(name, tmp_path_factory.mktemp(name))
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
    assert {s["name"] for s in e.meta["state"]} == set(flatten(want_state))


def ort_greedy(e: Exported, x, lengths) -> np.ndarray:
    """Greedy decoding as the JSON describes it, with numpy and onnxruntime only."""
    d = e.meta["decoding"]
    state = e.encode(x, lengths)
    rule = d["max_len"]
    length = {"src_len": lengths.numpy(), **state}[rule["input"]]
    limit = getattr(np, rule["rounding"])(rule["ratio"] * length).astype(np.int64) + rule["extra"]
    tokens = np.full(len(limit), d["bos"])
    done = np.zeros(len(limit), dtype=bool)
    out = []
    for t in range(limit.max()):
        res = e.run_step(tokens, state)
        log_probs = res["log_probs"].copy()
        log_probs[:, d["never_emit"]] = -np.inf
        tokens = np.where(done, d["pad"], log_probs.argmax(-1))
        out.append(tokens)
        done |= (tokens == d["eos"]) | (t + 1 >= limit)
        state.update({s["name"]: res[s["next"]] for s in e.meta["state"] if s["next"]})
        if done.all():
            break
    return np.stack(out, 1)


# A bias towards EOS (set before the export) so that greedy decoding of the randomly
# initialised models stops some examples at EOS, at different steps, and others at max_len.
EOS_BIAS = {"bahdanau": 0.3, "luong": 0.4, "transformer": 0.0}


@pytest.mark.parametrize("name", list(EOS_BIAS))
def test_greedy_decoding_through_onnxruntime_gives_attnkits_tokens(name, exported, one_thread):
    e = exported(name)
    x, lengths = model_inputs(e.model).example(4, 9, seed=11)
    limit = (lengths.float() * MAX_LEN["ratio"]).ceil().long() + MAX_LEN["extra"]
    with torch.no_grad():
        want = decode(e.model, x, lengths, max_len=limit)
    got = ort_greedy(e, x, lengths)
    np.testing.assert_array_equal(got, want.tokens.numpy())
    stops = want.lengths.tolist()
    assert len(set(stops)) > 1 and any(n < int(m) for n, m in zip(stops, limit))
    assert any(n == int(m) for n, m in zip(stops, limit))


def test_the_json_names_every_graph_input_and_output(exported):
    meta = exported("bahdanau").meta
    assert [i["name"] for i in meta["encoder"]["inputs"]] == ["src", "src_len"]
    state = ["state.h", "state.src_len", "state.memory.key_features", "state.memory.values"]
    assert [o["name"] for o in meta["encoder"]["outputs"]] == state
    assert [i["name"] for i in meta["decoder_step"]["inputs"]] == ["tokens", *state]
    assert [o["name"] for o in meta["decoder_step"]["outputs"]] == ["log_probs", "weights",
                                                                    "next.h"]
    assert meta["state"][:2] == [{"name": "state.h", "next": "next.h"},
                                 {"name": "state.src_len", "next": None}]
    assert meta["encoder"]["outputs"][2]["shape"] == ["B", 1, "S", 16]  # (B, H, S, A)
    assert meta["decoding"] | {"rule": ""} == {
        "method": "greedy", "bos": 1, "eos": 2, "pad": 0, "never_emit": [0, 1],
        "max_len": MAX_LEN, "rule": ""}
    assert (meta["opset"], meta["model"]["name"]) == (17, "seq2seq")
    # a step that never reads an entry does not take it (the no-attention model's lengths)
    plain = exported("none").meta
    assert "state.src_len" not in [i["name"] for i in plain["decoder_step"]["inputs"]]
    assert "weights" not in [o["name"] for o in plain["decoder_step"]["outputs"]]
    cache = exported("transformer").meta["decoder_step"]["inputs"][5]
    assert cache["name"] == "state.cache.0.key_features" and cache["shape"] == ["B", 2, "T", 8]
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
    with pytest.raises(ValueError, match="out: expected a folder, got the file"):
        export_onnx(model, tmp_path / "file", task="t", vocab={}, max_len=MAX_LEN)
    with pytest.raises(ValueError, match="model: expected Seq2Seq, Transformer, LAS or CRNN, "
                                         "got Linear"):
        export_onnx(torch.nn.Linear(2, 2), out, task="t", vocab={}, max_len=MAX_LEN)
    aligned = LAS(10, features=8, listener_hidden=8, hidden=16, emb=8, key_value_dim=8,
                  alignment="monotonic")
    with pytest.raises(ValueError, match="model: its decoder's monotonic alignment is not "
                                         "exported"):
        export_onnx(aligned, out, task="t", vocab={}, max_len=MAX_LEN)
    assert not out.exists() and model.training
    export_onnx(model, out, task="t", vocab={}, max_len=MAX_LEN, opset=18)
    assert model.training  # the export leaves the model's mode as it was
    assert sorted(p.name for p in out.iterdir()) == ["attnkit.json", "decoder_step.onnx",
                                                     "encoder.onnx"]
