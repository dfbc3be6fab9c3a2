"""Monotonic attention (Raffel et al. 2017) and monotonic chunkwise attention (MoChA, Chiu &
Raffel 2018).

At output step ``i`` a monotonic reader scans the keys left to right from where step ``i - 1``
stopped and stops at key ``j`` with probability ``p_ij = sigmoid(e_ij)``, with the energy

    e_ij = g * v^T / ||v|| tanh(W q_i + U k_j + b) + r

(``g`` starts at ``1 / sqrt(A)``, ``r`` at ``r_init = -4`` so that early on it rarely stops at
once). **Training** uses the expected alignment (the probability of stopping at ``j``)

    alpha_ij = p_ij * sum_{k <= j} alpha_{i-1,k} * prod_{k <= l < j} (1 - p_il)

computed for every key at once in log space: ``log(1 - p) = logsigmoid(-e)`` is exact where
``p`` rounds to 1, and the sum of products is a ``logcumsumexp`` of the exclusive cumulative
sums of ``log(1 - p)`` (in float64: the cumulative sums grow with ``Tk``), so no step divides
by a cumulative product that has underflowed to 0 (the NaN of the paper's ``cumprod`` form).
In training, Gaussian noise of std ``noise`` is added to ``e`` so the model learns
probabilities near 0 and 1. **Inference** (``inference="hard"``, in eval mode) stops at the
first key from the previous stop on with ``e_ij >= 0`` (``p >= 1/2``), computing energies only
from there, ``block`` keys at a time: a whole output reads each key a bounded number of
times (linear time). If no key stops it, the step attends to nothing (zero context) and so do
all later steps. The state of both is ``alpha_i`` ``(B, Tk)``, starting as ``(1, 0, ..., 0)``.

MoChA then attends softly within the ``chunk`` keys ending at the stop, with a second energy
``u_ij = v_c^T tanh(W_c q_i + U_c k_j + b_c)``; in training with the expected weights

    beta_ij = sum_{k=j}^{j+w-1} alpha_ik exp(u_ij) / sum_{l=k-w+1}^{k} exp(u_il)

(both sums windowed log-sum-exps), at inference a softmax of ``u`` over the keys
``t_i - w + 1 .. t_i`` of the stop ``t_i``. Masked keys are never stopped at nor attended.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.attention.alignment import Alignment, keys_of
from attnkit.attention.core import Memory
from attnkit.checks import check_non_negative, check_positive_int

__all__ = ["MoChA", "MonotonicAttention", "chunkwise_weights", "expected_alignment", "hard_stops"]

INFERENCE = ("hard", "soft")
SCAN_DTYPE = torch.float64  # the cumulative sums of log(1 - p) and their log-sum-exp


def _log(x: torch.Tensor) -> torch.Tensor:
    """``log x`` with ``finfo.min`` (not -inf) where ``x == 0``, and zero gradient there."""
    tiny = torch.finfo(x.dtype).tiny
    return torch.where(x > 0, x.clamp_min(tiny).log(), torch.finfo(x.dtype).min)


def expected_alignment(
    energy: torch.Tensor, prev: torch.Tensor, valid: torch.Tensor
) -> torch.Tensor:
    """Raffel et al.'s expected monotonic alignment of one output step, in log space.

    Args:
        energy: ``(B, Tk)`` energies ``e_ij`` (``p = sigmoid(e)``).
        prev: ``(B, Tk)`` the previous step's alignment ``alpha_{i-1}`` (non-negative).
        valid: ``(B, Tk)`` bool, **True = may attend**; masked keys have ``p = 0``.

    Returns:
        ``alpha_i`` ``(B, Tk)`` in ``energy``'s dtype: zero on masked keys; rows sum to at most
        the previous row's sum (what is left is the chance of reading past the end).
    """
    if energy.shape[-1] == 0:
        return energy.clone()
    e = energy.to(SCAN_DTYPE)
    log_p = F.logsigmoid(e)
    log_stay = F.logsigmoid(-e).masked_fill(~valid, 0.0)  # log(1 - p), exact where p ~ 1
    before = log_stay.cumsum(-1)
    before = torch.cat([torch.zeros_like(before[..., :1]), before[..., :-1]], -1)  # sum_{l<j}
    reach = torch.logcumsumexp(_log(prev.to(SCAN_DTYPE)) - before, -1)
    alpha = torch.where(valid, (log_p + before + reach).exp(), 0.0)
    return alpha.to(energy.dtype)


def hard_stops(
    energy_at, start: torch.Tensor, active: torch.Tensor, valid: torch.Tensor, block: int
) -> torch.Tensor:
    """The first allowed key ``j >= start`` with energy ``>= 0`` of each row, or -1.

    Args:
        energy_at: ``energy_at(rows (R,), idx (R, W)) -> (R, W)``, the energies of the keys
            ``idx`` of rows ``rows``; only called on keys from ``start`` to the stop.
        start: ``(B,)`` where each row's scan starts; active: ``(B,)`` bool, rows that scan.
        valid: ``(B, Tk)`` bool, True = may attend.
        block: keys scored per row per pass.

    Returns:
        ``(B,)`` long: the stop of each row, -1 where none (or the row is not active).
    """
    b, tk = valid.shape
    stops = torch.full((b,), -1, dtype=torch.long, device=valid.device)
    cur = start.clone()
    searching = active & (cur < tk)
    offsets = torch.arange(block, device=valid.device)
    while bool(searching.any()):
        rows = searching.nonzero()[:, 0]  # (R,)
        idx = cur[rows, None] + offsets  # (R, W)
        inside = idx < tk
        idx = idx.clamp(max=tk - 1)
        stop = (energy_at(rows, idx) >= 0) & valid[rows].gather(1, idx) & inside  # (R, W)
        hit = stop.any(-1)
        first = stop.to(torch.int8).argmax(-1)  # the first True (0 where none)
        stops[rows[hit]] = idx[hit, first[hit]]
        cur = cur + block
        searching[rows] = ~hit & (cur[rows] < tk)
    return stops


def chunkwise_weights(
    alpha: torch.Tensor, energy: torch.Tensor, valid: torch.Tensor, chunk: int
) -> torch.Tensor:
    """MoChA's expected weights ``beta`` from the monotonic alignment, in log space.

    Args:
        alpha: ``(..., Tk)`` monotonic alignments; energy: ``(..., Tk)`` chunk energies
            ``u``; valid: bool broadcastable to them, **True = may attend**; chunk: ``w``.

    Returns:
        ``beta`` ``(..., Tk)``: ``sum_{k=j}^{j+w-1} alpha_k exp(u_j) / sum_{l=k-w+1}^{k}
        exp(u_l)`` over allowed keys, zero on masked ones.
    """
    if energy.shape[-1] == 0:
        return energy.clone()
    low = torch.finfo(SCAN_DTYPE).min
    u = energy.to(SCAN_DTYPE).masked_fill(~valid, low)
    log_norm = F.pad(u, (chunk - 1, 0), value=low).unfold(-1, chunk, 1).logsumexp(-1)  # (.., Tk)
    a = alpha.to(SCAN_DTYPE)
    ratio = torch.where(a > 0, _log(a) - log_norm, low)  # alpha_k / sum of its chunk
    gathered = F.pad(ratio, (0, chunk - 1), value=low).unfold(-1, chunk, 1).logsumexp(-1)
    beta = torch.where(valid, (u + gathered).exp(), 0.0)
    return beta.to(energy.dtype)


class Energy(nn.Module):
    """``e_ij = g v^T/||v|| tanh(W q_i + U k_j + b) + r`` (``normalised``), else
    ``v^T tanh(W q_i + U k_j + b)``.

    Shape: ``prepare_query`` ``(B, Tq, Dq) -> (B, Tq, A)``; ``prepare_key``
    ``(B, Tk, Dk) -> (B, Tk, A)``; ``pairwise`` -> ``(B, Tq, Tk)``.
    """

    def __init__(
        self, query_dim: int, key_dim: int, attn_dim: int, *, normalised: bool, r_init: float = 0.0
    ):
        super().__init__()
        self.w_query = nn.Parameter(_uniform((query_dim, attn_dim), query_dim))  # W
        self.w_key = nn.Parameter(_uniform((key_dim, attn_dim), key_dim))  # U
        self.bias = nn.Parameter(torch.zeros(attn_dim))  # b
        self.v = nn.Parameter(_uniform((attn_dim,), attn_dim))
        self.normalised = normalised
        if normalised:
            self.gain = nn.Parameter(torch.tensor(attn_dim**-0.5))  # g
            self.offset = nn.Parameter(torch.tensor(float(r_init)))  # r

    def prepare_query(self, q: torch.Tensor) -> torch.Tensor:
        return q @ self.w_query.to(q.dtype) + self.bias.to(q.dtype)  # (B, Tq, A)

    def prepare_key(self, k: torch.Tensor) -> torch.Tensor:
        return k @ self.w_key.to(k.dtype)  # (B, Tk, A)

    def direction(self, dtype: torch.dtype) -> torch.Tensor:
        """``g v / ||v||`` (normalised) or ``v``, ``(A,)``."""
        v = self.v.to(dtype)
        return self.gain.to(dtype) * v / v.norm() if self.normalised else v

    def finish(self, e: torch.Tensor) -> torch.Tensor:
        return e + self.offset.to(e.dtype) if self.normalised else e

    def pairwise(self, qf: torch.Tensor, kf: torch.Tensor) -> torch.Tensor:
        """All pairs: ``qf (B, Tq, A)``, ``kf (B, Tk, A)`` -> ``(B, Tq, Tk)``."""
        pre = torch.tanh(qf[:, :, None, :] + kf[:, None, :, :])  # (B, Tq, Tk, A)
        return self.finish(pre @ self.direction(qf.dtype))

    def at(self, qf: torch.Tensor, kf: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        """Energies of one query per row ``qf (R, A)`` with the keys ``idx (R, W)`` of
        ``kf (R, Tk, A)``: ``(R, W)``."""
        keys = kf.gather(1, idx[..., None].expand(-1, -1, kf.shape[-1]))  # (R, W, A)
        return self.finish(torch.tanh(qf[:, None, :] + keys) @ self.direction(qf.dtype))

    def one(self, q: torch.Tensor, kf: torch.Tensor) -> torch.Tensor:
        """The paper's equation for one query ``(Dq,)`` and one prepared key ``U k_j``
        ``(A,)``: a scalar."""
        pre = q @ self.w_query + self.bias + kf
        if not self.normalised:
            return torch.dot(self.v, torch.tanh(pre))
        return self.gain * torch.dot(self.v / self.v.norm(), torch.tanh(pre)) + self.offset


def _uniform(shape: tuple[int, ...], fan_in: int) -> torch.Tensor:
    bound = 1.0 / math.sqrt(fan_in)
    return torch.empty(shape).uniform_(-bound, bound)


class MonotonicAttention(Alignment, name="monotonic"):
    """Monotonic attention (Raffel et al. 2017): see the module docstring.

    Args:
        query_dim, key_dim, value_dim: ``Dq``, ``Dk`` (default ``Dq``), ``Dv`` (default
            ``Dk``).
        attn_dim: ``A`` of the energy (default ``Dk``).
        noise: std of the Gaussian noise added to the energies in training (0: none).
        r_init: the energy's initial offset ``r``.
        inference: ``"hard"`` (default: a discrete stop, linear time) or ``"soft"`` (the
            expected alignment, as in training) in eval mode; training is always soft.
        block: keys scored per pass of the hard scan.
        impl: ``"fast"`` or ``"loop"`` (the equations key by key).

    Shape:
        - query ``(B, Tq, Dq)`` or ``(B, Dq)``; key ``(B, Tk, Dk)`` or a :class:`Memory`;
          prev_state ``(B, Tk)`` (``alpha`` of the previous step).
        - context ``(B, Tq, Dv)`` / ``(B, Dv)``; weights ``(B, Tq, Tk)`` / ``(B, Tk)``;
          state ``(B, Tk)``.

    Example:
        >>> attn = MonotonicAttention(8, 6, noise=0.0).eval()
        >>> memory = attn.prepare(torch.randn(2, 7, 6))
        >>> state = attn.initial_state(memory)
        >>> out = attn(torch.randn(2, 8), memory, prev_state=state)
        >>> out.weights.sum(-1).tolist() in ([1.0, 1.0], [1.0, 0.0], [0.0, 1.0], [0.0, 0.0])
        True
    """

    #: Each step's alpha sums to what the previous one left minus the chance of reading past
    #: the last key; MoChA's beta spreads each alpha_ij over its chunk, keeping its sum. A
    #: hard stop sums to 1, and to 0 for good once no key stops it.
    weight_sums = "non_increasing"

    def __init__(
        self,
        query_dim: int,
        key_dim: int | None = None,
        value_dim: int | None = None,
        *,
        attn_dim: int | None = None,
        noise: float = 1.0,
        r_init: float = -4.0,
        inference: str = "hard",
        block: int = 8,
        impl: str = "fast",
    ):
        super().__init__(query_dim, key_dim, value_dim, impl=impl)
        a = self.key_dim if attn_dim is None else check_positive_int("attn_dim", attn_dim)
        noise = check_non_negative("noise", noise)
        if inference not in INFERENCE:
            raise ValueError(
                f"inference: expected one of {', '.join(INFERENCE)}, got {inference!r}"
            )
        self.noise, self.inference = float(noise), inference
        self.block = check_positive_int("block", block)
        self.energy = Energy(self.query_dim, self.key_dim, a, normalised=True, r_init=r_init)

    @property
    def streaming(self) -> bool:
        """True with ``inference="hard"``: a step scans from the previous stop and reads no
        key after its own, so it is decided as soon as the keys up to its stop are there. A
        step that finds no stop among the keys of a memory still growing (:meth:`extend`) is
        run again once more keys have come."""
        return self.inference == "hard"

    @property
    def hard(self) -> bool:
        """True when calls stop discretely: eval mode with ``inference="hard"``."""
        return not self.training and self.inference == "hard"

    def prepare_key(self, key):
        return self.energy.prepare_key(key)  # (B, Tk, A)

    def state_size(self, tk):
        return tk

    def initial_state(self, key: torch.Tensor | Memory) -> torch.Tensor:
        """``(B, Tk)``: all mass on the first key (the scan starts there)."""
        state = keys_of(key).new_zeros(keys_of(key).shape[:2])
        state[:, :1] = 1.0
        return state

    # ------------------------------------------------------------------ the fast path

    def monotonic_energies(self, query: torch.Tensor, kf: torch.Tensor) -> torch.Tensor:
        """``e`` ``(B, Tq, Tk)``, with the training noise."""
        e = self.energy.pairwise(self.energy.prepare_query(query), kf[..., : self.mono_dim])
        if self.training and self.noise > 0:
            e = e + self.noise * torch.randn_like(e)
        return e

    @property
    def mono_dim(self) -> int:
        return self.energy.w_key.shape[1]

    def align_fast(self, query, kf, valid, state):
        if self.hard:
            return self.align_hard(query, kf, valid, state)
        e = self.monotonic_energies(query, kf)  # (B, Tq, Tk)
        alphas = []
        for i in range(query.shape[1]):  # each step starts where the previous one left off
            state = expected_alignment(e[:, i], state, valid)
            alphas.append(state)
        alpha = torch.stack(alphas, 1)  # (B, Tq, Tk)
        return self.soft_weights(alpha, query, kf, valid), state

    def soft_weights(self, alpha, query, kf, valid):
        """The weights of the context in training: ``alpha`` itself."""
        return alpha

    def align_hard(self, query, kf, valid, state):
        qf = self.energy.prepare_query(query)  # (B, Tq, A)
        mono = kf[..., : self.mono_dim]
        weights = []
        for i in range(query.shape[1]):
            q = qf[:, i]  # (B, A)
            stops = hard_stops(
                # called within this step only; q bound explicitly all the same
                lambda rows, idx, q=q: self.energy.at(q[rows], mono[rows], idx),
                state.argmax(-1),
                (state > 0).any(-1),
                valid,
                self.block,
            )
            found = stops >= 0
            state = torch.zeros_like(state)
            state[found, stops[found]] = 1.0
            weights.append(self.hard_weights(state, stops, query[:, i], kf, valid))
        return torch.stack(weights, 1), state  # (B, Tq, Tk), (B, Tk)

    def hard_weights(self, alpha, stops, query, kf, valid):
        """The weights of the context at inference: the one-hot stop itself."""
        return alpha

    # ------------------------------------------------------------------ the loop reference

    def align_loop(self, query, kf, valid, state):
        """The equations for one example, output step and key at a time."""
        b, tq, tk = query.shape[0], query.shape[1], kf.shape[1]
        zero = query.new_zeros(())
        weights = query.new_zeros(b, tq, tk)
        new_state = torch.zeros_like(state)
        for n in range(b):
            prev = [state[n, j] for j in range(tk)]
            for i in range(tq):
                e = [self.energy.one(query[n, i], kf[n, j, : self.mono_dim]) for j in range(tk)]
                if self.training and self.noise > 0:
                    e = [x + self.noise * torch.randn((), dtype=x.dtype) for x in e]
                loop = self._hard_loop if self.hard else self._soft_loop
                alpha = loop(e, prev, valid[n], zero)
                weights[n, i] = self._weights_loop(alpha, query[n, i], kf[n], valid[n], zero)
                prev = alpha
            new_state[n] = torch.stack(prev)
        return weights, new_state

    @staticmethod
    def _soft_loop(e, prev, valid, zero):
        """``q_j = (1 - p_{j-1}) q_{j-1} + alpha_{i-1,j}``, ``alpha_ij = p_ij q_j``."""
        alpha, q, p_before = [], zero, zero
        for j, e_j in enumerate(e):
            p = torch.sigmoid(e_j) if valid[j] else zero
            q = (1 - p_before) * q + prev[j]
            alpha.append(p * q)
            p_before = p
        return alpha

    @staticmethod
    def _hard_loop(e, prev, valid, zero):
        """Stop at the first allowed key from the previous stop on with ``e >= 0``."""
        tk = len(e)
        alpha = [zero] * tk
        if not any(x.item() > 0 for x in prev):
            return alpha  # attention has stopped for good
        start = max(range(tk), key=lambda j: prev[j].item())
        for j in range(start, tk):
            if valid[j] and e[j].item() >= 0:
                alpha[j] = zero + 1
                break
        return alpha

    def _weights_loop(self, alpha, query, kf, valid, zero):
        return torch.stack(alpha)


class MoChA(MonotonicAttention, name="mocha"):
    """Monotonic chunkwise attention (Chiu & Raffel 2018): see the module docstring.

    Args:
        chunk: ``w``, the keys ending at the monotonic stop that are attended (default 4).
        chunk_dim: ``A`` of the chunk energy (default: ``attn_dim``).

    Other arguments, shapes and state as :class:`MonotonicAttention`; the weights are ``beta``
    (the chunk's), the state is still ``alpha`` (the monotonic stops).

    Example:
        >>> attn = MoChA(8, 6, chunk=3, noise=0.0)
        >>> out = attn(torch.randn(2, 4, 8), torch.randn(2, 9, 6), key_lengths=torch.tensor([9, 5]))
        >>> out.weights.shape, out.state.shape, bool(out.weights[1, :, 5:].eq(0).all())
        (torch.Size([2, 4, 9]), torch.Size([2, 9]), True)
    """

    def __init__(
        self,
        query_dim: int,
        key_dim: int | None = None,
        value_dim: int | None = None,
        *,
        chunk: int = 4,
        chunk_dim: int | None = None,
        attn_dim: int | None = None,
        noise: float = 1.0,
        r_init: float = -4.0,
        inference: str = "hard",
        block: int = 8,
        impl: str = "fast",
    ):
        super().__init__(
            query_dim,
            key_dim,
            value_dim,
            attn_dim=attn_dim,
            noise=noise,
            r_init=r_init,
            inference=inference,
            block=block,
            impl=impl,
        )
        self.chunk = check_positive_int("chunk", chunk)
        a = self.mono_dim if chunk_dim is None else check_positive_int("chunk_dim", chunk_dim)
        self.chunk_energy = Energy(self.query_dim, self.key_dim, a, normalised=False)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, chunk={self.chunk}"

    def prepare_key(self, key):
        # (B, Tk, A + A_c): the monotonic energy's keys, then the chunk energy's
        return torch.cat([self.energy.prepare_key(key), self.chunk_energy.prepare_key(key)], -1)

    def soft_weights(self, alpha, query, kf, valid):
        u = self.chunk_energy.pairwise(
            self.chunk_energy.prepare_query(query), kf[..., self.mono_dim :]
        )  # (B, Tq, Tk)
        return chunkwise_weights(alpha, u, valid[:, None, :], self.chunk)

    def hard_weights(self, alpha, stops, query, kf, valid):
        """Softmax of the chunk energies over the allowed keys ``t - w + 1 .. t``."""
        found = stops >= 0
        idx = stops.clamp(min=0)[:, None] - torch.arange(
            self.chunk - 1, -1, -1, device=stops.device
        )  # (B, w)
        inside = (idx >= 0) & found[:, None]
        idx = idx.clamp(min=0)
        inside = inside & valid.gather(1, idx)
        cq = self.chunk_energy.prepare_query(query[:, None])[:, 0]  # (B, A_c)
        u = self.chunk_energy.at(cq, kf[..., self.mono_dim :], idx)  # (B, w)
        u = u.masked_fill(~inside, torch.finfo(u.dtype).min)
        beta = torch.softmax(u, -1).masked_fill(~inside, 0.0)
        return torch.zeros_like(alpha).scatter_add(1, idx, beta)  # (B, Tk)

    def _weights_loop(self, alpha, query, kf, valid, zero):
        """``beta_j`` of one step from its monotonic ``alpha``, key by key."""
        tk, w = len(alpha), self.chunk
        u = [self.chunk_energy.one(query, kf[j, self.mono_dim :]) for j in range(tk)]
        beta = [zero] * tk
        if self.hard:
            stops = [t for t in range(tk) if alpha[t].item() > 0]
            if stops:
                t = stops[0]
                chunk = [j for j in range(max(0, t - w + 1), t + 1) if valid[j]]
                z = sum(torch.exp(u[j]) for j in chunk)
                for j in chunk:
                    beta[j] = torch.exp(u[j]) / z
            return torch.stack(beta)
        for j in range(tk):
            if not valid[j]:
                continue
            for k in range(j, min(j + w, tk)):
                if valid[k]:
                    z = sum(torch.exp(u[m]) for m in range(max(0, k - w + 1), k + 1) if valid[m])
                    beta[j] = beta[j] + alpha[k] * torch.exp(u[j]) / z
        return torch.stack(beta)
