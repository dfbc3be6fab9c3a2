"""The memory-light path: attention over blocks, scores recomputed in backward.

Two custom autograd functions, for every score type (they call the score's ``block_scores`` and
``block_backward``, see :mod:`attnkit.attention.scores`):

* :func:`chunked_attention` (weights not needed): for each block of queries, an online softmax
  runs over blocks of keys (running max ``m``, normaliser ``denom`` and context accumulator), so
  neither the ``(Tq, Tk)`` scores nor the ``(Tq, Tk, A)`` pair tensor of additive attention ever
  exists. Saved for backward: the inputs, the output and the log-sum-exp ``(B, H, Tq)``. Backward
  recomputes each block's scores (FlashAttention-2's recurrence) — in one fused pass with the
  gradients when the score has a kernel for it (:meth:`Score.block_attention_backward`: the
  additive score on CPU), else as a pass of its own — except when there are no more queries
  than key features (``Tq <= F``, e.g. a decoder step): then the ``(Tq, Tk)`` scores are no
  bigger than the keys and are kept instead. With a window or causal mask,
  key blocks outside the band are skipped, so local attention costs ``O(Tq * (left + right))``.
* :func:`recomputed_scores` (weights needed, e.g. the location score's state): the full scores
  ``(B, H, Tq, Tk)`` computed block by block; backward recomputes the pair tensor block by block,
  so training keeps ``O(Tq * Tk)``, not ``O(Tq * Tk * A)``. (The location score's own features
  ``f (B, H, Tq, Tk, F)`` are an input, ``F`` = conv filters, usually with ``Tq = 1``.)

Masks are built per block from key validity ``(B, Tk)`` and query centres; a query with no
allowed key gets zero output and zero gradient. Dropout on the weights draws each block's mask
from a generator seeded with ``(seed, block)``, so backward regenerates the same mask and runs
are reproducible under ``torch.manual_seed``.
"""

from __future__ import annotations

from typing import cast

import torch

from attnkit.attention.masks import KeyLayout
from attnkit.attention.path import Inputs, Path, Plan
from attnkit.attention.reference import check_single_backward, weigh
from attnkit.attention.scores import AdditiveScore, Score
from attnkit.ops import kernels, native
from attnkit.ops.precision import compute_dtype

__all__ = [
    "CHUNKED",
    "ChunkedPath",
    "band_reason",
    "block_sizes",
    "chunked_attention",
    "default_blocks",
    "recomputed_scores",
]

# Budget, in elements, for one block's transient tensors.
_SCORE_BLOCK = 1 << 21  # (B, H, bq, bk) scores
# The C++ additive kernels tile the block themselves and run as fast on small blocks; a
# smaller budget keeps the half-dozen (B, H, bq, bk) transients of a block at ~2 MiB each, so
# extra memory grows linearly in T from short sequences on. (With 1 << 21 the blocks keep
# filling up to T ~ 800, and memory grows x2.55 per doubling of T from 256 to 800:
# docs/benchmarks.md.)
_NATIVE_SCORE_BLOCK = 1 << 19
_PAIR_BLOCK = 1 << 23  # (B, H, bq, bk, A) eager pair tensor (32 MiB in float32)


def block_sizes(
    bh: int, tq: int, tk: int, pair_dim: int, *, fused: bool, score_budget: int = _SCORE_BLOCK
) -> tuple[int, int]:
    """Query and key block sizes for ``B*H = bh`` rows, keeping transients within budget.

    ``pair_dim`` is ``A`` for scores that build a pair tensor eagerly, 1 otherwise (fused
    kernels and dot products only hold the block's scores); ``score_budget`` bounds the
    elements of one block's scores.
    """
    per_pair = 1 if fused else pair_dim
    bh = max(bh, 1)  # an empty batch: any blocks do
    bk = max(1, min(tk, 1024))
    budget = min(score_budget, _PAIR_BLOCK // per_pair)
    bq = max(1, min(tq, budget // (bh * bk)))
    if bq < 16 and tq > bq:  # very long rows: smaller key blocks rather than 1-query blocks
        bk = max(1, min(tk, max(16, budget // (bh * 16))))
        bq = max(1, min(tq, budget // (bh * bk)))
    return bq, bk


def default_blocks(
    bh: int,
    tq: int,
    tk: int,
    features: int,
    *,
    dot_family: bool,
    kernel: str,
    window: tuple[int, int] | None = None,
) -> tuple[int, int]:
    """The blocks :func:`chunked_attention` and :func:`recomputed_scores` use for ``B*H = bh``
    rows of ``tq`` queries over ``tk`` keys with ``features`` prepared features (``F``), for
    a score of the dot family or not, on ``kernel``. With a ``window``, blocks of about the
    band's width (at most ``band`` queries by ``2 band`` keys, ``band = left + right + 1``, and
    no fewer than 32 by 64), so the key blocks outside every query's band are skipped: one
    block of the whole ``(Tq, Tk)`` would cost the full attention."""
    fused = kernel != "eager"
    pair = 1 if dot_family or fused else features  # eager pair tensor: x A
    budget = _NATIVE_SCORE_BLOCK if kernel == "native" else _SCORE_BLOCK
    bq, bk = block_sizes(bh, tq, tk, pair, fused=fused, score_budget=budget)
    if window is not None:
        band = window[0] + window[1] + 1
        bq, bk = min(bq, max(32, band)), min(bk, max(64, 2 * band))
    return bq, bk


def _default_blocks(qf, kf, score: Score, kernel: str, layout: KeyLayout) -> tuple[int, int]:
    return default_blocks(
        qf.shape[0] * qf.shape[1],
        qf.shape[2],
        kf.shape[2],
        qf.shape[-1],
        dot_family=score.dot_family,
        kernel=kernel,
        window=layout.window,
    )


def _add_param_grads(total: list, grads) -> None:
    for i, g in enumerate(grads):
        if g is not None:
            total[i] = g if total[i] is None else total[i] + g


def _slice_extra(extra, q0, q1, k0, k1):
    return None if extra is None else extra[:, :, q0:q1, k0:k1]


def _keep_mask(shape, p, seed, block, device):
    g = torch.Generator(device=device)
    g.manual_seed((seed + 1_000_003 * block) % (2**63))
    return torch.rand(shape, generator=g, device=device) >= p


class _ChunkedAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, layout, score, blocks, dropout_p, seed, kernel, qf, kf, v, extra, *params):
        b, h, tq, _ = qf.shape
        acc_t = compute_dtype(qf.dtype)
        bq, bk = blocks
        out = torch.zeros(b, h, tq, v.shape[-1], dtype=acc_t, device=qf.device)
        lse = torch.full((b, h, tq), float("inf"), dtype=acc_t, device=qf.device)
        # Few queries (a decoder step): the scores are no bigger than the keys, so keep them
        # for backward instead of recomputing the pair tensor there.
        kept = None
        if tq <= kf.shape[-1]:
            kept = torch.full((b, h, tq, layout.tk), float("-inf"), dtype=acc_t, device=qf.device)
        block = 0
        for q0 in range(0, tq, bq):
            q1 = min(q0 + bq, tq)
            qb = qf[:, :, q0:q1]
            m = torch.full((b, h, q1 - q0), float("-inf"), dtype=acc_t, device=qf.device)
            denom = torch.zeros_like(m)
            acc = torch.zeros(b, h, q1 - q0, v.shape[-1], dtype=acc_t, device=qf.device)
            k_lo, k_hi = layout.key_range(q0, q1)
            for k0 in range(k_lo, k_hi, bk):
                k1 = min(k0 + bk, k_hi)
                s = score.block_scores(
                    qb, kf[:, :, k0:k1], _slice_extra(extra, q0, q1, k0, k1), kernel=kernel
                ).to(acc_t)  # (B, H, bq, bk)
                mask = layout.block_mask(q0, q1, k0, k1)
                if mask is not None:
                    s = s.masked_fill(~mask, float("-inf"))
                if kept is not None:
                    kept[:, :, q0:q1, k0:k1] = s
                m_new = torch.maximum(m, s.amax(-1))
                m_safe = m_new.masked_fill(m_new == float("-inf"), 0.0)  # rows with no key yet
                p = torch.exp(s - m_safe[..., None])  # (B, H, bq, bk); masked -> 0
                corr = torch.exp(m - m_safe)
                denom = denom * corr + p.sum(-1)
                if dropout_p > 0:
                    keep = _keep_mask(p.shape, dropout_p, seed, block, p.device)
                    p = p * keep / (1 - dropout_p)
                acc = acc * corr[..., None] + p @ v[:, :, k0:k1].to(acc_t)
                m = m_new
                block += 1
            has_key = denom > 0
            out[:, :, q0:q1] = acc / torch.where(has_key, denom, 1.0)[..., None]
            lse[:, :, q0:q1] = torch.where(has_key, m + torch.log(denom), float("inf"))
        out = out.to(v.dtype)
        ctx.layout, ctx.score, ctx.blocks = layout, score, blocks
        ctx.dropout_p, ctx.seed, ctx.kernel = dropout_p, seed, kernel
        ctx.has_extra, ctx.kept = extra is not None, kept is not None
        ctx.save_for_backward(
            qf,
            kf,
            v,
            out,
            lse,
            *(() if extra is None else (extra,)),
            *(() if kept is None else (kept,)),
        )
        return out

    @staticmethod
    def backward(ctx, dout):
        check_single_backward("chunked")
        qf, kf, v, out, lse, *rest = ctx.saved_tensors
        extra = rest.pop(0) if ctx.has_extra else None
        kept = rest.pop(0) if ctx.kept else None
        layout, score, (bq, bk), p_drop = ctx.layout, ctx.score, ctx.blocks, ctx.dropout_p
        acc_t = lse.dtype
        b, h, tq, _ = qf.shape
        dout = dout.to(acc_t)
        delta = (dout * out.to(acc_t)).sum(-1)  # (B, H, Tq) = rowsum(dP * P)
        # With one query block and no band, each key block is visited once: write, don't add.
        once = tq <= bq and layout.key_range(0, tq) == (0, layout.tk)
        new = torch.empty if once else torch.zeros
        dq = torch.zeros(qf.shape, dtype=acc_t, device=qf.device)
        dk = new(kf.shape, dtype=acc_t, device=kf.device)
        dv = new(v.shape, dtype=acc_t, device=v.device)
        dextra = None if extra is None else torch.zeros(extra.shape, dtype=acc_t, device=qf.device)
        params = score.pairwise_params()
        dparams = [None] * len(params)
        block = 0
        for q0 in range(0, tq, bq):
            q1 = min(q0 + bq, tq)
            qb, dob = qf[:, :, q0:q1], dout[:, :, q0:q1]
            lse_b, delta_b = lse[:, :, q0:q1, None], delta[:, :, q0:q1, None]
            k_lo, k_hi = layout.key_range(q0, q1)
            for k0 in range(k_lo, k_hi, bk):
                k1 = min(k0 + bk, k_hi)
                kb, eb = kf[:, :, k0:k1], _slice_extra(extra, q0, q1, k0, k1)
                vb = v[:, :, k0:k1].to(acc_t)
                dp = dob @ vb.transpose(-1, -2)  # (B, H, bq, bk)
                fused = None
                if kept is None and p_drop == 0 and eb is None:  # one pass, if the score can
                    fused = score.block_attention_backward(
                        qb,
                        kb,
                        lse_b[..., 0],
                        dp - delta_b,
                        layout.block_mask(q0, q1, k0, k1),
                        kernel=ctx.kernel,
                    )
                if fused is not None:
                    p, gq, gk, gp = fused
                    ge, gv = None, p.transpose(-1, -2) @ dob
                else:
                    if kept is not None:  # masked entries were stored as -inf
                        p = torch.exp(kept[:, :, q0:q1, k0:k1] - lse_b)
                    else:
                        s = score.block_scores(qb, kb, eb, kernel=ctx.kernel).to(acc_t)
                        p = torch.exp(s - lse_b)  # (B, H, bq, bk); no key: exp(-inf) = 0
                        mask = layout.block_mask(q0, q1, k0, k1)
                        if mask is not None:
                            p = p.masked_fill(~mask, 0.0)
                    if p_drop > 0:
                        keep = _keep_mask(p.shape, p_drop, ctx.seed, block, p.device)
                        keep = keep / (1 - p_drop)
                        gv = (p * keep).transpose(-1, -2) @ dob
                        dp = dp * keep
                    else:
                        gv = p.transpose(-1, -2) @ dob
                    ds = p * (dp - delta_b)
                    gq, gk, ge, gp = score.block_backward(qb, kb, eb, ds, kernel=ctx.kernel)
                dq[:, :, q0:q1] += gq
                if once and (k0, k1) == (0, layout.tk):
                    dk, dv = gk, gv
                elif once:
                    dk[:, :, k0:k1] = gk
                    dv[:, :, k0:k1] = gv
                else:
                    dk[:, :, k0:k1] += gk
                    dv[:, :, k0:k1] += gv
                if dextra is not None:
                    dextra[:, :, q0:q1, k0:k1] += ge
                _add_param_grads(dparams, gp)
                block += 1
        grads_in = (dq.to(qf.dtype), dk.to(kf.dtype), dv.to(v.dtype))
        grads_in += (None if dextra is None else dextra.to(extra.dtype),)
        return (None,) * 6 + grads_in + tuple(dparams)


def chunked_attention(
    qf: torch.Tensor,
    kf: torch.Tensor,
    value: torch.Tensor,
    score: Score,
    layout: KeyLayout,
    *,
    extra: torch.Tensor | None = None,
    dropout_p: float = 0.0,
    seed: int | None = None,
    kernel: str = "eager",
    blocks: tuple[int, int] | None = None,
) -> torch.Tensor:
    """``softmax(score(q, k)) @ v`` without the ``(Tq, Tk)`` matrix, scores recomputed in backward.

    Args:
        qf: prepared queries ``(B, H, Tq, F)``; kf: prepared keys ``(B, H, Tk, F)``.
        value: ``(B, H, Tk, Dv)``.
        score: the score module that prepared ``qf``/``kf``.
        layout: which keys each query may attend to.
        extra: per-pair features ``(B, H, Tq, Tk, E)`` (location score) or None.
        dropout_p: dropout on the weights; ``seed`` fixes its masks (drawn from torch's global
            generator when None).
        kernel: the score's block kernels (:data:`attnkit.ops.kernels.KERNELS`), for
            scores that have several.
        blocks: ``(block_q, block_k)``; chosen from the shapes when None.

    Returns:
        ``context (B, H, Tq, Dv)``.
    """
    blocks = blocks or _default_blocks(qf, kf, score, kernel, layout)
    if dropout_p > 0 and seed is None:
        seed = int(torch.randint(0, 2**62, (1,)))
    return _ChunkedAttention.apply(
        layout,
        score,
        blocks,
        dropout_p,
        seed or 0,
        kernel,
        qf,
        kf,
        value,
        extra,
        *score.pairwise_params(),
    )


class _RecomputedScores(torch.autograd.Function):
    @staticmethod
    def forward(ctx, layout, score, blocks, kernel, qf, kf, extra, *params):
        b, h, tq, _ = qf.shape
        tk = kf.shape[2]
        acc_t = compute_dtype(qf.dtype)
        bq, bk = blocks
        # Blocks outside the band stay 0: the caller's mask hides them.
        s = torch.zeros(b, h, tq, tk, dtype=acc_t, device=qf.device)
        for q0 in range(0, tq, bq):
            q1 = min(q0 + bq, tq)
            k_lo, k_hi = layout.key_range(q0, q1)
            for k0 in range(k_lo, k_hi, bk):
                k1 = min(k0 + bk, k_hi)
                s[:, :, q0:q1, k0:k1] = score.block_scores(
                    qf[:, :, q0:q1],
                    kf[:, :, k0:k1],
                    _slice_extra(extra, q0, q1, k0, k1),
                    kernel=kernel,
                )
        ctx.layout, ctx.score, ctx.blocks, ctx.kernel = layout, score, blocks, kernel
        ctx.has_extra = extra is not None
        ctx.save_for_backward(qf, kf, *(() if extra is None else (extra,)))
        return s

    @staticmethod
    def backward(ctx, ds):
        check_single_backward("chunked")
        qf, kf, *rest = ctx.saved_tensors
        extra = rest[0] if ctx.has_extra else None
        score, (bq, bk) = ctx.score, ctx.blocks
        tq = qf.shape[2]
        acc_t = ds.dtype
        dq = torch.zeros(qf.shape, dtype=acc_t, device=qf.device)
        dk = torch.zeros(kf.shape, dtype=acc_t, device=kf.device)
        dextra = None if extra is None else torch.zeros(extra.shape, dtype=acc_t, device=qf.device)
        dparams = [None] * len(score.pairwise_params())
        for q0 in range(0, tq, bq):
            q1 = min(q0 + bq, tq)
            k_lo, k_hi = ctx.layout.key_range(q0, q1)
            for k0 in range(k_lo, k_hi, bk):
                k1 = min(k0 + bk, k_hi)
                gq, gk, ge, gp = score.block_backward(
                    qf[:, :, q0:q1],
                    kf[:, :, k0:k1],
                    _slice_extra(extra, q0, q1, k0, k1),
                    ds[:, :, q0:q1, k0:k1].contiguous(),
                    kernel=ctx.kernel,
                )
                dq[:, :, q0:q1] += gq
                dk[:, :, k0:k1] += gk
                if dextra is not None:
                    dextra[:, :, q0:q1, k0:k1] += ge
                _add_param_grads(dparams, gp)
        grads = (dq.to(qf.dtype), dk.to(kf.dtype))
        grads += (None if dextra is None else dextra.to(extra.dtype),)
        return (None,) * 4 + grads + tuple(dparams)


def recomputed_scores(
    qf: torch.Tensor,
    kf: torch.Tensor,
    score: Score,
    layout: KeyLayout,
    *,
    extra: torch.Tensor | None = None,
    kernel: str = "eager",
    blocks: tuple[int, int] | None = None,
) -> torch.Tensor:
    """Scores ``(B, H, Tq, Tk)`` (float32 for low precision) whose backward recomputes the pair
    tensor block by block instead of keeping it. Blocks outside ``layout``'s band are not
    computed (they are 0; mask them)."""
    blocks = blocks or _default_blocks(qf, kf, score, kernel, layout)
    return _RecomputedScores.apply(
        layout, score, blocks, kernel, qf, kf, extra, *score.pairwise_params()
    )


def band_reason(inp: Inputs) -> str:
    """Why a call with a narrow window takes the chunked path."""
    return (
        f"window {inp.window} over {inp.shape[3]} keys: banded blocks, "
        "O(Tq * window) work and memory"
    )


class ChunkedPath(Path):
    """The chunked path as dispatch sees it: it serves every call. ``auto`` passes it by for
    a dot-family score with weights (the reference path computes those anyway). Its plan
    names the kernel computing an additive score (:data:`attnkit.ops.kernels.KERNELS`)."""

    name = "chunked"

    def auto_reasons(self, inp: Inputs) -> list[str]:
        if inp.need_weights and inp.score.dot_family:
            return ["weights requested: they are the (Tq, Tk) score matrix anyway"]
        return []

    def plan(self, inp: Inputs, because: str | None) -> Plan:
        if because is not None:
            reason = because
        elif inp.need_weights:
            reason = (
                "weights requested: (Tq, Tk) scores built block by block, the "
                "(Tq, Tk, A) pair tensor recomputed in backward"
            )
        elif inp.narrow_band:
            reason = band_reason(inp)
        else:
            reason = (
                f"score {inp.score.name!r}: online softmax over key blocks; backward "
                "recomputes the scores (keeps them when Tq <= key features)"
            )
        if inp.score.name != "additive":
            return Plan("chunked", reason)
        return _additive_plan(inp, reason)

    def run(self, inp: Inputs, plan: Plan) -> tuple[torch.Tensor, torch.Tensor | None]:
        qf, kf, v, call = inp.tensors()
        layout = call.layout
        if not inp.need_weights:
            context = chunked_attention(
                qf,
                kf,
                v,
                inp.score,
                layout,
                extra=inp.extra,
                dropout_p=inp.dropout_p,
                kernel=plan.kernel,
            )
            return context, None
        scores = recomputed_scores(qf, kf, inp.score, layout, extra=inp.extra, kernel=plan.kernel)
        return weigh(scores, v, call.mask(), inp.dropout_p)


def _additive_plan(inp: Inputs, reason: str) -> Plan:
    """The chunked plan of an additive score: the C++ block kernels on CPU where they were
    built, else compiled or eager kernels, and why."""
    b, h, tq, tk = inp.shape
    dtype, window, on_cpu = inp.dtype or torch.float32, inp.window, inp.on_cpu
    if on_cpu and dtype != torch.float64 and native.available():
        return Plan(
            "chunked", f"{reason}; C++ additive block kernels (backward in one pass)", "native"
        )
    keys = tk if window is None else min(tk, window[0] + window[1] + 1)  # keys per query
    additive = cast(AdditiveScore, inp.score)  # only additive scores are planned here
    attn_dim: int = additive.v.shape[-1]
    work = b * h * tq * keys * attn_dim
    compiled = kernels.want_compiled(work, dtype)
    no_native = (
        "" if not on_cpu or dtype == torch.float64 else f"; no C++ kernels ({native.status()})"
    )
    if compiled and work < kernels.COMPILE_MIN_WORK:
        kernel = "compiled additive kernels (already compiled in this process)"
    elif compiled:
        kernel = "compiled additive kernels"
    elif dtype == torch.float64:
        kernel = "eager additive kernels (float64 is not compiled)"
    elif work >= kernels.COMPILE_MIN_WORK:
        kernel = f"eager additive kernels ({kernels.compile_status()})"
    else:
        kernel = "eager additive kernels (too small to pay for compiling)"
    return Plan("chunked", f"{reason}; {kernel}{no_native}", "compiled" if compiled else "eager")


CHUNKED = ChunkedPath()
