"""Greedy decoding, sampling and batched beam search over any step function.

A model exposes one decoder step::

    step(tokens, state) -> (log_probs, state, weights)

* ``tokens``: ``(N,)`` the previous output token of each hypothesis;
* ``state``: anything made of tensors whose first dim is ``N`` (a tensor, or nested
  tuples/lists/dicts of them): RNN states, prepared encoder memories, previous attention weights;
* ``log_probs``: ``(N, V)`` log-probabilities of the next token;
* ``weights``: ``(N, Tk)`` the step's attention weights (for plots and the coverage penalty),
  or None.

``N`` is the batch size ``B`` for greedy decoding and sampling, and ``B * K`` for a beam of ``K``
(hypothesis ``b * K + k`` belongs to example ``b``). Beam search reorders the state along dim 0
with ``index_select`` after every step, so the step function never sees beams as such; the
tensors a step hands back untouched (same object, no in-place change) since the state was
repeated are the same in every beam of an example and are not copied.

All three return a :class:`Hypotheses`; tokens after an example's EOS are ``pad``. No output
ever emits ``pad`` or ``bos``. The weights of every step are kept only with ``weights=True``
(``(B, T, Tk)`` floats: gigabytes for long inputs and outputs); without, ``Hypotheses.weights``
is None.

All three stop a hypothesis that loops (``loop_stop=True``, the default): one that keeps
repeating a unit of tokens while its attention stands still (:mod:`attnkit.decoding.loops`)
ends there, without EOS, as if it had reached ``max_len``, and ``Hypotheses.looped`` says so.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import torch

from attnkit.checks import quoted
from attnkit.decoding.loops import LoopState, loop_step, start_loops

__all__ = [
    "BEAM_STOPS",
    "MAX_BEAM",
    "Hypotheses",
    "beam_search_reference",
    "check_beam_options",
    "greedy",
    "sample",
    "length_penalty",
]

StepFn = Callable[[torch.Tensor, Any], tuple[torch.Tensor, Any, torch.Tensor | None]]


class Hypotheses(NamedTuple):
    """Decoded outputs. The ``n_best`` dim, when there is one, holds beam search's ``n_best``
    hypotheses or sampling's ``num_samples`` draws of each example, best first.

    Attributes:
        tokens: ``(B, T)`` (``(B, n_best, T)`` for ``n_best > 1``), EOS included, then ``pad``.
        lengths: ``(B,)`` (or ``(B, n_best)``) tokens up to and including EOS.
        scores: ``(B,)`` (or ``(B, n_best)``): summed log-probability, or for beam search the
            ranking score (length-normalised, with coverage penalty).
        weights: ``(B, T, Tk)`` (or ``(B, n_best, T, Tk)``) attention of every output step, or
            None when the step function returns none or they were not asked for.
        looped: ``(B,)`` (or ``(B, n_best)``) bool: the hypotheses stopped because they
            looped (they end without EOS), or None when they were not checked.
        token_scores: ``(B, T)`` (or ``(B, n_best, T)``): each token's log-probability under
            the step function when it was chosen (with a language model or CTC in the step:
            their fused score), 0 past the end; their sum up to ``lengths`` is the summed
            log-probability. None when the search did not keep them.
    """

    tokens: torch.Tensor
    lengths: torch.Tensor
    scores: torch.Tensor
    weights: torch.Tensor | None
    looped: torch.Tensor | None = None
    token_scores: torch.Tensor | None = None

    def best(self) -> Hypotheses:
        """The first of the ``n_best`` hypotheses of each example (itself without that dim)."""
        if self.lengths.dim() == 1:
            return self
        return Hypotheses._make(None if x is None else x[:, 0] for x in self)


def length_penalty(lengths: torch.Tensor, alpha: float) -> torch.Tensor:
    """Wu et al. (2016): ``((5 + |Y|) / 6) ** alpha``; scores are divided by it."""
    return ((5.0 + lengths.to(torch.float32)) / 6.0) ** alpha


def _max_lengths(max_len, batch: int, device) -> torch.Tensor:
    if isinstance(max_len, torch.Tensor):
        if max_len.shape != (batch,):
            raise ValueError(
                f"max_len: expected an int or a ({batch},) tensor, got shape {tuple(max_len.shape)}"
            )
        out = max_len.to(device=device, dtype=torch.long)
    elif isinstance(max_len, int) and not isinstance(max_len, bool):
        out = torch.full((batch,), max_len, dtype=torch.long, device=device)
    else:
        raise TypeError(f"max_len: expected an int or a tensor, got {type(max_len).__name__}")
    if out.numel() and int(out.min()) < 1:
        raise ValueError(f"max_len: expected values >= 1, got min {int(out.min())}")
    return out


def _check_common(batch_size, bos, eos, pad):
    for name, value in (("batch_size", batch_size), ("bos", bos), ("eos", eos), ("pad", pad)):
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            raise ValueError(f"{name}: expected a non-negative int, got {quoted(value)}")
    if batch_size < 1:
        raise ValueError(f"batch_size: expected a positive int, got {batch_size}")


def _check_log_probs(log_probs: torch.Tensor, n: int) -> None:
    if log_probs.dim() != 2 or log_probs.shape[0] != n:
        raise ValueError(
            f"step: expected log_probs of shape ({n}, V), got {tuple(log_probs.shape)}"
        )


def _run(
    step: StepFn,
    state,
    *,
    batch_size,
    bos,
    eos,
    pad,
    max_len,
    device,
    choose,
    keep_weights,
    loop_stop,
):
    """Shared loop of greedy decoding and sampling: ``choose(log_probs) -> tokens (B,)``."""
    _check_common(batch_size, bos, eos, pad)
    limit = _max_lengths(max_len, batch_size, device)
    tokens = torch.full((batch_size,), bos, dtype=torch.long, device=device)
    done = torch.zeros(batch_size, dtype=torch.bool, device=device)
    looped = torch.zeros(batch_size, dtype=torch.bool, device=device)
    loops = start_loops(batch_size, device) if loop_stop else None
    out, weights, chosen = [], [], []
    for t in range(int(limit.max())):
        log_probs, state, w = step(tokens, state)
        _check_log_probs(log_probs, batch_size)
        tokens = choose(_never(log_probs, pad, bos))
        chosen.append(torch.where(done, 0.0, log_probs.gather(1, tokens[:, None])[:, 0].float()))
        tokens = tokens.masked_fill(done, pad)
        out.append(tokens)
        if w is not None and keep_weights:
            weights.append(w.masked_fill(done[:, None], 0.0))
        if loops is not None:
            loops, loops_now = loop_step(loops, tokens, w)
            looped = looped | (loops_now & ~done & (tokens != eos))
        done = done | (tokens == eos) | (t + 1 >= limit) | looped
        if bool(done.all()):
            break
    toks = torch.stack(out, dim=1)  # (B, T)
    lengths = _lengths(toks, eos, pad)
    token_scores = torch.stack(chosen, dim=1)  # (B, T)
    return Hypotheses(
        toks,
        lengths,
        token_scores.sum(1),
        torch.stack(weights, dim=1) if weights else None,
        looped if loop_stop else None,
        token_scores,
    )


def _never(log_probs: torch.Tensor, *tokens: int) -> torch.Tensor:
    """``log_probs`` with ``tokens`` (pad, bos) made impossible: an output never emits them."""
    out = log_probs.clone()
    out[:, list(tokens)] = float("-inf")
    return out


def _lengths(tokens: torch.Tensor, eos: int, pad: int) -> torch.Tensor:
    """Tokens up to and including the first EOS (all non-pad tokens when there is none)."""
    t = tokens.shape[-1]
    is_eos = tokens == eos
    first = torch.where(is_eos.any(-1), is_eos.float().argmax(-1) + 1, t)
    return torch.minimum(first, (tokens != pad).sum(-1).clamp(min=1))


def greedy(
    step: StepFn,
    state,
    *,
    batch_size: int,
    bos: int,
    eos: int,
    max_len,
    pad: int = 0,
    device=None,
    weights: bool = True,
    loop_stop: bool = True,
) -> Hypotheses:
    """Most probable token at every step.

    Args:
        step: the decoder step (see the module docstring); state: its initial state.
        batch_size: ``B``. bos, eos, pad: token ids.
        max_len: output tokens at most, an int or ``(B,)`` per example (e.g. from a
            length ratio of the source).
        weights: keep every step's attention weights (else ``Hypotheses.weights`` is None).
        loop_stop: stop a hypothesis that loops (see the module docstring); False decodes it
            to ``max_len`` and leaves ``Hypotheses.looped`` None.
    """
    return _run(
        step,
        state,
        batch_size=batch_size,
        bos=bos,
        eos=eos,
        pad=pad,
        max_len=max_len,
        device=device,
        choose=lambda lp: lp.argmax(-1),
        keep_weights=weights,
        loop_stop=loop_stop,
    )


def sample(
    step: StepFn,
    state,
    *,
    batch_size: int,
    bos: int,
    eos: int,
    max_len,
    pad: int = 0,
    temperature: float = 1.0,
    top_k: int | None = None,
    top_p: float | None = None,
    num_samples: int = 1,
    generator: torch.Generator | None = None,
    device=None,
    weights: bool = True,
    loop_stop: bool = True,
) -> Hypotheses:
    """Random decoding: tokens drawn from ``softmax(log_probs / temperature)``, restricted to
    the ``top_k`` most probable and/or the smallest set whose probability reaches ``top_p``
    (nucleus sampling). Scores are the log-probabilities of the drawn tokens under the model.
    ``weights``, ``loop_stop``: as for :func:`greedy`.

    ``num_samples = S > 1`` draws ``S`` outputs per example (the state is repeated ``S`` times,
    example-major, as beam search does) and returns them with an n-best dim ranked by score,
    best first: ``.best()`` keeps the draw the model finds most probable."""
    if not isinstance(temperature, (int, float)) or not temperature > 0:
        raise ValueError(f"temperature: expected a positive number, got {quoted(temperature)}")
    if top_k is not None and (not isinstance(top_k, int) or top_k < 1):
        raise ValueError(f"top_k: expected a positive int, got {quoted(top_k)}")
    if top_p is not None and not (isinstance(top_p, (int, float)) and 0 < top_p <= 1):
        raise ValueError(f"top_p: expected a probability in (0, 1], got {quoted(top_p)}")
    if not isinstance(num_samples, int) or isinstance(num_samples, bool) or num_samples < 1:
        raise ValueError(f"num_samples: expected a positive int, got {quoted(num_samples)}")
    if num_samples > 1:
        _check_common(batch_size, bos, eos, pad)
        s = num_samples
        limit = _max_lengths(max_len, batch_size, device).repeat_interleave(s)  # (B * S,)
        state = _reorder(state, torch.arange(batch_size, device=device).repeat_interleave(s))
        drawn = sample(
            step,
            state,
            batch_size=batch_size * s,
            bos=bos,
            eos=eos,
            pad=pad,
            max_len=limit,
            temperature=temperature,
            top_k=top_k,
            top_p=top_p,
            generator=generator,
            device=device,
            weights=weights,
            loop_stop=loop_stop,
        )
        return _ranked(drawn, batch_size, s)

    def choose(log_probs):
        logits = log_probs.float() / temperature
        if top_k is not None and top_k < logits.shape[-1]:
            kth = logits.topk(top_k, dim=-1).values[:, -1:]
            logits = logits.masked_fill(logits < kth, float("-inf"))
        if top_p is not None and top_p < 1:
            sorted_logits, order = logits.sort(dim=-1, descending=True)
            cum = sorted_logits.softmax(-1).cumsum(-1)
            drop = cum - sorted_logits.softmax(-1) >= top_p  # mass before this token
            logits = logits.scatter(1, order, sorted_logits.masked_fill(drop, float("-inf")))
        probs = logits.softmax(-1)
        return torch.multinomial(probs, 1, generator=generator)[:, 0]

    return _run(
        step,
        state,
        batch_size=batch_size,
        bos=bos,
        eos=eos,
        pad=pad,
        max_len=max_len,
        device=device,
        choose=choose,
        keep_weights=weights,
        loop_stop=loop_stop,
    )


def _ranked(hyp: Hypotheses, b: int, s: int) -> Hypotheses:
    """``B * S`` example-major hypotheses as ``(B, S, ...)``, each example's ranked by score."""
    order = hyp.scores.reshape(b, s).argsort(dim=-1, descending=True, stable=True)  # (B, S)
    pick = ((torch.arange(b, device=order.device) * s)[:, None] + order).reshape(-1)
    return Hypotheses._make(
        None if x is None else x.index_select(0, pick).reshape(b, s, *x.shape[1:]) for x in hyp
    )


def take_rows(x: torch.Tensor, index: torch.Tensor) -> torch.Tensor:
    """``x.index_select(0, index)``; but a tensor that stores one element (every stride 0, as
    a decoder cache's placeholder keys: :func:`attnkit.attention.core.extend_memory`) has
    rows all alike, and stays one element, expanded to ``len(index)`` rows."""
    if x.dim() and x.shape[0] and not any(x.stride()):
        return x[:1].expand(len(index), *x.shape[1:])
    return x.index_select(0, index)


def map_tensors(fn: Callable[[torch.Tensor], Any], state: Any) -> Any:
    """``state`` with ``fn`` applied to each tensor in it, walking the containers a step state
    is made of as ``torch.utils._pytree`` does: a dict, list or tuple is rebuilt with its items
    mapped (a NamedTuple as its own type), and any other object is kept as it is. A direct
    walk: on a Transformer's state of a few dozen tensors, pytree's flatten and unflatten at
    every beam step cost about as much as the row copies themselves."""
    kind = type(state)
    if isinstance(state, torch.Tensor):
        return fn(state)
    if kind is dict:
        return {k: map_tensors(fn, v) for k, v in state.items()}
    if kind is list:
        return [map_tensors(fn, v) for v in state]
    if kind is tuple:
        return tuple(map_tensors(fn, v) for v in state)
    if isinstance(state, tuple) and hasattr(kind, "_fields"):  # a NamedTuple
        return kind._make(map_tensors(fn, v) for v in state)
    return state


def tensors_in(state: Any) -> list[torch.Tensor]:
    """The tensors of ``state`` in the order :func:`map_tensors` visits them."""
    found: list[torch.Tensor] = []

    def one(x: torch.Tensor) -> torch.Tensor:
        found.append(x)
        return x

    map_tensors(one, state)
    return found


def _reorder(state, index: torch.Tensor, keep: tuple = ()):
    """``state`` with the rows of each tensor picked by ``index`` (dim 0), but for the tensors
    in ``keep`` (by identity), which come back as they are. A tensor found twice in ``state``
    (a self-attention cache's keys that are its values) is picked once and stays one."""
    kept = {id(x) for x in keep}
    done: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def one(x: torch.Tensor) -> torch.Tensor:
        if id(x) in kept:
            return x
        if id(x) not in done:
            done[id(x)] = (x, take_rows(x, index))  # x kept: its id stays its own
        return done[id(x)][1]

    return map_tensors(one, state)


def _versions(state) -> list[tuple[torch.Tensor, int]]:
    """Each tensor of ``state`` with its version counter (bumped by every in-place change);
    inference-mode tensors, which have none, are left out."""
    return [(x, x._version) for x in tensors_in(state) if not x.is_inference()]


def _unchanged(state, before: list[tuple[torch.Tensor, int]]) -> tuple:
    """The tensors of ``state`` that were in ``before`` and have not changed since: the same
    object at the same version."""
    return tuple(x for x, v in _versions(state) if any(x is y and v == w for y, w in before))


def _ngram_ban(hyps: torch.Tensor, n: int, vocab: int) -> torch.Tensor:
    """``(N, V)`` bool: tokens that would repeat an n-gram already in each hypothesis."""
    num, t = hyps.shape
    banned = torch.zeros(num, vocab + 1, dtype=torch.bool, device=hyps.device)
    if n == 1 and t:
        banned.scatter_(1, hyps, True)
    elif n > 1 and t >= n:
        prefix = hyps[:, t - n + 1 :]  # (N, n-1): the last n-1 tokens
        windows = hyps.unfold(1, n - 1, 1)[:, : t - n + 1]  # (N, t-n+1, n-1) earlier prefixes
        match = (windows == prefix[:, None, :]).all(-1)  # (N, t-n+1)
        follow = hyps[:, n - 1 :]  # (N, t-n+1): the token that followed each of them
        banned.scatter_(1, follow.masked_fill(~match, vocab), True)
    return banned[:, :vocab]


def _rank(
    scores: torch.Tensor,
    hyps: torch.Tensor,
    coverage: torch.Tensor | None,
    eos: int,
    pad: int,
    alpha: float,
    beta: float,
) -> torch.Tensor:
    """``(N,)`` Wu et al.'s ``log P / lp(|Y|) + cp`` of the hypotheses ``hyps (N, t)`` with
    cumulative ``scores (B, K)``; NaN as -inf."""
    rank = scores.reshape(-1) / length_penalty(_lengths(hyps, eos, pad), alpha)
    if beta and coverage is not None:
        attended = coverage > 0
        cp = torch.log(coverage.clamp(max=1.0).where(attended, torch.ones_like(coverage)))
        rank = rank + beta * cp.sum(-1)
    return rank.masked_fill(torch.isnan(rank), float("-inf"))


def _settled(
    rank: torch.Tensor,
    scores: torch.Tensor,
    done: torch.Tensor,
    limit: torch.Tensor,
    alpha: float,
    n_best: int,
) -> torch.Tensor:
    """``(B,)`` examples whose ``n_best`` finished hypotheses can no longer be beaten: a live
    hypothesis's score only falls, its length penalty grows at most to ``lp(max_len)`` and the
    coverage penalty is never above 0, so its rank stays below ``score / lp(max_len)``."""
    b, k = scores.shape
    finished = rank.masked_fill(~done, float("-inf")).reshape(b, k)
    kth = finished.topk(n_best, dim=-1).values[:, -1]  # (B,)
    best_live = (
        (scores.reshape(-1) / length_penalty(limit, alpha))
        .masked_fill(done, float("-inf"))
        .reshape(b, k)
        .amax(-1)
    )  # (B,)
    return kth > best_live


def _best_finished(scores: torch.Tensor, done: torch.Tensor, n_best: int) -> torch.Tensor:
    """``(B,)`` examples whose most probable hypothesis (the highest cumulative score of
    ``scores (B, K)``) is one of the finished ``done (B * K,)``, with ``n_best`` finished:
    the ``"best"`` stop of :data:`BEAM_STOPS`."""
    b, k = scores.shape
    done = done.reshape(b, k)
    lead = done.gather(1, scores.argmax(-1, keepdim=True))[:, 0]  # (B,)
    return lead & (done.sum(-1) >= n_best)


# The widest beam: every step scores B * K hypotheses, and the CTC prefix beam keeps (T, V)
# forward variables for each, so a beam of thousands exhausts memory rather than helping
# (widths past 10-20 rarely change an output).
MAX_BEAM = 256


# When an example's beam search ends (besides every hypothesis having finished):
# "bound": no live hypothesis can outrank its n_best finished ones (:func:`_settled`): the
#   result of searching on to the length limit, exactly;
# "best": its most probable hypothesis (highest log P) has finished and n_best have: the rule
#   of OpenNMT-py and CTranslate2, which ends earlier and may miss a longer hypothesis that
#   the length penalty would have ranked first.
BEAM_STOPS = ("bound", "best")


def check_beam_options(beam_size, n_best, no_repeat_ngram, stop: str = "bound") -> None:
    """Raise a one-line ``ValueError`` naming the first bad option."""
    if not isinstance(beam_size, int) or isinstance(beam_size, bool):
        raise ValueError(f"beam_size: expected an int in [1, {MAX_BEAM}], got {quoted(beam_size)}")
    if not 1 <= beam_size <= MAX_BEAM:
        raise ValueError(f"beam_size: expected an int in [1, {MAX_BEAM}], got {beam_size}")
    if not isinstance(n_best, int) or not 1 <= n_best <= beam_size:
        raise ValueError(
            f"n_best: expected an int in [1, beam_size={beam_size}], got {quoted(n_best)}"
        )
    if not isinstance(no_repeat_ngram, int) or no_repeat_ngram < 0:
        raise ValueError(
            f"no_repeat_ngram: expected a non-negative int, got {quoted(no_repeat_ngram)}"
        )
    if stop not in BEAM_STOPS:
        raise ValueError(f"stop: expected one of {', '.join(BEAM_STOPS)}, got {quoted(stop)}")


class Beams(NamedTuple):
    """The hypotheses of a beam search, ``N = B * K`` rows (example-major: row ``b * K + k``
    is beam ``k`` of example ``b``); every field has ``N`` rows, so cutting examples out is
    an ``index_select`` of each.

    Attributes:
        tokens: ``(N,)`` the last token of each. scores: ``(N,)`` cumulative log-probability.
        done: ``(N,)`` bool, frozen. limit: ``(N,)`` its example's ``max_len``.
        hyps: ``(N, t)`` the tokens so far. token_scores: ``(N, t)`` their log-probabilities.
        looped: ``(N,)`` bool, stopped as a loop. loops: the loop check's state, or None.
        kept: ``(N, t, Tk)`` every step's weights (with ``weights=True``), or None.
        coverage: ``(N, Tk)`` the weights summed (for the coverage penalty), or None.
    """

    tokens: torch.Tensor
    scores: torch.Tensor
    done: torch.Tensor
    limit: torch.Tensor
    hyps: torch.Tensor
    token_scores: torch.Tensor
    looped: torch.Tensor
    loops: LoopState | None
    kept: torch.Tensor | None = None
    coverage: torch.Tensor | None = None


class BeamRules(NamedTuple):
    """What a beam search's step follows (the arguments of :func:`beam_search_reference`)."""

    k: int
    bos: int
    eos: int
    pad: int
    alpha: float
    beta: float
    no_repeat_ngram: int
    n_best: int
    weights: bool
    stop: str = "bound"


def start_beams(limit: torch.Tensor, k: int, bos: int, loop_stop: bool) -> Beams:
    """The beams of ``B`` examples of limits ``limit (B,)`` before the first step: beam 0 of
    each live at score 0, the others at -inf (all beams start identical: keep one)."""
    n, device = limit.shape[0] * k, limit.device
    scores = torch.zeros(limit.shape[0], k, device=device)
    scores[:, 1:] = float("-inf")
    return Beams(
        tokens=torch.full((n,), bos, dtype=torch.long, device=device),
        scores=scores.reshape(n),
        done=torch.zeros(n, dtype=torch.bool, device=device),
        limit=limit.repeat_interleave(k),
        hyps=torch.empty(n, 0, dtype=torch.long, device=device),
        token_scores=torch.empty(n, 0, device=device),
        looped=torch.zeros(n, dtype=torch.bool, device=device),
        loops=start_loops(n, device) if loop_stop else None,
    )


def advance(
    beams: Beams, log_probs: torch.Tensor, w: torch.Tensor | None, steps: int, rules: BeamRules
) -> tuple[Beams, torch.Tensor]:
    """One step of beam search: the beams extended by the step's ``log_probs (N, V)`` and
    weights ``w (N, Tk)`` (or None), ``steps`` the steps taken with this one. Returns the new
    beams and each one's parent ``(N,)`` (reorder the step state by it)."""
    r, n = rules, beams.tokens.shape[0]
    b, k = n // r.k, r.k
    _check_log_probs(log_probs, n)
    vocab, inf = log_probs.shape[-1], float("-inf")
    log_probs = log_probs.float()
    # Each candidate's score: the hypothesis's plus the token's log-probability, but pad and
    # bos never (:func:`_never`), banned n-grams never, and a finished hypothesis continues
    # only with pad, at no cost. Written into the one (N, V) sum rather than into a copy of
    # the log-probabilities: every pass over (N, V) floats counts at a vocabulary of 8,000.
    cand = beams.scores[:, None] + log_probs  # (N, V)
    cand[:, [r.pad, r.bos]] = inf
    banned = None
    if r.no_repeat_ngram:
        banned = _ngram_ban(beams.hyps, r.no_repeat_ngram, vocab)
        cand.masked_fill_(banned, inf)
    frozen = beams.done.nonzero()[:, 0]  # (F,)
    if frozen.numel():
        cand.index_fill_(0, frozen, inf)
        cand[frozen, r.pad] = beams.scores.index_select(0, frozen)
    top, idx = cand.reshape(b, k * vocab).topk(k, dim=-1)  # (B, K)
    base = (torch.arange(b, device=cand.device) * k)[:, None]  # (B, 1)
    parent = (base + idx // vocab).reshape(n)  # (N,) flat index of each new beam's parent
    tokens = (idx % vocab).reshape(n)
    scores = top.reshape(n)
    was_done = beams.done.index_select(0, parent)
    hyps = torch.cat([beams.hyps.index_select(0, parent), tokens[:, None]], dim=1)
    # The chosen token's log-probability under the same rules as its candidate's score.
    chosen = log_probs[parent, tokens]
    never = (tokens == r.pad) | (tokens == r.bos)
    if banned is not None:
        never = never | banned[parent, tokens]
    chosen = chosen.masked_fill(never, inf)
    chosen = torch.where(was_done, torch.where(tokens == r.pad, 0.0, inf), chosen)
    token_scores = torch.cat([beams.token_scores.index_select(0, parent), chosen[:, None]], dim=1)
    kept, coverage, loops, looped = beams.kept, beams.coverage, beams.loops, beams.looped
    if w is not None and (r.weights or r.beta or loops is not None):
        w = w.float().index_select(0, parent).masked_fill(was_done[:, None], 0.0)
        if r.weights:
            kept = (
                w[:, None]
                if kept is None
                else torch.cat([kept.index_select(0, parent), w[:, None]], dim=1)
            )
        coverage = w if coverage is None else coverage.index_select(0, parent) + w
    if loops is not None:
        loops, loops_now = loop_step(_reorder(loops, parent), tokens, w)
        live = ~was_done & (tokens != r.eos)
        loops_now = loops_now & live
        # When an example's leading live hypothesis loops, its other live ones are
        # variants of the loop (or worse): the example stops.
        lead = top.masked_fill(~live.reshape(b, k), float("-inf")).argmax(-1)  # (B,)
        stop = loops_now.reshape(b, k).gather(1, lead[:, None])  # (B, 1)
        loops_now = loops_now | (stop.expand(b, k).reshape(n) & live)
        looped = looped.index_select(0, parent) | loops_now
    done = was_done | (tokens == r.eos) | (steps >= beams.limit) | looped
    if r.stop == "best":
        # The live hypotheses of an example that ends are dropped (score -inf), not frozen:
        # unfinished, they must not be ranked among its outputs.
        ends = _best_finished(top, done, r.n_best).repeat_interleave(k)  # (N,)
        scores = scores.masked_fill(ends & ~done, float("-inf"))
    else:
        rank = _rank(top, hyps, coverage, r.eos, r.pad, r.alpha, r.beta)
        ends = _settled(rank, top, done, beams.limit, r.alpha, r.n_best).repeat_interleave(k)
    done = done | ends
    new = Beams(
        tokens, scores, done, beams.limit, hyps, token_scores, looped, loops, kept, coverage
    )
    return new, parent


def best_of(beams: Beams, rules: BeamRules) -> tuple:
    """The ``n_best`` of each example of ``beams``, best first, as the fields of
    :class:`Hypotheses`, each ``(B, n_best, ...)``."""
    r, n = rules, beams.tokens.shape[0]
    b = n // r.k
    rank = _rank(
        beams.scores.reshape(b, r.k), beams.hyps, beams.coverage, r.eos, r.pad, r.alpha, r.beta
    )
    best = rank.reshape(b, r.k).topk(r.n_best, dim=-1)  # (B, n_best)
    pick = ((torch.arange(b, device=rank.device) * r.k)[:, None] + best.indices).reshape(-1)

    def rows(x: torch.Tensor | None) -> torch.Tensor | None:
        return None if x is None else x.index_select(0, pick).reshape(b, r.n_best, *x.shape[1:])

    return (
        rows(beams.hyps),
        rows(_lengths(beams.hyps, r.eos, r.pad)),
        best.values,
        rows(beams.kept),
        None if beams.loops is None else rows(beams.looped),
        rows(beams.token_scores),
    )


def beam_search_reference(
    step: StepFn,
    state,
    *,
    batch_size: int,
    beam_size: int,
    bos: int,
    eos: int,
    max_len,
    pad: int = 0,
    alpha: float = 0.0,
    beta: float = 0.0,
    no_repeat_ngram: int = 0,
    n_best: int = 1,
    device=None,
    weights: bool = True,
    loop_stop: bool = True,
    stop: str = "bound",
) -> Hypotheses:
    """Batched beam search, the slow reference of :func:`attnkit.decoding.beam.beam_search`:
    all ``B * K`` hypotheses advance as one tensor until the last example is done (a finished
    example stays in the batch, its hypotheses frozen).

    Hypotheses are extended by cumulative log-probability; a hypothesis that emits EOS (or
    reaches its example's ``max_len``, or loops: then, if it leads its example's live
    hypotheses, they all stop) is frozen with its score, and an example stops as soon
    as no live hypothesis can outrank its ``n_best`` finished ones (``stop="bound"``: the
    search ends at EOS, not at ``max_len``, with the result of running on) or, with
    ``stop="best"``, once its most probable hypothesis has finished (:data:`BEAM_STOPS`).
    At the end each example's ``K`` hypotheses are ranked by Wu et al. (2016)'s
    ``log P / lp(|Y|) + cp``, with ``lp = ((5 + |Y|) / 6) ** alpha`` and coverage penalty
    ``cp = beta * sum_j log(min(sum_i a_ij, 1))`` over the source positions ``j`` that were
    attended (needs the step's weights; ``beta = 0`` turns it off).

    Args:
        state: the initial state for ``B`` examples; it is repeated ``K`` times (example-major).
        beam_size: ``K``. no_repeat_ngram: forbid repeating any n-gram of this size (0: off).
        n_best: hypotheses returned per example (<= ``K``).
        weights: keep every step's attention weights of each hypothesis (else
            ``Hypotheses.weights`` is None; the coverage penalty sums them all the same).
        loop_stop: freeze a hypothesis that loops, as for :func:`greedy`.
        stop: when an example ends, ``"bound"`` or ``"best"`` (:data:`BEAM_STOPS`).

    With ``K = 1`` this is greedy decoding; with ``K`` at least the number of possible
    outputs it is exhaustive search (both tested).
    """
    _check_common(batch_size, bos, eos, pad)
    check_beam_options(beam_size, n_best, no_repeat_ngram, stop)
    b, k = batch_size, beam_size
    beams = start_beams(_max_lengths(max_len, b, device), k, bos, loop_stop)
    state = _reorder(state, torch.arange(b, device=device).repeat_interleave(k))
    # Rows of one example are equal in every tensor of the repeated state, and a beam's parent
    # is always a beam of the same example, so reordering such a tensor changes nothing. The
    # tensors a step hands back untouched (an encoder's memory, CTC log-probabilities) stay
    # so, and are not copied at every step.
    same_in_beams = _versions(state)
    rules = BeamRules(k, bos, eos, pad, alpha, beta, no_repeat_ngram, n_best, weights, stop)
    for t in range(int(beams.limit.max())):
        log_probs, state, w = step(beams.tokens, state)
        beams, parent = advance(beams, log_probs, w, t + 1, rules)
        kept_as_is = _unchanged(state, same_in_beams)
        state = _reorder(state, parent, keep=kept_as_is)
        same_in_beams = [(x, x._version) for x in kept_as_is]
        if bool(beams.done.all()):
            break
    out = Hypotheses(*best_of(beams, rules))
    return out.best() if n_best == 1 else out
