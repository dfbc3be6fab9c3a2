"""The one way every task decodes a model: :class:`Decoding` says how, :func:`decode` does it.

A model for decoding has ``start(inputs, lengths) -> state`` and
``step(tokens, state) -> (log_probs, state, weights)`` (see :mod:`attnkit.decoding.search`).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields

import torch

from attnkit.checks import quoted
from attnkit.decoding.beam import beam_search
from attnkit.decoding.ctc import ctc_greedy
from attnkit.decoding.ctc_prefix import ctc_beam_decode, joint_decode
from attnkit.decoding.search import BEAM_STOPS, MAX_BEAM, Hypotheses, sample
from attnkit.tokens import BOS, EOS, PAD

__all__ = [
    "DEFAULT_LENGTH_PENALTY",
    "MAX_BEAM",
    "MAX_OUTPUT_TOKENS",
    "Decoding",
    "decode",
    "decode_batches",
    "check_ctc_decoding",
    "decode_ctc",
]

# Beam search ranks by log P / ((5 + |Y|) / 6) ** alpha. With alpha 0 a beam prefers outputs
# that end early: a LAS model trained with label smoothing stops after the first word on some
# numbers, which greedy decoding reads whole, and an attention-only ASR beam ranks "EOS first"
# above the transcript (docs/models.md, docs/alignment.md); with alpha 1 it ranks like greedy
# or better.
DEFAULT_LENGTH_PENALTY = 1.0

log = logging.getLogger(__name__)


# Output tokens at most, whatever a task's limit or a Decoding's max_len: every task's outputs
# stop here, so that no input or option makes decoding run without end.
MAX_OUTPUT_TOKENS = 10_000
# The most items in one decoding batch: past it a batch's state (B * beam rows of encoder
# memory) would not fit in memory anyway, and the number is a mistyped option.
MAX_BATCH = 65_536
# The largest beam-search weights: past them a rank overflows float32 and every hypothesis
# ties (--length-penalty 100 gave "2001-03-33" for "2001-03-03"). Wu et al. tune alpha and
# beta in [0, 1]; lp(MAX_OUTPUT_TOKENS) ** 10 is 1.7e32, and 100 times the log of the least
# float32 weight on a million keys is -1e10: both finite (tests/decoding/test_decode.py).
MAX_LENGTH_PENALTY = 10.0
MAX_COVERAGE_PENALTY = 100.0  # also the largest lm_weight: it scales log-probabilities
# Sampling temperatures allowed: logits divided by 1e-300 overflow to inf (and the draw fails);
# 0.001 is greedy in effect, 1000 uniform in effect. Seeds: what a signed 64-bit int holds.
TEMPERATURES = (1e-3, 1e3)
MAX_SEED = 2**63 - 1


def _check(name: str, value, ok: bool, expected: str) -> None:
    if not ok:
        raise ValueError(f"{name}: expected {expected}, got {quoted(value)}")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


@dataclass(frozen=True)
class Decoding:
    """How outputs are chosen.

    Greedy by default; ``beam > 1`` (or any beam option) runs batched beam search, ranked by
    ``log P / lp(|Y|) + cp`` with Wu et al. (2016)'s ``length_penalty`` (alpha; None, the
    default, is :data:`DEFAULT_LENGTH_PENALTY` with ``beam > 1`` and 0 otherwise) and
    ``coverage_penalty`` (beta), ``no_repeat_ngram`` forbidding repeated n-grams and ``n_best``
    hypotheses per input. ``ctc_weight`` (lambda in [0, 1]) adds the CTC prefix scores of the
    model's CTC head to the beam's scores and lets CTC decide where outputs end (joint
    CTC/attention decoding, :mod:`attnkit.decoding.ctc_prefix`); ``lm_weight`` adds a language
    model's log-probabilities (shallow fusion; :func:`decode` takes the model). ``sample=True``
    draws each token from the model's distribution (``temperature``, ``top_k``, nucleus
    ``top_p``; ``seed`` makes the draws repeatable), ``samples`` outputs per input ranked by
    their log-probability under the model (the best first: random search keeps it).
    ``max_len``: output tokens at most (EOS included) for every input, instead of the limit the
    caller derives from each input's length. ``loop_stop`` (on by default) ends an output that
    loops, repeating a unit of tokens while its attention stands still
    (:mod:`attnkit.decoding.loops`), and :func:`decode` logs a warning; False decodes it to
    the length limit. ``beam_stop`` says when beam search ends an input: ``"bound"`` (the
    default) once no live hypothesis can outrank the finished ones, the result of searching
    to the length limit; ``"best"`` once its most probable hypothesis has finished, the rule
    of OpenNMT-py and CTranslate2: fewer steps, and it may miss a longer output that the
    length penalty would rank first (:data:`attnkit.decoding.search.BEAM_STOPS`).

    Example:
        >>> Decoding(beam=5, length_penalty=0.6).method
        'beam'
        >>> Decoding(beam=5).length_penalty, Decoding().length_penalty
        (1.0, 0.0)
        >>> Decoding(sample=True, beam=4)
        Traceback (most recent call last):
        ...
        ValueError: sample: draws one token at a time, not with beam=4
    """

    beam: int = 1
    length_penalty: float | None = None
    coverage_penalty: float = 0.0
    no_repeat_ngram: int = 0
    n_best: int = 1
    sample: bool = False
    temperature: float = 1.0
    top_k: int | None = None
    top_p: float | None = None
    seed: int | None = None
    samples: int = 1
    max_len: int | None = None
    ctc_weight: float = 0.0
    lm_weight: float = 0.0
    loop_stop: bool = True
    beam_stop: str = "bound"

    def __post_init__(self):
        _check(
            "beam",
            self.beam,
            _is_int(self.beam) and 1 <= self.beam <= MAX_BEAM,
            f"an int in [1, {MAX_BEAM}]",
        )
        if self.length_penalty is None:
            object.__setattr__(
                self, "length_penalty", DEFAULT_LENGTH_PENALTY if self.beam > 1 else 0.0
            )
        _check(
            "n_best",
            self.n_best,
            _is_int(self.n_best) and 1 <= self.n_best <= self.beam,
            f"an int in [1, beam={self.beam}]",
        )
        _check(
            "no_repeat_ngram",
            self.no_repeat_ngram,
            _is_int(self.no_repeat_ngram) and self.no_repeat_ngram >= 0,
            "a non-negative int",
        )
        for name, most in (
            ("length_penalty", MAX_LENGTH_PENALTY),
            ("coverage_penalty", MAX_COVERAGE_PENALTY),
            ("lm_weight", MAX_COVERAGE_PENALTY),
        ):
            value = getattr(self, name)
            _check(
                name, value, _is_finite(value) and 0 <= value <= most, f"a number in [0, {most:g}]"
            )
        low, high = TEMPERATURES
        _check(
            "temperature",
            self.temperature,
            _is_finite(self.temperature) and low <= self.temperature <= high,
            f"a number in [{low:g}, {high:g}]",
        )
        _check(
            "seed",
            self.seed,
            self.seed is None or (_is_int(self.seed) and 0 <= self.seed <= MAX_SEED),
            "None or an int in [0, 2**63 - 1]",
        )
        _check(
            "top_k",
            self.top_k,
            self.top_k is None or (_is_int(self.top_k) and self.top_k >= 1),
            "a positive int",
        )
        _check(
            "top_p",
            self.top_p,
            self.top_p is None or (_is_finite(self.top_p) and 0 < self.top_p <= 1),
            "a probability in (0, 1]",
        )
        _check(
            "samples",
            self.samples,
            _is_int(self.samples) and self.samples >= 1 and (self.sample or self.samples == 1),
            "1 without sample=True, else a positive int",
        )
        _check(
            "max_len",
            self.max_len,
            self.max_len is None
            or (_is_int(self.max_len) and 1 <= self.max_len <= MAX_OUTPUT_TOKENS),
            f"None or an int in [1, {MAX_OUTPUT_TOKENS}]",
        )
        _check(
            "ctc_weight",
            self.ctc_weight,
            isinstance(self.ctc_weight, (int, float)) and 0 <= self.ctc_weight <= 1,
            "a number in [0, 1]",
        )
        _check("loop_stop", self.loop_stop, isinstance(self.loop_stop, bool), "a bool")
        _check(
            "beam_stop",
            self.beam_stop,
            self.beam_stop in BEAM_STOPS,
            f"one of {', '.join(BEAM_STOPS)}",
        )
        if self.sample and self._beam_options():
            raise ValueError(
                f"sample: draws one token at a time, not with beam={self.beam}"
                + ("" if self.beam > 1 else " and beam options")
            )

    def _beam_options(self) -> bool:
        beam_only = (
            self.length_penalty,
            self.coverage_penalty,
            self.no_repeat_ngram,
            self.ctc_weight,
            self.lm_weight,
            self.beam_stop != "bound",
        )
        return self.beam > 1 or any(beam_only)

    def describe(self) -> str:
        """The settings that differ from greedy decoding, e.g. ``beam=5, length_penalty=0.6``
        (``greedy`` when none does).

        Example:
            >>> Decoding(beam=5, length_penalty=0.6).describe()
            'beam=5, length_penalty=0.6'
            >>> Decoding(beam=5).describe()
            'beam=5, length_penalty=1.0'
        """
        default = {f.name: f.default for f in fields(self)}
        default["length_penalty"] = 0.0
        changed = [
            f"{name}={getattr(self, name)}"
            for name in default
            if getattr(self, name) != default[name]
        ]
        return ", ".join(changed) or "greedy"

    @property
    def method(self) -> str:
        """``"greedy"``, ``"beam"`` or ``"sample"``."""
        if self.sample:
            return "sample"
        return "beam" if self._beam_options() else "greedy"

    def generator(self, device) -> torch.Generator | None:
        """A generator seeded with ``seed`` on ``device`` (None without a seed): make one per
        decoding run and pass it to every :func:`decode` call of the run."""
        if self.seed is None:
            return None
        return torch.Generator(device=device).manual_seed(self.seed)


def decode(
    model,
    inputs: torch.Tensor,
    lengths: torch.Tensor,
    *,
    max_len,
    decoding: Decoding | None = None,
    generator: torch.Generator | None = None,
    bos: int = BOS,
    eos: int = EOS,
    pad: int = PAD,
    lm=None,
    weights: bool = False,
) -> Hypotheses:
    """Decode a batch: ``model.start(inputs, lengths)``, then the steps ``decoding`` asks for.

    Args:
        model: anything with ``start`` and ``step`` (every attnkit decoder model).
        inputs, lengths: the batch as ``model.start`` takes it (``B`` examples), on the
            model's device.
        max_len: output tokens at most (EOS included): an int or ``(B,)`` per example;
            ``decoding.max_len``, when set, replaces it; never more than
            :data:`MAX_OUTPUT_TOKENS`.
        decoding: how (default greedy); generator: the random draws of ``sample``.
        lm: the language model of ``decoding.lm_weight`` (``start(B, device) -> state``,
            ``step(tokens, state)`` like a decoder's).
        weights: keep every step's attention weights (for pictures; else
            ``Hypotheses.weights`` is None).

    Returns:
        :class:`Hypotheses` (with an ``n_best`` dim when ``decoding.n_best > 1`` or
        ``decoding.samples > 1``). When outputs were stopped because they looped, a warning
        is logged and ``Hypotheses.looped`` marks them.
    """
    decoding = decoding or Decoding()
    if decoding.max_len is not None:
        max_len = decoding.max_len
    elif isinstance(max_len, torch.Tensor):
        max_len = max_len.clamp(max=MAX_OUTPUT_TOKENS)
    else:
        max_len = min(max_len, MAX_OUTPUT_TOKENS)
    kw = {
        "batch_size": int(lengths.shape[0]),
        "bos": bos,
        "eos": eos,
        "pad": pad,
        "max_len": max_len,
        "device": lengths.device,
        "weights": weights,
        "loop_stop": decoding.loop_stop,
    }
    if decoding.ctc_weight or decoding.lm_weight:
        hyp = joint_decode(
            model,
            inputs,
            lengths,
            beam=decoding.beam,
            ctc_weight=decoding.ctc_weight,
            lm=lm,
            lm_weight=decoding.lm_weight,
            alpha=decoding.length_penalty,
            beta=decoding.coverage_penalty,
            no_repeat_ngram=decoding.no_repeat_ngram,
            n_best=decoding.n_best,
            stop=decoding.beam_stop,
            **kw,
        )
    elif decoding.method == "sample":
        hyp = sample(
            model.step,
            model.start(inputs, lengths),
            temperature=decoding.temperature,
            top_k=decoding.top_k,
            top_p=decoding.top_p,
            num_samples=decoding.samples,
            generator=generator,
            **kw,
        )
    elif decoding.method == "greedy":
        # a beam of one is greedy decoding (the same outputs: tests/decoding/test_search.py),
        # run by the search that drops the examples that have ended from the batch: a few
        # long or looping outputs no longer keep the whole batch stepping
        hyp = beam_search(model.step, model.start(inputs, lengths), beam_size=1, **kw)
    else:
        assert decoding.length_penalty is not None  # Decoding.__post_init__ sets it
        hyp = beam_search(
            model.step,
            model.start(inputs, lengths),
            beam_size=decoding.beam,
            alpha=decoding.length_penalty,
            beta=decoding.coverage_penalty,
            no_repeat_ngram=decoding.no_repeat_ngram,
            n_best=decoding.n_best,
            stop=decoding.beam_stop,
            **kw,
        )
    _warn_loops(hyp)
    return hyp


def check_ctc_decoding(decoding: Decoding) -> Decoding:
    """``decoding`` if a CTC head can follow it (:func:`decode_ctc`), else a ValueError naming
    the field: sampling, ``ctc_weight`` (the outputs are CTC's already), ``coverage_penalty``
    (no attention) or ``max_len`` (the frames bound the output).

    Example:
        >>> check_ctc_decoding(Decoding(sample=True))  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        ValueError: sample: a CTC head reads the best path or a prefix beam ..., got sample=True
    """
    for name, wrong in (
        ("sample", decoding.sample),
        ("ctc_weight", decoding.ctc_weight),
        ("coverage_penalty", decoding.coverage_penalty),
        ("max_len", decoding.max_len is not None),
    ):
        if wrong:
            raise ValueError(
                f"{name}: a CTC head reads the best path or a prefix beam "
                f"(beam, lm_weight, length_penalty, n_best), got {decoding.describe()}"
            )
    return decoding


def decode_ctc(
    log_probs: torch.Tensor,
    lengths: torch.Tensor,
    *,
    decoding: Decoding | None = None,
    lm=None,
    blank: int = PAD,
    bos: int = BOS,
    eos: int = EOS,
) -> Hypotheses:
    """Decode a CTC head's outputs as ``decoding`` says: greedy, the best path
    (:func:`attnkit.decoding.ctc_greedy`); a beam (``beam > 1`` or ``lm_weight``), CTC prefix
    beam search (:func:`attnkit.decoding.ctc_prefix.ctc_beam_decode`), ranked by
    ``log p_ctc(Y | X) + lm_weight log p_lm(Y)`` over ``lp(|Y|)`` (``length_penalty``).

    Args:
        log_probs: ``(B, T, V)`` CTC log-probabilities (blank ``blank``; ``bos`` and ``eos``
            never output); lengths: ``(B,)`` valid frames.
        lm: the language model of ``decoding.lm_weight`` (see :func:`decode`).

    Returns:
        :class:`Hypotheses` (EOS included; an ``n_best`` dim with ``n_best > 1``). Greedy:
        ``scores`` are the best path's log-probability, summed over the valid frames, and
        ``weights`` ``(B, L, T)`` mark the frame where each label was emitted (1 there, 0
        elsewhere; 0 rows past the end); a beam keeps no weights.

    Raises:
        ValueError: naming the field of ``decoding`` a CTC head cannot follow
            (:func:`check_ctc_decoding`).

    Example:
        >>> lp = torch.log(torch.tensor([[[.1, 0, 0, .5, .4], [.6, 0, 0, .4, 0],
        ...                                [.1, 0, 0, .5, .4]]]))
        >>> decode_ctc(lp, torch.tensor([3])).tokens.tolist()  # best path 3 _ 3: p = .15
        [[3, 3, 2]]
        >>> beam = Decoding(beam=4, length_penalty=0.0)  # the likeliest labelling: p = .216
        >>> decode_ctc(lp, torch.tensor([3]), decoding=beam).tokens.tolist()
        [[3, 4, 2]]
    """
    decoding = check_ctc_decoding(decoding or Decoding())
    if decoding.method == "beam":
        assert decoding.length_penalty is not None  # Decoding.__post_init__ sets it
        return ctc_beam_decode(
            log_probs,
            lengths,
            beam=decoding.beam,
            lm=lm,
            lm_weight=decoding.lm_weight,
            bos=bos,
            eos=eos,
            pad=blank,
            alpha=decoding.length_penalty,
            no_repeat_ngram=decoding.no_repeat_ngram,
            n_best=decoding.n_best,
            stop=decoding.beam_stop,
            weights=False,
            loop_stop=False,  # CTC decides the end: an output never outruns its frames
        )
    paths = ctc_greedy(log_probs, lengths, blank=blank, drop=(bos, eos))
    b, t = log_probs.shape[:2]
    size = max(map(len, paths.ids)) + 1
    tokens = torch.full((b, size), blank, dtype=torch.long, device=log_probs.device)
    emitted = torch.zeros(b, size, t, device=log_probs.device)  # (B, L, T)
    for i, (ids, steps) in enumerate(zip(paths.ids, paths.steps)):
        tokens[i, : len(ids) + 1] = torch.tensor([*ids, eos])
        emitted[i, torch.arange(len(ids)), torch.tensor(steps, dtype=torch.long)] = 1.0
    valid = torch.arange(t, device=log_probs.device) < lengths.to(log_probs.device)[:, None]
    best = (log_probs.float().max(-1).values * valid).sum(-1)  # (B,)
    return Hypotheses(
        tokens, torch.tensor([len(ids) + 1 for ids in paths.ids]).to(tokens.device), best, emitted
    )


def _warn_loops(hyp: Hypotheses) -> None:
    """Log how many outputs of a batch were stopped because they looped, and where."""
    if hyp.looped is None or not bool(hyp.looped.any()):
        return
    warn_loops(hyp.lengths[hyp.looped].tolist(), hyp.looped.numel())


def warn_loops(sizes: list[int], total: int) -> None:
    """Log that ``len(sizes)`` of ``total`` outputs were stopped because they looped, after
    ``sizes`` tokens each (EOS-free; past five, the first five and the range)."""
    said = ", ".join(map(str, sizes[:5]))
    if len(sizes) > 5:
        said += f", ... ({min(sizes)} to {max(sizes)})"
    log.warning(
        "%d of %d outputs stopped after %s tokens: each repeated a unit of tokens "
        "while its attention stood still (a loop); loop_stop=False (--no-loop-stop) "
        "decodes them to the length limit",
        len(sizes),
        total,
        said,
    )


def decode_batches(
    model,
    items: Sequence,
    collate: Callable,
    *,
    max_len: Callable,
    decoding: Decoding | None = None,
    batch_size: int = 32,
    lm=None,
    weights: bool = False,
    sort_key: Callable | None = len,
) -> Iterator[tuple[Sequence, Hypotheses]]:
    """Decode ``items`` in batches of ``batch_size`` with the model in eval mode; yields them
    in input order.

    Greedy decoding and beam search decode the items sorted by ``sort_key`` (longest first;
    default ``len``: a text's characters, an utterance's frames), so that a batch holds inputs
    of similar lengths: less padding, and outputs that end at about the same step. The outputs
    are then put back in input order, in batches of ``batch_size`` items (each padded to the
    longest of its batch: ``tokens`` with ``pad``, ``weights`` and ``token_scores`` with 0).
    Sampling decodes in input order (each batch's draws come from the one generator in turn),
    and so does ``sort_key=None``.

    Args:
        collate: ``collate(chunk) -> (inputs, lengths)`` as ``model.start`` takes them; they
            are moved to the model's device.
        max_len: ``max_len(lengths) -> int | (B,)``, the output length limit of a batch.
        decoding: how (default greedy); one generator (``decoding.seed``) serves every batch.
        batch_size: items per batch, in ``[1, MAX_BATCH]``.
        lm: the language model of ``decoding.lm_weight`` (see :func:`decode`).
        weights: keep the attention weights (see :func:`decode`).
        sort_key: ``sort_key(item) -> number``, the length to sort by, or None.

    Yields:
        Each batch's items and their :class:`Hypotheses`, in input order.
    """
    decoding = decoding or Decoding()
    _check(
        "batch_size",
        batch_size,
        _is_int(batch_size) and 1 <= batch_size <= MAX_BATCH,
        f"an int in [1, {MAX_BATCH}]",
    )
    model.eval()
    device = next(model.parameters()).device
    generator = decoding.generator(device)

    def run(chunk: Sequence) -> Hypotheses:
        inputs, lengths = (x.to(device) for x in collate(chunk))
        return decode(
            model,
            inputs,
            lengths,
            max_len=max_len(lengths),
            decoding=decoding,
            generator=generator,
            lm=lm,
            weights=weights,
        )

    if sort_key is None or decoding.method == "sample":
        for i in range(0, len(items), batch_size):
            chunk = items[i : i + batch_size]
            yield chunk, run(chunk)
        return
    order = sorted(range(len(items)), key=lambda i: -sort_key(items[i]))  # stable
    decoded = [
        run([items[j] for j in order[i : i + batch_size]]) for i in range(0, len(items), batch_size)
    ]
    where = [0] * len(items)  # item -> its (batch, row) among the decoded batches
    for position, item in enumerate(order):
        where[item] = position
    for i in range(0, len(items), batch_size):
        rows = [divmod(where[j], batch_size) for j in range(i, min(i + batch_size, len(items)))]
        yield items[i : i + batch_size], gather_rows(decoded, rows)


def gather_rows(batches: Sequence[Hypotheses], rows: Sequence[tuple[int, int]]) -> Hypotheses:
    """The rows ``(batch, row)`` of decoded ``batches`` as one :class:`Hypotheses`, output
    steps (and attended keys) padded to the longest: ``tokens`` with ``PAD``, ``weights`` and
    ``token_scores`` with 0."""
    out: list[torch.Tensor | None] = []
    for field in Hypotheses._fields:
        if getattr(batches[rows[0][0]], field) is None:
            out.append(None)
            continue
        picked = [getattr(batches[b], field)[r] for b, r in rows]  # each ([n_best,] [T, Tk])
        most = [max(x.shape[d] for x in picked) for d in range(picked[0].dim())]
        value = PAD if field == "tokens" else 0.0
        out.append(torch.stack([_pad_to(x, most, value) for x in picked]))
    return Hypotheses._make(out)


def _pad_to(x: torch.Tensor, shape: list[int], value: float) -> torch.Tensor:
    """``x`` padded at the end of every dim to ``shape`` with ``value``."""
    if list(x.shape) == shape:
        return x
    padding = [p for d in reversed(range(x.dim())) for p in (0, shape[d] - x.shape[d])]
    return torch.nn.functional.pad(x, padding, value=value)
