"""Scoring functions: the papers' equations for ``e_ij = score(q_i, k_j)``.

Every score is split into three steps so that every attention path (reference, SDPA, chunked,
banded) can share it:

* ``prepare_query(q)``: per-query work done once, ``(B, H, Tq, Dq) -> (B, H, Tq, F)``;
* ``prepare_key(k)``: per-key work done once, ``(B, H, Tk, Dk) -> (B, H, Tk, F)``;
* ``pairwise(qf, kf, extra)``: the part that needs every (query, key) pair, ``-> (B, H, Tq, Tk)``.

For the *dot family* (dot, scaled_dot, general, cosine) ``pairwise`` is ``scale * qf @ kf^T``, so
fused dot-product kernels apply to the prepared features. Additive and location scores need the
pair tensor ``tanh(W q_i + U k_j)`` of shape ``(B, H, Tq, Tk, A)``.

Parameters carry a leading head dimension ``H`` (``H = 1`` for single-head attention).

The memory-light paths (:mod:`attnkit.attention.chunked`) call ``block_scores`` and
``block_backward`` on one block of queries and keys at a time, recomputing scores in backward
instead of storing them; the default ``block_backward`` differentiates ``pairwise`` with autograd,
and the additive score overrides both with fused kernels (:mod:`attnkit.ops.kernels`).

=============  ===========================================  ======================
score          e_ij                                          parameters (per head)
=============  ===========================================  ======================
dot            q_i . k_j                                     none
scaled_dot     q_i . k_j / sqrt(Dk)                          none
general        q_i^T W k_j              (Luong 2015)         W (Dq, Dk)
additive       v^T tanh(W q_i + U k_j)  (Bahdanau 2015)      W (Dq, A), U (Dk, A), v (A)
cosine         g * cos(q_i, k_j)                             log g (learnable scale)
location       v^T tanh(W q_i + U k_j + L f_ij + b)          W, U, v, conv (F, 1, K),
               f_i = conv(alpha_{i-1})  (Chorowski 2015)     L (F, A), b (A)
=============  ===========================================  ======================
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.ops import kernels
from attnkit.ops.dense import linear
from attnkit.ops.precision import upcast
from attnkit.ops.tracing import exporting

__all__ = ["SCORES", "Score", "make_score"]

SCORES = ("dot", "scaled_dot", "general", "additive", "cosine", "location")


def _uniform(shape: tuple[int, ...], fan_in: int) -> nn.Parameter:
    bound = 1.0 / math.sqrt(fan_in)
    return nn.Parameter(torch.empty(shape).uniform_(-bound, bound))


def project(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """Per-head projection ``x (B, H, T, D) @ w (H, D, A)`` -> ``(B, H, T, A)``.

    One matrix product per head over all ``B * T`` rows, so the gradient of ``w`` is
    ``x^T dy`` per head; the broadcast ``x @ w`` would instead form one ``(D, A)`` product per
    example and sum the ``B`` of them (per decoder step, for a query).
    """
    b, h, t, d = x.shape
    if h == 1:
        return linear(x.reshape(b * t, d), w[0].t()).view(b, 1, t, w.shape[-1])
    return torch.einsum("bhtd,hda->bhta", x, w)


def _reduce_v(x: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``v^T x`` over the last dim per head: ``x (B, H, Tq, Tk, A)``, ``v (H, A)`` ->
    ``(B, H, Tq, Tk)``. Exported as a broadcast matrix product: onnxruntime runs an ONNX
    ``MatMul`` about 3x faster than the ``Einsum`` of the same contraction. PyTorch keeps the
    einsum, which does not copy ``x`` (the broadcast product does, in training)."""
    if exporting():
        return (x @ v[:, None, :, None]).squeeze(-1)
    return torch.einsum("bhqka,ha->bhqk", x, v)


def _location_term(extra: torch.Tensor, w_loc: torch.Tensor) -> torch.Tensor:
    """``extra (B, H, Tq, Tk, F) @ w_loc (H, F, A)`` per head -> ``(B, H, Tq, Tk, A)``; a
    ``MatMul`` when exported, as :func:`_reduce_v`."""
    if exporting():
        return extra @ w_loc[:, None]
    return torch.einsum("bhqkf,hfa->bhqka", extra, w_loc)


class Score(nn.Module):
    """Base class. Subclasses implement the paper's equation; see the module docstring.

    Attributes:
        name: the score's name in :data:`SCORES`.
        dot_family: True when ``pairwise`` is ``qf @ kf^T`` (fused dot-product kernels apply).
        needs_prev: True when the score reads the previous step's attention weights.
    """

    name = ""
    dot_family = True
    needs_prev = False
    scale = 1.0  # dot family: pairwise = scale * qf @ kf^T (SDPA takes it as its scale)

    def prepare_query(self, q: torch.Tensor) -> torch.Tensor:
        """``(B, H, Tq, Dq) -> (B, H, Tq, F)``."""
        return q

    def prepare_key(self, k: torch.Tensor) -> torch.Tensor:
        """``(B, H, Tk, Dk) -> (B, H, Tk, F)``."""
        return k

    def prepare_extra(self, prev: torch.Tensor) -> torch.Tensor | None:
        """Per-pair features from the previous weights ``(B, H, Tq, Tk)``; None if unused."""
        return None

    def pairwise(
        self, qf: torch.Tensor, kf: torch.Tensor, extra: torch.Tensor | None = None
    ) -> torch.Tensor:
        """Scores ``(B, H, Tq, Tk)`` from prepared queries and keys."""
        s = qf @ kf.transpose(-1, -2)  # (B, H, Tq, Tk)
        return s if self.scale == 1.0 else s * self.scale

    def pairwise_params(self) -> tuple[nn.Parameter, ...]:
        """The parameters ``pairwise`` reads (their gradients come from ``block_backward``)."""
        return ()

    def block_scores(self, qf, kf, extra=None, *, kernel: str = "eager") -> torch.Tensor:
        """Scores of one block, ``(B, H, bq, bk)``, without recording autograd history
        (float32 for float16/bfloat16 inputs, as in the reference path). ``kernel`` names the
        implementation (:data:`attnkit.ops.kernels.KERNELS`) for scores that have several."""
        with torch.no_grad():
            return self.pairwise(*upcast(qf, kf, extra))

    def block_backward(self, qf, kf, extra, grad_scores, *, kernel: str = "eager"):
        """Gradients of ``sum(grad_scores * pairwise(qf, kf, extra))`` for one block.

        Args:
            qf: ``(B, H, bq, F)``; kf: ``(B, H, bk, F)``; extra: ``(B, H, bq, bk, E)`` or None;
            grad_scores: ``(B, H, bq, bk)``.

        Returns:
            ``(d_qf, d_kf, d_extra or None, d_params)`` with ``d_params`` matching
            :meth:`pairwise_params` (None for a parameter that does not require grad).
        """
        params = self.pairwise_params()
        qf, kf, extra = upcast(qf, kf, extra)
        with torch.enable_grad():
            q = qf.detach().requires_grad_()
            k = kf.detach().requires_grad_()
            e = None if extra is None else extra.detach().requires_grad_()
            wanted = [p for p in params if p.requires_grad]
            inputs = [q, k] + ([e] if e is not None else []) + wanted
            grads = list(torch.autograd.grad(self.pairwise(q, k, e), inputs, grad_scores))
        dq, dk = grads.pop(0), grads.pop(0)
        de = grads.pop(0) if e is not None else None
        dparams = tuple(grads.pop(0) if p.requires_grad else None for p in params)
        return dq, dk, de, dparams

    def block_attention_backward(self, qf, kf, lse, dpd, mask, *, kernel: str = "eager"):
        """One block's backward from the context's gradient in one fused pass, or None when
        this score has no such kernel (the caller then recomputes the block's scores and calls
        :meth:`block_backward`).

        Args:
            qf: ``(B, H, bq, F)``; kf: ``(B, H, bk, F)``; lse: ``(B, H, bq)`` log-sum-exp of
                the rows' scores; dpd: ``(B, H, bq, bk)`` ``d loss / d p - delta`` (``delta``:
                the row's ``sum_j p_j d loss / d p_j``); mask: bool ``(B|1, 1, bq|1, bk)`` or
                None.

        Returns:
            ``(p (B, H, bq, bk), d_qf, d_kf, d_params)``, ``p`` the block's weights.
        """
        return None


class DotScore(Score):
    """``e_ij = q_i . k_j`` (Luong "dot")."""

    name = "dot"


class ScaledDotScore(Score):
    """``e_ij = q_i . k_j / sqrt(Dk)`` (Vaswani et al. 2017)."""

    name = "scaled_dot"

    def __init__(self, key_dim: int):
        super().__init__()
        self.scale = key_dim**-0.5


class GeneralScore(Score):
    """``e_ij = q_i^T W k_j`` (Luong "general", bilinear)."""

    name = "general"

    def __init__(self, heads: int, query_dim: int, key_dim: int):
        super().__init__()
        self.weight = _uniform((heads, query_dim, key_dim), query_dim)  # W: (H, Dq, Dk)

    def prepare_query(self, q):
        return project(q, self.weight)  # (B, H, Tq, Dk)


class CosineScore(Score):
    """``e_ij = g * cos(q_i, k_j)`` with a learnable scale ``g`` per head (init 10, at most 100)."""

    name = "cosine"
    max_log_scale = math.log(100.0)

    def __init__(self, heads: int, scale: float = 10.0, learnable: bool = True):
        super().__init__()
        log_scale = torch.full((heads,), math.log(scale))
        if learnable:
            self.log_scale = nn.Parameter(log_scale)
        else:
            self.register_buffer("log_scale", log_scale)

    def prepare_query(self, q):
        g = self.log_scale.clamp(max=self.max_log_scale).exp().to(q.dtype)  # (H,)
        return F.normalize(q, dim=-1, eps=1e-6) * g[:, None, None]

    def prepare_key(self, k):
        return F.normalize(k, dim=-1, eps=1e-6)


class AdditiveScore(Score):
    """``e_ij = v^T tanh(W q_i + U k_j)`` (Bahdanau et al. 2015, "concat" in Luong et al.)."""

    name = "additive"
    dot_family = False

    def __init__(self, heads: int, query_dim: int, key_dim: int, attn_dim: int):
        super().__init__()
        self.w_query = _uniform((heads, query_dim, attn_dim), query_dim)  # W: (H, Dq, A)
        self.w_key = _uniform((heads, key_dim, attn_dim), key_dim)  # U: (H, Dk, A)
        self.v = _uniform((heads, attn_dim), attn_dim)  # v: (H, A)

    def prepare_query(self, q):
        return project(q, self.w_query)  # (B, H, Tq, A)

    def prepare_key(self, k):
        return project(k, self.w_key)  # (B, H, Tk, A)

    def pairwise(self, qf, kf, extra=None):
        pre = qf.unsqueeze(-2) + kf.unsqueeze(-3)  # (B, H, Tq, Tk, A)
        return _reduce_v(torch.tanh(pre), self.v.to(qf.dtype))

    def pairwise_params(self):
        return (self.v,)

    def block_scores(self, qf, kf, extra=None, *, kernel="eager"):
        return kernels.additive_scores(qf, kf, self.v.detach().to(qf.dtype), kernel=kernel)

    def block_backward(self, qf, kf, extra, grad_scores, *, kernel="eager"):
        v = self.v.detach().to(qf.dtype)
        dq, dk, dv = kernels.additive_backward(qf, kf, v, grad_scores, kernel=kernel)
        return dq, dk, None, (dv.to(self.v.dtype) if self.v.requires_grad else None,)

    def block_attention_backward(self, qf, kf, lse, dpd, mask, *, kernel="eager"):
        if kernel != "native":
            return None
        v = self.v.detach().to(qf.dtype)
        p, dq, dk, dv = kernels.additive_attention_backward(qf, kf, v, lse, dpd, mask)
        return p, dq, dk, (dv.to(self.v.dtype) if self.v.requires_grad else None,)


class LocationScore(AdditiveScore):
    """``e_ij = v^T tanh(W q_i + U k_j + L f_ij + b)``, ``f_i = conv(alpha_{i-1})``.

    Chorowski et al. 2015: the previous step's weights ``alpha_{i-1}`` ``(Tk,)`` are convolved
    with ``F`` filters of odd width ``K`` to give location features ``f_i`` ``(Tk, F)``.
    """

    name = "location"
    needs_prev = True

    def __init__(
        self, heads: int, query_dim: int, key_dim: int, attn_dim: int, filters: int, kernel: int
    ):
        super().__init__(heads, query_dim, key_dim, attn_dim)
        self.conv = nn.Conv1d(1, filters, kernel, padding=kernel // 2, bias=False)
        self.w_loc = _uniform((heads, filters, attn_dim), filters)  # L: (H, F, A)
        self.bias = nn.Parameter(torch.zeros(heads, attn_dim))  # b: (H, A)

    def prepare_query(self, q):
        return project(q, self.w_query) + self.bias[:, None, :]  # (B, H, Tq, A)

    def prepare_extra(self, prev):
        """Location features ``f (B, H, Tq, Tk, F)`` from the previous weights (B, H, Tq, Tk)."""
        b, h, tq, tk = prev.shape
        if tk == 0:  # no keys: conv1d refuses an empty input
            return prev.new_zeros(b, h, tq, 0, self.conv.out_channels)
        f = self.conv(prev.reshape(b * h * tq, 1, tk))  # (B*H*Tq, F, Tk)
        return f.reshape(b, h, tq, self.conv.out_channels, tk).transpose(-1, -2)  # (B,H,Tq,Tk,F)

    def pairwise(self, qf, kf, extra=None):
        loc = _location_term(extra, self.w_loc.to(qf.dtype))  # (B, H, Tq, Tk, A)
        pre = qf.unsqueeze(-2) + kf.unsqueeze(-3) + loc  # (B, H, Tq, Tk, A)
        return _reduce_v(torch.tanh(pre), self.v.to(qf.dtype))

    def pairwise_params(self):
        return (self.v, self.w_loc)

    # The location term is not separable in (i, j): use the generic recompute-and-autograd path.
    block_scores = Score.block_scores
    block_backward = Score.block_backward
    block_attention_backward = Score.block_attention_backward


def make_score(
    name: str,
    *,
    heads: int,
    query_dim: int,
    key_dim: int,
    attn_dim: int | None,
    location_filters: int | None = None,
    location_kernel: int | None = None,
) -> Score:
    """Build the score module ``name`` for per-head features of sizes ``query_dim``/``key_dim``.

    The location conv has ``location_filters`` (default 10) filters of odd width
    ``location_kernel`` (default 31).

    Raises:
        ValueError: unknown ``name``; ``query_dim != key_dim`` for a score that compares vectors
            directly; ``attn_dim`` given to a score that has none; bad location conv sizes.
    """
    if name not in SCORES:
        raise ValueError(f"score: expected one of {', '.join(SCORES)}, got {name!r}")
    if name in ("dot", "scaled_dot", "cosine") and query_dim != key_dim:
        raise ValueError(
            f"score={name!r} compares queries with keys directly and needs query_dim == key_dim "
            f"(per head), got query_dim={query_dim}, key_dim={key_dim}; use 'general' or "
            "'additive', or heads > 1 to project both"
        )
    if name not in ("additive", "location") and attn_dim is not None:
        raise ValueError(
            f"attn_dim: only the 'additive' and 'location' scores have an attention dim, "
            f"got attn_dim={attn_dim} with score={name!r}"
        )
    if name != "location":
        for arg, val in (
            ("location_filters", location_filters),
            ("location_kernel", location_kernel),
        ):
            if val is not None:
                raise ValueError(
                    f"{arg}: only the 'location' score has a conv, got {arg}={val!r} "
                    f"with score={name!r}"
                )
    a = key_dim if attn_dim is None else attn_dim
    if name == "dot":
        return DotScore()
    if name == "scaled_dot":
        return ScaledDotScore(key_dim)
    if name == "general":
        return GeneralScore(heads, query_dim, key_dim)
    if name == "cosine":
        return CosineScore(heads)
    if name == "additive":
        return AdditiveScore(heads, query_dim, key_dim, a)
    filters = 10 if location_filters is None else location_filters
    kernel = 31 if location_kernel is None else location_kernel
    if not _is_int(kernel) or kernel < 1 or kernel % 2 == 0:
        raise ValueError(f"location_kernel: expected a positive odd int, got {kernel!r}")
    if not _is_int(filters) or filters < 1:
        raise ValueError(f"location_filters: expected a positive int, got {filters!r}")
    return LocationScore(heads, query_dim, key_dim, a, filters, kernel)


def _is_int(x) -> bool:
    return isinstance(x, int) and not isinstance(x, bool)
