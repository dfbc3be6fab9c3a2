"""Training-step time of attnkit's additive-attention decoders in three modes: plain PyTorch
(``ATTNKIT_COMPILE=0``), the default (decoder steps on the C++ step kernel), and the default
after ``attnkit.attention.kernels.warm_up()`` (the Inductor kernels compiled ahead, as
``attnkit train`` does for long runs).

Each (model, mode) runs in a fresh process: a few warm-up steps, then the median of the timed
ones. Models: the Bahdanau translator at the CLI's default size on sentence-length inputs, the
CRNN's attention-decoder head on 800 px lines (400 encoder steps, 40 characters), and LAS with
the location-aware score on 8 s of audio (800 frames, 100 listener steps, 60 characters).

    python benchmarks/decoder_training.py --json docs/decoder_training.json
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

import torch

from attnkit.bench import machine


def build(name: str):
    """Model, a training step's inputs, and the vocabulary size."""
    torch.manual_seed(0)
    if name == "bahdanau":
        from attnkit.models import Seq2Seq

        v, b, s, t = 60, 64, 30, 30
        model = Seq2Seq(v, v, kind="bahdanau", emb=64, hidden=128)
        src = torch.randint(4, v, (b, s))
        src_len = torch.randint(s // 2, s + 1, (b,))
        src_len[0] = s
        tgt = torch.randint(4, v, (b, t + 1))
        return model, (src, src_len, tgt[:, :-1]), tgt[:, 1:], v
    if name == "las-location":
        from attnkit.models import LAS

        v, b, frames, u = 30, 16, 800, 60
        model = LAS(v, score="location", listener_hidden=128, hidden=256)
        tgt = torch.randint(4, v, (b, u + 1))
        return model, (torch.randn(b, frames, 80), torch.full((b,), frames), tgt[:, :-1]), \
            tgt[:, 1:], v
    from attnkit.models import CRNN

    v, b, w, t = 80, 32, 800, 40
    model = CRNN(v, head="attention", attention=None, hidden=128)
    tgt = torch.randint(4, v, (b, t + 1))
    return model, (torch.randn(b, 1, 32, w), torch.full((b,), w), tgt[:, :-1]), tgt[:, 1:], v


MODES = ("plain", "default", "warm")


def worker(name: str, mode: str, steps: int) -> dict:
    from attnkit.attention import kernels

    compile_s = 0.0
    if mode == "warm":
        start = time.perf_counter()
        kernels.warm_up()
        compile_s = time.perf_counter() - start
    model, inputs, target, v = build(name)
    opt = torch.optim.AdamW(model.parameters(), 1e-3)

    def step():
        logits = model(*inputs)[0]
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, v), target.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()

    for _ in range(2):
        step()
    times = []
    for _ in range(steps):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    times.sort()
    return {"model": name, "mode": mode, "step_s": times[len(times) // 2],
            "compile_s": compile_s, "threads": torch.get_num_threads()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=9, help="timed steps per case")
    p.add_argument("--json", help="write the results here")
    p.add_argument("--worker", nargs=2, metavar=("MODEL", "MODE"), help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.worker:
        print(json.dumps(worker(args.worker[0], args.worker[1], args.steps)))
        return
    rows = []
    for name in ("bahdanau", "crnn-attention-head", "las-location"):
        for mode in MODES:
            env = dict(os.environ, **({"ATTNKIT_COMPILE": "0"} if mode == "plain" else {}))
            out = subprocess.run([sys.executable, __file__, "--steps", str(args.steps),
                                  "--worker", name, mode], check=True, capture_output=True,
                                 text=True, env=env).stdout
            rows.append(json.loads(out.strip().splitlines()[-1]))
    print("| model | plain PyTorch step s | default step s | after warm_up() step s | "
          "compile s |")
    print("|---|---|---|---|---|")
    for plain, default, warm in zip(rows[::3], rows[1::3], rows[2::3]):
        print(f"| {plain['model']} | {plain['step_s']:.3f} | {default['step_s']:.3f} "
              f"({default['step_s'] / plain['step_s']:.2f}x) | {warm['step_s']:.3f} "
              f"({warm['step_s'] / plain['step_s']:.2f}x) | {warm['compile_s']:.1f} |")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"torch": torch.__version__, "machine": machine(), "rows": rows}, f,
                      indent=1)


if __name__ == "__main__":
    main()
