"""Attention benchmarks: median time and peak extra memory, each case in a fresh process.

``python -m benchmarks.attention`` (or ``attnkit bench``, same options) runs every (case,
implementation) pair in its own process through :mod:`harness`: after one warm-up run (which
also compiles kernels), the measured runs' median time and peak extra resident memory are
reported. Forward is timed under ``torch.no_grad()`` (inference); "train" is forward + backward.

Implementations compared (not every case has every one):

* ``loop``: a per-step Python loop, one query at a time (what users write first);
* ``naive``: the full-matrix version written the usual way;
* ``reference`` / ``chunked`` / ``auto``: attnkit with that ``impl``;
* ``sdpa``: ``F.scaled_dot_product_attention`` (with the same projections for multi-head).

A baseline whose estimated memory exceeds the free memory is skipped and says so; a run longer
than the per-case time budget is stopped and reported as such.

``decoder`` cases time 100 one-query steps over the same encoder states: ``auto`` takes the C++
step kernel (:mod:`attnkit.attention.step`; built before the measured runs), ``auto-eager``
runs with ``ATTNKIT_COMPILE=0`` (plain PyTorch).

``--targets`` runs only the cases behind the long-sequence targets (:data:`TARGETS`), without
the slow baselines: a quicker check on another machine than the full suite (hours on a slow CPU). A
selection (``--targets`` or ``--match``) is printed, and written only to the ``--json`` given,
never merged into the report.

``--device cuda`` (or ``cuda:N``) runs the cases on a GPU: each run is timed to the end of its
kernels (``torch.cuda.synchronize``) and its memory is the peak of CUDA's allocator, not the
resident memory; its rows are, like a selection, written only to the ``--json`` given:

    attnkit bench --targets --device cuda --json gpu.json
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

import torch
import torch.nn.functional as F

from attnkit import Attention
from attnkit.train import resolve_device
from benchmarks import harness


@dataclass
class Case:
    group: str  # self | mha | additive | local | decoder
    impl: str
    b: int
    t: int  # Tq = Tk for self-attention; Tk for decoder
    d: int = 256
    heads: int = 1
    a: int = 128  # additive attention dim
    window: tuple[int, int] | None = None
    steps: int = 0  # decoder steps

    @property
    def name(self) -> str:
        parts = [self.group, f"B={self.b}", f"T={self.t}"]
        if self.heads > 1:
            parts.append(f"H={self.heads},d={self.d // self.heads}")
        elif self.group in ("additive", "decoder"):
            parts.append(f"A={self.a}")
        else:
            parts.append(f"D={self.d}")
        if self.window:
            parts.append(f"window={self.window}")
        if self.steps:
            parts.append(f"steps={self.steps}")
        return " ".join(parts)


@dataclass
class Result:
    case: dict
    name: str
    impl: str
    status: str = "ok"  # ok | skipped | timeout | error
    note: str = ""
    forward_s: float | None = None
    forward_mb: float | None = None
    train_s: float | None = None
    train_mb: float | None = None
    rate: float | None = None  # billions of (query, key, A) elements per second, train
    plan: str = ""
    reps: list = field(default_factory=list)
    command: str = ""  # the command line that measured this row
    date: str = ""
    commit: str = ""  # attnkit's git commit (+ "-dirty" with uncommitted changes to its code)
    machine: str = ""  # CPU, cores, torch and threads (see machine()), the GPU
    device: str = "cpu"  # where it ran; on a GPU the MiB are CUDA allocator peaks


# --------------------------------------------------------------------------- implementations


def _loop_dot(q, k, v):
    """One query at a time (a per-step loop): q (B, T, D) or (B, H, T, d). Iterating with
    ``unbind``, as ``for x in xs`` does, keeps the backward of the slicing cheap."""
    outs = []
    for qt in q.unbind(-2):  # (B, [H,] D)
        s = (k @ qt[..., None])[..., 0]  # (B, [H,] Tk)
        outs.append((s.softmax(-1)[..., None, :] @ v)[..., 0, :])
    return torch.stack(outs, dim=-2)


def _naive_dot(q, k, v):
    """The full matrix, through autograd."""
    return (q @ k.transpose(-1, -2)).softmax(-1) @ v


def _additive_pairs(qf, kf, v_a):
    return torch.tanh(qf.unsqueeze(-2) + kf.unsqueeze(-3)) @ v_a  # (B, Tq, Tk)


def build(case: Case, device: torch.device | str = "cpu"):
    """Returns (forward function of no arguments -> output, parameters and inputs with grad,
    attnkit module or None, work in (q, k, A) elements), on ``device``."""
    torch.manual_seed(0)
    b, t, d = case.b, case.t, case.d
    g = case.group
    if g in ("self", "local"):
        score = "dot" if g == "self" else "scaled_dot"
        x = torch.randn(b, t, d, device=device, requires_grad=True)
        attn = Attention(d, score=score, window=case.window, impl=_attnkit_impl(case.impl)).to(
            device
        )
        if case.impl == "loop":
            return lambda: _loop_dot(x, x, x), [x], None, 0
        if case.impl == "naive":
            return lambda: _naive_dot(x, x, x), [x], None, 0
        if case.impl == "sdpa":
            mask = _band(t, case.window).to(device) if case.window else None
            scale = 1.0 if g == "self" else None
            x4 = x[:, None]  # (B, 1, T, D): SDPA's fused CPU kernels want 4-D inputs
            return (
                lambda: F.scaled_dot_product_attention(x4, x4, x4, attn_mask=mask, scale=scale)[
                    :, 0
                ],
                [x],
                None,
                0,
            )
        return lambda: attn(x, x).context, [x], attn, 0
    if g == "mha":
        x = torch.randn(b, t, d, device=device, requires_grad=True)
        attn = Attention(d, score="scaled_dot", heads=case.heads, impl=_attnkit_impl(case.impl)).to(
            device
        )
        h, hd = case.heads, d // case.heads

        def heads(proj):  # contiguous, so the loop's per-step matmuls copy nothing
            return proj(x).view(b, t, h, hd).transpose(1, 2).contiguous()  # (B, H, T, d)

        def merged(fn):
            q, k, v = heads(attn.q_proj), heads(attn.k_proj), heads(attn.v_proj)
            return attn.out_proj(fn(q * hd**-0.5, k, v).transpose(1, 2).reshape(b, t, d))

        if case.impl == "loop":
            return lambda: merged(_loop_dot), [x], None, 0
        if case.impl == "naive":
            return lambda: merged(_naive_dot), [x], None, 0
        if case.impl == "sdpa":
            return (
                lambda: merged(lambda q, k, v: F.scaled_dot_product_attention(q, k, v, scale=1.0)),
                [x],
                None,
                0,
            )
        return lambda: attn(x, x).context, [x], attn, 0
    if g == "additive":
        x = torch.randn(b, t, case.a, device=device, requires_grad=True)
        attn = Attention(
            case.a, score="additive", attn_dim=case.a, impl=_attnkit_impl(case.impl)
        ).to(device)
        sc = attn.score
        work = b * t * t * case.a

        def prepared():
            return x @ sc.w_query[0], x @ sc.w_key[0], sc.v[0]

        if case.impl == "loop":

            def loop():
                qf, kf, v_a = prepared()
                outs = []
                for qi in qf.unbind(1):
                    s = torch.tanh(qi[:, None, :] + kf) @ v_a  # (B, Tk)
                    outs.append(s.softmax(-1)[:, None, :] @ x)
                return torch.cat(outs, dim=1)

            return loop, [x], None, work
        if case.impl == "naive":

            def naive():
                qf, kf, v_a = prepared()
                return _additive_pairs(qf, kf, v_a).softmax(-1) @ x

            return naive, [x], None, work
        return lambda: attn(x, x).context, [x], attn, work
    if g == "decoder":
        enc = torch.randn(b, t, case.a, device=device, requires_grad=True)
        queries = torch.randn(case.steps, b, case.a, device=device, requires_grad=True)
        attn = Attention(
            case.a, score="additive", attn_dim=case.a, impl=_attnkit_impl(case.impl)
        ).to(device)
        sc = attn.score
        work = b * case.steps * t * case.a
        if case.impl == "loop":

            def loop():
                kf = enc @ sc.w_key[0]  # U k once per sequence
                outs = []
                for q in queries:
                    s = torch.tanh((q @ sc.w_query[0])[:, None, :] + kf) @ sc.v[0]  # (B, Tk)
                    outs.append((s.softmax(-1)[:, None, :] @ enc)[:, 0])
                return torch.stack(outs)

            return loop, [enc, queries], None, work

        def steps():
            memory = attn.prepare(enc)
            return torch.stack([attn(q, memory).context for q in queries])

        return steps, [enc, queries], attn, work
    raise ValueError(f"group: unknown benchmark group {g!r}")


def _attnkit_impl(impl: str) -> str:
    return impl if impl in ("reference", "chunked", "auto") else "auto"  # auto-eager too


def _band(t: int, window) -> torch.Tensor:
    i = torch.arange(t)
    return (i[None, :] >= i[:, None] - window[0]) & (i[None, :] <= i[:, None] + window[1])


def estimate_bytes(case: Case) -> int:
    """Rough peak extra memory of the full-matrix baselines (training), to skip hopeless runs."""
    b, t = case.b, case.t
    if case.impl in ("naive", "reference"):
        if case.group == "additive":
            return int(11.6 * b * case.a * t * t) + (
                8 * b * t * t if case.impl == "reference" else 0
            )
        if case.group == "decoder":
            return 0
        return 20 * b * case.heads * t * t  # scores, weights and their gradients, float32
    if case.impl == "sdpa" and case.window:
        return 6 * t * t  # the dense band mask, and SDPA's float copy of it
    if case.impl == "loop":  # autograd keeps every step's tensors
        per_step = {"additive": 3 * b * t * case.a, "decoder": 3 * b * t * case.a}
        steps = case.steps or t
        return 4 * steps * per_step.get(case.group, 3 * b * case.heads * t)
    return 0


# --------------------------------------------------------------------------- measuring


def measure(
    case: dict, reps: int, time_budget: float, device: str = "cpu", autocast: str | None = None
) -> dict:
    """Measure one case in this process (the fresh process of :func:`harness.run`), on
    ``device``; ``autocast`` "bf16" or "fp16": the forward under ``torch.autocast`` of that
    dtype (inputs and parameters stay float32; SDPA then gets half-precision queries, which
    its flash kernel takes)."""
    if case.get("window") is not None:
        case = {**case, "window": tuple(case["window"])}  # JSON made it a list
    case = Case(**case)
    fwd, leaves, attn, work = build(case, device)
    if autocast is not None:
        fwd = _under_autocast(fwd, device, autocast)
    res = Result(asdict(case), case.name, case.impl)
    if attn is not None:
        probe = leaves[-1] if case.group == "decoder" else leaves[0]
        query = probe[0] if case.group == "decoder" else probe
        key = leaves[0]
        plan = attn.plan(query, key)
        res.plan = f"{plan.impl}: {plan.reason}"

    def forward():
        with torch.no_grad():
            fwd()

    def train():
        out = fwd()
        out.square().mean().backward()
        for p in leaves:
            p.grad = None

    train()  # warm-up: first-call allocations, kernel compilation
    # a third of the budget each: warm-up, training, forward
    t_train = harness.timed(train, reps=reps, time_budget=time_budget / 3, warmup=0, device=device)
    t_fwd = harness.timed(forward, reps=reps, time_budget=time_budget / 3, warmup=0, device=device)
    res.forward_s, res.forward_mb = t_fwd.median, t_fwd.extra_mb
    res.train_s, res.train_mb = t_train.median, t_train.extra_mb
    res.reps = [t_fwd.times, t_train.times]
    if work:
        res.rate = work / res.train_s / 1e9
    return asdict(res)


def _under_autocast(fwd, device: str, autocast: str):
    """``fwd`` run under ``torch.autocast`` on ``device`` with ``autocast``'s dtype."""
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[autocast]

    def run():
        with torch.autocast(torch.device(device).type, dtype=dtype):
            return fwd()

    return run


# --------------------------------------------------------------------------- the suite


def suite(quick: bool = False) -> list[Case]:
    cases: list[Case] = []

    def add(group, impls, **kw):
        cases.extend(Case(group, impl, **kw) for impl in impls)

    all_dot = ("loop", "naive", "reference", "auto", "sdpa")
    add("self", all_dot, b=32, t=800, d=256)
    for t in (800,) if quick else (800, 2048, 8192, 16384):
        add("mha", all_dot, b=8, t=t, d=256, heads=4)
    for t in (256, 800) if quick else (256, 800, 2048, 8192):
        add("additive", ("loop", "naive", "reference", "auto"), b=8, t=t)
    if not quick:
        add("additive", ("auto",), b=1, t=16384)
    for t in (4096,) if quick else (4096, 16384, 65536):
        add("local", ("reference", "sdpa", "auto"), b=4, t=t, d=64, window=(64, 64))
    for t in (800,) if quick else (800, 1500):
        add("decoder", ("loop", "auto", "auto-eager"), b=8, t=t, steps=100)
    return cases


# (group, name fragment, implementations): the cases behind the long-sequence targets
TARGETS = [
    ("self", "B=32 T=800 ", ("loop", "auto")),
    ("mha", "T=2048 ", ("auto", "sdpa")),
    ("additive", "B=8 T=800 ", ("naive", "auto")),
    ("additive", "B=8 T=256 ", ("auto",)),
    ("additive", "B=8 T=2048 ", ("auto",)),
    ("additive", "B=1 T=16384 ", ("auto",)),
    ("local", "T=4096 ", ("auto",)),
    ("local", "T=65536 ", ("auto",)),
]


def is_target(case: Case) -> bool:
    return any(
        case.group == group and name in case.name + " " and case.impl in impls
        for group, name, impls in TARGETS
    )


def run_suite(
    cases: list[Case],
    reps: int,
    time_budget: float,
    log=print,
    device: str = "cpu",
    autocast: str | None = None,
) -> list[Result]:
    """Each case in a fresh process on ``device`` (``autocast``: see :func:`measure`); a row
    per case, logged as it comes."""
    results = []
    extra = {} if autocast is None else {"autocast": autocast}
    for case in cases:
        env = {"ATTNKIT_COMPILE": "0"} if case.impl == "auto-eager" else None
        row = harness.run(
            measure,
            {
                "case": asdict(case),
                "reps": reps,
                "time_budget": time_budget,
                "device": device,
                **extra,
            },
            time_budget=time_budget,
            env=env,
            need_bytes=estimate_bytes(case) if device == "cpu" else 0,
        )
        if row["status"] == "ok":
            res = Result(**row)
        else:
            res = Result(asdict(case), case.name, case.impl, status=row["status"], note=row["note"])
        res.device = device
        results.append(res)
        log(_row(res))
    return results


# --------------------------------------------------------------------------- reporting


def _fmt(x, spec):
    return "—" if x is None else format(x, spec)


def _row(r: Result) -> str:
    if r.status != "ok":
        return harness.table_row([r.name, r.impl, f"{r.status}: {r.note}", "", "", "", "", ""])
    return harness.table_row(
        [
            r.name,
            r.impl,
            _fmt(r.forward_s, ".3f"),
            _fmt(r.forward_mb, ".0f"),
            _fmt(r.train_s, ".3f"),
            _fmt(r.train_mb, ".0f"),
            _fmt(r.rate, ".2f"),
            r.plan,
        ]
    )


HEADER = harness.table_header(
    [
        "case",
        "impl",
        "forward s",
        "forward extra MiB",
        "train s",
        "train extra MiB",
        "G elem/s",
        "attnkit path",
    ]
)


def _find(results, name_prefix, impl):
    for r in results:
        if r.name.startswith(name_prefix) and r.impl == impl and r.status == "ok":
            return r
    return None


def figures(results: list[Result]) -> list[str]:
    """The long-sequence targets, each marked reached / missed / not measured."""
    lines = []

    def verdict(ok):
        return "**reached**" if ok else "**missed**"

    naive = _find(results, "additive B=8 T=800 ", "naive")
    fast = _find(results, "additive B=8 T=800 ", "auto")
    if naive and fast:
        speed, mem = naive.train_s / fast.train_s, fast.train_mb / max(naive.train_mb, 1e-9)
        lines.append(
            f"- Additive B=8 T=800 A=128 train: {speed:.1f}x faster than naive "
            f"(target >= 5x), {mem:.3f} of its peak memory (target <= 0.125), "
            f"{fast.rate:.2f} G elem/s: {verdict(speed >= 5 and mem <= 0.125)}"
        )
    big = _find(results, "additive B=1 T=16384", "auto")
    if big:
        lines.append(
            f"- Additive B=1 T=16384 train: runs in {big.train_s:.1f} s, peak extra "
            f"{big.train_mb:.0f} MiB (target < 2048): {verdict(big.train_mb < 2048)}"
        )
    for t in (800, 2048, 8192, 16384):
        a, s = _find(results, f"mha B=8 T={t} ", "auto"), _find(results, f"mha B=8 T={t} ", "sdpa")
        if a and s:
            r, f = a.train_s / s.train_s, a.forward_s / s.forward_s
            lines.append(
                f"- scaled_dot (4 heads) T={t} through auto vs F.sdpa: train "
                f"{r:.3f}x, forward {f:.3f}x (target <= 1.15): "
                f"{verdict(r <= 1.15 and f <= 1.15)}"
            )
    chunked = [
        r
        for r in results
        if r.case["group"] == "additive"
        and r.impl == "auto"
        and r.case["b"] == 8
        and r.status == "ok"
    ]
    chunked.sort(key=lambda r: r.case["t"])
    for r1, r2 in zip(chunked, chunked[1:]):
        growth = (r2.train_mb / max(r1.train_mb, 1e-9)) / (r2.case["t"] / r1.case["t"]) * 2
        lines.append(
            f"- Additive chunked memory T={r1.case['t']}->{r2.case['t']}: "
            f"{r1.train_mb:.0f} -> {r2.train_mb:.0f} MiB, per doubling of T x{growth:.2f} "
            f"(target <= 2.2): {verdict(growth <= 2.2)}"
        )
    local = sorted(
        [
            r
            for r in results
            if r.case["group"] == "local" and r.impl == "auto" and r.status == "ok"
        ],
        key=lambda r: r.case["t"],
    )
    if len(local) >= 2:
        r1, r2 = local[0], local[-1]
        k = r2.case["t"] / r1.case["t"]
        tg, mg = r2.train_s / r1.train_s / k, r2.train_mb / max(r1.train_mb, 1e-9) / k
        lines.append(
            f"- Local window (64, 64) T={r1.case['t']}->{r2.case['t']} (x{k:.0f}): time "
            f"x{r2.train_s / r1.train_s:.1f}, memory x{r2.train_mb / max(r1.train_mb, 1e-9):.1f}"
            f" (linear = x{k:.0f}; ratios {tg:.2f}, {mg:.2f}): "
            f"{verdict(tg <= 1.3 and mg <= 1.3)}"
        )
    loop, auto = (
        _find(results, "self B=32 T=800", "loop"),
        _find(results, "self B=32 T=800", "auto"),
    )
    if loop and auto:
        s = loop.train_s / auto.train_s
        lines.append(
            f"- Long-sequence self-attention (dot, B=32 T=800 D=256) train: {s:.0f}x "
            f"faster than the per-step loop (target >= 20x): {verdict(s >= 20)}"
        )
    for t in (800, 1500):
        lp, au = (
            _find(results, f"decoder B=8 T={t} ", "loop"),
            _find(results, f"decoder B=8 T={t} ", "auto"),
        )
        if lp and au:
            ok = au.train_mb < lp.train_mb and au.train_s <= lp.train_s * 1.05
            lines.append(
                f"- Additive decoder, 100 steps over Tk={t}: memory {au.train_mb:.0f} vs "
                f"{lp.train_mb:.0f} MiB, time {au.train_s:.2f} vs {lp.train_s:.2f} s "
                f"(attnkit vs per-step autograd; target less memory, no slower): "
                f"{verdict(ok)}"
            )
    return lines


def write_report(results: list[Result], json_path: Path, md_path: Path) -> None:
    """The rows as JSON at ``json_path``; the Markdown report (commands, targets, table) at
    ``md_path``, keeping its hand-written notes."""
    harness.write_json(json_path, [asdict(r) for r in results])
    runs = {}
    for r in results:
        runs.setdefault((r.command, r.date, r.commit, r.machine), []).append(r.case["group"])
    commands = [
        f"- `{cmd}` ({date}, commit {commit or '?'}, {where or 'machine not recorded'}): "
        f"groups {', '.join(dict.fromkeys(groups))}"
        for (cmd, date, commit, where), groups in runs.items()
    ]
    body = [
        "# Benchmarks",
        "",
        f"<!-- generated down to the notes mark by `python -m benchmarks.attention` (`attnkit "
        f"bench`), which also writes {json_path}; edit below the mark -->",
        "",
        f"Produced by (raw data in `{json_path}`; compare rows measured on the same machine only):",
        "",
        *commands,
        "",
        "Each row ran in a fresh process: one warm-up run (kernel compilation included), then "
        "the median of up to the requested repetitions. *Extra MiB* is the peak resident memory "
        "during the measured runs minus the resident memory just before them (inputs and "
        "parameters excluded). *G elem/s* counts (query, key, A) triples per second of "
        "training. Forward runs under `torch.no_grad()`.",
        "",
        "## Targets",
        "",
        *figures(results),
        "",
        "## Measurements",
        "",
        HEADER,
        *[_row(r) for r in results],
        "",
    ]
    harness.write_markdown(md_path, body)


DEFAULT_JSON, DEFAULT_MARKDOWN = "results/attention.json", "docs/benchmarks.md"


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.attention", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--quick", action="store_true", help="small cases only (a few minutes)")
    p.add_argument(
        "--group",
        action="append",
        help="only these groups (self, mha, additive, "
        "local, decoder); repeatable; their rows replace those already in --json",
    )
    p.add_argument(
        "--targets",
        action="store_true",
        help="only the cases behind the long-sequence targets of docs/benchmarks.md "
        "(no slow baselines)",
    )
    p.add_argument("--match", help="only the cases whose name contains this")
    p.add_argument("--reps", type=int, default=3, help="measured repetitions (median)")
    p.add_argument(
        "--time-budget",
        type=float,
        default=600.0,
        help="seconds per case; its process is stopped after (default 600)",
    )
    p.add_argument(
        "--json",
        help=f"rows as JSON (default {DEFAULT_JSON}; with --targets, "
        "--match or a GPU --device, written only where given, never merged into "
        "the report)",
    )
    p.add_argument(
        "--markdown",
        help=f"the report (default {DEFAULT_MARKDOWN}; not written "
        "with --targets, --match or a --device other than cpu)",
    )
    p.add_argument(
        "--device",
        default="cpu",
        help="cpu (default), cuda, cuda:N or auto: where the cases run; on a GPU "
        "each step is timed to its kernels' end and memory is CUDA's allocator "
        "peak, and the rows go to --json only",
    )
    return p


def main(argv: list[str] | None = None) -> int:
    """Run the cases the options (:func:`parser`) select."""
    args = parser().parse_args(argv)
    cases = [
        c
        for c in suite(args.quick and not args.targets)
        if (not args.group or c.group in args.group)
        and (not args.targets or is_target(c))
        and (args.match is None or args.match in c.name)
    ]
    try:
        device = str(resolve_device(str(args.device)))
    except ValueError as e:
        print(f"benchmarks.attention: {e}", file=sys.stderr)
        return 2
    print(HEADER)
    results = run_suite(
        cases, args.reps, args.time_budget, log=lambda s: print(s, flush=True), device=device
    )
    command = harness.command()
    date, commit, machine = time.strftime("%Y-%m-%d"), harness.commit(), harness.machine(device)
    for r in results:
        r.command, r.date, r.commit, r.machine = command, date, commit, machine
    # a selection, or another device than the report's CPU: never merged into the report
    if args.targets or args.match is not None or device != "cpu":
        print("\n".join(figures(results)))
        if args.json:
            harness.write_json(args.json, [asdict(r) for r in results], device=device)
        return 0
    json_path = Path(args.json or DEFAULT_JSON)
    if args.group and json_path.exists():  # re-measured groups replace theirs in the report
        old = [Result(**r) for r in json.loads(json_path.read_text())["rows"]]
        order = [c.group for c in suite()]
        results = sorted(
            [r for r in old if r.case["group"] not in args.group] + results,
            key=lambda r: order.index(r.case["group"]),
        )
    write_report(results, json_path, Path(args.markdown or DEFAULT_MARKDOWN))
    print("\n".join(figures(results)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
