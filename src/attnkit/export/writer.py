"""Write a model's ONNX graphs and the JSON that says how to run them.

:func:`export_onnx` traces the graphs of :mod:`attnkit.export.graphs` with PyTorch's
TorchScript-based ONNX exporter (``torch.onnx.export(..., dynamo=False)``) inside
:func:`attnkit.ops.export_mode`, so every attention call takes the reference path.

Why that exporter (torch 2.13): it writes ``nn.GRU`` / ``nn.LSTM`` as ONNX ``GRU`` / ``LSTM``
nodes whose sequence axis stays dynamic, and exports a small model in well under a second. The
``torch.export``-based one (``dynamo=True``, with onnxscript 0.7.2) fixed the sequence length
of a bidirectional GRU's output at the example's (onnxruntime then refuses other lengths:
"invalid expand shape") and takes about 9 s per graph. The attention modules trace with
``torch.export`` as well (tested), so the choice is the recurrent layers'.

The axes of every state tensor are found by running the model eagerly on examples of two
batch sizes and lengths (the dims that change are ``B`` and ``S``) and for two decoder steps
(the dims that grow are ``T``); the step graph is traced on the state after two steps.
"""

from __future__ import annotations

import json
import os
import shutil
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

import torch

from attnkit.attention import Alignment
from attnkit.decoding import Decoding
from attnkit.decoding.loops import MAX_PERIOD, MIN_SPAN, REPEATS, TOLERANCE
from attnkit.export.card import CARD
from attnkit.export.ctranslate2_format import CT2_FORMAT, CT2_JSON, CT2_NAMES
from attnkit.export.decoder_state import flatten
from attnkit.export.graphs import AXES, CTCGraph, EncoderGraph, StepGraph, model_inputs, next_name
from attnkit.export.quantize import SESSION_CONFIG, quantize_int8
from attnkit.folders import write_folder
from attnkit.models import CRNN, model_config
from attnkit.ops import export_mode
from attnkit.tokens import BOS, EOS, PAD

__all__ = [
    "DEFAULT_OPSET",
    "ENCODER_FILE",
    "EXPORTER",
    "JSON_FILE",
    "OPSETS",
    "RUNNER_FILE",
    "STEP_FILE",
    "check_out",
    "decoding_json",
    "export_graph",
    "export_onnx",
]

OPSETS = (17, 18)  # tested with onnxruntime 1.31; 17 is the first with LayerNormalization
DEFAULT_OPSET = 17
EXPORTER = "torch.onnx.export(dynamo=False): the TorchScript-based exporter"
ENCODER_FILE, STEP_FILE, JSON_FILE = "encoder.onnx", "decoder_step.onnx", "attnkit.json"
QUANTIZE = (None, "int8")  # export_onnx's quantize
RUNNER_FILE = "attnkit_runner.py"  # a copy of attnkit/export/runner.py: numpy only
FORMAT, VERSION = "attnkit-onnx", 3
# What an export folder may hold: the files of this format, those of an inference checkpoint
# (``attnkit export --format checkpoint``: attnkit.train's format, named here since export
# does not import train), the cache Python writes when attnkit_runner is imported from it, and
# the files of a CTranslate2 export (ctranslate2_format).
# ``attnkit average`` writes an inference checkpoint whose trainer.json lists what it averaged.
CHECKPOINT_FORMAT, TRAINER_FILE = "attnkit-checkpoint", "trainer.json"
EXPORT_NAMES = {
    ENCODER_FILE,
    STEP_FILE,
    JSON_FILE,
    RUNNER_FILE,
    "__pycache__",
    "config.json",
    "model.safetensors",
    "vocab.json",
    TRAINER_FILE,
    CARD,
    *CT2_NAMES,
}


def export_onnx(
    model: torch.nn.Module,
    out: str | Path,
    *,
    task: str,
    vocab: dict,
    max_len: dict | None = None,
    decoding: Decoding | None = None,
    opset: int = DEFAULT_OPSET,
    force: bool = False,
    quantize: str | None = None,
) -> dict:
    """Write ``out/encoder.onnx``, ``out/decoder_step.onnx`` (token decoders),
    ``out/attnkit.json`` and ``out/attnkit_runner.py``; returns the JSON's content.

    Args:
        model: a model of the registry (see :func:`attnkit.export.graphs.model_inputs`).
        task: the checkpoint's task, written to the JSON.
        vocab: the vocabularies (``{"src": ..., "tgt": ...}``, each as ``to_json()`` gives).
        max_len: the output length limit of a token decoder: ``{"input": the encoder input
            or output holding a length per example, "ratio": r, "extra": e, "rounding":
            "ceil" | "floor", "at_most": a cap or None}`` for
            ``min(rounding(r * length) + e, at_most)`` tokens, EOS included (ignored for a
            CTC model).
        decoding: how a token decoder decodes (default greedy): greedy, beam search or
            sampling with their settings, written to the JSON for the runner; joint CTC or
            language-model decoding is not exported. A CTC model takes the best path only.
        opset: the ONNX opset, one of :data:`OPSETS`.
        force: replace ``out`` whatever it holds (see :func:`check_out`).
        quantize: None (float32 graphs) or ``"int8"``: every large weight stored as int8
            (:func:`attnkit.export.quantize.quantize_int8`: onnxruntime's dynamic
            quantisation of matrix multiplications, LSTMs and embeddings, weight-only int8
            for GRUs and convolutions); read by the same runner. Needs ``onnxruntime``.

    The files are written in a folder beside ``out``, which then replaces ``out`` whole
    (:func:`attnkit.folders.write_folder`): on an error ``out`` is left as it was, an
    earlier export in it whole, and a file that cannot be written (a full disk, a read-only
    folder) is a ValueError naming ``out`` and the cause. Needs the ``onnx`` package (the
    ``export`` extra) to read the graphs back.
    """
    if opset not in OPSETS:
        raise ValueError(f"opset: expected one of {', '.join(map(str, OPSETS))}, got {opset!r}")
    if quantize not in QUANTIZE:
        raise ValueError(
            f"quantize: expected one of {', '.join(map(str, QUANTIZE))}, got {quantize!r}"
        )
    out = check_out(out, force=force)
    aligned = sorted({m.name for m in model.modules() if isinstance(m, Alignment)})
    if aligned:
        raise ValueError(
            f"model: its decoder's {', '.join(aligned)} alignment is not "
            "exported (its hard decoding scans a number of keys that depends on "
            "the input); export a softmax-attention model"
        )
    inputs = model_inputs(model)
    ctc = isinstance(model, CRNN) and model.head_kind == "ctc"
    if not ctc and max_len is None:
        raise ValueError("max_len: a token decoder needs its output length limit, got None")
    settings = decoding_json(decoding, max_len, ctc=ctc)
    training = model.training
    model.eval()
    try:
        with write_folder(out) as tmp:  # replaces out whole once every file is written
            with torch.no_grad(), export_mode():
                graphs = (
                    _export_ctc(model, inputs, tmp, opset)
                    if ctc and isinstance(model, CRNN)  # ctc implies it; mypy is told
                    else _export_decoder(model, inputs, tmp, opset)
                )
            if quantize:
                for graph in ("encoder", "decoder_step"):
                    if graph in graphs:
                        quantize_int8(tmp / graphs[graph]["file"])
            meta = {
                "format": FORMAT,
                "version": VERSION,
                "task": task,
                "model": model_config(model),
                "opset": opset,
                "exporter": EXPORTER,
                "quantize": quantize,
                "session_config": SESSION_CONFIG if quantize else {},
                "torch": torch.__version__,
                "axes": AXES,
                **graphs,
                "vocab": vocab,
                "decoding": settings,
                "runner": RUNNER_FILE,
            }
            (tmp / JSON_FILE).write_text(json.dumps(meta, indent=1))
            shutil.copyfile(Path(__file__).with_name("runner.py"), tmp / RUNNER_FILE)
    except OSError as exc:  # a full disk, a read-only folder...
        kept = "; the earlier export there is left as it was" if out.exists() else ""
        raise ValueError(
            f"out: cannot write the export in {out}: {exc.strerror or exc}{kept}"
        ) from None
    finally:
        model.train(training)
    return meta


def check_out(
    out: str | Path,
    *,
    reading: str | Path | Sequence[str | Path] | None = None,
    force: bool = False,
    doing: str = "exported",
) -> Path:
    """``out`` as an absolute path, once it is known that an export (or ``attnkit average``)
    may replace that folder whole: it does not exist (and no file stands in the way of
    creating it), it is empty, or it holds an earlier export (ONNX, an inference checkpoint
    or an averaged one) and nothing else; with ``force``, any folder. Never a checkpoint of
    ``reading`` (the ones being ``doing``: exported, averaged), a folder holding one or one
    inside one, even with ``force``; never a folder inside a checkpoint (a run's next save
    replaces that checkpoint whole, and what is inside with it).

    Raises:
        ValueError: naming ``out``, what it is and what was expected.
    """
    given, out = out, Path(os.path.abspath(out))
    readings = [reading] if isinstance(reading, (str, Path)) else list(reading or ())
    target = Path(os.path.realpath(out))
    for read in readings:
        source = Path(os.path.realpath(read))
        why = (
            "is"
            if target == source
            else "is inside"
            if source in target.parents
            else "holds"
            if target in source.parents
            else None
        )
        if why:
            raise ValueError(
                f"out: {given} {why} the checkpoint being {doing} ({read}); expected another folder"
            )
    holder = next((p for p in target.parents if _is_checkpoint(p)), None)
    if holder is not None:
        raise ValueError(
            f"out: {given} is inside the checkpoint {holder}, which its next "
            "save replaces whole; expected a folder outside it"
        )
    if out.exists() and not out.is_dir():
        raise ValueError(f"out: expected a folder (new or existing), got the file {given}")
    if not out.exists():
        above = next(p for p in out.parents if p.exists())
        if not above.is_dir():
            raise ValueError(f"out: cannot create {given}: {above} is a file")
        return out
    names = sorted(p.name for p in out.iterdir())
    foreign = _foreign(out, names)
    if names and not force and (foreign or not _is_export(out)):
        shown = foreign or names
        raise ValueError(
            f"out: {given} is not empty and not an earlier attnkit export (it "
            f"holds {', '.join(shown[:5])}{', ...' if len(shown) > 5 else ''}); "
            "expected a new or empty folder, or pass --force to replace it and "
            "all it holds"
        )
    return out


def _is_checkpoint(folder: Path) -> bool:
    """Whether ``folder`` is a checkpoint (its config.json says so)."""
    return _head(folder / "config.json").get("format") == CHECKPOINT_FORMAT


def _head(path: Path) -> dict:
    """The JSON object in ``path``, or {} when it is not a regular file holding one (a FIFO
    is not opened)."""
    if not path.is_file():
        return {}
    try:
        head = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return head if isinstance(head, dict) else {}


def _foreign(folder: Path, names: list[str]) -> list[str]:
    """Those of ``names`` (in ``folder``) that no export holds: any other file, and a
    trainer.json that does not list what was averaged (a run's checkpoints and the models it
    keeps say their step instead)."""
    return [
        n
        for n in names
        if n not in EXPORT_NAMES or (n == TRAINER_FILE and "averaged" not in _head(folder / n))
    ]


def _is_export(folder: Path) -> bool:
    """Whether ``folder`` holds an export: its attnkit.json, attnkit_ct2.json or config.json
    says so."""
    return (
        _head(folder / JSON_FILE).get("format") == FORMAT
        or _head(folder / CT2_JSON).get("format") == CT2_FORMAT
        or _is_checkpoint(folder)
    )


# Per method of a token decoder: the Decoding fields written to the JSON, and in words how
# each step's tokens are chosen.
METHODS = {
    "greedy": (
        (),
        "take the argmax of log_probs over the ids not in never_emit; finished "
        "examples are fed pad",
    ),
    "beam": (
        ("beam", "length_penalty", "coverage_penalty", "no_repeat_ngram", "n_best", "beam_stop"),
        "keep the beam best hypotheses by summed log_probs (ids in never_emit excluded; "
        "rows repeated beam times per example), ranked at the end by log P / ((5 + "
        "length) / 6) ** length_penalty + coverage_penalty * sum_j log(min(attention on "
        "j, 1)); n_best outputs per example; an example ends when no live hypothesis can "
        "outrank its n_best finished ones (beam_stop bound) or when its most probable "
        "hypothesis has finished and n_best have (beam_stop best: the others dropped)",
    ),
    "sample": (
        ("temperature", "top_k", "top_p", "seed", "samples"),
        "draw each token from softmax(log_probs / temperature) over the top_k most "
        "probable ids and the smallest set reaching probability top_p (ids in "
        "never_emit excluded); samples outputs per example, ranked by summed log_probs",
    ),
}


# How an output that loops stops (attnkit.decoding.loops), in words.
LOOP_RULE = (
    "with loop_stop, where it loops: for some period p <= loop.max_period, each of its last "
    "max((loop.repeats - 1) * p, loop.min_span) tokens equals the token p steps before, with "
    "the attention's centre sum_j j * weights[j] within loop.tolerance of the centre then (a "
    "step without weights never counts); it ends there without eos. In beam search such a "
    "hypothesis is frozen, and when it is its example's live hypothesis with the highest "
    "summed log_probs, all that example's live hypotheses stop"
)


def decoding_json(decoding: Decoding | None, max_len: dict | None, *, ctc: bool) -> dict:
    """attnkit.json's ``decoding``: for a token decoder, the special ids, the length limit
    ``max_len`` (see :func:`export_onnx`) and the settings of ``decoding``'s method (default
    greedy); for a CTC model (``ctc``), best path.

    Raises:
        ValueError: joint CTC/language-model decoding, or a CTC model asked for another
            method or a ``max_len``.
    """
    if ctc:
        return _ctc_decoding(decoding)
    decoding = decoding or Decoding()
    if decoding.ctc_weight or decoding.lm_weight:
        raise ValueError(
            f"decoding: joint CTC/language-model decoding is not exported, got "
            f"ctc_weight={decoding.ctc_weight}, lm_weight={decoding.lm_weight}"
        )
    names, how = METHODS[decoding.method]
    return {
        "method": decoding.method,
        "bos": BOS,
        "eos": EOS,
        "pad": PAD,
        "never_emit": [PAD, BOS],
        "max_len": max_len,
        "max_tokens": decoding.max_len,
        **{n: getattr(decoding, n) for n in names},
        "loop_stop": decoding.loop_stop,
        "loop": {
            "max_period": MAX_PERIOD,
            "repeats": REPEATS,
            "min_span": MIN_SPAN,
            "tolerance": TOLERANCE,
        },
        "rule": "tokens = bos for every example; at each step feed tokens and the state, "
        "replace the state entries the step returns (state[i].next) and "
        + how
        + "; an output stops at eos or after max_tokens tokens (eos included; when "
        "null, after the max_len rule's), or " + LOOP_RULE,
    }


def _ctc_decoding(decoding: Decoding | None) -> dict:
    if decoding is not None and (decoding.method != "greedy" or decoding.max_len is not None):
        raise ValueError(
            f"decoding: a CTC model decodes by best path only, not "
            f"{decoding.method} (beam={decoding.beam}, max_len={decoding.max_len})"
        )
    return {
        "method": "ctc_best_path",
        "blank": PAD,
        "drop": [BOS, EOS],
        "log_probs": "log_probs",
        "lengths": "steps",
        "rule": "per example, the argmax id of each of its first lengths[b] steps; merge "
        "repeated ids, then remove blank and the ids in drop",
    }


class Port(NamedTuple):
    """One input or output of a graph: its name, an example tensor, its dynamic dims
    ``{dim: axis name}`` and what it means (None: a state tensor)."""

    name: str
    example: torch.Tensor
    axes: dict
    meaning: str | None = None

    def json(self) -> dict:
        shape = [self.axes.get(d, size) for d, size in enumerate(self.example.shape)]
        out = {
            "name": self.name,
            "dtype": str(self.example.dtype).removeprefix("torch."),
            "shape": shape,
        }
        return {**out, "meaning": self.meaning} if self.meaning else out


def _write(module, inputs: list[Port], outputs: list[Port], path: Path, opset: int) -> dict:
    """Export ``module`` with these ports; its JSON entry (the inputs the graph kept)."""
    ports = [*inputs, *outputs]
    export_graph(
        module,
        [p.example for p in inputs],
        path,
        [p.name for p in inputs],
        [p.name for p in outputs],
        [p.axes for p in ports],
        opset,
    )
    kept = _graph_inputs(path)  # the exporter drops the inputs a graph never reads
    _prune_shape_only_expands(path)
    return {
        "file": path.name,
        "inputs": [p.json() for p in inputs if p.name in kept],
        "outputs": [p.json() for p in outputs],
    }


def _input_ports(inputs, example) -> list[Port]:
    return [
        Port(n, x, {d: a for d, a in enumerate(shape) if isinstance(a, str)}, m)
        for n, x, shape, m in zip(inputs.names, example, inputs.shapes, inputs.meanings)
    ]


def _export_ctc(model: CRNN, inputs, folder: Path, opset: int) -> dict:
    example = inputs.example(2, 40)
    log_probs, steps = model(*example)
    outputs = [
        Port(
            "log_probs",
            log_probs,
            {0: "B", 1: "S"},
            "log-probabilities of each encoder step, blank = 0",
        ),
        Port("steps", steps, {0: "B"}, "valid encoder steps of each example"),
    ]
    return {
        "encoder": _write(
            CTCGraph(model), _input_ports(inputs, example), outputs, folder / ENCODER_FILE, opset
        )
    }


def _export_decoder(model, inputs, folder: Path, opset: int) -> dict:
    small, wide = inputs.example(2, 24), inputs.example(3, 40, seed=1)
    state0 = model.start(*small)
    start, wide_start = flatten(state0), flatten(model.start(*wide))
    names = list(start)
    axes = {n: _changed(start[n], wide_start[n], "S") for n in names}
    bos = torch.full((2,), BOS, dtype=torch.long)
    log_probs, first, weights = model.step(bos, state0)
    _, second, _ = model.step(bos, first)
    flat1, flat2 = flatten(first), flatten(second)
    changed = [n for n in names if flat1[n] is not start[n]]
    for n in names:  # state that grows with every step: the Transformer's cache
        axes[n].update(_changed(flat1[n], flat2[n], "T", batch=False))
    encoder = _write(
        EncoderGraph(model, names),
        _input_ports(inputs, small),
        [Port(n, start[n], axes[n]) for n in names],
        folder / ENCODER_FILE,
        opset,
    )

    outputs = [Port("log_probs", log_probs, {0: "B"}, "log-probabilities of the next token")]
    if weights is not None:
        outputs.append(
            Port(
                "weights",
                weights,
                {0: "B", 1: "S"},
                "the step's attention weights over the encoder steps",
            )
        )
    outputs += [
        Port(
            next_name(n),
            flat1[n],
            {d: "T+1" if a == "T" else a for d, a in axes[n].items()},
            f"the new {n}",
        )
        for n in changed
    ]
    # traced on the state after two steps: no axis of size 0 or 1 but the batch's
    inputs = [
        Port("tokens", bos, {0: "B"}, "the previous output token of each example"),
        *(Port(n, flat2[n], axes[n]) for n in names),
    ]
    step = _write(
        StepGraph(model, second, names, changed, weights is not None),
        inputs,
        outputs,
        folder / STEP_FILE,
        opset,
    )
    return {
        "encoder": encoder,
        "decoder_step": step,
        "state": [{"name": n, "next": next_name(n) if n in changed else None} for n in names],
    }


def _changed(a: torch.Tensor, b: torch.Tensor, axis: str, *, batch: bool = True) -> dict:
    """``{dim: name}`` of the dims where ``a`` and ``b`` differ: dim 0 is ``B`` when ``batch``,
    any other ``axis``."""
    return {
        d: ("B" if d == 0 and batch else axis)
        for d, (x, y) in enumerate(zip(a.shape, b.shape))
        if x != y
    }


def _prune_shape_only_expands(path: Path) -> int:
    """Rewrite the ONNX graph at ``path`` without the scalars broadcast to a shape that only
    ``Shape`` nodes read: ``Shape(Expand(ConstantOfShape([]), shape))`` is ``shape``. A traced
    decoder step makes one for each attention memory (:func:`attnkit.export.decoder_state.unflatten`
    stands in a zero-stride view for the memory's keys, of which a call reads the shape only);
    onnxruntime would write its ``(B, S, Dk)`` zeros at every step. Returns how many went."""
    import onnx  # the export extra (pyproject.toml)

    model = onnx.load(str(path))
    graph = model.graph
    producers = {o: n for n in graph.node for o in n.output}
    readers: dict[str, list] = {}
    for node in graph.node:
        for name in node.input:
            readers.setdefault(name, []).append(node)
    outputs = {o.name for o in graph.output}
    pruned = 0
    for node in list(graph.node):
        source = producers.get(node.input[0]) if node.op_type == "Expand" else None
        if source is None or source.op_type != "ConstantOfShape":
            continue
        shape = producers.get(source.input[0])
        scalar = (
            shape is not None
            and shape.op_type == "Constant"
            and any(a.name == "value" and list(a.t.dims) == [0] for a in shape.attribute)
        )
        users = readers.get(node.output[0], [])
        if (
            not scalar
            or not users
            or node.output[0] in outputs
            or any(u.op_type != "Shape" or u.attribute or u.output[0] in outputs for u in users)
        ):
            continue
        for user in users:
            for reader in readers.get(user.output[0], []):
                reader.input[:] = [
                    node.input[1] if i == user.output[0] else i for i in reader.input
                ]
            graph.node.remove(user)
        graph.node.remove(node)
        pruned += 1
    while pruned:  # then the constants left unread, and those only they read
        used = {name for node in graph.node for name in node.input} | outputs
        dead = [
            node
            for node in graph.node
            if node.op_type in ("ConstantOfShape", "Constant") and not used & set(node.output)
        ]
        if not dead:
            onnx.save(model, str(path))
            break
        for node in dead:
            graph.node.remove(node)
    return pruned


def _graph_inputs(path: Path) -> set[str]:
    import onnx  # the export extra (pyproject.toml); only here, to read a graph back

    return {i.name for i in onnx.load(str(path), load_external_data=False).graph.input}


def export_graph(
    module: torch.nn.Module,
    args,
    path: str | Path,
    input_names,
    output_names,
    axes,
    opset: int = DEFAULT_OPSET,
) -> None:
    """Trace ``module(*args)`` in eval mode to the ONNX file ``path`` with the exporter and
    settings of :func:`export_onnx`; ``axes``: per input, then per output, ``{dim: name}`` of
    its dynamic dims.

    Leaves ``module`` in eval mode: the exporter restores the mode the module had, which its
    children then take, so the module is put in eval mode first.
    """
    module.eval()
    with torch.no_grad(), export_mode(), warnings.catch_warnings():
        # The TorchScript-based exporter is deprecated in favour of dynamo=True (see above).
        warnings.simplefilter("ignore", DeprecationWarning)
        # Shape checks compare traced sizes (they hold for the example); the parity tests
        # run the graphs on other batch sizes, lengths and padding.
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        warnings.filterwarnings("ignore", "Constant folding", UserWarning)
        # The GRU/LSTM nodes start from zeros of the batch's size (tested at other sizes).
        warnings.filterwarnings(
            "ignore", "Exporting a model to ONNX with a batch_size", UserWarning
        )
        torch.onnx.export(
            module,
            tuple(args),
            str(path),
            dynamo=False,
            opset_version=opset,
            input_names=list(input_names),
            output_names=list(output_names),
            dynamic_axes=dict(zip([*input_names, *output_names], axes)),
        )
