"""Alignments around a predicted position: Luong's local-p (2015) and Graves's GMM (2013).

**local-p** predicts a centre ``p_i = (S - 1) * sigmoid(v_p^T tanh(W_p q_i))`` in the input of
``S`` keys (the paper's ``S * sigmoid(...)`` with 0-based positions), scores the keys within
``D`` of it with any content score of :mod:`attnkit.attention.scores`, and weighs the softmax of
those scores by a Gaussian around the centre:

    a_ij = softmax_{|j - p_i| <= max(D, 1/2)}(score(q_i, k_j)) * exp(-(j - p_i)^2 / (2 sigma^2)),
    sigma = max(D, 1) / 2

(with ``D = 0`` the window is the key nearest the real-valued centre, where ``|j - p_i| <= 0``
would hold none).
The window is discrete, so gradients reach ``p_i`` through the Gaussian (as in the paper). It
has no state: every step predicts its centre afresh. ``S`` is the position after the last
allowed key.

**GMM** attention is location only: from the query alone it predicts ``K`` Gaussians over key
positions ``u = 0 .. Tk - 1`` whose means only move forward,

    (a_hat, b_hat, k_hat) = W q_i + c,  kappa_i = kappa_{i-1} + exp(k_hat)
    phi_iu = sum_k exp(a_hat_k) exp(-exp(b_hat_k) (kappa_ik - u)^2)

and the context is ``sum_u phi_iu v_u``. The weights are not normalised (Graves 2013); the
state is ``kappa`` ``(B, K)``, starting at 0.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from attnkit.attention.alignment import Alignment, keys_of
from attnkit.attention.core import Memory
from attnkit.attention.reference import masked_softmax
from attnkit.attention.scores import SCORES, make_score
from attnkit.checks import check_positive_int
from attnkit.ops.dense import Linear

__all__ = ["GMMAttention", "LocalPAttention"]

LOCAL_SCORES = tuple(s for s in SCORES if s != "location")


class LocalPAttention(Alignment, name="local_p"):
    """Luong et al.'s local-p attention: see the module docstring.

    Args:
        query_dim, key_dim, value_dim: ``Dq``, ``Dk`` (default ``Dq``), ``Dv`` (default
            ``Dk``).
        score: the content score (any of :data:`attnkit.SCORES` but ``"location"``; Luong's
            default ``"general"``).
        attn_dim: hidden size of the centre predictor ``W_p`` (default ``Dq``), and of an
            additive score.
        half_width: ``D``, keys each side of the centre (``sigma = max(D, 1) / 2``; with
            ``D = 0`` the key nearest the centre).
        impl: ``"fast"`` or ``"loop"``.

    Shape:
        query ``(B, Tq, Dq)`` or ``(B, Dq)``; key ``(B, Tk, Dk)`` or a :class:`Memory`;
        weights ``(B, Tq, Tk)`` / ``(B, Tk)``; no state.

    Example:
        >>> attn = LocalPAttention(8, half_width=2)
        >>> out = attn(torch.randn(2, 3, 8), torch.randn(2, 20, 8))
        >>> bool((out.weights > 0).sum(-1).le(5).all()), out.state is None
        (True, True)
    """

    #: A softmax over the window times a Gaussian of at most 1.
    weight_sums = "at_most_one"

    def __init__(
        self,
        query_dim: int,
        key_dim: int | None = None,
        value_dim: int | None = None,
        *,
        score: str = "general",
        attn_dim: int | None = None,
        half_width: int = 10,
        impl: str = "fast",
    ):
        super().__init__(query_dim, key_dim, value_dim, impl=impl)
        if score not in LOCAL_SCORES:
            raise ValueError(
                f"score: expected one of {', '.join(LOCAL_SCORES)} (the window "
                f"takes the place of the location score's state), got {score!r}"
            )
        if not isinstance(half_width, int) or isinstance(half_width, bool) or half_width < 0:
            raise ValueError(f"half_width: expected a non-negative int, got {half_width!r}")
        self.half_width = half_width
        hidden = self.query_dim if attn_dim is None else check_positive_int("attn_dim", attn_dim)
        self.score = make_score(
            score,
            heads=1,
            query_dim=self.query_dim,
            key_dim=self.key_dim,
            attn_dim=attn_dim if score == "additive" else None,
        )
        bound = 1.0 / math.sqrt(self.query_dim)
        self.w_centre = nn.Parameter(torch.empty(self.query_dim, hidden).uniform_(-bound, bound))
        self.v_centre = nn.Parameter(torch.empty(hidden).uniform_(-(hidden**-0.5), hidden**-0.5))

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, score={self.score.name!r}, half_width={self.half_width}"

    @property
    def sigma(self) -> float:
        return max(self.half_width, 1) / 2

    @property
    def radius(self) -> float:
        """The window's reach around the centre: ``D``, and 1/2 for ``D = 0`` (the nearest
        key)."""
        return max(self.half_width, 0.5)

    def prepare_key(self, key):
        return self.score.prepare_key(key[:, None])[:, 0]  # (B, Tk, F)

    def centres(self, query: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
        """``p`` ``(B, Tq)`` of the queries ``(B, Tq, Dq)`` over the keys ``valid`` allows."""
        positions = torch.arange(1, valid.shape[1] + 1, device=valid.device)
        last = (positions * valid).amax(-1).clamp(min=1) - 1  # (B,): S - 1
        unit = torch.sigmoid(
            torch.tanh(query @ self.w_centre.to(query.dtype)) @ self.v_centre.to(query.dtype)
        )  # (B, Tq)
        return last[:, None].to(query.dtype) * unit

    def align_fast(self, query, kf, valid, state):
        qf = self.score.prepare_query(query[:, None])  # (B, 1, Tq, F)
        scores = self.score.pairwise(qf, kf[:, None])[:, 0]  # (B, Tq, Tk)
        p = self.centres(query, valid)  # (B, Tq)
        dist = torch.arange(kf.shape[1], device=kf.device, dtype=query.dtype) - p[..., None]
        inside = valid[:, None, :] & (dist.abs() <= self.radius)  # (B, Tq, Tk)
        gauss = torch.exp(-dist.square() / (2 * self.sigma**2))
        return masked_softmax(scores, inside).to(query.dtype) * gauss, None

    def align_loop(self, query, kf, valid, state):
        b, tq, tk = query.shape[0], query.shape[1], kf.shape[1]
        weights = query.new_zeros(b, tq, tk)
        for n in range(b):
            last = max([j for j in range(tk) if valid[n, j]], default=0)
            for i in range(tq):
                q = query[n, i]
                p = last * torch.sigmoid(torch.dot(self.v_centre, torch.tanh(q @ self.w_centre)))
                qf = self.score.prepare_query(q.view(1, 1, 1, -1))
                window = [j for j in range(tk) if valid[n, j] and abs(j - p.item()) <= self.radius]
                e = {
                    j: self.score.pairwise(qf, kf[n, j].view(1, 1, 1, -1)).view(()) for j in window
                }
                if not e:
                    continue
                top = max(x.item() for x in e.values())
                z = sum(torch.exp(x - top) for x in e.values())
                for j, x in e.items():
                    gauss = torch.exp(-((j - p) ** 2) / (2 * self.sigma**2))
                    weights[n, i, j] = torch.exp(x - top) / z * gauss
        return weights, None


class GMMAttention(Alignment, name="gmm"):
    """Graves's Gaussian-mixture (location-only) attention: see the module docstring.

    Args:
        query_dim, key_dim, value_dim: ``Dq``, ``Dk`` (default ``Dq``; the keys are not read,
            only counted), ``Dv`` (default ``Dk``).
        components: ``K`` Gaussians.
        impl: ``"fast"`` or ``"loop"``.

    Shape:
        query ``(B, Tq, Dq)`` or ``(B, Dq)``; key ``(B, Tk, Dk)`` or a :class:`Memory`;
        prev_state ``kappa`` ``(B, K)``; weights ``(B, Tq, Tk)`` / ``(B, Tk)``; state
        ``(B, K)``.

    Example:
        >>> attn = GMMAttention(8, components=3)
        >>> out = attn(torch.randn(2, 4, 8), torch.randn(2, 10, 8))
        >>> out.weights.shape, out.state.shape, bool((out.state > 0).all())
        (torch.Size([2, 4, 10]), torch.Size([2, 3]), True)
    """

    #: A mixture of unnormalised Gaussians (Graves 2013).
    weight_sums = "unnormalised"

    def __init__(
        self,
        query_dim: int,
        key_dim: int | None = None,
        value_dim: int | None = None,
        *,
        components: int = 5,
        impl: str = "fast",
    ):
        super().__init__(query_dim, key_dim, value_dim, impl=impl)
        self.components = check_positive_int("components", components)
        self.proj = Linear(self.query_dim, 3 * components)  # -> (a_hat, b_hat, k_hat)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, components={self.components}"

    def state_size(self, tk):
        return self.components

    def initial_state(self, key: torch.Tensor | Memory) -> torch.Tensor:
        """``kappa`` ``(B, K)``: every mean at the first key."""
        k = keys_of(key)
        return k.new_zeros(k.shape[0], self.components)

    def align_fast(self, query, kf, valid, state):
        a_hat, b_hat, k_hat = self.proj(query).chunk(3, -1)  # each (B, Tq, K)
        kappa = state[:, None, :] + k_hat.exp().cumsum(1)  # (B, Tq, K)
        u = torch.arange(kf.shape[1], device=kf.device, dtype=query.dtype)
        dist = kappa[..., None] - u  # (B, Tq, K, Tk)
        phi = torch.exp(a_hat[..., None] - b_hat.exp()[..., None] * dist.square()).sum(-2)
        return phi.masked_fill(~valid[:, None, :], 0.0), kappa[:, -1]

    def align_loop(self, query, kf, valid, state):
        b, tq, tk = query.shape[0], query.shape[1], kf.shape[1]
        weights = query.new_zeros(b, tq, tk)
        new_state = torch.zeros_like(state)
        for n in range(b):
            kappa = [state[n, k] for k in range(self.components)]
            for i in range(tq):
                params = self.proj(query[n, i])
                for k in range(self.components):
                    kappa[k] = kappa[k] + torch.exp(params[2 * self.components + k])
                for u in range(tk):
                    if valid[n, u]:
                        weights[n, i, u] = sum(
                            torch.exp(params[k])
                            * torch.exp(
                                -torch.exp(params[self.components + k]) * (kappa[k] - u) ** 2
                            )
                            for k in range(self.components)
                        )
            new_state[n] = torch.stack(kappa)
        return weights, new_state
