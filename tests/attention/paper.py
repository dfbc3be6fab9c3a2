"""Loop-by-loop transcriptions of the papers' equations, for one example at a time.

Deliberately naive: Python loops over queries, keys and heads, scalar softmax. They read the
parameters of an :class:`attnkit.Attention` module so tests can compare its outputs exactly.
"""

from __future__ import annotations

import math

import torch


def _score_one(score, h: int, q: torch.Tensor, k: torch.Tensor, loc: torch.Tensor | None) -> float:
    """``e = score(q, k)`` for head ``h`` from the paper's equation; ``loc`` is f_ij (F,)."""
    name = score.name
    if name == "dot":
        return float(sum(q[a] * k[a] for a in range(len(q))))
    if name == "scaled_dot":
        return float(sum(q[a] * k[a] for a in range(len(q)))) / math.sqrt(len(k))
    if name == "general":
        w = score.weight[h]
        return float(q @ w @ k)
    if name == "cosine":
        g = math.exp(min(float(score.log_scale[h]), math.log(100.0)))
        return g * float(q @ k) / (float(q.norm()) * float(k.norm()))
    if name in ("additive", "location"):
        pre = q @ score.w_query[h] + k @ score.w_key[h]
        if name == "location":
            pre = pre + loc @ score.w_loc[h] + score.bias[h]
        return float(score.v[h] @ torch.tanh(pre))
    raise AssertionError(name)


def _location_features(score, prev_row: torch.Tensor, length: int) -> torch.Tensor:
    """f_j = sum_m filter[c, m] * alpha_{j + m - K//2}, zero outside the sequence's ``length``
    frames (the keys past it are padding), shape (Tk, F)."""
    filt = score.conv.weight[:, 0, :]  # (F, K)
    n_f, kernel = filt.shape
    tk = len(prev_row)
    f = torch.zeros(tk, n_f, dtype=prev_row.dtype)
    for j in range(tk):
        for c in range(n_f):
            for m in range(kernel):
                src = j + m - kernel // 2
                if 0 <= src < length:
                    f[j, c] += filt[c, m] * prev_row[src]
    return f


@torch.no_grad()
def paper_attention(attn, query, key, value, allowed, prev=None, length=None):
    """One example. query (Tq, Dq), key (Tk, Dk), value (Tk, Dv), allowed (Tq, Tk) bool,
    prev (H, Tq, Tk) or None, length: the example's keys before its padding (default Tk).
    Returns context (Tq, Dv) and weights (H, Tq, Tk)."""
    tq, tk = query.shape[0], key.shape[0]
    length = tk if length is None else length
    heads = attn.heads
    if heads > 1:
        d = attn.head_dim
        qs = [(attn.q_proj(query))[:, h * d : (h + 1) * d] for h in range(heads)]
        ks = [(attn.k_proj(key))[:, h * d : (h + 1) * d] for h in range(heads)]
        vs = [(attn.v_proj(value))[:, h * d : (h + 1) * d] for h in range(heads)]
    else:
        qs, ks, vs = [query], [key], [value]
    weights = torch.zeros(heads, tq, tk, dtype=query.dtype)
    outs = []
    for h in range(heads):
        ctx_h = torch.zeros(tq, vs[h].shape[1], dtype=query.dtype)
        for i in range(tq):
            loc = _location_features(attn.score, prev[h, i], length) if prev is not None else None
            e = {
                j: _score_one(attn.score, h, qs[h][i], ks[h][j], None if loc is None else loc[j])
                for j in range(tk)
                if allowed[i, j]
            }
            if not e:
                continue
            top = max(e.values())
            z = sum(math.exp(x - top) for x in e.values())
            for j, x in e.items():
                weights[h, i, j] = math.exp(x - top) / z
                ctx_h[i] += weights[h, i, j] * vs[h][j]
        outs.append(ctx_h)
    context = attn.out_proj(torch.cat(outs, dim=-1)) if heads > 1 else outs[0]
    return context, weights
