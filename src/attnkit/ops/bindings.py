"""The C++ kernels (``csrc/``) as Python functions: their C signatures and one checked wrapper each.

A kernel reads raw memory, so its wrapper first checks what the kernel assumes: CPU tensors of
one dtype (float32 or float64), shapes that go together, a contiguous last dimension. It raises
a ``TypeError`` or ``ValueError`` naming the argument, what was expected and what it got. Then
it allocates the outputs and calls the kernel through ctypes with data pointers, strides and
the thread count. :mod:`attnkit.ops.native` builds and loads the library.

* :func:`block_scores`, :func:`block_backward`, :func:`block_attention_backward`
  (``csrc/blocks.cpp``): a block of queries and a block of keys, for the chunked path's
  ``kernel="native"`` (:mod:`attnkit.ops.kernels`). Here ``v (H, A)`` is the additive
  score's vector.
* :func:`step_forward`, :func:`step_backward` (``csrc/step.cpp``): one query per row, a decoder
  step (:mod:`attnkit.attention.step`). Here the score's vector is ``va (H, A)`` and ``v`` the
  values.
* :func:`tanh` (``csrc/tanh.h``): the kernels' float tanh, for its accuracy test.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable

import torch

from attnkit.ops import native
from attnkit.ops.dense import linear

__all__ = [
    "SIGNATURES",
    "block_attention_backward",
    "block_backward",
    "block_scores",
    "declare",
    "location_term",
    "step_backward",
    "step_forward",
    "tanh",
]

_i64, _int, _ptr = ctypes.c_int64, ctypes.c_int, ctypes.c_void_p
# B, H, Tq, Tk, A; q and its (b, h, i) strides; k and its (b, h, j) strides; va
_BLOCK_IN = [_i64] * 5 + [_ptr, _i64, _i64, _i64, _ptr, _i64, _i64, _i64, _ptr]
# B, H, Tk, A, D; q; k and its (b, h, j) strides; va; v and its (b, h, j) strides
_STEP_IN = [_i64] * 5 + [_ptr, _ptr, _i64, _i64, _i64, _ptr, _ptr, _i64, _i64, _i64]

# ``attnkit_<name>_f32`` and ``attnkit_<name>_f64``: argument types, as in the ``extern "C"``
# declarations at the end of csrc/blocks.cpp and csrc/step.cpp.
SIGNATURES = {
    # s, threads
    "additive_scores": _BLOCK_IN + [_ptr, _int],
    # grad, dq, dk, dva, threads
    "additive_backward": _BLOCK_IN + [_ptr, _ptr, _ptr, _ptr, _int],
    # lse, dpd, mask and its (b, i, j) strides, p, dq, dk, dva, threads
    "additive_attention_backward": _BLOCK_IN
    + [_ptr, _ptr, _ptr, _i64, _i64, _i64, _ptr, _ptr, _ptr, _ptr, _int],
    # mask and its (b, j) strides, extra, out, p, threads
    "step_forward": _STEP_IN + [_ptr, _i64, _i64, _ptr, _ptr, _ptr, _int],
    # extra, p, dout, dw, dq, dk, dva, dv, accumulate, threads
    "step_backward": _STEP_IN + [_ptr] * 8 + [_int, _int],
}

_FUNCTIONS: dict[tuple[str, torch.dtype], Callable[..., None]] = {}


def declare(lib: ctypes.CDLL) -> ctypes.CDLL:
    """Give the functions of a library from :mod:`~attnkit.ops.native` their C argument
    types (ctypes then passes 64-bit pointers and integers). Returns ``lib``."""
    for name, args in SIGNATURES.items():
        for suffix in ("f32", "f64"):
            getattr(lib, f"attnkit_{name}_{suffix}").argtypes = args
    lib.attnkit_tanh_f32.argtypes = [_ptr, _ptr, _i64]
    return lib


def _function(name: str, dtype: torch.dtype, context: str = ""):
    """The kernel ``attnkit_<name>`` for ``dtype`` (float64, else float32), looked up once."""
    fn = _FUNCTIONS.get((name, dtype))
    if fn is None:
        lib = native.library()
        if lib is None:
            raise RuntimeError(f"{context}the C++ kernels are unavailable ({native.status()})")
        suffix = "f64" if dtype == torch.float64 else "f32"
        fn = _FUNCTIONS[name, dtype] = getattr(declare(lib), f"attnkit_{name}_{suffix}")
    return fn


def _ptr_of(x: torch.Tensor | None) -> int | None:
    return None if x is None else x.data_ptr()


def _strided(x: torch.Tensor) -> tuple[int, int, int, int]:
    """Pointer and the first three strides of a 4-d tensor (its last dim must be contiguous)."""
    s0, s1, s2 = x.stride()[:3]
    return x.data_ptr(), s0, s1, s2


def _rows(x: torch.Tensor) -> torch.Tensor:
    """``x`` with a contiguous last dimension (the kernels take the other strides as given)."""
    return x if x.stride(-1) == 1 else x.contiguous()


def _written_like(*xs: torch.Tensor) -> list[torch.Tensor]:
    """Contiguous outputs shaped like ``xs``, for a kernel to write."""
    return [torch.empty_like(x, memory_format=torch.contiguous_format) for x in xs]


# -- blocks (csrc/blocks.cpp) ---------------------------------------------------------------

_BLOCKS = "kernel='native': "  # what selects these kernels, at the head of their errors


def _check_block(**tensors: torch.Tensor) -> None:
    """What the block kernels read: CPU, float32 or float64 alike, ``q`` and ``k`` with a
    contiguous last dim, no empty dims, ``v`` contiguous, and the shapes that go with ``q`` and
    ``k``."""
    dtype = tensors["q"].dtype
    for name, x in tensors.items():
        if (
            x.device.type != "cpu"
            or x.dtype != dtype
            or dtype not in (torch.float32, torch.float64)
        ):
            raise ValueError(
                f"{_BLOCKS}{name} must be a CPU float32 or float64 tensor like q "
                f"({dtype}), got {x.dtype} on {x.device}"
            )
    for name in ("q", "k"):
        if tensors[name].stride(-1) != 1:
            raise ValueError(
                f"{_BLOCKS}{name} must have a contiguous last dim, got strides "
                f"{tuple(tensors[name].stride())}"
            )
    if not tensors["v"].is_contiguous():
        raise ValueError(f"{_BLOCKS}v (H, A) must be contiguous")
    q, k = tensors["q"], tensors["k"]
    if q.dim() != 4 or k.dim() != 4:
        raise ValueError(
            f"{_BLOCKS}q and k must be 4-d (B, H, T, A), got {tuple(q.shape)} and {tuple(k.shape)}"
        )
    (b, h, tq, a), tk = q.shape, k.shape[2]
    expected = {
        "k": (b, h, tk, a),
        "v": (h, a),
        "grad": (b, h, tq, tk),
        "lse": (b, h, tq),
        "dpd": (b, h, tq, tk),
    }
    for name, x in tensors.items():
        if name in expected and tuple(x.shape) != expected[name]:
            raise ValueError(
                f"{_BLOCKS}{name} must have shape {expected[name]} (from q "
                f"{tuple(q.shape)} and k), got {tuple(x.shape)}"
            )


def block_scores(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor) -> torch.Tensor:
    """``s_ij = sum_a v_a tanh(q_ia + k_ja)``: ``q (B, H, bq, A)``, ``k (B, H, bk, A)``,
    ``v (H, A)`` -> ``s (B, H, bq, bk)``."""
    fn = _function("additive_scores", q.dtype, _BLOCKS)
    _check_block(q=q, k=k, v=v)
    b, h, tq, a = q.shape
    s = torch.empty(b, h, tq, k.shape[2], dtype=q.dtype)
    fn(
        b,
        h,
        tq,
        k.shape[2],
        a,
        *_strided(q),
        *_strided(k),
        v.data_ptr(),
        s.data_ptr(),
        torch.get_num_threads(),
    )
    return s


def block_backward(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad: torch.Tensor):
    """Gradients ``(d q (B, H, bq, A), d k (B, H, bk, A), d v (H, A))`` of ``sum(grad * s)``
    for ``grad (B, H, bq, bk)``, in one pass over the pairs; pairs with ``grad == 0`` are
    skipped."""
    fn = _function("additive_backward", q.dtype, _BLOCKS)
    _check_block(q=q, k=k, v=v, grad=grad)
    grad = grad.contiguous()
    b, h, tq, a = q.shape
    dq, dk, dv = _written_like(q, k, v)
    fn(
        b,
        h,
        tq,
        k.shape[2],
        a,
        *_strided(q),
        *_strided(k),
        v.data_ptr(),
        grad.data_ptr(),
        dq.data_ptr(),
        dk.data_ptr(),
        dv.data_ptr(),
        torch.get_num_threads(),
    )
    return dq, dk, dv


def block_attention_backward(q, k, v, lse, dpd, mask=None):
    """A block's backward from the context's gradient, in one pass; see
    :func:`attnkit.ops.kernels.additive_attention_backward` for the arguments.
    Returns ``p (B, H, bq, bk)``, ``d q``, ``d k``, ``d v (H, A)``."""
    fn = _function("additive_attention_backward", q.dtype, _BLOCKS)
    _check_block(q=q, k=k, v=v, lse=lse, dpd=dpd)
    b, h, tq, a = q.shape
    tk = k.shape[2]
    lse, dpd = lse.contiguous(), dpd.contiguous()
    p = torch.empty(b, h, tq, tk, dtype=q.dtype)
    dq, dk, dv = _written_like(q, k, v)
    m_strides = (0, 0, 0)
    if mask is not None:  # broadcastable to (B, 1, bq, bk): one mask for all gets stride 0
        mask = mask.expand(b, 1, tq, tk).view(torch.uint8)
        m_strides = (mask.stride(0), mask.stride(2), mask.stride(3))
    fn(
        b,
        h,
        tq,
        tk,
        a,
        *_strided(q),
        *_strided(k),
        v.data_ptr(),
        lse.data_ptr(),
        dpd.data_ptr(),
        _ptr_of(mask),
        *m_strides,
        p.data_ptr(),
        dq.data_ptr(),
        dk.data_ptr(),
        dv.data_ptr(),
        torch.get_num_threads(),
    )
    return p, dq, dk, dv


# -- the decoder step (csrc/step.cpp) -------------------------------------------------------


def _check_step(q, kf, v, va, mask, f, lw):
    """The common case checked in one expression (this runs at every decoder step); anything
    else goes to :func:`_explain_step`, which raises naming the tensor."""
    d = q.dtype
    if (
        d in (torch.float32, torch.float64)
        and kf.dim() == 4
        and v.dim() == 4
        and kf.dtype == d
        and v.dtype == d
        and va.dtype == d
        and q.is_cpu
        and kf.is_cpu
        and v.is_cpu
        and va.is_cpu
        and q.shape == (*kf.shape[:2], 1, kf.shape[3])
        and v.shape[:3] == kf.shape[:3]
        and va.shape == (kf.shape[1], kf.shape[3])
        and (
            mask is None
            or (
                mask.dtype == torch.bool
                and mask.is_cpu
                and mask.dim() == 4
                and mask.shape[0] in (1, kf.shape[0])
                and mask.shape[1:] == (1, 1, kf.shape[2])
            )
        )
        and f is None
    ):
        return
    _explain_step(q, kf, v, va, mask, f, lw)


def _explain_step(q, kf, v, va, mask, f, lw):
    if kf.dim() != 4 or v.dim() != 4:
        raise ValueError(
            f"kf, v: expected (B, H, Tk, A) and (B, H, Tk, D), got "
            f"{tuple(kf.shape)} and {tuple(v.shape)}"
        )
    b, h, tk, a = kf.shape
    if q.dtype not in (torch.float32, torch.float64):
        raise TypeError(f"q: the C++ step takes float32 or float64, got {q.dtype}")
    want = {
        "q": (q, (b, h, 1, a)),
        "kf": (kf, None),
        "v": (v, (b, h, tk, v.shape[-1])),
        "va": (va, (h, a)),
    }
    if f is not None:
        want["f"] = (f, (b, h, tk, f.shape[-1]))
        want["lw"] = (lw, (h, f.shape[-1], a))
    for name, (x, shape) in want.items():
        if x.dtype != q.dtype or x.device.type != "cpu":
            raise TypeError(
                f"{name}: expected {q.dtype} on cpu (the query's), got {x.dtype} on {x.device}"
            )
        if shape is not None and tuple(x.shape) != shape:
            raise ValueError(f"{name}: expected shape {shape}, got {tuple(x.shape)}")
    if mask is not None and (
        mask.dtype != torch.bool
        or mask.device.type != "cpu"
        or mask.dim() != 4
        or mask.shape[0] not in (1, b)
        or tuple(mask.shape[1:]) != (1, 1, tk)
    ):
        raise ValueError(
            f"mask: expected a bool tensor ({b} or 1, 1, 1, {tk}) on cpu, got "
            f"{mask.dtype} {tuple(mask.shape)} on {mask.device}"
        )


def location_term(f: torch.Tensor, lw: torch.Tensor) -> torch.Tensor:
    """The location score's term ``f_j L``: ``f (B, H, Tk, F)``, ``lw (H, F, A)`` ->
    ``(B, H, Tk, A)`` (contiguous), one matrix product per head over all ``B * Tk`` rows (the
    broadcast ``f @ lw`` runs ``B * H`` small ones, ~1.4x slower at B=32, Tk=48, F=10,
    A=256)."""
    b, h, tk, nf = f.shape
    if h == 1:  # through linear: oneDNN on CPU float32, 3-4x faster than MKL for F = 10
        return linear(f.reshape(b * tk, nf), lw[0].t()).view(b, 1, tk, lw.shape[-1])
    rows = f.transpose(0, 1).reshape(h, b * tk, nf) @ lw  # (H, B * Tk, A)
    return rows.view(h, b, tk, lw.shape[-1]).transpose(0, 1).contiguous()


def step_forward(q, kf, va, v, mask=None, f=None, lw=None):
    """Additive attention of one query per row: scores ``va . tanh(q + k_j [+ f_j lw])``, mask,
    softmax and context in one kernel.

    Args:
        q ``(B, H, 1, A)``, kf ``(B, H, Tk, A)``, va ``(H, A)``, v ``(B, H, Tk, D)``;
        mask: bool ``(B or 1, 1, 1, Tk)`` (True = may attend) or None;
        f ``(B, H, Tk, F)`` and lw ``(H, F, A)``: the location term, or None.

    Returns:
        ``context (B, H, 1, D)`` and ``weights (B, H, 1, Tk)``.
    """
    fn = _function("step_forward", q.dtype)
    _check_step(q, kf, v, va, mask, f, lw)
    b, h, tk, a = kf.shape
    q, va, kf, v = q.contiguous(), va.contiguous(), _rows(kf), _rows(v)
    extra = None if f is None else location_term(f, lw)  # (B, H, Tk, A)
    out = q.new_empty(b, h, 1, v.shape[-1])
    p = q.new_empty(b, h, 1, tk)
    m_sb = m_sj = 0
    if mask is not None:  # (B or 1, 1, 1, Tk)
        m_sb, m_sj = (mask.stride(0) if mask.shape[0] > 1 else 0), mask.stride(3)
    fn(
        b,
        h,
        tk,
        a,
        v.shape[-1],
        q.data_ptr(),
        *_strided(kf),
        va.data_ptr(),
        *_strided(v),
        _ptr_of(mask),
        m_sb,
        m_sj,
        _ptr_of(extra),
        out.data_ptr(),
        p.data_ptr(),
        torch.get_num_threads(),
    )
    return out, p


def step_backward(q, kf, va, v, p, dout, dw=None, f=None, lw=None, *, key_sum=None, values=True):
    """Gradients of a step from those of its context ``dout (B, H, 1, D)`` and weights
    ``dw (B, H, 1, Tk)`` (or None), ``tanh`` recomputed, keys of zero weight skipped.

    ``p`` is :func:`step_forward`'s weights. Returns ``d q (B, H, 1, A)``, ``d kf``,
    ``d va`` per batch row ``(B, H, A)``, ``d v`` (None unless ``values``). With ``key_sum`` (a
    contiguous buffer shaped like ``kf``) the key gradient is added into it and returned as
    None, and the value gradient is not computed.
    """
    fn = _function("step_backward", q.dtype)
    _check_step(q, kf, v, va, None, f, lw)
    for name, x, shape in (
        ("dout", dout, (*q.shape[:3], v.shape[-1])),
        ("dw", dw, (*q.shape[:3], kf.shape[2])),
    ):
        if x is not None and (x.dtype != q.dtype or tuple(x.shape) != shape):
            raise ValueError(f"{name}: expected {q.dtype} {shape}, got {x.dtype} {tuple(x.shape)}")
    b, h, tk, a = kf.shape
    q, va, kf, v, dout = q.contiguous(), va.contiguous(), _rows(kf), _rows(v), dout.contiguous()
    dw = None if dw is None else dw.contiguous()
    extra = None if f is None else location_term(f, lw)  # (B, H, Tk, A)
    values = values and key_sum is None
    dk = kf.new_empty(b, h, tk, a) if key_sum is None else key_sum
    dv = v.new_empty(b, h, tk, v.shape[-1]) if values else None
    dq, dva = q.new_empty(b, h, 1, a), q.new_empty(b, h, a)
    fn(
        b,
        h,
        tk,
        a,
        v.shape[-1],
        q.data_ptr(),
        *_strided(kf),
        va.data_ptr(),
        *_strided(v),
        _ptr_of(extra),
        p.data_ptr(),
        dout.data_ptr(),
        _ptr_of(dw),
        dq.data_ptr(),
        dk.data_ptr(),
        dva.data_ptr(),
        _ptr_of(dv),
        int(key_sum is not None),
        torch.get_num_threads(),
    )
    return dq, (dk if key_sum is None else None), dva, dv


# -- tanh (csrc/tanh.h) ---------------------------------------------------------------------


def tanh(x: torch.Tensor, *, lib: ctypes.CDLL | None = None) -> torch.Tensor:
    """The kernels' float tanh of a float32 CPU tensor. ``lib``: a library loaded by
    :mod:`~attnkit.ops.native` (default: the one the kernels use)."""
    if x.dtype != torch.float32 or x.device.type != "cpu":
        raise TypeError(f"x: expected torch.float32 on cpu, got {x.dtype} on {x.device}")
    fn = _function("tanh", torch.float32) if lib is None else declare(lib).attnkit_tanh_f32
    x = x.contiguous()
    y = torch.empty_like(x)
    fn(x.data_ptr(), y.data_ptr(), x.numel())
    return y
