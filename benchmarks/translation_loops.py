"""What a translation model does where its outputs loop: the outputs the loop detector stops,
and for each the model's own probabilities of the tokens it wrote.

    python -m benchmarks.translation_loops --checkpoint CKPT --src FILE[.gz] [--beam 5] [--limit N]

Each source of ``--src`` (one a line) is decoded twice, as ``attnkit translate`` does (the loop
detector on) and with ``loop_stop=False``; an output that differs was stopped as a loop. For
each of those, the output decoded without the stop (its first ``--tokens`` tokens) is scored
again by one teacher-forced forward pass of the whole sequence, which the training loss uses:

* ``agree``: the share of its tokens that are the full forward's most probable token at that
  step (greedy decoding: 1.0 unless the incremental decoder, its key/value cache and
  positions, computes another model than training does);
* ``p_before`` / ``p_loop``: the mean probability of the tokens written before the loop began
  (the first piece written three times in a row; for a loop of a longer unit, where the
  detector stopped it) and from there on; ``entropy_before`` / ``entropy_loop``: the mean
  entropy (nats) of the distributions they were drawn from;
* ``repeated``: the piece written most often within the loop, and how often.

A loop whose pieces the model gives high probability is a model that learnt to repeat; one at
low probability and high entropy is a model that does not know what comes next and whose
argmax, step after step, falls on the same piece.
"""

from __future__ import annotations

import argparse
import gzip
import math
from collections import Counter
from pathlib import Path

import torch

from attnkit.data import load_vocab
from attnkit.decoding import Decoding
from attnkit.tasks.loading import load_task_model
from attnkit.tasks.translate import translate_texts
from attnkit.tokens import BOS, EOS, PAD
from benchmarks import harness


def _mean(values: list[float]) -> float | None:
    return round(sum(values) / len(values), 4) if values else None


def loop_start(tokens: list[int], stopped_at: int) -> int:
    """Where the loop began: the first piece written three times in a row, else (a loop of a
    longer unit) where the detector stopped it."""
    for k in range(len(tokens) - 2):
        if tokens[k] == tokens[k + 1] == tokens[k + 2]:
            return k
    return stopped_at


def loop_rows(checkpoint: str, sources: list[str], beam: int, tokens: int) -> list[dict]:
    """One row per source whose output the loop detector stopped (see the module docstring)."""
    model, ck = load_task_model(checkpoint, "translate")
    model.eval()
    src_vocab, tgt_vocab = load_vocab(ck.vocab["src"]), load_vocab(ck.vocab["tgt"])
    kw = dict(max_len_extra=ck.config["max_len_extra"], max_chars=None)
    stopped, raws_stopped = translate_texts(
        model, src_vocab, tgt_vocab, sources, decoding=Decoding(beam=beam), **kw
    )
    free, raws_free = translate_texts(
        model, src_vocab, tgt_vocab, sources, decoding=Decoding(beam=beam, loop_stop=False), **kw
    )
    best_stopped = [row for hyp in raws_stopped for row in hyp.best().tokens.tolist()]
    best_free = [row for hyp in raws_free for row in hyp.best().tokens.tolist()]
    rows = []
    for i, source in enumerate(sources):
        if stopped[i] == free[i]:
            continue
        out = best_free[i]
        # up to its <eos>, or (an output cut at the length limit) the batch's padding
        out = out[: out.index(EOS) + 1] if EOS in out else [t for t in out if t != PAD]
        out = out[:tokens]
        start = loop_start(out, len([t for t in best_stopped[i] if t != EOS and t > 0]))
        src = torch.tensor([src_vocab.encode(source)])
        with torch.no_grad():
            logits, _ = model(src, torch.tensor([src.shape[1]]), torch.tensor([[BOS, *out[:-1]]]))
        logp = torch.log_softmax(logits[0].double(), dim=-1)
        p = [math.exp(float(logp[k, t])) for k, t in enumerate(out)]
        entropy = (-(logp.exp() * logp).sum(-1)).tolist()
        piece, count = Counter(out[start:]).most_common(1)[0] if out[start:] else (None, 0)
        rows.append(
            {
                "line": i + 1,
                "source": source,
                "stopped": stopped[i],
                "free": free[i][:200],
                "loop_starts_at": start,
                "agree": round(
                    sum(int(logp[k].argmax()) == t for k, t in enumerate(out)) / len(out), 3
                ),
                "p_before": _mean(p[:start]),
                "p_loop": _mean(p[start:]),
                "entropy_before": _mean(entropy[:start]),
                "entropy_loop": _mean(entropy[start:]),
                "repeated": None if piece is None else f"{tgt_vocab.piece(piece)} x{count}",
            }
        )
    return rows


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--checkpoint", required=True, help="a translate checkpoint")
    p.add_argument("--src", type=Path, required=True, help="sources, one a line (.gz: gzipped)")
    p.add_argument("--beam", type=int, default=1, help="beam width (default 1: greedy)")
    p.add_argument("--limit", type=int, help="the first N sources")
    p.add_argument("--tokens", type=int, default=60, help="tokens of each loop scored")
    p.add_argument("--threads", type=int, help="torch threads (default: torch's)")
    p.add_argument("--json", type=Path, help="write the rows here")
    args = p.parse_args(argv)
    if args.beam < 1 or args.tokens < 2 or (args.limit is not None and args.limit < 1):
        raise SystemExit("--beam, --limit: expected >= 1; --tokens: expected >= 2")
    if args.threads:
        torch.set_num_threads(args.threads)
    with (gzip.open if args.src.suffix == ".gz" else open)(args.src, "rt", encoding="utf-8") as f:
        sources = f.read().splitlines()[: args.limit]
    rows = loop_rows(args.checkpoint, sources, args.beam, args.tokens)
    columns = ["line", "loop_starts_at", "agree", "p_before", "p_loop", "entropy_before"]
    columns += ["entropy_loop", "repeated"]
    print(f"{len(rows)} of {len(sources)} outputs stopped as loops")
    print(harness.table_header(columns))
    for row in rows:
        print(harness.table_row([row[c] for c in columns]))
    if args.json:
        harness.write_json(
            args.json, rows, checkpoint=args.checkpoint, beam=args.beam, sources=len(sources)
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
