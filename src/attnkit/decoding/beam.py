"""Beam search whose batch shrinks as its examples finish.

:func:`beam_search` advances the ``K`` hypotheses of every unfinished example as one tensor
of ``N = B' * K`` rows (``B'`` the examples still searching; row ``b * K + k`` is beam ``k`` of
active example ``b``). Each step is the one of
:func:`attnkit.decoding.search.beam_search_reference`, the slow reference it is tested
against: candidates scored by cumulative log-probability, the top ``K`` of each example's
``K * V`` kept with ``topk``, the state reordered by parent with ``index_select``, finished
hypotheses frozen by a mask (they continue only with ``pad``, at no cost). No Python code
runs per hypothesis or per example.

What differs is what happens to an example once all its ``K`` hypotheses are finished (each
ended with EOS, reached its ``max_len`` or looped; or the example is settled: no live
hypothesis can outrank its ``n_best`` finished ones). The reference keeps it in the batch,
stepping the model for its frozen hypotheses until the last example ends; here its ``n_best``
are picked at once and its rows leave the batch: every tensor of the step state, the scores,
the token histories and the loop check's state are cut to the remaining rows with
``index_select``. A batch whose outputs differ in length then costs the work of its outputs,
not ``B`` times the longest one.

Results equal the reference's: the same tokens, n-best order and lengths, and scores equal up
to the model's own float differences between batch sizes (a matrix product over fewer rows may
round differently). Frozen hypotheses whose scores tie exactly may come out in another order
(the reference's later ``topk`` calls may swap tied beams).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from attnkit.decoding.search import (
    BeamRules,
    Beams,
    Hypotheses,
    StepFn,
    _check_common,
    _max_lengths,
    _reorder,
    advance,
    best_of,
    check_beam_options,
    map_tensors,
    start_beams,
    take_rows,
    tensors_in,
)

__all__ = ["SHRINK_AT", "beam_search"]

# The batch is cut when this share of its examples has ended: each cut copies the state of the
# rows that remain (an encoder memory too), so cutting at every ending costs more than it saves
# when examples end one step after another; cutting at half bounds the rows stepped in vain
# to half and the copies to twice the first batch's state.
SHRINK_AT = 0.5


def _versioned(tensors) -> dict[int, tuple[torch.Tensor, int | None]]:
    """Each tensor by id, with its version counter (bumped by every in-place change; None for
    inference-mode tensors, which keep none)."""
    return {id(x): (x, None if x.is_inference() else x._version) for x in tensors}


def _same_objects(state, before: dict[int, tuple[torch.Tensor, int | None]]) -> tuple:
    """The tensors of ``state`` that were in ``before`` and have not changed since: the same
    object at the same version (for an inference-mode tensor, the same object: a step must
    not change its state in place)."""
    out = []
    for x in tensors_in(state):
        if id(x) in before:
            y, version = before[id(x)]
            if y is x and (version is None or version == x._version):
                out.append(x)
    return tuple(out)


def _cut(state, rows: torch.Tensor, same: tuple, parent: torch.Tensor | None = None) -> tuple:
    """``state`` with the rows ``rows`` of every tensor in ``same`` (which stay the same in
    every beam of an example) and the rows ``parent[rows]`` of every other one (``parent``
    None: ``rows``): the batch cut to the beams that stay and reordered by their parents in
    one copy. Also the cut tensors of ``same``. A tensor found twice in ``state`` (an
    attention memory's keys that are its values) is cut once."""
    ids, cut, done = {id(x) for x in same}, [], {}
    moved = rows if parent is None else parent.index_select(0, rows)

    def one(x: torch.Tensor) -> torch.Tensor:
        if id(x) not in done:
            picked = take_rows(x, rows if id(x) in ids else moved)
            done[id(x)] = (x, picked)  # x kept: its id stays its own
            if id(x) in ids:
                cut.append(picked)
        return done[id(x)][1]

    return map_tensors(one, state), tuple(cut)


def beam_search(
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
    """Batched beam search: all ``B * K`` hypotheses advance as one tensor, and an example
    leaves the batch as soon as its search is over (see the module docstring).

    Ranking, stopping and arguments are those of
    :func:`attnkit.decoding.search.beam_search_reference`: Wu et al. (2016)'s
    ``log P / lp(|Y|) + cp`` with ``lp = ((5 + |Y|) / 6) ** alpha`` and coverage penalty
    ``cp = beta * sum_j log(min(sum_i a_ij, 1))``; hypotheses frozen at EOS, at their example's
    ``max_len`` or when they loop; an example done when no live hypothesis can outrank its
    ``n_best`` finished ones (``stop="bound"``) or when its most probable hypothesis has
    finished (``stop="best"``, OpenNMT-py's and CTranslate2's rule: :data:`BEAM_STOPS`).

    Args:
        step: the decoder step, ``(N,) tokens, state -> (N, V) log-probs, state, (N, Tk)
            weights or None``; it must not change its state in place (the tensors it hands
            back untouched are the same in every beam of an example and are not reordered).
        state: the initial state for ``B`` examples (every tensor ``(B, ...)``); it is
            repeated ``K`` times (example-major).
        batch_size: ``B``. beam_size: ``K`` in ``[1, MAX_BEAM]``. bos, eos, pad: token ids.
        max_len: output tokens at most (EOS included), an int or ``(B,)``.
        alpha, beta: length and coverage penalties. no_repeat_ngram: forbid repeating any
            n-gram of this size (0: off). n_best: hypotheses returned per example (<= ``K``).
        weights: keep every step's attention weights of each hypothesis.
        loop_stop: freeze a hypothesis that loops (:mod:`attnkit.decoding.loops`).
        stop: when an example ends, ``"bound"`` or ``"best"``.

    Returns:
        :class:`Hypotheses`: ``tokens (B, T)`` (``(B, n_best, T)`` for ``n_best > 1``) with
        ``T`` the steps run, ``pad`` after each output; ``weights (B, [n_best,] T, Tk)`` or
        None.
    """
    _check_common(batch_size, bos, eos, pad)
    check_beam_options(beam_size, n_best, no_repeat_ngram, stop)
    b, k = batch_size, beam_size
    beams = start_beams(_max_lengths(max_len, b, device), k, bos, loop_stop)
    state, _ = _cut(state, torch.arange(b, device=device).repeat_interleave(k), ())
    # Rows of one example are equal in every tensor of the repeated state, and a beam's parent
    # is a beam of the same example, so reordering such a tensor changes nothing: those the
    # step hands back as they are (an encoder's memory) are only cut when the batch shrinks.
    same_in_beams = _versioned(tensors_in(state))
    rules = BeamRules(k, bos, eos, pad, alpha, beta, no_repeat_ngram, n_best, weights, stop)
    example = torch.arange(b, device=device)  # (B',) each active example's index in the batch
    gone = torch.zeros(b, dtype=torch.bool, device=device)  # (B',) examples that ended
    finished: list[tuple] = []  # per group of examples that ended together: see _assemble
    steps = 0
    while example.numel():
        log_probs, state, w = step(beams.tokens, state)
        steps += 1
        beams, parent = advance(beams, log_probs, w, steps, rules)
        kept_as_is = _same_objects(state, same_in_beams)
        over = beams.done.reshape(-1, k).all(-1)  # (B',) examples whose search is over
        ends = (over & ~gone).nonzero()[:, 0]  # (E,) those that ended at this step
        if ends.numel():
            # Their n-best, best first; their frozen rows stay until enough have ended.
            finished.append((example.index_select(0, ends), *best_of(_rows(beams, ends, k), rules)))
            gone = gone | over
        if int(gone.sum()) < max(SHRINK_AT * gone.numel(), 1):
            if k > 1:  # a beam of one is its own parent: nothing to reorder
                state = _reorder(state, parent, keep=kept_as_is)
            same_in_beams = _versioned(kept_as_is)
            continue
        # The batch without the rows of the examples that ended, reordered by parent in the
        # same copy.
        stay = (~gone).nonzero()[:, 0]  # (B'',)
        example, gone = example.index_select(0, stay), gone.index_select(0, stay)
        beams = _rows(beams, stay, k)
        state, cut = _cut(state, _beam_rows(stay, k), kept_as_is, parent)
        same_in_beams = _versioned(cut)
    return _assemble(finished, b, n_best, steps, pad)


def _beam_rows(examples: torch.Tensor, k: int) -> torch.Tensor:
    """``(E * K,)`` the rows of the beams of ``examples (E,)``."""
    return ((examples * k)[:, None] + torch.arange(k, device=examples.device)).reshape(-1)


def _rows(beams: Beams, examples: torch.Tensor, k: int) -> Beams:
    """The beams of ``examples (E,)`` only."""
    return _reorder(beams, _beam_rows(examples, k))


def _assemble(finished: list[tuple], b: int, n_best: int, steps: int, pad: int) -> Hypotheses:
    """The n-best of every example in batch order, each padded to the ``steps`` run.
    ``finished``: per group of examples that ended together, their indices ``(E,)`` and the
    fields of :class:`Hypotheses` of their n-best (:func:`attnkit.decoding.search.best_of`),
    each ``(E, n_best, ...)``, ``t`` tokens long (the steps run when they ended)."""
    examples, *fields = zip(*finished)
    where = torch.cat(examples).argsort()  # (B,) each example's row among the finished

    def joined(parts: tuple, value: float) -> torch.Tensor:
        """``parts`` ``(E, n_best, [t, ...])`` in batch order, ``t`` padded to ``steps``."""
        if parts[0].dim() > 2:
            parts = tuple(
                F.pad(x, (0, 0) * (x.dim() - 3) + (0, steps - x.shape[2]), value=value)
                for x in parts
            )
        return torch.cat(parts).index_select(0, where)

    tokens, lengths, scores, kept, looped, token_scores = fields
    out = Hypotheses(
        joined(tokens, pad),
        joined(lengths, 0),
        joined(scores, 0.0),
        None if kept[0] is None else joined(kept, 0.0),
        None if looped[0] is None else joined(looped, False),
        joined(token_scores, 0.0),
    )
    return out.best() if n_best == 1 else out
