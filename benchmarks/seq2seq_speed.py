"""Seq2seq speed: vectorised Luong training step vs a per-step loop, batched beam search vs one
sentence at a time. Prints a Markdown table and writes JSON.

    python -m benchmarks.seq2seq_speed --json results/seq2seq_speed.json

Both sides of each comparison compute the same thing with the same (untrained) weights (checked
before timing); each side runs in a fresh process (:mod:`harness`), its time the median of
``--reps`` runs after one warm-up.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F

from attnkit.decoding import beam_search
from attnkit.models import Seq2Seq
from benchmarks import harness

# comparison -> (attnkit side, baseline side)
SIDES = {"luong": ("vectorised", "per-step loop"), "beam": ("batched", "one sentence at a time")}
LUONG = dict(batch=64, src_len=40, tgt_len=30)
BEAM = dict(batch=64, src_len=30, max_len=30, beam_size=5)
TARGETS = {"luong": 3.0, "beam": 5.0}


def luong_step(
    side: str, reps: int, time_budget: float, batch: int, src_len: int, tgt_len: int
) -> dict:
    """A teacher-forced training step (forward + backward) of Luong's model without input
    feeding: one GRU call and one attention call for all steps, or the usual per-step loop
    through the public ``step`` (same math)."""
    torch.manual_seed(0)
    model = Seq2Seq(60, 60, kind="luong", score="general", emb=64, hidden=256)
    src = torch.randint(4, 60, (batch, src_len))
    lengths = torch.full((batch,), src_len)
    tgt = torch.randint(4, 60, (batch, tgt_len))

    def vectorised(n=batch):
        logits, _ = model(src[:n], lengths[:n], tgt[:n])
        return F.log_softmax(logits, -1)  # (B, T, V)

    def loop(n=batch):
        state = model.start(src[:n], lengths[:n])
        out = []
        for t in range(tgt_len):
            log_probs, state, _ = model.step(tgt[:n, t], state)
            out.append(log_probs)
        return torch.stack(out, 1)  # (B, T, V)

    with torch.no_grad():  # same function: check before timing
        if not torch.allclose(vectorised(2), loop(2), atol=1e-4):
            raise AssertionError("the vectorised step and the loop differ")
    forward = vectorised if side == "vectorised" else loop

    def step():
        F.nll_loss(forward().flatten(0, 1), tgt.flatten()).backward()

    return {"s": harness.timed(step, reps=reps, time_budget=time_budget / 2).median}


def beam(
    side: str, reps: int, time_budget: float, batch: int, src_len: int, max_len: int, beam_size: int
) -> dict:
    """Beam search over a batch of sentences at once, or one sentence at a time; the
    one-at-a-time side also says whether both give the same tokens."""
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
        return [
            beam_search(
                model.step, model.start(src[i : i + 1], lengths[i : i + 1]), batch_size=1, **kw
            )
            for i in range(batch)
        ]

    row = {}
    if side == "one sentence at a time":
        together, alone = batched(), one_by_one()
        row["same_outputs"] = all(
            torch.equal(together.tokens[i, : alone[i].tokens.shape[1]], alone[i].tokens[0])
            for i in range(batch)
        )
    run = batched if side == "batched" else one_by_one
    return {**row, "s": harness.timed(run, reps=reps, time_budget=time_budget / 2).median}


def main(argv=None) -> int:
    p = harness.parser(
        __doc__.splitlines()[0], time_budget=600.0, json_path="results/seq2seq_speed.json", reps=3
    )
    args = p.parse_args(argv)
    names = {
        "luong": (
            f"Luong (general, no input feeding) training step, B={LUONG['batch']}, "
            f"S={LUONG['src_len']}, T={LUONG['tgt_len']}, hidden 256"
        ),
        "beam": (
            f"beam search (beam {BEAM['beam_size']}), {BEAM['batch']} sentences, "
            f"S={BEAM['src_len']}, max_len={BEAM['max_len']}"
        ),
    }
    rows = []
    for kind, (fn, sizes) in {"luong": (luong_step, LUONG), "beam": (beam, BEAM)}.items():
        if args.match is not None and args.match not in names[kind]:
            continue
        ours, theirs = (
            harness.run(
                fn,
                {"side": side, "reps": args.reps, "time_budget": args.time_budget, **sizes},
                time_budget=args.time_budget,
                threads=args.threads,
            )
            for side in SIDES[kind]
        )
        row = {"case": names[kind], "baseline": SIDES[kind][1], "target": TARGETS[kind]}
        failed = next((r for r in (ours, theirs) if r["status"] != "ok"), None)
        if failed:
            row.update(status=failed["status"], note=failed["note"])
        else:
            row.update(
                status="ok",
                attnkit_s=ours["s"],
                baseline_s=theirs["s"],
                speedup=theirs["s"] / ours["s"],
            )
            if "same_outputs" in theirs:
                row["same_outputs"] = theirs["same_outputs"]
        rows.append(row)
    print(
        harness.table_header(["case", "attnkit s", "baseline", "baseline s", "speed-up", "target"])
    )
    for r in rows:
        if r["status"] != "ok":
            print(
                harness.table_row(
                    [r["case"], f"{r['status']}: {r['note']}", r["baseline"], "", "", ""]
                )
            )
            continue
        verdict = "reached" if r["speedup"] >= r["target"] else "missed"
        print(
            harness.table_row(
                [
                    r["case"],
                    f"{r['attnkit_s']:.3f}",
                    r["baseline"],
                    f"{r['baseline_s']:.3f}",
                    f"{r['speedup']:.1f}x",
                    f">= {r['target']:.0f}x: {verdict}",
                ]
            )
        )
    if args.json:
        harness.write_json(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
