"""``attnkit plan``: the peak memory (and time) of an attention call on every path, before
running it, and with ``--memory-limit`` the largest batch or window that fits
(:mod:`attnkit.attention.planner`)."""

from __future__ import annotations

import argparse
import re
from dataclasses import replace

import torch

from attnkit.attention import SCORES, Attention, planner
from attnkit.attention.dispatch import IMPLS, Plan
from attnkit.cli import argtypes, common

DTYPES = {
    "float32": torch.float32,
    "float64": torch.float64,
    "float16": torch.float16,
    "bfloat16": torch.bfloat16,
}
_UNITS = {
    "": 1,
    "b": 1,
    "kb": 10**3,
    "mb": 10**6,
    "gb": 10**9,
    "tb": 10**12,
    "k": 2**10,
    "m": 2**20,
    "g": 2**30,
    "t": 2**40,
    "kib": 2**10,
    "mib": 2**20,
    "gib": 2**30,
    "tib": 2**40,
}


def memory_size(text: str) -> int:
    """An argparse type: bytes from ``8GB`` (10^9), ``8GiB`` or ``8G`` (2^30), ``512MB``,
    ``1.5e9``..."""
    match = re.fullmatch(r"\s*([0-9]*\.?[0-9]+(?:e[0-9]+)?)\s*([a-z]*)\s*", text.lower())
    if match is None or match[2] not in _UNITS or float(match[1]) <= 0:
        raise ValueError(text)
    return int(float(match[1]) * _UNITS[match[2]])


memory_size.__name__ = "memory size (e.g. 8GB, 8GiB, 512MB)"


def window_arg(text: str) -> tuple[int, int]:
    """An argparse type: ``W`` (W keys each side) or ``L,R``."""
    parts = [int(x) for x in text.split(",")]
    if len(parts) == 1:
        parts *= 2
    if len(parts) != 2 or min(parts) < 0:
        raise ValueError(text)
    return parts[0], parts[1]


window_arg.__name__ = "window (W or L,R, keys each side)"


def add_parser(sub: common.SubParsers) -> None:
    p = sub.add_parser(
        "plan",
        help="predict an attention call's peak memory and time on every path",
        description="Predict the peak extra memory of one attention call (forward, and "
        "forward + backward) on every path, and the path auto takes, from the tensors each "
        "path allocates: nothing is run unless --time is given. With --memory-limit, the "
        "largest batch (or else window) that fits.",
    )
    p.add_argument("--score", choices=SCORES, default="scaled_dot")
    p.add_argument("--batch", type=argtypes.positive_int, default=1, help="B (default 1)")
    p.add_argument("--tq", type=argtypes.positive_int, required=True, help="queries per example")
    p.add_argument("--tk", type=argtypes.positive_int, help="keys per example (default --tq)")
    p.add_argument("--dim", type=argtypes.positive_int, required=True, help="query features Dq")
    p.add_argument("--key-dim", type=argtypes.positive_int, help="Dk (default --dim)")
    p.add_argument("--value-dim", type=argtypes.positive_int, help="Dv (default Dk)")
    p.add_argument(
        "--attn-dim",
        type=argtypes.positive_int,
        help="A of the additive and location scores (default: the key features)",
    )
    p.add_argument("--heads", type=argtypes.positive_int, default=1)
    p.add_argument(
        "--head-dim", type=argtypes.positive_int, help="features per head (default Dq / heads)"
    )
    p.add_argument("--window", type=window_arg, help="local attention: W or L,R keys each side")
    p.add_argument("--causal", action="store_true")
    p.add_argument(
        "--dropout",
        type=argtypes.proportion,
        default=0.0,
        help="dropout on the weights, as in training",
    )
    p.add_argument(
        "--impl",
        choices=IMPLS,
        default="auto",
        help="the module's impl: the path whose fit --memory-limit reports",
    )
    p.add_argument("--dtype", choices=tuple(DTYPES), default="float32")
    p.add_argument(
        "--device",
        choices=("cpu", "cuda"),
        default="cpu",
        dest="target",
        help="the device to plan for (default cpu; --time runs there)",
    )
    p.add_argument(
        "--key-padding", action="store_true", help="the call passes key_lengths or key_mask"
    )
    p.add_argument("--weights", action="store_true", help="the call asks for the weights")
    p.add_argument(
        "--one-step",
        action="store_true",
        help="one query per row, shape (B, Dq): a decoder step (Tq = 1)",
    )
    p.add_argument(
        "--self-attention",
        action="store_true",
        help="query, key and value are one tensor (Tk = Tq)",
    )
    p.add_argument(
        "--memory-limit",
        type=memory_size,
        metavar="SIZE",
        help="a budget for the inputs, parameters and the call: the largest batch "
        "that fits, or when none does, the largest window",
    )
    p.add_argument(
        "--forward-only",
        action="store_true",
        help="fit --memory-limit for inference (forward under no_grad)",
    )
    p.add_argument(
        "--time",
        action="store_true",
        help="also predict each path's time: runs it on random inputs of growing "
        "size until a run takes 0.2 s, and scales by the work",
    )
    p.set_defaults(run=run)


def _module(args: argparse.Namespace) -> Attention:
    """The module the call is planned for (its arguments' errors name the option)."""
    options = {
        "key_dim": "--key-dim",
        "value_dim": "--value-dim",
        "attn_dim": "--attn-dim",
        "heads": "--heads",
        "head_dim": "--head-dim",
    }
    try:
        return Attention(
            args.dim,
            args.key_dim,
            args.value_dim,
            score=args.score,
            attn_dim=args.attn_dim,
            heads=args.heads,
            head_dim=args.head_dim,
            window=args.window,
            causal=args.causal,
            dropout=args.dropout,
            impl=args.impl,
        ).to(DTYPES[args.dtype])
    except ValueError as exc:
        name, _, rest = str(exc).partition(": ")
        raise ValueError(f"{options.get(name, '--' + name.replace('_', '-'))}: {rest}") from exc


def _shape(args: argparse.Namespace) -> planner.CallShape:
    tk = args.tq if args.self_attention else (args.tk or args.tq)
    if args.self_attention and args.tk not in (None, args.tq):
        raise ValueError(
            f"--tk: --self-attention attends over the queries, so Tk = Tq = "
            f"{args.tq}; got --tk {args.tk}"
        )
    if args.one_step and args.tq != 1:
        raise ValueError(f"--tq: a --one-step call has one query per row, got --tq {args.tq}")
    if args.one_step and (args.causal or args.window):
        raise ValueError(
            "--one-step: with --causal or --window a step needs its position; "
            "plan it with --tq 1 instead"
        )
    return planner.CallShape(
        batch=args.batch,
        queries=args.tq,
        keys=tk,
        dtype=DTYPES[args.dtype],
        device=args.target,
        one_step=args.one_step,
        key_padding=args.key_padding,
        need_weights=args.weights,
        value_is_key=args.self_attention,
        query_is_key=args.self_attention,
        training=args.dropout > 0,
    )


def size(n: int) -> str:
    """Bytes as B, KiB, MiB, GiB, TiB or PiB (past 1024 PiB in powers of ten of PiB)."""
    if n >= 2**60:
        return f"{n / 2**50:.2e} PiB"
    for unit, scale in (
        ("PiB", 2**50),
        ("TiB", 2**40),
        ("GiB", 2**30),
        ("MiB", 2**20),
        ("KiB", 2**10),
    ):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def run(args: argparse.Namespace) -> int:
    if args.time and args.target == "cuda" and not torch.cuda.is_available():
        raise ValueError(
            "--time: runs on the planned device, and this machine has no CUDA "
            "(torch.cuda.is_available() is False); plan memory without --time"
        )
    attn = _module(args)
    shape = _shape(args)
    try:
        plan = planner.estimate(attn, shape, timing=args.time)
    except ValueError as exc:  # a timing run too large: named by the option
        raise ValueError(str(exc).replace("timing: ", "--time: ", 1)) from None
    dims = f"Dq={attn.query_dim}, Dk={attn.key_dim}, Dv={attn.value_dim}"
    if args.score in ("additive", "location"):
        score_v = attn.score.v
        assert isinstance(score_v, torch.Tensor)  # these scores' parameter v: (H, A)
        dims += f", A={score_v.shape[-1]}"
    heads = f", {attn.heads} heads of {attn.head_dim}" if attn.heads > 1 else ""
    band = (", causal" if args.causal else "") + (f", window {args.window}" if args.window else "")
    print(
        f"{args.score} attention, B={shape.batch}, Tq={shape.queries}, Tk={shape.keys}, "
        f"{dims}{heads}{band}, {args.dtype} on {args.target}"
    )
    print(
        f"inputs and parameters: {size(planner.input_bytes(attn, shape))}; peak extra "
        "memory of one call:"
    )
    columns = ["path", "kernel", "forward", "forward+backward"]
    if args.time:
        columns += ["forward s", "train s"]
    print("  " + "".join(f"{c:<18}" for c in columns).rstrip())
    for e in plan.estimates:
        cells = [e.impl, e.kernel if e.blocker is None else "-"]
        if e.blocker is not None:
            print(
                "  "
                + "".join(f"{c:<18}" for c in cells)
                + f"cannot: {e.blocker.split(': ', 1)[-1]}"
            )
            continue
        cells += [size(e.forward_bytes), size(e.train_bytes)]
        if args.time:
            cells += [f"~{e.forward_seconds:.3g}", f"~{e.train_seconds:.3g}"]
        mark = f"<- {args.impl}" if e.impl == plan.impl else ""
        print(("  " + "".join(f"{c:<18}" for c in cells) + mark).rstrip())
    print(f"{args.impl} takes {plan.impl}: {plan.reason}")
    if args.time:
        print(
            "times: each path run on this machine at a smaller size and scaled by the work "
            "(pairs x features); memory is predicted, never measured"
        )
    if args.memory_limit is not None:
        _fit(args, attn, shape, plan)
    return 0


def _fit(args: argparse.Namespace, attn: Attention, shape: planner.CallShape, plan: Plan) -> None:
    """Whether the call fits ``--memory-limit`` on the path the module's ``impl`` takes, and
    the largest batch that does; when not even one example does, the largest number of
    queries per call (the queries split into chunks), else the largest window."""
    limit, train = args.memory_limit, not args.forward_only
    what = "forward" if args.forward_only else "training (forward + backward)"
    peak = plan.predicted.train_bytes if train else plan.predicted.forward_bytes
    need = planner.input_bytes(attn, shape) + peak
    verdict = "fits" if need <= limit else "does not fit"
    print(
        f"memory limit {size(limit)} ({limit:,} bytes) for {what}: this call needs "
        f"{size(need)} and {verdict}"
    )
    batch = planner.largest_fit(attn, shape, limit, train=train)
    if batch:
        there = planner.estimate(attn, replace(shape, batch=batch)).impl
        print(f"largest batch that fits: {batch} ({args.impl} takes {there} there)")
        return
    one = replace(shape, batch=1)
    queries = planner.largest_fit(attn, one, limit, vary="queries", train=train)
    if queries:
        print(
            f"not even one example fits; one with its queries split into chunks of "
            f"{queries} (a call per chunk) does"
        )
        return
    window = planner.largest_fit(attn, one, limit, vary="window", train=train)
    if window is not None:
        print(
            f"not even one query fits over all {shape.keys} keys; with window=({window}, "
            f"{window}) (local attention) one example fits"
        )
    else:
        print("not even one query fits, with any window")
