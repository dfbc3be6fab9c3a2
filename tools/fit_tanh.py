"""Fit the rational tanh of ``src/attnkit/ops/csrc/tanh.h``: ``tanh(x) ~ x P(x^2) / Q(x^2)``
on ``[0, 9]``.

Minimises the largest *relative* error (so tiny arguments stay accurate: gradient sums add many
of them) by Loeb's iteration: each round solves the linearised minimax problem
``min E  s.t.  |P(s) - f(s) Q(s)| <= E f(s) Q_prev(s)`` as a linear programme on a dense grid,
with ``f(s) = tanh(sqrt s) / sqrt s`` and ``Q(0) = 1``, in a Chebyshev basis for conditioning.
Then it prints the coefficients (monomials in ``s = x^2``, for Horner's rule) and the error of
evaluating them in float32 with fused multiply-adds, as the kernels do.

Run by hand (``python tools/fit_tanh.py``), never at build time: it needs mpmath, which attnkit
does not depend on.
"""

from __future__ import annotations

import mpmath
import numpy as np
from numpy.polynomial import chebyshev, polynomial
from scipy.optimize import linprog

CLAMP = 9.0  # 1 - tanh(9) < 4e-8: beyond it float32 tanh is 1 (to half an ulp)
DEG_P, DEG_Q = 6, 3


def fit(deg_p: int, deg_q: int, clamp: float, points: int = 4000, rounds: int = 30):
    """Monomial coefficients ``(P, Q)`` in ``s = x^2`` with ``Q[0] = 1``, and the relative error."""
    span = clamp * clamp
    t = (1 - np.cos(np.linspace(0, np.pi, points))) / 2  # dense near both ends
    s = t * span
    f = np.array([float(mpmath.tanh(mpmath.sqrt(v)) / mpmath.sqrt(v)) if v > 0 else 1.0 for v in s])
    vp, vq = chebyshev.chebvander(2 * t - 1, deg_p), chebyshev.chebvander(2 * t - 1, deg_q)
    n_var = deg_p + deg_q + 3  # P, Q, E
    cost = np.zeros(n_var)
    cost[-1] = 1
    q_at_0 = np.concatenate([np.zeros(deg_p + 1), chebyshev.chebvander([-1.0], deg_q)[0], [0]])
    q_prev = np.ones(points)
    for _ in range(rounds):
        w = 1 / (f * q_prev)
        rows = np.hstack([vp * w[:, None], -vq * (f * w)[:, None]])
        ones = np.ones((points, 1))
        res = linprog(
            cost,
            A_ub=np.vstack([np.hstack([rows, -ones]), np.hstack([-rows, -ones])]),
            b_ub=np.zeros(2 * points),
            A_eq=q_at_0[None],
            b_eq=[1.0],
            bounds=[(None, None)] * n_var,
            method="highs",
        )
        p, q = res.x[: deg_p + 1], res.x[deg_p + 1 : -1]
        q_prev = vq @ q
        err = float(np.max(np.abs((vp @ p) / (f * q_prev) - 1)))
    p_mono, q_mono = _monomials(p, span), _monomials(q, span)
    return p_mono / q_mono[0], q_mono / q_mono[0], err


def _monomials(cheb: np.ndarray, span: float) -> np.ndarray:
    """Chebyshev coefficients in ``u = 2 s / span - 1`` -> monomial coefficients in ``s``."""
    in_u = chebyshev.cheb2poly(cheb)
    out, power = np.zeros(len(in_u)), np.array([1.0])
    for a in in_u:
        out[: len(power)] += a * power
        power = polynomial.polymul(power, [-1.0, 2 / span])
    return out


def float32_error(p: np.ndarray, q: np.ndarray, clamp: float) -> tuple[float, float]:
    """Largest absolute and relative error of the float32 evaluation (FMA Horner, clamp, divide)."""
    x = np.concatenate([np.linspace(0, 12, 6_000_001), np.logspace(-30, 0, 100_000)])
    x = x.astype(np.float32)
    xc = np.minimum(x, np.float32(clamp))
    s = xc * xc

    def horner(coef):
        r = np.full_like(s, np.float32(coef[-1]))
        for a in coef[-2::-1]:  # fma: one rounding per step
            r = (r.astype(np.float64) * s + np.float64(np.float32(a))).astype(np.float32)
        return r

    y = (xc * horner(p)) / horner(q)
    ref = np.tanh(x.astype(np.float64))
    err = np.abs(y - ref)
    return float(err.max()), float((err[x > 0] / ref[x > 0]).max())


def main() -> None:
    p, q, err = fit(DEG_P, DEG_Q, CLAMP)
    print(f"degrees {DEG_P}/{DEG_Q} on [0, {CLAMP}]: relative error of the fit {err:.3g}")
    print("P:", ", ".join(f"{v:.9e}f" for v in p))
    print("Q:", ", ".join(f"{v:.9e}f" for v in q))
    abs_err, rel_err = float32_error(p, q, CLAMP)
    print(f"float32 evaluation: max abs error {abs_err:.3g}, max rel error {rel_err:.3g}")


if __name__ == "__main__":
    main()
