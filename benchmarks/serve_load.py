"""Load on ``attnkit serve``: throughput and latency at 1, 8, 32 and 128 concurrent clients.

For each model (``--models``: checkpoints or ONNX exports of translation, given texts of the
test split, or of speech recognition, given WAV files of spoken digits, espeak-ng; else
tones; default ``builtin:translate-dates`` and ``builtin:asr-digits``) it starts ``attnkit
serve`` on a free localhost port, warms it up, then for each number of clients sends requests
from that many concurrent clients, each client sending its next request when its answer
arrives, for ``--time-budget`` seconds (Python's clients stop sooner, after 8 requests per
client, at least 32 and at most ``--requests``).

The clients are wrk's (Debian's ``wrk``: one C thread, a connection per client) where it is
installed, else Python's (asyncio, one httpx connection pool). The clients share the machine
with the server, and httpx's take about as much CPU per request as the server does: on two
cores they cannot send fast enough to load it past a few tens of clients (at 128 the server's
batches shrank to 4), so figures are taken with wrk; ``--client httpx`` forces the other.

A row per level: requests answered and their statuses, requests per second, latency p50 and
p99 (milliseconds from sending to the answer), and the mean batch the server decoded (from
``/metrics``). Then each level against one client's (:func:`ratios`): the throughput ratio
and p99 over the lone requests' p99 (and p50), with issue 62's targets at 32 clients
(throughput >= 8x, p99 <= 3x). The server decodes with its defaults but ``--max-batch`` and
``--max-wait-ms``.

    python -m benchmarks.serve_load --json results/serve_load.json
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path

import httpx

from benchmarks import harness

# wrk's script: the request bodies and their content types from files; at the end one JSON
# line of the counts and the latency percentiles (microseconds).
WRK_SCRIPT = """
local bodies, types = {}, {}
for i = 1, COUNT do
  local f = io.open(FOLDER .. "/" .. i .. ".body", "rb"); bodies[i] = f:read("*a"); f:close()
  f = io.open(FOLDER .. "/" .. i .. ".type", "rb"); types[i] = f:read("*a"); f:close()
end
local next = 0
request = function()
  next = next % COUNT + 1
  return wrk.format("POST", PATH, {["Content-Type"] = types[next]}, bodies[next])
end
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format('{"requests": %d, "us": %d, "p50": %d, "p99": %d, "connect": %d, '
    .. '"read": %d, "write": %d, "status": %d, "timeout": %d}\\n', summary.requests,
    summary.duration, latency:percentile(50), latency:percentile(99), e.connect, e.read,
    e.write, e.status, e.timeout))
end
"""

CLIENTS = (1, 8, 32, 128)
MODELS = ("builtin:translate-dates", "builtin:asr-digits")
# issue 62's targets at TARGET_CLIENTS: requests/s at least THROUGHPUT_TARGET times one
# client's, p99 at most P99_TARGET times a lone request's (the 1-client level's p99)
TARGET_CLIENTS, THROUGHPUT_TARGET, P99_TARGET = 32, 8.0, 3.0


def _task(model: str) -> str:
    """The task of ``model``, an ONNX export or a checkpoint."""
    from attnkit.export import is_export, read_export
    from attnkit.train import load_checkpoint

    if is_export(model):
        return read_export(model)["task"]
    return load_checkpoint(model).config["task"]


def _inputs(task: str, n: int, folder: Path) -> list[dict]:
    """Keyword arguments of ``httpx.post`` for ``n`` distinct requests to a model of ``task``."""
    if task == "translate":
        from attnkit.data import generate_pairs

        return [
            {"json": {"text": source}} for source, _ in generate_pairs(n, split="test", seed=11)
        ]
    from attnkit.data import write_wav

    if shutil.which("espeak-ng"):
        from attnkit.data import synthesize

        words = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]
        texts = [" ".join(words[(i * 7 + j) % 10] for j in range(3)) for i in range(n)]
        audio = [synthesize(text, voice="en-us+m6", speed=165) for text in texts]
    else:
        import torch

        t = torch.arange(16000) / 16000
        audio = [(0.3 * torch.sin(2 * torch.pi * (200 + 10 * i) * t), 16000) for i in range(n)]
    paths = [
        write_wav(folder / f"u{i}.wav", samples, rate) for i, (samples, rate) in enumerate(audio)
    ]
    return [{"files": {"audio": (p.name, p.read_bytes(), "audio/wav")}} for p in paths]


def _start(model: str, max_batch: int, max_wait_ms: float) -> tuple[subprocess.Popen, str]:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "attnkit",
            "serve",
            "--checkpoint",
            model,
            "--port",
            "0",
            "--max-batch",
            str(max_batch),
            "--max-wait-ms",
            str(max_wait_ms),
            "--max-queue",
            "512",
            "--timeout",
            "120",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    for line in proc.stderr:
        found = re.search(r"running on (http://127\.0\.0\.1:\d+)", line)
        if found:
            # keep reading its log, so that the pipe never fills
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, found.group(1)
    raise RuntimeError(f"{model}: the server ended before listening (exit {proc.wait()})")


def _batches(url: str, path: str) -> tuple[float, float]:
    """The sum and count of the server's batch-size histogram."""
    text = httpx.get(url + "/metrics").text
    total = float(re.search(r"^attnkit_batch_size_sum (\S+)", text, re.M).group(1))
    count = float(re.search(r"^attnkit_batch_size_count (\S+)", text, re.M).group(1))
    return total, count


async def _level(
    url: str, path: str, inputs: list[dict], clients: int, requests: int, budget: float
) -> dict:
    latencies, statuses = [], Counter()
    sent = 0
    deadline = time.perf_counter() + budget
    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(base_url=url, timeout=180, limits=limits) as client:

        async def one_client():
            nonlocal sent
            while sent < requests and time.perf_counter() < deadline:
                kwargs = inputs[sent % len(inputs)]
                sent += 1
                start = time.perf_counter()
                try:
                    r = await client.post(path, **kwargs)
                    statuses[r.status_code] += 1
                except httpx.HTTPError as exc:
                    statuses[type(exc).__name__] += 1
                    continue
                latencies.append(time.perf_counter() - start)

        start = time.perf_counter()
        await asyncio.gather(*(one_client() for _ in range(clients)))
        seconds = time.perf_counter() - start
    ms = sorted(x * 1000 for x in latencies)
    return {
        "clients": clients,
        "requests": sent,
        "statuses": dict(statuses),
        "seconds": round(seconds, 3),
        "requests_per_s": round(len(ms) / seconds, 2),
        "p50_ms": round(statistics.median(ms), 1) if ms else None,
        "p99_ms": round(ms[min(len(ms) - 1, int(0.99 * len(ms)))], 1) if ms else None,
    }


def _wrk_script(url: str, path: str, inputs: list[dict], folder: Path) -> Path:
    """wrk's script in ``folder``, sending ``inputs`` (their bodies written beside it)."""
    bodies = folder / "bodies"
    bodies.mkdir()
    for i, kwargs in enumerate(inputs, 1):
        request = httpx.Request("POST", url + path, **kwargs)
        (bodies / f"{i}.body").write_bytes(request.read())
        (bodies / f"{i}.type").write_text(request.headers["content-type"])
    script = folder / "load.lua"
    script.write_text(
        f"local COUNT, FOLDER, PATH = {len(inputs)}, {json.dumps(str(bodies))}, "
        f"{json.dumps(path)}\n" + WRK_SCRIPT
    )
    return script


def _wrk_level(url: str, path: str, script: Path, clients: int, budget: float) -> dict:
    """:func:`_level` with wrk's clients, for ``budget`` seconds (wrk runs for a duration)."""
    out = subprocess.run(
        [
            "wrk",
            "-t1",
            f"-c{clients}",
            f"-d{max(1, round(budget))}s",
            "--timeout",
            "180s",
            "-s",
            str(script),
            url + path,
        ],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    counts = json.loads(out.strip().splitlines()[-1])
    failed = {k: counts[k] for k in ("connect", "read", "write", "timeout") if counts[k]}
    statuses = {200: counts["requests"] - counts["status"]}
    if counts["status"]:
        statuses["not 2xx"] = counts["status"]
    seconds = counts["us"] / 1e6
    return {
        "clients": clients,
        "requests": counts["requests"],
        "statuses": {**statuses, **failed},
        "seconds": round(seconds, 3),
        "requests_per_s": round(counts["requests"] / seconds, 2),
        "p50_ms": round(counts["p50"] / 1000, 1),
        "p99_ms": round(counts["p99"] / 1000, 1),
    }


def measure(
    model: str,
    *,
    clients=CLIENTS,
    requests: int = 1024,
    budget: float = 60.0,
    max_batch: int = 32,
    max_wait_ms: float = 10.0,
    client: str = "httpx",
) -> list[dict]:
    """The rows of one model (see the module's docstring)."""
    task = _task(model)
    if task not in ("translate", "asr"):
        raise ValueError(f"{model}: a model of task {task!r}; expected translate or asr")
    path = "/translate" if task == "translate" else "/transcribe"
    with tempfile.TemporaryDirectory() as folder:
        inputs = _inputs(task, 64, Path(folder))
        proc, url = _start(model, max_batch, max_wait_ms)
        try:
            for kwargs in inputs[:3]:  # first calls: allocations, kernels
                httpx.post(url + path, timeout=120, **kwargs).raise_for_status()
            script = _wrk_script(url, path, inputs, Path(folder)) if client == "wrk" else None
            rows = []
            for n in clients:
                total, count = _batches(url, path)
                if client == "wrk":
                    row = _wrk_level(url, path, script, n, budget)
                else:
                    row = asyncio.run(
                        _level(url, path, inputs, n, min(requests, max(32, 8 * n)), budget)
                    )
                total2, count2 = _batches(url, path)
                row["mean_batch"] = round((total2 - total) / max(count2 - count, 1), 2)
                rows.append({"model": model, **row})
                print(
                    f"{model:26s} {n:4d} clients: {row['requests_per_s']:7.2f} req/s, p50 "
                    f"{row['p50_ms']} ms, p99 {row['p99_ms']} ms, batch "
                    f"{row['mean_batch']}, {row['statuses']}",
                    flush=True,
                )
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(60)
    return rows


def ratios(rows: list[dict]) -> list[dict]:
    """Each model's levels above one client against its 1-client level: ``throughput``
    (requests/s over one client's), ``p99`` (p99 over the lone requests' p99) and ``p99_p50``
    (p99 over the lone requests' p50); at :data:`TARGET_CLIENTS`, ``met`` says whether both
    of issue 62's targets are."""
    lone = {r["model"]: r for r in rows if r["clients"] == 1}
    out = []
    for r in rows:
        one = lone.get(r["model"])
        if r["clients"] == 1 or one is None or not (r["p99_ms"] and one["p99_ms"]):
            continue
        row = {
            "model": r["model"],
            "clients": r["clients"],
            "throughput": round(r["requests_per_s"] / one["requests_per_s"], 2),
            "p99": round(r["p99_ms"] / one["p99_ms"], 2),
            "p99_p50": round(r["p99_ms"] / one["p50_ms"], 2),
        }
        if r["clients"] == TARGET_CLIENTS:
            row["met"] = {
                "throughput": row["throughput"] >= THROUGHPUT_TARGET,
                "p99": row["p99"] <= P99_TARGET,
            }
        out.append(row)
    return out


def main(argv=None) -> int:
    p = harness.parser(
        __doc__.split("\n\n")[0],
        time_budget=60.0,
        time_budget_help="seconds per level of clients at most",
    )
    p.add_argument(
        "--requests",
        type=int,
        default=1024,
        help="requests per level at most (else 8 per client, at least 32; default 1024)",
    )
    p.add_argument(
        "--models",
        default=",".join(MODELS),
        help=f"checkpoints or ONNX export folders, comma-separated (default {','.join(MODELS)})",
    )
    p.add_argument(
        "--clients",
        default=",".join(map(str, CLIENTS)),
        help="levels of concurrent clients (default 1,8,32,128)",
    )
    p.add_argument(
        "--client",
        choices=("wrk", "httpx"),
        default="wrk" if shutil.which("wrk") else "httpx",
        help="whose clients send the requests (default: wrk where installed)",
    )
    p.add_argument("--max-batch", type=int, default=32)
    p.add_argument("--max-wait-ms", type=float, default=10.0)
    args = p.parse_args(argv)
    if args.threads:
        os.environ["OMP_NUM_THREADS"] = str(args.threads)
    clients = tuple(int(c) for c in args.clients.split(","))
    rows = []
    for model in args.models.split(","):
        if args.match and args.match not in model:
            continue
        rows += measure(
            model,
            clients=clients,
            requests=args.requests,
            budget=args.time_budget,
            max_batch=args.max_batch,
            max_wait_ms=args.max_wait_ms,
            client=args.client,
        )
    print(
        harness.table_header(
            ["model", "clients", "req/s", "p50 ms", "p99 ms", "mean batch", "statuses"]
        )
    )
    for r in rows:
        print(
            harness.table_row(
                [
                    r["model"],
                    r["clients"],
                    r["requests_per_s"],
                    r["p50_ms"],
                    r["p99_ms"],
                    r["mean_batch"],
                    r["statuses"],
                ]
            )
        )
    found = ratios(rows)
    print(
        "\nAgainst one client (throughput: requests/s; p99: over the lone requests' p99, and "
        f"their p50); issue 62's targets at {TARGET_CLIENTS} clients: throughput >= "
        f"{THROUGHPUT_TARGET:g}x, p99 <= {P99_TARGET:g}x"
    )
    print(
        harness.table_header(
            ["model", "clients", "throughput", "p99 / lone p99", "p99 / lone p50", "targets"]
        )
    )
    for r in found:
        met = r.get("met")
        verdict = (
            ""
            if met is None
            else ", ".join(f"{k} {'met' if v else 'missed'}" for k, v in met.items())
        )
        print(
            harness.table_row(
                [
                    r["model"],
                    r["clients"],
                    f"{r['throughput']}x",
                    f"{r['p99']}x",
                    f"{r['p99_p50']}x",
                    verdict,
                ]
            )
        )
    if args.json:
        harness.write_json(
            args.json,
            rows,
            ratios=found,
            client=args.client,
            max_batch=args.max_batch,
            max_wait_ms=args.max_wait_ms,
            requests=args.requests,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
