"""Decoding speed: greedy and beam search through attnkit's decoding front door
(:func:`attnkit.decoding.front`) on seeded, untrained models, one fresh process per case.

Each case decodes one batch under ``torch.no_grad``; the figure is the median wall time of
``--reps`` decodings after one warm-up, and ``tokens`` (the sum of the output ids) lets two
versions' rows be checked for the same outputs. Compare versions by running the script with
another checkout's source first on the path:

    python -m benchmarks.decoding_speed --threads 1 --json results/decoding_speed.json
    PYTHONPATH=<another checkout>/src python -m benchmarks.decoding_speed --threads 1
    python -m benchmarks.decoding_speed --device cuda     # on a GPU, timed to its kernels' end
"""

from __future__ import annotations

import sys

import torch

from attnkit.decoding import Decoding, decode
from attnkit.models import LAS, Seq2Seq
from benchmarks import harness

# name -> (model family, beam, CTC weight)
CASES = {
    "bahdanau greedy": ("bahdanau", 1, 0.0),
    "bahdanau beam 5": ("bahdanau", 5, 0.0),
    "luong beam 5": ("luong", 5, 0.0),
    "las beam 5": ("las", 5, 0.0),
    "las beam 5, CTC weight 0.3": ("las", 5, 0.3),
}
SEQ2SEQ = dict(batch=32, src_len=40, max_len=40)  # emb = hidden = 256, vocabularies of 100
SPEECH = dict(batch=16, frames=800, max_len=60)  # LAS at its default sizes, 80 features


def measure(
    family: str, beam: int, ctc_weight: float, reps: int, time_budget: float, device: str = "cpu"
) -> dict:
    """Median seconds of one batch's decoding, in this process, on ``device`` (on a GPU each
    decoding is timed to its kernels' end); ``batch``, the sentences or utterances decoded."""
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    if family == "las":
        model = LAS(30, features=80, ctc=True)
        inputs = torch.randn(SPEECH["batch"], SPEECH["frames"], 80, generator=gen)
        lengths = torch.full((SPEECH["batch"],), SPEECH["frames"])
        max_len = SPEECH["max_len"]
    else:
        extra = {"score": "general", "input_feeding": True} if family == "luong" else {}
        model = Seq2Seq(100, 100, kind=family, emb=256, hidden=256, **extra)
        inputs = torch.randint(4, 100, (SEQ2SEQ["batch"], SEQ2SEQ["src_len"]), generator=gen)
        lengths = torch.full((SEQ2SEQ["batch"],), SEQ2SEQ["src_len"])
        max_len = SEQ2SEQ["max_len"]
    model.to(device).eval()
    inputs, lengths = inputs.to(device), lengths.to(device)
    decoding = Decoding(beam=beam, ctc_weight=ctc_weight)
    out = {}

    @torch.no_grad()
    def run():
        out["tokens"] = int(
            decode(model, inputs, lengths, max_len=max_len, decoding=decoding).tokens.sum()
        )

    timing = harness.timed(run, reps=reps, time_budget=time_budget / 2, device=device)
    return {
        "s": timing.median,
        "times": timing.times,
        "tokens": out["tokens"],
        "batch": int(inputs.shape[0]),
        "threads": torch.get_num_threads(),
    }


def main(argv=None) -> int:
    p = harness.parser(__doc__.split("\n\n")[0], time_budget=300.0, reps=5, device=True)
    args = p.parse_args(argv)
    print(harness.table_header(["case", "decoding s", "tokens (sum of ids)"]))
    rows = []
    for name, (family, beam, ctc_weight) in CASES.items():
        if args.match is not None and args.match not in name:
            continue
        row = {
            "name": name,
            **harness.run(
                measure,
                {
                    "family": family,
                    "beam": beam,
                    "ctc_weight": ctc_weight,
                    "reps": args.reps,
                    "time_budget": args.time_budget,
                    "device": args.device,
                },
                time_budget=args.time_budget,
                threads=args.threads,
            ),
        }
        rows.append(row)
        cells = (
            [f"{row['s']:.3f}", row["tokens"]]
            if row["status"] == "ok"
            else [f"{row['status']}: {row['note']}", ""]
        )
        print(harness.table_row([name, *cells]), flush=True)
    if args.json:
        harness.write_json(args.json, rows, device=args.device, reps=args.reps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
