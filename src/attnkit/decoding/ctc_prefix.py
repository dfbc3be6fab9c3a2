"""Joint CTC/attention decoding (Watanabe et al. 2017) with optional shallow fusion of a
language model (Gulcehre et al. 2015).

Beam search ranks each extension ``h = g + c`` of a hypothesis ``g`` by

    (1 - lambda) log p_att(c | g, X) + lambda (log psi(h) - log psi(g)) + beta log p_lm(c | g)

where ``psi(h)``, the **CTC prefix score**, is the probability under the model's CTC head that
the labels of the input start with ``h``; for the end token it is the probability that they
are exactly ``g``. Summed over a hypothesis the CTC terms give ``log p_ctc(Y | X)``, so a
hypothesis that loops, skips or stops early (which an attention decoder alone may do on long
inputs) is ranked by how well CTC's monotonic alignment supports it, and **the end is decided
by CTC**: it is likely only once the prefix covers the input. A prefix longer than the input
allows scores ``-inf``.

:class:`CTCPrefixScorer` computes the prefix scores of many hypotheses at once (Algorithm 2 of
Watanabe et al.: the forward variables of the prefix, one pass over the frames per output
step, for the ``pre_beam`` tokens the attention decoder finds most likely, as ESPnet does).
:func:`joint_step` wraps a model's decoder step so :func:`attnkit.decoding.beam_search` runs
unchanged. :func:`prefix_scores_loop` is the definition, one hypothesis and token at a time,
for tests.

Shapes: ``B`` examples, ``N`` hypotheses (``B * K`` in a beam of ``K``), ``T`` CTC frames,
``V`` vocabulary, ``C`` candidate tokens per hypothesis.
"""

from __future__ import annotations

import math

import torch

from attnkit.decoding.beam import beam_search
from attnkit.tokens import BOS, EOS, PAD

# The smallest log-probability a frame gives a label (frames past an input's end give every
# label this): -inf would make the scans' cumulative sums -inf and their differences NaN. A
# score below LOG_FLOOR / 2 went through such a frame: it is reported as -inf.
LOG_FLOOR = -1e10

__all__ = [
    "CANDIDATE_WINDOW",
    "CTCPrefixScorer",
    "ctc_beam_decode",
    "joint_decode",
    "joint_step",
    "prefix_scores_loop",
]

# CTC prefix beam search with CTC alone extends a hypothesis g by the pre-beam tokens most
# likely in the WINDOW frames from where g's labels most likely end (the frame t of the
# largest gamma_t(g)): the next label is emitted there, and scoring every character of a
# long line at every step made a beam of 5 ten times slower. The scores of the tokens
# extended stay exact prefix probabilities; the window only chooses which are scored (as
# ESPnet's CTC prefix scorer windows the frames around the attention's peak).
CANDIDATE_WINDOW = 32


def _impossible(scores: torch.Tensor) -> torch.Tensor:
    """``scores`` with those that needed a frame past the input's end as -inf."""
    return scores.masked_fill(scores < LOG_FLOOR / 2, -math.inf)


def _linear_scan(first: torch.Tensor, add: torch.Tensor, mul: torch.Tensor) -> torch.Tensor:
    """``y[0] = first``, ``y[t] = (y[t-1] + add[t-1]) * mul[t-1]`` for ``t >= 1``, in log space
    (``add``, ``mul`` ``(L, ...)`` log values; returns ``(L + 1, ...)``), without a loop:
    ``y[t] = M[t] + logcumsumexp(first, add[0] - M[0], ..., add[t-1] - M[t-1])`` with ``M`` the
    cumulative sums of ``mul`` (``M[0] = 0``)."""
    m = torch.cat([torch.zeros_like(first)[None], mul.cumsum(0)])  # (L + 1, ...)
    terms = torch.cat([first[None], add - m[:-1]])  # (L + 1, ...)
    return m + torch.logcumsumexp(terms, 0)


class CTCPrefixScorer:
    """CTC prefix scores of hypotheses over one batch's CTC outputs.

    Args:
        log_probs: ``(B, T, V)`` CTC log-probabilities.
        lengths: ``(B,)`` valid frames of each example (frames past them are read as blank
            with probability 1, so they change no score).
        blank: the CTC blank id (attnkit's CTC heads use the padding id).
        eos: the end token, whose prefix score is the probability of the whole label sequence.

    The state of a hypothesis (:meth:`initial_state`, :meth:`advance`) holds, per hypothesis
    ``n``: ``example`` (its row of ``log_probs``), ``r`` ``(N, T, 2)`` the log forward
    variables of the prefix ending in a label / in blank at each frame, ``psi`` its prefix
    score, ``length`` its labels and ``last`` its last label (-1 for none); every tensor is
    batch-first, so beam search reorders it as it reorders any decoder state.
    """

    def __init__(
        self, log_probs: torch.Tensor, lengths: torch.Tensor, *, blank: int = PAD, eos: int = EOS
    ):
        if log_probs.dim() != 3:
            raise ValueError(f"log_probs: expected (B, T, V), got shape {tuple(log_probs.shape)}")
        if lengths.shape != log_probs.shape[:1]:
            raise ValueError(
                f"lengths: expected shape ({log_probs.shape[0]},), got {tuple(lengths.shape)}"
            )
        b, t, v = log_probs.shape
        x = log_probs.double().clamp(min=LOG_FLOOR)
        past = torch.arange(t, device=x.device)[None, :] >= lengths.to(x.device)[:, None]
        x = x.masked_fill(past[..., None], LOG_FLOOR)
        x[..., blank] = x[..., blank].masked_fill(past, 0.0)  # past the end: blank, surely
        self.x, self.blank, self.eos = x, blank, eos

    def initial_state(self, copies: int = 1) -> dict:
        """The empty prefix of every example, each repeated ``copies`` times (example-major,
        as beam search repeats a state)."""
        b, t, _ = self.x.shape
        example = torch.arange(b, device=self.x.device).repeat_interleave(copies)
        r = torch.full((b * copies, t, 2), -math.inf, dtype=self.x.dtype, device=self.x.device)
        r[..., 1] = self.x[example, :, self.blank].cumsum(-1)  # only blanks so far
        return {
            "example": example,
            "r": r,
            "psi": r.new_zeros(b * copies),
            "length": torch.zeros(b * copies, dtype=torch.long, device=r.device),
            "last": torch.full((b * copies,), -1, dtype=torch.long, device=r.device),
        }

    def end_scores(self, state: dict) -> torch.Tensor:
        """``log psi(g + eos)`` ``(N,)``: the probability that the labels are exactly ``g``."""
        return _impossible(torch.logsumexp(state["r"][:, -1], -1))

    def extend(self, state: dict, tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Prefix scores of ``g + c`` for the labels ``tokens`` ``(N, C)`` of each hypothesis.

        The forward variables follow ``r_n[t] = (r_n[t-1] + phi[t-1]) x_c[t]`` and
        ``r_b[t] = (r_b[t-1] + r_n[t-1]) x_blank[t]`` (in probabilities): first-order linear
        recurrences, each solved for every frame at once as a cumulative sum of log-probs and
        a ``logcumsumexp`` (in float64), so a step costs a few tensor operations over
        ``(T, N, C)`` rather than a loop over the frames.

        Returns:
            ``psi`` ``(N, C)`` and the forward variables ``r`` ``(N, C, T, 2)`` of each
            extension (for :meth:`advance`).
        """
        n, c = tokens.shape
        t_all = self.x.shape[1]
        example, r_prev = state["example"], state["r"].transpose(0, 1)  # (T, N, 2)
        xc = self.x[example[:, None], :, tokens].permute(2, 0, 1)  # (T, N, C)
        xb = self.x[example, :, self.blank].transpose(0, 1)[..., None]  # (T, N, 1)
        total = torch.logsumexp(r_prev, -1)  # (T, N): gamma_t(g)
        # phi_t: paths of g that may be followed by c at t + 1 (after a blank if c repeats g's
        # last label)
        same = tokens == state["last"][:, None]  # (N, C)
        phi = torch.where(same[None], r_prev[..., 1, None], total[..., None])  # (T, N, C)
        r = torch.full((t_all, n, c, 2), -math.inf, dtype=self.x.dtype, device=self.x.device)
        empty = state["length"] == 0  # (N,)
        r[0, :, :, 0] = torch.where(empty[:, None], xc[0], -math.inf)
        lo = max(int(state["length"].min()), 1) - 1  # no prefix of g's length ends earlier
        if lo >= t_all:  # every prefix is already longer than the input allows
            return r[0, :, :, 0].clone(), r.permute(1, 2, 0, 3)
        r[lo:, ..., 0] = _linear_scan(r[lo, ..., 0], phi[lo:-1], xc[lo + 1 :])
        r[lo:, ..., 1] = _linear_scan(
            r[lo, ..., 1], r[lo:-1, ..., 0], xb[lo + 1 :].expand(-1, -1, c)
        )
        psi = torch.logsumexp(torch.cat([r[lo, None, ..., 0], phi[lo:-1] + xc[lo + 1 :]]), 0)
        return _impossible(psi), r.permute(1, 2, 0, 3)

    @staticmethod
    def advance(state: dict, tokens: torch.Tensor, psi: torch.Tensor, r: torch.Tensor) -> dict:
        """The state of each hypothesis ``n`` extended by ``tokens[n]``, whose prefix score
        and forward variables are ``psi[n]`` ``(N,)`` and ``r[n]`` ``(N, T, 2)``."""
        return {**state, "r": r, "psi": psi, "length": state["length"] + 1, "last": tokens}


def joint_step(
    step,
    scorer: CTCPrefixScorer | None,
    *,
    ctc_weight: float,
    pre_beam: int,
    lm_step=None,
    lm_weight: float = 0.0,
    pad: int = PAD,
    bos: int = BOS,
    eos: int = EOS,
    window: int = 0,
):
    """A decoder step that scores with CTC prefix scores and a language model too.

    Args:
        step: the model's ``step(tokens, state) -> (log_probs (N, V), state, weights)``, or
            None for CTC alone (CTC prefix beam search: ``ctc_weight`` 1, ``window``
            given).
        scorer: the batch's :class:`CTCPrefixScorer` (None when ``ctc_weight`` is 0).
        ctc_weight: ``lambda``; the attention decoder's log-probabilities weigh ``1 - lambda``.
        pre_beam: ``C``, the attention decoder's most likely tokens that are scored by CTC
            each step (the end token always is); the others are not extended.
        lm_step, lm_weight: a language model's step (same signature) and ``beta``.
        window: with ``step`` None, the ``pre_beam`` tokens scored are those most likely in
            the ``window`` frames from where each hypothesis most likely ends
            (:data:`CANDIDATE_WINDOW`).

    Returns:
        ``joint(tokens, state) -> (scores (N, V), state, weights)`` over the state
        ``{"model": ..., "ctc": ..., "lm": ...}`` of :func:`joint_state`.
    """
    blocked = [pad, bos, eos]
    if step is None and (scorer is None or window < 1 or ctc_weight != 1):
        raise ValueError(
            "step: None (CTC alone) needs a scorer, a window and ctc_weight 1, got "
            f"window={window}, ctc_weight={ctc_weight}"
        )

    def joint(tokens, state):
        new, weights, scores = {}, None, None
        if step is not None:
            log_att, new["model"], weights = step(tokens, state["model"])
            scores = log_att.float()
        if scorer is not None:
            ctc = _follow(state["ctc"], tokens)
            if step is None:
                cand = _window_candidates(scorer, ctc, pre_beam, window, blocked)  # (N, C)
            else:
                att = log_att.float().clone()
                att[:, blocked] = -math.inf
                cand = att.topk(min(pre_beam, att.shape[1] - len(blocked)), dim=-1).indices
            psi, r = scorer.extend(ctc, cand)  # (N, C), (N, C, T, 2)
            prev = ctc["psi"][:, None]
            gain = torch.where(torch.isfinite(prev), psi - prev, -math.inf)
            end = scorer.end_scores(ctc)[:, None]
            end_gain = torch.where(torch.isfinite(prev), end - prev, -math.inf)
            ctc_scores = torch.full(
                (len(tokens), scorer.x.shape[-1]), -math.inf, device=tokens.device
            )
            ctc_scores.scatter_(1, cand, gain.to(ctc_scores.dtype))
            ctc_scores[:, eos : eos + 1] = end_gain.to(ctc_scores.dtype)
            scores = (
                ctc_scores
                if scores is None
                else (1 - ctc_weight) * scores + ctc_weight * ctc_scores
            )
            new["ctc"] = {**ctc, "cand": cand, "cand_psi": psi, "cand_r": r}
        assert scores is not None  # step or scorer: checked above
        if lm_step is not None:
            log_lm, lm_state, _ = lm_step(tokens, state["lm"])
            scores = scores + lm_weight * log_lm.float()
            new["lm"] = lm_state
        return scores, new, weights

    return joint


def _window_candidates(
    scorer: CTCPrefixScorer, ctc: dict, pre_beam: int, window: int, blocked: list[int]
) -> torch.Tensor:
    """The ``pre_beam`` tokens ``(N, C)`` most likely at some frame of the ``window`` frames
    from where each hypothesis's labels most likely end (``argmax_t gamma_t(g)``)."""
    x = scorer.x  # (B, T, V)
    t_all, v = x.shape[1], x.shape[2]
    end = torch.logsumexp(ctc["r"], -1).argmax(-1)  # (N,)
    frames = (end[:, None] + torch.arange(window, device=x.device)).clamp(max=t_all - 1)
    best = x[ctc["example"][:, None], frames].amax(1)  # (N, V)
    best[:, blocked] = -math.inf
    return best.topk(min(pre_beam, v - len(blocked)), dim=-1).indices


def joint_state(model_state, scorer: CTCPrefixScorer | None, lm_state) -> dict:
    """The state :func:`joint_step` starts from, for ``B`` examples (beam search repeats it;
    ``model_state`` None: CTC alone)."""
    state = {} if model_state is None else {"model": model_state}
    if scorer is not None:
        state["ctc"] = scorer.initial_state()
    if lm_state is not None:
        state["lm"] = lm_state
    return state


def _follow(ctc: dict, tokens: torch.Tensor) -> dict:
    """The CTC state after each hypothesis took ``tokens[n]``: the scored candidate it chose
    (unchanged where it is not a candidate: the first step's BOS, the end token, and the
    padding a finished hypothesis continues with)."""
    if "cand" not in ctc:  # the first step: the empty prefix
        return ctc
    slot = ctc["cand"] == tokens[:, None]  # (N, C)
    hit = slot.any(-1)
    if not bool(hit.any()):
        return ctc
    pick = slot.to(torch.int8).argmax(-1)  # (N,)
    rows = torch.arange(len(tokens), device=tokens.device)
    moved = CTCPrefixScorer.advance(
        ctc, tokens, ctc["cand_psi"][rows, pick], ctc["cand_r"][rows, pick]
    )
    return {
        k: (
            torch.where(hit.view(-1, *[1] * (v.dim() - 1)), moved[k], v)
            if k in ("r", "psi", "length", "last")
            else v
        )
        for k, v in ctc.items()
    }


def prefix_scores_loop(log_probs: torch.Tensor, prefix: list[int], blank: int = PAD) -> float:
    """``log psi(prefix)``: the log-probability that the labels of ``log_probs`` ``(T, V)``
    start with ``prefix``, by summing over every CTC path (a dynamic programme over the
    extended label sequence, frame by frame; the definition the scorer is tested against)."""
    if not prefix:
        return 0.0
    t_all = log_probs.shape[0]
    p = log_probs.double().exp()
    labels = [blank]
    for c in prefix:
        labels += [c, blank]
    # a[s]: paths over frames 0..t emitting labels[:s + 1] (CTC's forward variables)
    a = [0.0] * len(labels)
    a[0] = float(p[0, blank])
    if len(labels) > 1:
        a[1] = float(p[0, labels[1]])
    total = a[1] if len(prefix) == 1 else 0.0  # paths whose prefix completes at frame 0
    for t in range(1, t_all):
        new = [0.0] * len(labels)
        for s, lab in enumerate(labels):
            acc = a[s] + (a[s - 1] if s >= 1 else 0.0)
            if s >= 2 and lab != blank and labels[s - 2] != lab:
                acc += a[s - 2]
            new[s] = acc * float(p[t, lab])
        # first emission of the prefix's last label at frame t, from paths over t - 1 frames
        last = len(labels) - 2
        came = a[last - 1] + (
            a[last - 2] if last >= 2 and labels[last - 2] != labels[last] else 0.0
        )
        total += came * float(p[t, labels[last]])
        a = new
    return math.log(total) if total > 0 else -math.inf


def ctc_beam_decode(
    log_probs: torch.Tensor,
    lengths: torch.Tensor,
    *,
    beam: int,
    lm=None,
    lm_weight: float = 0.0,
    window: int = CANDIDATE_WINDOW,
    bos: int = BOS,
    eos: int = EOS,
    pad: int = PAD,
    **beam_options,
):
    """CTC prefix beam search over a CTC head's outputs alone (Graves 2012, Hannun et al.
    2014), label by label: :func:`attnkit.decoding.beam_search` over :func:`joint_step` with
    no decoder and ``ctc_weight`` 1, so a hypothesis ``g + c`` gains
    ``log psi(g + c) - log psi(g)`` (+ ``lm_weight log p_lm(c | g)``), the end token
    ``log p_ctc(g | X) - log psi(g)``: a finished hypothesis's score sums to
    ``log p_ctc(Y | X)``, every path that collapses to ``Y`` counted, not the best path's
    alone. A hypothesis is extended by the :func:`pre_beam_size` tokens most likely in the
    ``window`` frames from where it most likely ends (:data:`CANDIDATE_WINDOW`).

    Args:
        log_probs: ``(B, T, V)`` CTC log-probabilities (blank ``pad``); lengths: ``(B,)``
            valid frames.
        lm: a language model (``lm.start(B, device) -> state``, ``lm.step``) fused with
            ``lm_weight``.
        beam_options: to :func:`attnkit.decoding.beam_search` (``alpha``, ``n_best``, ...).

    Returns:
        :class:`attnkit.decoding.Hypotheses`, EOS included; at most ``T`` labels each.

    Raises:
        ValueError: ``lm_weight > 0`` without ``lm``.
    """
    return _fused_search(
        None,
        None,
        CTCPrefixScorer(log_probs, lengths, blank=pad, eos=eos),
        ctc_weight=1.0,
        beam=beam,
        lm=lm,
        lm_weight=lm_weight,
        batch_size=int(lengths.shape[0]),
        max_len=lengths + 1,  # labels <= frames, then the end token
        device=lengths.device,
        tokens=(bos, eos, pad),
        window=window,
        beam_options=beam_options,
    )


def joint_decode(
    model,
    inputs: torch.Tensor,
    lengths: torch.Tensor,
    *,
    beam: int,
    ctc_weight: float,
    lm=None,
    lm_weight: float = 0.0,
    batch_size: int,
    max_len,
    bos: int = BOS,
    eos: int = EOS,
    pad: int = PAD,
    device=None,
    **beam_options,
):
    """Beam search over ``model``'s steps with CTC prefix scores (``ctc_weight > 0``: the
    model needs ``start_joint(inputs, lengths) -> (state, ctc_log_probs (B, T, V),
    ctc_lengths (B,))``) and/or a language model ``lm`` (``lm_weight > 0``: ``lm.start(B,
    device) -> state`` and ``lm.step``). With CTC an output has at most as many labels as its
    input has CTC frames. The search and the language model run on ``device`` (default:
    ``lengths``'s); ``beam_options`` go to :func:`attnkit.decoding.beam_search`.

    Raises:
        ValueError: the model has no CTC head, or ``lm_weight > 0`` without ``lm``.
    """
    scorer = None
    if ctc_weight > 0:
        if not getattr(model, "has_ctc", False):
            raise ValueError(
                f"ctc_weight: {type(model).__name__} has no CTC head to score "
                f"with (train it with a CTC weight), got ctc_weight={ctc_weight}"
            )
        model_state, log_probs, ctc_lengths = model.start_joint(inputs, lengths)
        scorer = CTCPrefixScorer(log_probs, ctc_lengths, blank=pad, eos=eos)
        limit = ctc_lengths.to(lengths.device) + 1  # labels <= frames, then the end token
        max_len = torch.minimum(
            torch.as_tensor(max_len, device=lengths.device).expand(batch_size), limit
        ).clamp(min=1)
    else:
        model_state = model.start(inputs, lengths)
    return _fused_search(
        model.step,
        model_state,
        scorer,
        ctc_weight=ctc_weight,
        beam=beam,
        lm=lm,
        lm_weight=lm_weight,
        batch_size=batch_size,
        max_len=max_len,
        device=lengths.device if device is None else device,
        tokens=(bos, eos, pad),
        beam_options=beam_options,
    )


def _fused_search(
    step,
    model_state,
    scorer: CTCPrefixScorer | None,
    *,
    ctc_weight: float,
    beam: int,
    lm,
    lm_weight: float,
    batch_size: int,
    max_len,
    device,
    tokens: tuple[int, int, int],
    window: int = 0,
    beam_options: dict,
):
    """:func:`attnkit.decoding.beam_search` over :func:`joint_step` of the model's ``step``
    (None: no decoder), the CTC ``scorer`` (None: no CTC) and ``lm`` (started here when
    ``lm_weight > 0``); ``tokens``: ``(bos, eos, pad)``.

    Raises:
        ValueError: ``lm_weight > 0`` without ``lm``.
    """
    bos, eos, pad = tokens
    lm_state = None
    if lm_weight > 0:
        if lm is None:
            raise ValueError(f"lm: lm_weight={lm_weight} needs a language model, got None")
        lm_state = lm.start(batch_size, device)
    joint = joint_step(
        step,
        scorer,
        ctc_weight=ctc_weight,
        pre_beam=pre_beam_size(beam),
        lm_step=None if lm_state is None else lm.step,
        lm_weight=lm_weight,
        pad=pad,
        bos=bos,
        eos=eos,
        window=window,
    )
    return beam_search(
        joint,
        joint_state(model_state, scorer, lm_state),
        batch_size=batch_size,
        beam_size=beam,
        bos=bos,
        eos=eos,
        pad=pad,
        max_len=max_len,
        device=device,
        **beam_options,
    )


def pre_beam_size(beam: int) -> int:
    """Tokens scored by CTC per hypothesis and step: ``1.5 K`` (ESPnet's ratio), at least 4."""
    return max(int(1.5 * beam), 4)
