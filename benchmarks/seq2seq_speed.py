"""Seq2seq speed: vectorised Luong training step vs a per-step loop, batched beam search vs one
sentence at a time. Prints a Markdown table and writes JSON.

    python benchmarks/seq2seq_speed.py --json docs/seq2seq_speed.json

Both sides of each comparison compute the same thing with the same (untrained) weights; timing is
the median of ``--reps`` runs after one warm-up.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

from attnkit.decoding import beam_search
from attnkit.models import Seq2Seq


def _median_time(fn, reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def luong_step(batch: int, src_len: int, tgt_len: int, reps: int) -> dict:
    torch.manual_seed(0)
    model = Seq2Seq(60, 60, kind="luong", score="general", emb=64, hidden=256)
    src = torch.randint(4, 60, (batch, src_len))
    lengths = torch.full((batch,), src_len)
    tgt = torch.randint(4, 60, (batch, tgt_len))

    def vectorised():
        logits, _ = model(src, lengths, tgt)  # one GRU call, one attention call for all steps
        logits.logsumexp(-1).mean().backward()

    def loop():
        state = model.start(src, lengths)
        out = []
        for t in range(tgt_len):  # the usual per-step decoder loop, same math
            logits, state, _ = model._step(tgt[:, t], state)
            out.append(logits)
        torch.stack(out, 1).logsumexp(-1).mean().backward()

    with torch.no_grad():  # same function: check before timing
        a, _ = model(src[:2], lengths[:2], tgt[:2])
        state, b = model.start(src[:2], lengths[:2]), []
        for t in range(tgt_len):
            logits, state, _ = model._step(tgt[:2, t], state)
            b.append(logits)
        assert torch.allclose(a, torch.stack(b, 1), atol=1e-4)
    v, lp = _median_time(vectorised, reps), _median_time(loop, reps)
    return {"case": f"Luong (general, no input feeding) training step, B={batch}, S={src_len}, "
                    f"T={tgt_len}, hidden 256", "attnkit_s": v, "baseline_s": lp,
            "baseline": "per-step loop", "speedup": lp / v, "target": 3.0}


def beam(batch: int, src_len: int, max_len: int, beam_size: int, reps: int) -> dict:
    torch.manual_seed(0)
    model = Seq2Seq(60, 60, kind="bahdanau", emb=64, hidden=128).eval()
    src = torch.randint(4, 60, (batch, src_len))
    lengths = torch.full((batch,), src_len)
    kw = dict(beam_size=beam_size, bos=1, eos=2, max_len=max_len)

    @torch.no_grad()
    def batched():
        return beam_search(model.step, model.start(src, lengths), batch_size=batch, **kw)

    @torch.no_grad()
    def one_by_one():
        return [beam_search(model.step, model.start(src[i : i + 1], lengths[i : i + 1]),
                            batch_size=1, **kw) for i in range(batch)]

    together, alone = batched(), one_by_one()
    same = all(torch.equal(together.tokens[i, : alone[i].tokens.shape[1]], alone[i].tokens[0])
               for i in range(batch))
    b, s = _median_time(batched, reps), _median_time(one_by_one, reps)
    return {"case": f"beam search (beam {beam_size}), {batch} sentences, S={src_len}, "
                    f"max_len={max_len}", "attnkit_s": b, "baseline_s": s,
            "baseline": "one sentence at a time", "speedup": s / b, "target": 5.0,
            "same_outputs": same}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--json", type=Path, default=Path("docs/seq2seq_speed.json"))
    args = p.parse_args()
    rows = [luong_step(64, 40, 30, args.reps), beam(64, 30, 30, 5, args.reps)]
    print("| case | attnkit s | baseline | baseline s | speed-up | target |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        verdict = "reached" if r["speedup"] >= r["target"] else "missed"
        print(f"| {r['case']} | {r['attnkit_s']:.3f} | {r['baseline']} | {r['baseline_s']:.3f} | "
              f"{r['speedup']:.1f}x | >= {r['target']:.0f}x: {verdict} |")
    args.json.parent.mkdir(parents=True, exist_ok=True)
    args.json.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
