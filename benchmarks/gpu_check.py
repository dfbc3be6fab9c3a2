"""Every CUDA path of attnkit in one command, and the GPU figures: the check to run first when a
GPU is lent (docs/benchmarks.md, "GPU"), about 8 minutes in all.

    python -m benchmarks.gpu_check --device cuda --out OUT
    python -m benchmarks.gpu_check --device cpu --tiny --out OUT    # the dry run of the tests

The steps run in this order, each in a process of its own stopped after its time limit (a
failing or stopped step does not stop the others):

1. the tests, both at once: ``tests-cuda``, the tests of the suite that need CUDA (those
   skipped by a ``skipif`` whose reason says it: "needs a CUDA GPU", "needs CUDA", "needs two
   CUDA GPUs"), and ``tests-attention-models``, tests/attention and tests/models with CUDA
   present;
2. the trainings, all at once: ``train-TASK`` for translate, ocr, asr, caption and vqa,
   ``attnkit train`` on ``--device`` in fp32 (with data workers, so pinned-memory loading),
   bf16 and fp16 (whose gradient scaler is saved, then resumed: the resumed run must continue
   its state), each checked to have allocated on the GPU, and one ``attnkit eval`` of the fp32
   checkpoint; and ``torchrun``: ``torchrun --standalone --nproc-per-node 1`` running ``attnkit
   train translate`` and its ``--resume``, then a process group of that one process on the
   nccl backend (gloo on the CPU) training attnkit's Seq2Seq and Transformer through
   ``DistributedDataParallel`` (one process alone joins no group in ``attnkit train``: its nccl
   branch needs two GPUs);
3. the figures, one at a time: ``additive`` (B=8 T=800 A=128 training, attnkit vs the full
   matrix: time and peak memory), ``scaled-dot`` (4 heads, T=800 and 2048, attnkit vs
   ``F.scaled_dot_product_attention``, in fp32 and under bf16 autocast, where SDPA takes its
   flash kernel), ``bahdanau`` and ``transformer`` (a training step on the device vs on this
   machine's CPU and vs the step recorded in results/models_vs_plain.json), ``decoding``
   (greedy and beam-5 throughput) and ``onnx`` (``attnkit export`` of the fp32 translation
   checkpoint trained in step 2: onnxruntime's encoder and decoder steps against the model on
   the device, and the exported runner's translations against ``attnkit translate``);
4. a summary line per step: passed, failed, stopped or not run, and its figure.

The figures come from the benchmark scripts' own functions (:mod:`attention`,
:mod:`models_vs_plain`, :mod:`decoding_speed`), each case in a fresh process as they measure.
``--budget`` (seconds, default 470) bounds the whole run: a step's limit is its own, shortened
so that the steps after it keep their minimum, and a step left with too little is not run.

Written to ``--out`` (two files: a lent machine sends back at most eight):
``gpu_check.json`` (the machine and its GPU, every step's status, seconds, figure and details;
rewritten after each step) and ``gpu_check.log`` (every step's output, then the summary). The
steps work in ``--work`` (default: a temporary folder, deleted at the end).

``--device cpu --tiny`` runs the same steps at tiny sizes on the CPU (one test file of
tests/models, 2 training steps in fp32 only, tiny cases measured in the step's process, the
figures two at a time; fp16 is CUDA-only and reported so): tests/test_gpu_check.py runs it, so
the check keeps working between GPU loans.

The ASR steps read WAV files with a manifest from ``--data``/speech (default .gpu/data),
synthesised by espeak-ng, which a lent machine lacks: ``--prepare DIR`` writes them
(tools/gpu_wheels.sh does, with the wheels that machine lacks); a run without them writes them
when espeak-ng is installed.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import importlib.util
import io
import json
import os
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from dataclasses import asdict, dataclass
from pathlib import Path

from benchmarks import harness
from benchmarks.suite import run_entry

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / ".gpu" / "data"
TASKS = ("translate", "ocr", "asr", "caption", "vqa")
PRECISIONS = ("fp32", "bf16", "fp16")
UTTERANCES = 24  # WAV files --prepare writes


@dataclass(frozen=True)
class Step:
    name: str
    phase: int  # 1 tests, 2 training, 3 figures
    limit_s: float  # at most this long
    least_s: float  # kept for it when earlier steps are given their limits


STEPS = [
    Step("tests-cuda", 1, 120, 30),
    Step("tests-attention-models", 1, 150, 30),
    *(Step(f"train-{task}", 2, 150, 60) for task in TASKS),
    Step("torchrun", 2, 120, 60),
    Step("additive", 3, 120, 40),  # compiles its Triton kernels first
    Step("scaled-dot", 3, 120, 40),
    Step("bahdanau", 3, 45, 15),
    Step("transformer", 3, 45, 15),
    Step("decoding", 3, 60, 20),
    Step("onnx", 3, 45, 15),
]
TOO_LITTLE_S = 5.0  # a step with less time than this is not run

# `attnkit train TASK` options: small models on small built-in sets (speech: the --data WAVs)
TRAIN = {
    "translate": [
        "--n-train",
        "2000",
        "--n-valid",
        "64",
        "--emb",
        "32",
        "--hidden",
        "64",
        "--batch-size",
        "32",
    ],
    "ocr": [
        "--n-train",
        "256",
        "--n-valid",
        "32",
        "--channels",
        "16,16,32,32,32",
        "--hidden",
        "64",
        "--batch-size",
        "16",
        "--max-chars",
        "12",
    ],
    "asr": ["--listener-hidden", "32", "--hidden", "64", "--emb", "16", "--batch-size", "8"],
    "caption": [
        "--n-train",
        "256",
        "--n-valid",
        "32",
        "--channels",
        "16,32,32",
        "--hidden",
        "64",
        "--emb",
        "32",
        "--batch-size",
        "16",
    ],
    "vqa": [
        "--n-train",
        "256",
        "--n-valid",
        "32",
        "--channels",
        "16,32,32",
        "--hidden",
        "32",
        "--emb",
        "32",
        "--batch-size",
        "16",
    ],
}
TRAIN_TINY = {
    "translate": [
        "--n-train",
        "64",
        "--n-valid",
        "4",
        "--emb",
        "8",
        "--hidden",
        "16",
        "--batch-size",
        "8",
    ],
    "ocr": [
        "--n-train",
        "8",
        "--n-valid",
        "2",
        "--channels",
        "4,4,8,8,8",
        "--hidden",
        "8",
        "--batch-size",
        "4",
        "--max-chars",
        "8",
    ],
    "asr": ["--listener-hidden", "8", "--hidden", "16", "--emb", "8", "--batch-size", "4"],
    "caption": [
        "--n-train",
        "8",
        "--n-valid",
        "2",
        "--channels",
        "4,8,8",
        "--hidden",
        "16",
        "--emb",
        "8",
        "--batch-size",
        "4",
    ],
    "vqa": [
        "--n-train",
        "8",
        "--n-valid",
        "2",
        "--channels",
        "4,8,8",
        "--hidden",
        "16",
        "--emb",
        "8",
        "--batch-size",
        "4",
    ],
}


@dataclass(frozen=True)
class Sizes:
    precisions: tuple[str, ...]  # of the trainings (fp16 on a GPU only)
    steps: int  # training steps of each run
    resume: int  # steps more on resuming
    eval_limit: int  # examples scored by attnkit eval
    reps: int  # measured repetitions of a figure's case
    case_s: float  # time budget of one case (its process's start and compiling included)
    attention_tests: tuple[str, ...]
    additive: dict
    mha: tuple[dict, ...]
    decoding: tuple[str, ...]  # cases of decoding_speed.CASES
    onnx_sentences: int


FULL = Sizes(
    precisions=PRECISIONS,
    steps=30,
    resume=10,
    eval_limit=32,
    reps=5,
    case_s=90,
    attention_tests=("tests/attention", "tests/models"),
    additive=dict(b=8, t=800, a=128),
    mha=(dict(b=8, t=800, d=256, heads=4), dict(b=8, t=2048, d=256, heads=4)),
    decoding=("bahdanau greedy", "bahdanau beam 5", "las beam 5"),
    onnx_sentences=8,
)
TINY = Sizes(
    precisions=("fp32", "fp16"),
    steps=2,
    resume=1,
    eval_limit=4,
    reps=1,
    case_s=30,
    attention_tests=("tests/models/test_registry.py",),
    additive=dict(b=2, t=32, a=16),
    mha=(dict(b=2, t=32, d=16, heads=2),),
    decoding=("bahdanau greedy", "bahdanau beam 5"),
    onnx_sentences=2,
)


@dataclass
class Context:
    """What a step's process is told: where it runs, at which sizes, where it works."""

    device: str
    tiny: bool
    work: Path
    data: Path
    limit_s: float

    @property
    def sizes(self) -> Sizes:
        return TINY if self.tiny else FULL

    @property
    def cuda(self) -> bool:
        return self.device.startswith("cuda")


# --------------------------------------------------------------------------- the steps


def _env() -> dict:
    """This environment with the checkout's src and root first on PYTHONPATH (attnkit and the
    benchmarks package, whether or not attnkit is installed)."""
    path = [str(ROOT / "src"), str(ROOT), os.environ.get("PYTHONPATH", "")]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}


def _pytest(ctx: Context, name: str, args: list[str], env: dict | None = None) -> dict:
    """``python -m pytest ARGS`` in the checkout, interrupted (as Ctrl-C does: the tests run so
    far are reported) 15 s before the step's limit; the counts of its JUnit report."""
    report = ctx.work / f"{name}.xml"
    cmd = [
        sys.executable,
        "-m",
        "pytest",
        "-rfEs",
        "-p",
        "no:cacheprovider",
        f"--junitxml={report}",
        *args,
    ]
    print("$", " ".join(cmd), flush=True)
    proc = subprocess.Popen(cmd, cwd=ROOT, env={**_env(), **(env or {})})
    interrupted = False
    try:
        code = proc.wait(timeout=max(ctx.limit_s - 15, 5))
    except subprocess.TimeoutExpired:
        interrupted = True
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            code = proc.wait()
    counts = {"tests": 0, "failures": 0, "errors": 0, "skipped": 0}
    failed = []
    if report.exists():
        for suite in ET.parse(report).getroot().iter("testsuite"):
            for key in counts:
                counts[key] += int(suite.get(key, 0))
            for case in suite.iter("testcase"):
                if case.find("failure") is not None or case.find("error") is not None:
                    failed.append(f"{case.get('classname')}::{case.get('name')}")
    passed = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    figure = f"{passed} passed, {counts['skipped']} skipped"
    if failed:
        named = ", ".join(failed[:5]) + (", ..." if len(failed) > 5 else "")
        figure = f"{len(failed)} failed ({named}), {figure}"
    if interrupted:
        figure = f"interrupted at the step's limit: {figure}"
    elif code == 5:
        figure = "no test collected"
    return {
        "ok": code == 0 and not interrupted,
        "figure": figure,
        "exit": code,
        "counts": counts,
        "failed": failed,
    }


def needs_cuda(item) -> bool:
    """A test skipped by a ``skipif`` whose reason says it needs CUDA."""
    for mark in item.iter_markers("skipif"):
        reason = str(mark.kwargs.get("reason", ""))
        if "CUDA" in reason and reason.startswith("needs") and "without" not in reason:
            return True
    return False


def pytest_collection_modifyitems(config, items):
    """As a pytest plugin (``-p benchmarks.gpu_check``): keep the tests that need CUDA."""
    keep = [item for item in items if needs_cuda(item)]
    config.hook.pytest_deselected(items=[item for item in items if not needs_cuda(item)])
    items[:] = keep


def step_tests_cuda(ctx: Context) -> dict:
    files = sorted(
        str(p.relative_to(ROOT))
        for p in (ROOT / "tests").rglob("test_*.py")
        if "cuda" in p.read_text(encoding="utf-8")
    )
    return _pytest(ctx, "tests-cuda", ["-p", "benchmarks.gpu_check", *files])


def step_tests_attention_models(ctx: Context) -> dict:
    args, env = list(ctx.sizes.attention_tests), {}
    if not ctx.tiny and importlib.util.find_spec("xdist") is not None:
        workers = max(1, min(8, (os.cpu_count() or 2) // 2))
        args = ["-n", str(workers), *args]
        env["OMP_NUM_THREADS"] = "2"  # each worker's torch threads
    return _pytest(ctx, "tests-attention-models", args, env)


def _cli(argv: list[str]) -> tuple[int, str]:
    """``attnkit ARGV`` in this process: its exit status and what it printed (also printed
    here, for the log)."""
    from attnkit.cli.main import main

    print("$ attnkit", " ".join(argv), flush=True)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        code = main(argv)
    print(out.getvalue(), end="", flush=True)
    return code, out.getvalue()


def _eval_data(task: str, ctx: Context) -> str:
    """Labelled data for ``attnkit eval`` of ``task``: written into the work folder, the
    speech manifest of --data, or the built-in scenes."""
    from attnkit.data import generate_lines, generate_pairs, write_line_folder

    n = ctx.sizes.eval_limit
    if task == "translate":
        path = ctx.work / "data" / "pairs.tsv"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            "".join(f"{s}\t{t}\n" for s, t in generate_pairs(n, split="test", seed=1)),
            encoding="utf-8",
        )
        return str(path)
    if task == "ocr":
        return str(
            write_line_folder(
                generate_lines(n, split="test", seed=1, max_chars=30), ctx.work / "data" / "lines"
            ).parent
        )
    if task == "asr":
        return str(_speech(ctx))
    return "scenes:test"


def _speech(ctx: Context) -> Path:
    """The manifest of --data/speech, written first where it is missing (needs espeak-ng)."""
    manifest = ctx.data / "speech" / "manifest.tsv"
    if not manifest.exists():
        if shutil.which("espeak-ng") is None:
            raise SystemExit(
                f"{manifest}: missing, and espeak-ng, which would synthesise it, "
                "is not installed: run tools/gpu_wheels.sh (or python -m "
                "benchmarks.gpu_check --prepare DIR) where it is"
            )
        prepare(ctx.data, UTTERANCES if not ctx.tiny else 8)
    return manifest


def _train_argv(task: str, ctx: Context, out: Path, precision: str, steps: int) -> list[str]:
    options = (TRAIN_TINY if ctx.tiny else TRAIN)[task]
    if task == "asr":
        manifest = str(_speech(ctx))
        options = [*options, "--train", manifest, "--valid", manifest]
    if task == "ocr":
        options = [*options, "--cache-dir", str(ctx.work / "lines-cache")]
    if precision == "fp32" and not ctx.tiny:
        options = [*options, "--workers-data", "2"]
    return [
        "train",
        task,
        *options,
        "--steps",
        str(steps),
        "--eval-every",
        str(steps),
        "--checkpoint-every",
        str(steps),
        "--seed",
        "0",
        "--device",
        ctx.device,
        "--precision",
        precision,
        "--no-progress",
        "--plot",
        "1",
        "--out",
        str(out),
    ]


def _trainer(out: Path) -> dict:
    return json.loads((out / "checkpoint" / "trainer.json").read_text())


def step_train(ctx: Context, task: str) -> dict:
    import torch

    sizes, runs, problems, details = ctx.sizes, [], [], {}
    for precision in sizes.precisions:
        if precision == "fp16" and not ctx.cuda:
            runs.append("fp16 not run (CUDA only)")
            continue
        if precision == "bf16" and ctx.cuda and not torch.cuda.is_bf16_supported():
            runs.append("bf16 not run (this GPU has none)")
            continue
        out = ctx.work / "runs" / f"{task}-{precision}"
        shutil.rmtree(out, ignore_errors=True)  # a run of an earlier check in this --work
        if ctx.cuda:
            torch.cuda.reset_peak_memory_stats()
        start = time.perf_counter()
        code, _ = _cli(_train_argv(task, ctx, out, precision, sizes.steps))
        seconds = time.perf_counter() - start
        row = {"exit": code, "seconds": round(seconds, 1)}
        details[precision] = row
        if code != 0:
            problems.append(f"{precision} exit {code}")
            continue
        trainer = _trainer(out)
        row.update(step=trainer["step"], held_out=trainer["history"][-1])
        text = f"{precision} {seconds:.0f} s"
        if ctx.cuda:
            row["gpu_mib"] = torch.cuda.max_memory_allocated() / 2**20
            text += f" ({row['gpu_mib']:.0f} MiB on the GPU)"
            if row["gpu_mib"] == 0:
                problems.append(f"{precision}: nothing allocated on the GPU")
        if precision == "fp16":
            text += "; " + _resume_fp16(task, ctx, out, trainer, row, problems)
        runs.append(text)
    ck = ctx.work / "runs" / f"{task}-fp32" / "checkpoint"
    if ck.exists():
        code, printed = _cli(
            [
                "eval",
                "--checkpoint",
                str(ck),
                "--data",
                _eval_data(task, ctx),
                "--device",
                ctx.device,
                "--json",
                "--limit",
                str(sizes.eval_limit),
            ]
        )
        if code != 0:
            problems.append(f"eval exit {code}")
        else:
            metrics = json.loads(printed[printed.index("{") :])["metrics"]
            details["eval"] = metrics
            runs.append("eval " + ", ".join(f"{k} {v:.3g}" for k, v in list(metrics.items())[:2]))
    figure = "; ".join(runs)
    if problems:
        figure = "; ".join(problems) + " | " + figure
    return {"ok": not problems, "figure": figure, **details}


def _resume_fp16(
    task: str, ctx: Context, out: Path, trainer: dict, row: dict, problems: list
) -> str:
    """Resume the fp16 run for ``resume`` steps more: its gradient scaler must continue from
    the saved state (the steps since the last overflow go on counting, or an overflow lowers
    the saved scale)."""
    saved = trainer.get("scaler")
    if not saved or not saved.get("scale", 0) > 0:
        problems.append("fp16: no gradient scaler saved")
        return "no scaler saved"
    steps = ctx.sizes.steps + ctx.sizes.resume
    code, _ = _cli([*_train_argv(task, ctx, out, "fp16", steps), "--resume"])
    if code != 0:
        problems.append(f"fp16 resume exit {code}")
        return f"resume exit {code}"
    after = _trainer(out)
    resumed = after.get("scaler") or {}
    row["scaler"] = {"saved": saved, "resumed": resumed, "step": after["step"]}
    tracker = saved.get("_growth_tracker", 0)
    kept = (
        resumed.get("_growth_tracker") == tracker + ctx.sizes.resume
        or resumed.get("scale", saved["scale"]) < saved["scale"]
    )
    if after["step"] != steps or not kept:
        problems.append(
            f"fp16 resume: step {after['step']} (expected {steps}), scaler {saved} -> {resumed}"
        )
    return (
        f"scale {saved['scale']:g} ({tracker} steps without overflow) "
        f"resumed to step {after['step']}: {resumed.get('scale', 0):g} "
        f"({resumed.get('_growth_tracker')})"
    )


def step_torchrun(ctx: Context) -> dict:
    sizes, out = ctx.sizes, ctx.work / "runs" / "torchrun"
    shutil.rmtree(out, ignore_errors=True)
    launcher = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc-per-node",
        "1",
    ]
    problems, texts = [], []
    for steps, extra in ((sizes.steps, []), (sizes.steps + sizes.resume, ["--resume"])):
        argv = [*_train_argv("translate", ctx, out, "fp32", steps), *extra]
        cmd = [*launcher, "-m", "attnkit.cli.main", *argv]
        print("$", " ".join(cmd), flush=True)
        code = subprocess.run(cmd, cwd=ROOT, env=_env()).returncode
        if code != 0:
            problems.append(f"attnkit train{' --resume' if extra else ''} exit {code}")
            break
        step = _trainer(out)["step"]
        if step != steps:
            problems.append(f"stopped at step {step}, not {steps}")
        texts.append(f"step {step}")
    cmd = [*launcher, "-m", "benchmarks.gpu_check", "--ddp-probe", "--device", ctx.device]
    print("$", " ".join(cmd), flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(), capture_output=True, text=True)
    print(proc.stdout + proc.stderr, flush=True)
    probe = {}
    if proc.returncode != 0:
        problems.append(f"DDP probe exit {proc.returncode}")
    else:
        probe = json.loads(proc.stdout.strip().splitlines()[-1])
        texts.append(
            f"{probe['backend']}: all_reduce {probe['all_reduce']}, DDP steps of "
            f"{', '.join(probe['models'])}"
        )
    figure = "attnkit train under torchrun: " + " then ".join(texts[:2])
    if len(texts) > 2:
        figure += "; " + texts[2]
    if problems:
        figure = "; ".join(problems) + " | " + figure
    return {"ok": not problems, "figure": figure, "ddp_probe": probe}


def ddp_probe(device: str) -> dict:
    """In each process torchrun starts: join a process group (nccl on a GPU, else gloo), sum a
    tensor over it and train attnkit's Seq2Seq and Transformer for 3 steps through
    ``DistributedDataParallel``."""
    import torch
    import torch.distributed as dist
    import torch.nn.functional as F
    from torch.nn.parallel import DistributedDataParallel

    from attnkit.models import Seq2Seq, Transformer

    cuda = device.startswith("cuda")
    local = int(os.environ.get("LOCAL_RANK", "0"))
    dev = torch.device("cuda", local) if cuda else torch.device("cpu")
    if cuda:
        torch.cuda.set_device(dev)
    dist.init_process_group("nccl" if cuda else "gloo")
    try:
        total = torch.ones(4, device=dev)
        dist.all_reduce(total)
        gen = torch.Generator().manual_seed(0)
        src = torch.randint(4, 20, (4, 7), generator=gen).to(dev)
        src_len = torch.tensor([7, 6, 5, 3], device=dev)
        tgt = torch.randint(4, 22, (4, 6), generator=gen).to(dev)
        models = {
            "Seq2Seq": Seq2Seq(20, 22, kind="bahdanau", emb=8, hidden=16),
            "Transformer": Transformer(20, 22, d_model=16, heads=2, layers=1, ff=32),
        }
        for model in models.values():
            net = DistributedDataParallel(model.to(dev), device_ids=[local] if cuda else None)
            opt = torch.optim.Adam(net.parameters(), lr=1e-3)
            for _ in range(3):
                opt.zero_grad()
                logits = net(src, src_len, tgt[:, :-1])[0]
                F.cross_entropy(logits.flatten(0, 1), tgt[:, 1:].flatten()).backward()
                opt.step()
        return {
            "backend": dist.get_backend(),
            "world_size": dist.get_world_size(),
            "all_reduce": total.tolist(),
            "models": list(models),
        }
    finally:
        dist.destroy_process_group()


def _case(fn, kwargs: dict, ctx: Context) -> dict:
    """``fn(**kwargs)`` in a fresh process, as the benchmark scripts measure (at tiny sizes:
    in this process)."""
    if ctx.tiny:
        return {"status": "ok", **fn(**kwargs)}
    return harness.run(fn, kwargs, time_budget=ctx.sizes.case_s)


def _attention(cases: list, ctx: Context, autocast: str | None = None) -> list:
    from benchmarks import attention

    results = []
    for case in cases:
        kwargs = {
            "case": asdict(case),
            "reps": ctx.sizes.reps,
            "time_budget": ctx.sizes.case_s,
            "device": ctx.device,
        }
        if autocast is not None:
            kwargs["autocast"] = autocast
        row = _case(attention.measure, kwargs, ctx)
        result = (
            attention.Result(**{k: v for k, v in row.items() if k != "status"})
            if row["status"] == "ok"
            else attention.Result(
                asdict(case), case.name, case.impl, status=row["status"], note=row["note"]
            )
        )
        print(attention._row(result), flush=True)
        results.append(result)
    return results


def step_additive(ctx: Context) -> dict:
    from benchmarks import attention

    s = ctx.sizes.additive
    naive, fast = _attention(
        [attention.Case("additive", impl, **s) for impl in ("naive", "auto")], ctx
    )
    if naive.status != "ok" or fast.status != "ok":
        bad = naive if naive.status != "ok" else fast
        return {"ok": False, "figure": f"{bad.impl}: {bad.status}: {bad.note}"}
    speed, memory = naive.train_s / fast.train_s, fast.train_mb / max(naive.train_mb, 1e-9)
    reached = speed >= 5 and memory <= 0.125
    figure = (
        f"B={s['b']} T={s['t']} A={s['a']} training: {fast.train_s * 1e3:.1f} ms vs "
        f"{naive.train_s * 1e3:.1f} ms ({speed:.1f}x faster), {fast.train_mb:.0f} vs "
        f"{naive.train_mb:.0f} MiB ({memory:.3f} of it; target >= 5x at <= 0.125): "
        f"{'reached' if reached else 'missed'}; path {fast.plan}"
    )
    return {
        "ok": True,
        "figure": figure,
        "rows": [asdict(naive), asdict(fast)],
        "speedup": speed,
        "memory_ratio": memory,
        "reached": reached,
    }


def step_scaled_dot(ctx: Context) -> dict:
    from benchmarks import attention

    rows, texts, ok = [], [], True
    for precision in ("fp32", "bf16"):
        for s in ctx.sizes.mha:
            cases = [attention.Case("mha", impl, **s) for impl in ("auto", "sdpa")]
            auto, sdpa = _attention(cases, ctx, autocast=None if precision == "fp32" else precision)
            rows += [asdict(auto), asdict(sdpa)]
            if auto.status != "ok" or sdpa.status != "ok":
                ok = False
                texts.append(f"T={s['t']} {precision}: {auto.status} / {sdpa.status}")
                continue
            train, fwd = auto.train_s / sdpa.train_s, auto.forward_s / sdpa.forward_s
            texts.append(
                f"T={s['t']} {precision}: train {train:.3f}x, forward {fwd:.3f}x "
                f"({'within' if max(train, fwd) <= 1.05 else 'over'} 5%)"
            )
    return {"ok": ok, "figure": "attnkit / SDPA: " + "; ".join(texts), "rows": rows}


def _recorded_cpu_step(name: str) -> tuple[float, str] | None:
    """The step time of the row ``name`` in the last run of results/models_vs_plain.json that
    measured it, and that run's machine."""
    path = ROOT / "results" / "models_vs_plain.json"
    if not path.exists():
        return None
    data = json.loads(path.read_text())
    for run in reversed(data.get("runs", [data])):
        for row in run.get("rows", []):
            if row.get("name") == name and row.get("status") == "ok":
                return row["step_s"], run.get("machine", "?")
    return None


def _model_step(ctx: Context, family: str, target: float | None) -> dict:
    from benchmarks import models_vs_plain

    names, shapes, smoke, _ = models_vs_plain.FAMILIES[family]
    shape = list(smoke if ctx.tiny else shapes[0])
    label = " ".join(f"{n}={v}" for n, v in zip(names, shape))
    rows = {}
    for device in dict.fromkeys((ctx.device, "cpu")):
        rows[device] = _case(
            models_vs_plain.measure,
            {
                "family": family,
                "impl": "attnkit",
                "shape": shape,
                "reps": ctx.sizes.reps,
                "time_budget": ctx.sizes.case_s,
                "device": device,
            },
            ctx,
        )
    bad = [f"{d}: {r['status']}: {r.get('note')}" for d, r in rows.items() if r["status"] != "ok"]
    if bad:
        return {"ok": False, "figure": "; ".join(bad), "rows": rows}
    on, cpu = rows[ctx.device], rows["cpu"]
    figure = (
        f"{label} training step: {ctx.device} {on['step_s'] * 1e3:.1f} ms, this "
        f"machine's CPU ({cpu['threads']} threads) {cpu['step_s'] * 1e3:.1f} ms "
        f"({cpu['step_s'] / on['step_s']:.1f}x)"
    )
    recorded = _recorded_cpu_step(f"{family} {label} attnkit")
    out = {"ok": True, "rows": rows}
    if recorded:
        seconds, machine = recorded
        ratio = seconds / on["step_s"]
        figure += (
            f"; results/models_vs_plain.json's CPU ({machine}) {seconds * 1e3:.0f} ms ({ratio:.1f}x"
        )
        if target is not None:
            out["reached"] = ratio >= target
            figure += f"; target >= {target:g}x: {'reached' if ratio >= target else 'missed'}"
        figure += ")"
        out["recorded_cpu"] = {"step_s": seconds, "machine": machine, "ratio": ratio}
    return {**out, "figure": figure}


def step_bahdanau(ctx: Context) -> dict:
    return _model_step(ctx, "bahdanau", target=10)


def step_transformer(ctx: Context) -> dict:
    return _model_step(ctx, "transformer", target=None)


def step_decoding(ctx: Context) -> dict:
    from benchmarks import decoding_speed

    rows, texts, ok = {}, [], True
    for name in ctx.sizes.decoding:
        family, beam, ctc_weight = decoding_speed.CASES[name]
        row = _case(
            decoding_speed.measure,
            {
                "family": family,
                "beam": beam,
                "ctc_weight": ctc_weight,
                "reps": ctx.sizes.reps,
                "time_budget": ctx.sizes.case_s,
                "device": ctx.device,
            },
            ctx,
        )
        rows[name] = row
        if row["status"] != "ok":
            ok = False
            texts.append(f"{name}: {row['status']}: {row.get('note')}")
            continue
        texts.append(
            f"{name} {row['batch'] / row['s']:.0f}/s ({row['s'] * 1e3:.0f} ms a batch "
            f"of {row['batch']})"
        )
    return {"ok": ok, "figure": "; ".join(texts), "rows": rows}


def step_onnx(ctx: Context) -> dict:
    import numpy as np
    import onnxruntime as ort
    import torch

    from attnkit.data import generate_pairs
    from attnkit.export.decoder_state import flatten
    from attnkit.tasks.loading import load_task_model
    from attnkit.tokens import BOS

    checkpoint = ctx.work / "runs" / "translate-fp32" / "checkpoint"
    if not (checkpoint / "model.safetensors").exists():
        return {"ok": False, "figure": f"{checkpoint}: missing (train-translate saves it)"}
    folder = ctx.work / "onnx"
    code, _ = _cli(["export", "--checkpoint", str(checkpoint), "--out", str(folder), "--force"])
    if code != 0:
        return {"ok": False, "figure": f"attnkit export exit {code}"}
    meta = json.loads((folder / "attnkit.json").read_text())
    spec = importlib.util.spec_from_file_location("attnkit_runner", folder / "attnkit_runner.py")
    runner = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(runner)
    encoder = ort.InferenceSession(str(folder / meta["encoder"]["file"]))
    step = ort.InferenceSession(str(folder / meta["decoder_step"]["file"]))
    vocab_src, vocab_tgt = runner.Vocab(meta["vocab"]["src"]), runner.Vocab(meta["vocab"]["tgt"])
    texts = [s for s, _ in generate_pairs(ctx.sizes.onnx_sentences, split="test", seed=1)]

    # the graphs against the model on the device, in full float32 (no TF32 matmuls)
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    model, _ = load_task_model(checkpoint, "translate", ctx.device)
    model.eval()
    ids = [vocab_src.encode(t) for t in texts]
    src = np.zeros((len(ids), max(map(len, ids))), dtype=np.int64)
    for i, row in enumerate(ids):
        src[i, : len(row)] = row
    src_len = np.array([len(row) for row in ids], dtype=np.int64)
    names = [o.name for o in encoder.get_outputs()]
    state = dict(zip(names, encoder.run(None, {"src": src, "src_len": src_len})))
    tokens = np.full(len(ids), BOS, dtype=np.int64)
    with torch.no_grad():
        want = model.start(
            torch.from_numpy(src).to(ctx.device), torch.from_numpy(src_len).to(ctx.device)
        )
        state_diff = max(
            float(np.abs(state[n] - t.cpu().numpy()).max()) for n, t in flatten(want).items()
        )
        step_diff = 0.0
        for _ in range(5):
            log_probs, want, _ = model.step(torch.from_numpy(tokens).to(ctx.device), want)
            feed = {i.name: state[i.name] for i in step.get_inputs() if i.name != "tokens"}
            got = dict(
                zip(
                    [o.name for o in step.get_outputs()], step.run(None, {"tokens": tokens, **feed})
                )
            )
            step_diff = max(
                step_diff, float(np.abs(got["log_probs"] - log_probs.cpu().numpy()).max())
            )
            state.update({s["name"]: got[s["next"]] for s in meta["state"] if s["next"]})
            tokens = log_probs.argmax(-1).cpu().numpy()

    # the exported runner's translations (one sentence at a time) against attnkit translate's
    exported = []
    for row in ids:
        feed = {"src": np.array([row]), "src_len": np.array([len(row)])}
        start = dict(zip(names, encoder.run(None, feed)))
        exported.append(vocab_tgt.decode(runner.decode(step, start, meta, feed)[0][0]))
    code, printed = _cli(
        ["translate", "--checkpoint", str(checkpoint), "--device", ctx.device, *texts]
    )
    translated = printed.splitlines()
    same = sum(a == b for a, b in zip(exported, translated))
    ok = code == 0 and max(state_diff, step_diff) <= 1e-4
    figure = (
        f"translation trained on {ctx.device} exported (opset {meta['opset']}): max "
        f"|difference| {state_diff:.1e} in the encoder state, {step_diff:.1e} in 5 steps' "
        f"log-probabilities (limit 1e-4); {same} of {len(texts)} translations equal"
    )
    return {
        "ok": ok,
        "figure": figure,
        "state_diff": state_diff,
        "step_diff": step_diff,
        "exported": exported,
        "translated": translated,
    }


STEP_FUNCTIONS = {
    "tests-cuda": step_tests_cuda,
    "tests-attention-models": step_tests_attention_models,
    **{f"train-{task}": (lambda ctx, task=task: step_train(ctx, task)) for task in TASKS},
    "torchrun": step_torchrun,
    "additive": step_additive,
    "scaled-dot": step_scaled_dot,
    "bahdanau": step_bahdanau,
    "transformer": step_transformer,
    "decoding": step_decoding,
    "onnx": step_onnx,
}


def _run_step(name: str, ctx: Context) -> int:
    """A step's process: run it, write its result to WORK/results/NAME.json; 0 if it passed."""
    result = STEP_FUNCTIONS[name](ctx)
    path = ctx.work / "results" / f"{name}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, default=str))
    print(f"\n{name}: {'passed' if result['ok'] else 'failed'}: {result['figure']}", flush=True)
    return 0 if result["ok"] else 1


# --------------------------------------------------------------------------- the whole check


def prepare(data: Path, n: int = UTTERANCES) -> Path:
    """Write ``n`` built-in utterances (test split) as WAV files and ``manifest.tsv`` into
    ``data/speech``; returns the manifest. Needs espeak-ng."""
    from attnkit.data import plan_utterances, synthesize, write_wav

    speech = Path(data) / "speech"
    speech.mkdir(parents=True, exist_ok=True)
    rows = []
    for i, u in enumerate(plan_utterances(n, split="test", seed=1, kinds=("digits", "numbers"))):
        write_wav(
            speech / f"{i:03d}.wav",
            *synthesize(u.transcript, voice=u.voice, speed=u.speed, pitch=u.pitch),
        )
        rows.append(f"{i:03d}.wav\t{u.transcript}\n")
    manifest = speech / "manifest.tsv"
    manifest.write_text("".join(rows), encoding="utf-8")
    return manifest


def together(phase: int, tiny: bool) -> bool:
    """Whether the steps of ``phase`` run at the same time: the tests, and the trainings; the
    figures one at a time, as they are timed (at --tiny sizes they are not figures)."""
    return phase in (1, 2) or tiny


def reserve(steps: list[Step], tiny: bool) -> float:
    """The least time ``steps`` need."""
    phases = {s.phase for s in steps}
    return sum(
        (max if together(p, tiny) else sum)(s.least_s for s in steps if s.phase == p)
        for p in phases
    )


class Check:
    """The run: its steps' processes, the JSON and the log in ``out``."""

    def __init__(self, args, work: Path, argv: list[str] | None):
        self.args, self.work = args, work
        self.out = args.out
        self.rows: list[dict] = []
        self.start = time.perf_counter()
        command = shlex.join(
            ["python", "-m", "benchmarks.gpu_check", *(sys.argv[1:] if argv is None else argv)]
        )
        self.info = {
            **harness.run_info(args.device),
            "command": command,
            "tiny": args.tiny,
            "budget_s": args.budget,
        }
        self.log = self.out / "gpu_check.log"
        self.log.write_text(
            f"{self.info['command']}\n{self.info['machine']}\n"
            f"commit {self.info['commit']}, {self.info['date']}\n"
        )

    def left(self) -> float:
        return self.args.budget - (time.perf_counter() - self.start)

    def run(self, step: Step, reserve_s: float) -> dict:
        """Run ``step`` in a process of its own for at most its limit, less than what is left
        of the budget by ``reserve_s`` (the steps after it); its row."""
        limit = min(step.limit_s, self.left() - reserve_s)
        row = {"name": step.name, "phase": step.phase, "limit_s": round(max(limit, 0))}
        if limit < TOO_LITTLE_S:
            return {
                **row,
                "status": "not run",
                "seconds": 0.0,
                "figure": f"{self.left():.0f} s left of --budget {self.args.budget:g}",
            }
        cmd = [
            sys.executable,
            "-m",
            "benchmarks.gpu_check",
            "--step",
            step.name,
            "--device",
            self.args.device,
            "--work",
            str(self.work),
            "--data",
            str(self.args.data),
            "--limit",
            str(limit),
            *(["--tiny"] if self.args.tiny else []),
        ]
        log = self.work / "logs" / f"{step.name}.log"
        path = self.work / "results" / f"{step.name}.json"
        path.unlink(missing_ok=True)  # written by the step when it ends
        # tiny sizes: one torch thread, what the tiny steps are fastest with
        env = {**_env(), **({"OMP_NUM_THREADS": "1"} if self.args.tiny else {})}
        status, seconds = run_entry(cmd, limit, log, env=env, cwd=ROOT)
        result = json.loads(path.read_text()) if path.exists() else {}
        if status == "ok":
            state = "passed"
        elif status.startswith("over"):
            state = "stopped"
        else:
            state = "failed"
        lines = log.read_text(errors="replace").strip().splitlines()
        figure = result.get("figure") or (f"{status}: " + (lines[-1] if lines else "no output"))
        details = {k: v for k, v in result.items() if k not in ("ok", "figure")}
        return {
            **row,
            "status": state,
            "seconds": round(seconds, 1),
            "figure": figure,
            "details": details,
        }

    def record(self, row: dict) -> None:
        self.rows.append(row)
        line = summary_line(row)
        print(line, flush=True)
        log = self.work / "logs" / f"{row['name']}.log"
        with open(self.log, "a") as f:
            f.write(
                f"\n===== {row['name']}: {row['status']} ({row['seconds']:.0f} s of "
                f"{row['limit_s']} s) =====\n"
            )
            if log.exists():
                f.write(log.read_text(errors="replace"))
        self.write()

    def write(self, summary: list[str] | None = None) -> None:
        data = {
            **self.info,
            "seconds": round(time.perf_counter() - self.start, 1),
            "steps": self.rows,
            **({"summary": summary} if summary else {}),
        }
        (self.out / "gpu_check.json").write_text(json.dumps(data, indent=1, default=str))


def summary_line(row: dict) -> str:
    return f"{row['name']:<24} {row['status']:<8} {row['seconds']:>5.0f} s  {row['figure']}"


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.gpu_check", description=__doc__.split("\n\n")[0]
    )
    harness.add_device_arg(p)
    p.add_argument("--out", type=Path, help="folder for gpu_check.json and gpu_check.log")
    p.add_argument("--tiny", action="store_true", help="tiny sizes: the dry run")
    p.add_argument(
        "--budget", type=float, default=470.0, help="seconds for the whole check (default 470)"
    )
    p.add_argument(
        "--jobs",
        type=int,
        help="steps at a time where they run together (default: 6 on a GPU, 2 on the CPU)",
    )
    p.add_argument("--match", help="only the steps whose name contains this")
    p.add_argument(
        "--data",
        type=Path,
        default=DATA,
        help=f"the speech WAVs' folder (default {DATA.relative_to(ROOT)})",
    )
    p.add_argument(
        "--work",
        type=Path,
        help="the steps' files (default: a temporary folder, deleted at the end)",
    )
    p.add_argument(
        "--prepare",
        type=Path,
        metavar="DIR",
        help="write the speech WAVs into DIR/speech and stop (needs espeak-ng)",
    )
    p.add_argument("--step", help=argparse.SUPPRESS)  # a step's own process
    p.add_argument("--limit", type=float, default=600.0, help=argparse.SUPPRESS)
    p.add_argument("--ddp-probe", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    if args.prepare:
        print(f"wrote {prepare(args.prepare)}")
        return 0
    if args.ddp_probe:
        print(json.dumps(ddp_probe(args.device)))
        return 0
    if args.step:
        return _run_step(
            args.step, Context(args.device, args.tiny, args.work, args.data.resolve(), args.limit)
        )
    if args.out is None:
        p.error("--out is required")
    args.out.mkdir(parents=True, exist_ok=True)
    args.data = args.data.resolve()
    steps = [s for s in STEPS if args.match is None or args.match in s.name]
    with contextlib.ExitStack() as stack:
        work = args.work or Path(
            stack.enter_context(tempfile.TemporaryDirectory(prefix="gpu-check-"))
        )
        (work / "logs").mkdir(parents=True, exist_ok=True)
        check = Check(args, work.resolve(), argv)
        jobs = args.jobs or (len(TASKS) + 1 if args.device.startswith("cuda") else 2)
        for phase in sorted({s.phase for s in steps}):
            group = [s for s in steps if s.phase == phase]
            later = [s for s in steps if s.phase > phase]
            if together(phase, args.tiny):
                with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
                    runs = [pool.submit(check.run, s, reserve(later, args.tiny)) for s in group]
                    for run in runs:
                        check.record(run.result())
                continue
            for i, s in enumerate(group):
                check.record(check.run(s, reserve(group[i + 1 :] + later, args.tiny)))
        summary = [summary_line(r) for r in check.rows]
        check.write(summary)
        with open(check.log, "a") as f:
            f.write("\n===== summary =====\n" + "\n".join(summary) + "\n")
    counts = {
        s: sum(r["status"] == s for r in check.rows)
        for s in ("passed", "failed", "stopped", "not run")
    }
    print(
        ", ".join(f"{n} {s}" for s, n in counts.items() if n)
        + f" in {time.perf_counter() - check.start:.0f} s; {args.out / 'gpu_check.json'}, "
        f"{args.out / 'gpu_check.log'}"
    )
    return 0 if counts["passed"] == len(check.rows) else 1


if __name__ == "__main__":
    sys.exit(main())
