"""AN4 (CMU's census database: real people spelling names, saying digits, dates, phone numbers):
``attnkit train asr --recipe an4`` under a time budget, then the 130 test utterances decoded
and scored beside ESPnet's published figures. Prints a Markdown table and writes JSON.

    python -m benchmarks.an4 --data build/corpora/an4/data/an4 --time-budget 7200 \\
        --out runs/an4 --json results/an4.json
    python -m benchmarks.an4 --data build/corpora/an4/data/an4 \\
        --checkpoint runs/an4/checkpoint-best --beam 8

``--data`` is the AN4 folder (``etc/`` and ``wav/``, read with ``--format an4``: training on
ESPnet's ``train_nodev``, validation on its ``train_dev``, scores on ``test``; docs/speech.md).
Without ``--checkpoint`` the recipe trains into ``--out`` for ``--time-budget`` seconds (or
``--steps``; ``--resume`` continues the run there), and its best validation's model
(``checkpoint-best``) is scored. Decoding is beam search (``--beam``) with the CTC head's prefix
scores (``--ctc-weight``: joint CTC/attention decoding, docs/decoding.md).

Scores: jiwer's CER and WER over the whole test set (edits summed over utterances, divided by
the reference characters or words), each transcript normalised the same way first: upper
case, white space collapsed to single spaces (AN4's transcripts are upper-case words; the
model writes them so). ESPnet's row is its published result on the same 130 utterances
(egs2/an4/asr1 README: Transformer, BPE 30, speed perturbation, on a GPU), not rerun here.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import jiwer
import torch

from attnkit.cli.decoder_options import joint_decoding
from attnkit.cli.main import main as attnkit_main
from attnkit.decoding import Decoding
from attnkit.tasks.evaluator import evaluate
from attnkit.tasks.loading import load_evaluator, load_lm
from benchmarks import harness

# ESPnet's published figures on AN4's test set (egs2/an4/asr1/README.md, the Transformer row)
ESPNET = {
    "system": "ESPnet egs2/an4/asr1 (Transformer, BPE 30, speed perturbation, GPU; published)",
    "cer": 0.036,
    "wer": 0.074,
}


NORMALIZATION = "upper case, white space collapsed (jiwer CER and WER)"


def normalized(text: str) -> str:
    """A transcript as it is scored: upper case, white space collapsed."""
    return " ".join(text.upper().split())


def train(
    data: Path,
    out: Path,
    *,
    time_budget: float,
    steps: int | None,
    resume: bool,
    recipe: str = "an4",
) -> Path:
    """Train ``--recipe RECIPE`` on ``data`` (``--train`` and ``--valid``: the recipe's format
    reads each role's split) into ``out``; the checkpoint to score."""
    argv = ["train", "asr", "--recipe", recipe, "--train", str(data), "--valid", str(data)]
    argv += ["--out", str(out), "--time-budget", f"{time_budget:g}", "--no-progress"]
    argv += ["--steps", str(steps)] if steps else []
    argv += ["--resume"] if resume else []
    code = attnkit_main(argv)
    if code:
        raise SystemExit(f"attnkit {' '.join(argv)}: exit status {code}")
    best = out / "checkpoint-best"
    return best if best.exists() else out / "checkpoint"


def score(
    checkpoint: Path,
    data: Path,
    decoding: Decoding,
    *,
    format: str = "an4",
    role: str = "test",
    lm: Path | None = None,
) -> tuple[dict, list[dict]]:
    """CER and WER of ``checkpoint`` on the test set of ``data`` read in ``format`` (AN4's;
    ``role="valid"``: the validation set, to choose decoding settings on), and each
    utterance's ``{"id", "reference", "output"}`` (the id: the audio file's name without its
    suffix). ``lm``: the character LM that ``decoding.lm_weight`` fuses."""
    evaluator = load_evaluator(checkpoint)
    evaluator.lm = load_lm(lm, evaluator.vocab, "cpu", checkpoint)
    start = time.perf_counter()
    evaluation = evaluate(evaluator, data, decoding, options={"format": format, "role": role})
    seconds = time.perf_counter() - start
    refs = [normalized(str(e.reference)) for e in evaluation.examples]
    hyps = [normalized(o.text) for o in evaluation.outputs]
    utterances = [
        {"id": Path(e.origin.split(" ")[0]).stem, "reference": r, "output": h}
        for e, r, h in zip(evaluation.examples, refs, hyps)
    ]
    metrics = {
        "n": len(refs),
        "cer": float(jiwer.cer(refs, hyps)),
        "wer": float(jiwer.wer(refs, hyps)),
        "exact": sum(r == h for r, h in zip(refs, hyps)) / max(len(refs), 1),
        "decode_s": round(seconds, 1),
    }
    return metrics, utterances


def parse(argv, description: str, *, data_help: str, out: str) -> argparse.Namespace:
    """The command line of a speech benchmark that trains a recipe or scores a checkpoint."""
    p = harness.parser(
        description,
        time_budget=7200.0,
        time_budget_help="seconds of training (attnkit train --time-budget)",
    )
    p.add_argument("--data", type=Path, required=True, help=data_help)
    p.add_argument("--out", type=Path, default=Path(out), help="the training run folder")
    p.add_argument("--checkpoint", type=Path, help="score this checkpoint instead of training")
    p.add_argument("--steps", type=int, help="training steps (default: the recipe's)")
    p.add_argument("--resume", action="store_true", help="continue the run in --out")
    p.add_argument("--beam", type=int, default=4, help="beam width (default 4; 1: greedy)")
    p.add_argument(
        "--ctc-weight",
        type=float,
        default=0.3,
        help="weight of the CTC prefix scores in the beam (default 0.3; 0: attention alone)",
    )
    p.add_argument(
        "--lm",
        type=Path,
        metavar="CHECKPOINT",
        help="a character LM (attnkit train lm --vocab-from the recogniser) fused with --lm-weight",
    )
    p.add_argument(
        "--lm-weight",
        type=float,
        default=0.0,
        metavar="BETA",
        help="add BETA log p_LM to each token's score (shallow fusion; needs --lm)",
    )
    p.add_argument(
        "--role",
        choices=("test", "valid"),
        default="test",
        help="the set scored: test (default), or the validation set to choose --beam and "
        "--ctc-weight on",
    )
    args = p.parse_args(argv)
    try:  # the decoding, checked as `attnkit eval` checks its --lm and --lm-weight
        args.decoding = joint_decoding(args, Decoding(beam=args.beam))
    except ValueError as exc:
        p.error(str(exc))
    return args


def run(args: argparse.Namespace, *, recipe: str, format: str) -> tuple[dict, list[dict]]:
    """Train ``recipe`` on ``args.data`` (or take ``args.checkpoint``) and score it on the
    test set: this run's row and each test utterance."""
    if args.threads is not None:
        torch.set_num_threads(args.threads)
    start = time.perf_counter()
    checkpoint = args.checkpoint or train(
        args.data,
        args.out,
        time_budget=args.time_budget,
        steps=args.steps,
        resume=args.resume,
        recipe=recipe,
    )
    trained_s = round(time.perf_counter() - start, 1) if args.checkpoint is None else None
    decoding = args.decoding
    metrics, utterances = score(
        checkpoint, args.data, decoding, format=format, role=args.role, lm=args.lm
    )
    ours = {
        "system": f"attnkit LAS, --recipe {recipe} ({checkpoint})",
        "role": args.role,
        **metrics,
        "beam": args.beam,
        "ctc_weight": args.ctc_weight,
        **({"lm": str(args.lm), "lm_weight": args.lm_weight} if args.lm else {}),
        **({"train_s": trained_s} if trained_s is not None else {}),
    }
    return ours, utterances


def print_rows(rows: list[dict], utterances: list[dict], *, n: int) -> None:
    """The Markdown table of ``rows`` (a published row without ``n`` is of ``n``
    utterances), then this run's first five outputs."""
    print(harness.table_header(["system", "test utterances", "CER %", "WER %", "exact %"]))
    for row in rows:
        print(
            harness.table_row(
                [
                    row["system"],
                    row.get("n", n),
                    f"{100 * row['cer']:.1f}",
                    f"{100 * row['wer']:.1f}",
                    f"{100 * row['exact']:.1f}" if "exact" in row else "",
                ]
            )
        )
    for u in utterances[:5]:
        print(f"  {u['id']}: {u['output']!r}   (reference: {u['reference']!r})")


def main(argv=None) -> int:
    args = parse(
        argv, __doc__.splitlines()[0], data_help="the AN4 folder (etc/ and wav/)", out="runs/an4"
    )
    ours, utterances = run(args, recipe="an4", format="an4")
    rows = [ours, ESPNET] if args.role == "test" else [ours]  # ESPnet's figures: the test set
    print_rows(rows, utterances, n=130)
    if args.json:
        harness.write_json(
            args.json,
            rows,
            data=str(args.data),
            normalization=NORMALIZATION,
            utterances=utterances,
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
