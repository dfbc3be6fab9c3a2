"""Streaming transcription: CER offline against streaming, compute per chunk, emission delay.

Transcribes the built-in validation speech (espeak-ng, the split and kinds training
validated on) with a streaming checkpoint (``attnkit train asr --listener uni --alignment
monotonic|mocha``), once offline (greedy over each whole utterance, as ``attnkit
transcribe --beam 1``) and once per ``--chunk-ms`` as ``attnkit transcribe --stream`` does
(:func:`attnkit.tasks.asr.transcribe_stream`), and reports per chunk size:

* the CER of both and how many streamed transcripts equal the offline ones;
* the compute time per chunk (features, listener and speller), wall-clock and the CPU time
  of the decoding thread, and the real-time factor (compute / audio);
* the emission delay of each character: the time from the moment the audio its attention
  read up to (the end of the listener step it stopped at) has been recorded to the moment it
  is printed, with chunks arriving in real time and each processed once it has arrived and
  the previous one is done (a queue); from the CPU times (an unloaded core) and from the
  wall-clock times (this machine as loaded as it was). Characters whose attention found no
  stop are printed with the last chunk and are left out of the delays. Also for the
  characters before a transcript's first error only (a model whose hard attention loops
  emits many characters at one stop, which then wait for the length limit to grow);
* the final delay: from the end of the audio to the last character; and from the end of the
  speech (the last frame within 40 dB of the loudest; espeak-ng leaves some silence after
  it) to the last character printed, the delay a speaker waits for the end of a transcript;
* the share of characters printed before the audio ended;
* how far hard decoding is from the expected alignment training used, teacher-forced on the
  references (:func:`alignment_stats`), and the CER of greedy decoding with the expected
  (soft) alignment, which reads the whole utterance and does not stream.

    python -m benchmarks.streaming --checkpoint RUN/checkpoint --n 200 --chunk-ms 80,200,400 \\
        --time-budget 900 --json results/streaming.json

``--time-budget``: seconds for the streaming passes (all chunk sizes together): utterances
are streamed in turn, every chunk size each, until it is spent; the rows say how many were.
"""

from __future__ import annotations

import math
import os
import statistics
import time
from pathlib import Path

import torch

from attnkit.attention.monotonic import expected_alignment
from attnkit.data import log_mel, pad_features, plan_utterances, utterances_audio
from attnkit.data.audio.features import HOP_S, WINDOW_S
from attnkit.data.worlds.speech import KINDS
from attnkit.decoding import Decoding
from attnkit.tasks.asr import metrics, transcribe_stream
from attnkit.tasks.loading import load_evaluator
from attnkit.tokens import BOS, EOS, PAD
from benchmarks import harness

SPEECH_DB = 40.0  # frames this far below the loudest one count as silence


def emission_times(chunks, clock: str) -> list[float]:
    """When each chunk's characters are printed, in seconds from the start of the audio:
    chunk ``k`` arrives at its ``end_s`` and is processed after it and chunk ``k - 1``,
    taking its ``compute_s`` (``clock="wall"``) or ``cpu_s`` (``"cpu"``)."""
    done, out = 0.0, []
    for c in chunks:
        done = max(done, c.end_s) + (c.compute_s if clock == "wall" else c.cpu_s)
        out.append(done)
    return out


def percentile(values: list[float], q: float) -> float:
    """The ``q``-quantile of ``values`` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * len(ordered)) - 1))]


def summary(values: list[float], scale: float = 1.0) -> dict | None:
    """Mean, median, 95th percentile and maximum of ``values`` times ``scale`` (None for
    no values)."""
    if not values:
        return None
    values = [scale * v for v in values]
    return {
        "mean": statistics.fmean(values),
        "median": statistics.median(values),
        "p95": percentile(values, 0.95),
        "max": max(values),
    }


def pair(stats: dict | None, first: str, second: str, digits: int) -> str:
    """``"first / second"`` of a :func:`summary`, or "-"."""
    return "-" if stats is None else f"{stats[first]:.{digits}f} / {stats[second]:.{digits}f}"


def speech_end_s(features: torch.Tensor) -> float:
    """Where the speech of an utterance ends, in seconds: the end of the window of the last
    frame of raw log-mels ``(T, 80)`` whose power is within 40 dB of the loudest frame's."""
    power = features.logsumexp(-1)  # (T,) log of each frame's mel power
    loud = (power >= power.max() - SPEECH_DB * math.log(10) / 10).nonzero()
    return (int(loud[-1]) * HOP_S + WINDOW_S / 2) if len(loud) else 0.0


def common_prefix(a: str, b: str) -> int:
    """The length of the longest common prefix of ``a`` and ``b``."""
    return next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))


def stream_row(
    chunk_ms: float,
    streamed: list[list],
    offline: list[str],
    references: list[str],
    speech_end: list[float],
) -> dict:
    """The figures of one chunk size over the utterances streamed (``streamed[i]``: the
    chunks of utterance ``i``, whose speech ends at ``speech_end[i]`` seconds)."""
    n = len(streamed)
    texts = ["".join(c.text for c in chunks) for chunks in streamed]
    per_chunk = [c for chunks in streamed for c in chunks]
    audio_s = sum(chunks[-1].end_s for chunks in streamed)
    row = {
        "chunk_ms": chunk_ms,
        "utterances": n,
        "cer_offline": metrics(offline[:n], references[:n])["cer"],
        "cer_streaming": metrics(texts, references[:n])["cer"],
        "equal_to_offline": sum(t == o for t, o in zip(texts, offline)),
        "chunks": len(per_chunk),
    }
    for clock, key in (("wall", "compute_s"), ("cpu", "cpu_s")):
        seconds = [getattr(c, key) for c in per_chunk]
        row[f"{clock}_ms_per_chunk"] = summary(seconds, 1000)
        row[f"{clock}_real_time_factor"] = sum(seconds) / audio_s
        delays, right, final, last = [], [], [], []
        for chunks, end, text, reference in zip(streamed, speech_end, texts, references):
            printed = emission_times(chunks, clock)
            each = [
                None if heard is None else at - heard
                for c, at in zip(chunks, printed)
                for heard in c.heard_s
            ]  # per character
            delays += [d for d in each if d is not None]
            right += [d for d in each[: common_prefix(text, reference)] if d is not None]
            final.append(printed[-1] - chunks[-1].end_s)
            last += [at - end for c, at in zip(chunks, printed) if c.text][-1:]
        row[f"{clock}_char_delay_ms"] = summary(delays, 1000)
        row[f"{clock}_char_delay_correct_prefix_ms"] = summary(right, 1000)
        row[f"{clock}_final_delay_ms"] = summary(final, 1000)
        row[f"{clock}_last_char_after_speech_ms"] = summary(last, 1000)
    chars = sum(len(c.heard_s) for c in per_chunk)
    early = sum(len(c.heard_s) for chunks in streamed for c in chunks[:-1])
    row["chars_before_audio_end"] = early / max(chars, 1)
    row["chars_without_stop"] = sum(h is None for c in per_chunk for h in c.heard_s) / max(chars, 1)
    return row


def stop_records(
    energy: torch.Tensor, alpha: torch.Tensor, hard: torch.Tensor, steps: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Per output step, where the expected alignment ``alpha`` peaks, how saturated the stop
    probability ``p = sigmoid(energy)`` is and whether hard decoding stops there.

    Args:
        energy, alpha: ``(B, U, S)`` energies and expected alignments of teacher-forced steps.
        hard: ``(B, U)`` the key each step's hard scan stopped at (-1: none), on the same
            teacher-forced inputs.
        steps: ``(B, U)`` bool, the steps to count (not padding).

    Returns:
        ``p`` at each counted step's peak ``argmax alpha`` ``(N,)``; for each counted step
        whose peak is past the previous step's, whether ``p`` at the previous peak is
        ``>= 1/2`` ``(M,)`` (a hard scan starting there stops at once, and the character is
        repeated); for each counted step, whether its hard stop is the peak ``(N,)``.
    """
    p = torch.sigmoid(energy.double())
    peak = alpha.argmax(-1)  # (B, U)
    before = torch.cat([torch.zeros_like(peak[:, :1]), peak[:, :-1]], 1)  # the previous peak
    moved = steps & (peak > before)
    return (
        p.gather(2, peak[..., None])[..., 0][steps],
        p.gather(2, before[..., None])[..., 0][moved] >= 0.5,
        (hard == peak)[steps],
    )


def stop_figures(at_peak: torch.Tensor, again: torch.Tensor, at_stop: torch.Tensor) -> dict:
    """The summary of :func:`stop_records` (concatenated over batches): the 5/25/50/75/95%
    quantiles of ``p`` at the peaks, the share of those between 0.1 and 0.9, the share of
    moving steps a hard scan would stop again at the previous peak, and of steps whose hard
    stop is the peak."""
    q = torch.tensor([0.05, 0.25, 0.5, 0.75, 0.95], dtype=at_peak.dtype)
    return {
        "steps": len(at_peak),
        "p_at_peak": [round(x, 3) for x in at_peak.quantile(q).tolist()],
        "peak_p_between_0.1_and_0.9": float(((at_peak > 0.1) & (at_peak < 0.9)).double().mean()),
        "moved_steps": len(again),
        "stops_again": float(again.double().mean()) if len(again) else 0.0,
        "hard_stop_at_peak": float(at_stop.double().mean()),
    }


@torch.no_grad()
def alignment_stats(
    model, vocab, features: list[torch.Tensor], references: list[str], *, batch_size: int = 50
) -> dict:
    """:func:`stop_figures` of a monotonic or MoChA LAS ``model`` (in eval mode)
    teacher-forced on ``references``: the energies its expected (soft) pass computes (recorded
    by wrapping its attention's ``monotonic_energies``; no noise in eval mode), the expected
    alignments recomputed from them, and the stops of its hard pass (the last key its weights
    reach: the one-hot stop, or the end of MoChA's chunk)."""
    attention = model.speller.attention
    inference, energies, recorded = attention.inference, attention.monotonic_energies, []

    def record(query, kf):
        recorded.append(energies(query, kf))  # (B, 1, S): the decoder calls one step at a time
        return recorded[-1]

    records = []
    attention.monotonic_energies = record
    try:
        for s in range(0, len(features), batch_size):
            f, lengths = pad_features(features[s : s + batch_size])  # (B, T, F), (B,)
            ids = [[BOS] + vocab.encode(t) + [EOS] for t in references[s : s + batch_size]]
            tgt = torch.full((len(ids), max(map(len, ids))), PAD)
            for b, row in enumerate(ids):
                tgt[b, : len(row)] = torch.tensor(row)
            recorded.clear()
            attention.inference = "soft"
            model(f, lengths, tgt[:, :-1])
            energy = torch.cat(recorded, 1)  # (B, U, S)
            attention.inference = "hard"
            _, weights = model(f, lengths, tgt[:, :-1])  # (B, U, S)
            _, keys = model.listener(f, lengths)  # (B,) listener steps
            valid = torch.arange(energy.shape[-1]) < keys[:, None]  # (B, S)
            state, alphas = attention.initial_state(energy[:, 0]), []
            for i in range(energy.shape[1]):
                state = expected_alignment(energy[:, i], state, valid)
                alphas.append(state)
            reached = weights > 0
            last = weights.shape[-1] - 1 - reached.flip(-1).to(torch.int8).argmax(-1)  # (B, U)
            records.append(
                stop_records(
                    energy,
                    torch.stack(alphas, 1),
                    torch.where(reached.any(-1), last, -1),
                    tgt[:, 1:] != PAD,
                )
            )
    finally:
        del attention.monotonic_energies  # the method again
        attention.inference = inference
    return stop_figures(*(torch.cat(r) for r in zip(*records)))


def main() -> int:
    p = harness.parser(
        "Streaming transcription: CER offline vs streaming, compute per chunk "
        "and emission delay on the built-in validation speech.",
        time_budget=900.0,
        json_path=None,
        time_budget_help="seconds for the streaming passes, all chunk sizes",
    )
    p.add_argument("--checkpoint", type=Path, required=True, help="a streaming asr checkpoint")
    p.add_argument("--n", type=int, default=200, help="validation utterances (default 200)")
    p.add_argument(
        "--kinds",
        default="digits",
        help="built-in kinds, comma-separated (default "
        "digits; the ones the checkpoint was trained and validated on)",
    )
    p.add_argument("--seed", type=int, default=0, help="the data seed training used (default 0)")
    p.add_argument(
        "--chunk-ms",
        default="80,200,400",
        help="chunk sizes in ms, comma-separated (default 80,200,400)",
    )
    args = p.parse_args()
    torch.set_num_threads(args.threads or 1)
    kinds = tuple(args.kinds.split(","))
    if any(k not in KINDS for k in kinds):
        p.error(f"--kinds: expected a subset of {', '.join(KINDS)}, got {args.kinds}")
    sizes = [float(x) for x in args.chunk_ms.split(",")]

    evaluator = load_evaluator(args.checkpoint, "cpu", "asr")
    evaluator.model.check_streaming()
    plan = plan_utterances(args.n, split="valid", seed=args.seed, kinds=kinds)
    audio = utterances_audio(plan)
    references = [u.transcript for u in plan]
    features = [evaluator.features(a) for a in audio]
    offline = [o.text for o in evaluator.decode(features, Decoding())]
    speech_end = [speech_end_s(log_mel(a)) for a in audio]
    attention = evaluator.model.speller.attention
    attention.inference = "soft"
    soft = [o.text for o in evaluator.decode(features, Decoding())]
    attention.inference = "hard"  # what streaming reads (check_streaming: it was)
    stops = alignment_stats(evaluator.model, evaluator.char_vocab, features, references)

    streamed = {ms: [] for ms in sizes}
    deadline = time.perf_counter() + args.time_budget
    for samples in audio:
        if time.perf_counter() > deadline:
            break
        for ms in sizes:
            streamed[ms].append(
                list(transcribe_stream(evaluator.model, evaluator.char_vocab, samples, chunk_ms=ms))
            )
    rows = [stream_row(ms, streamed[ms], offline, references, speech_end) for ms in sizes]

    print(
        f"{args.checkpoint}: {len(audio)} validation utterances ({', '.join(kinds)}), "
        f"offline greedy CER {metrics(offline, references)['cer']:.4f} (hard), "
        f"{metrics(soft, references)['cer']:.4f} (soft: expected alignment, not streamable)"
    )
    print(
        f"teacher-forced, {stops['steps']} steps: p at the expected alignment's peak "
        f"(5/25/50/75/95%) {stops['p_at_peak']}, between 0.1 and 0.9: "
        f"{100 * stops['peak_p_between_0.1_and_0.9']:.1f}%; hard stop at the peak: "
        f"{100 * stops['hard_stop_at_peak']:.1f}%; p >= 0.5 at the previous peak (the hard "
        f"scan stops again): {100 * stops['stops_again']:.1f}% of {stops['moved_steps']} "
        "steps that move on"
    )
    print(
        harness.table_header(
            [
                "chunk",
                "utterances",
                "CER offline / streaming",
                "= offline",
                "CPU ms per chunk (mean / p95)",
                "wall ms per chunk (mean / p95)",
                "char delay CPU, ms (median / p95)",
                "char delay wall, ms (median / p95)",
                "correct prefix: char delay CPU, ms (median / p95)",
                "final delay, ms (CPU / wall)",
                "last char after speech end, ms (CPU median / p95)",
                "printed before the end",
            ]
        )
    )
    for r in rows:
        print(
            harness.table_row(
                [
                    f"{r['chunk_ms']:g} ms",
                    r["utterances"],
                    f"{100 * r['cer_offline']:.2f}% / {100 * r['cer_streaming']:.2f}%",
                    f"{r['equal_to_offline']}/{r['utterances']}",
                    pair(r["cpu_ms_per_chunk"], "mean", "p95", 1),
                    pair(r["wall_ms_per_chunk"], "mean", "p95", 1),
                    pair(r["cpu_char_delay_ms"], "median", "p95", 0),
                    pair(r["wall_char_delay_ms"], "median", "p95", 0),
                    pair(r["cpu_char_delay_correct_prefix_ms"], "median", "p95", 0),
                    pair(
                        {
                            "cpu": r["cpu_final_delay_ms"]["mean"],
                            "wall": r["wall_final_delay_ms"]["mean"],
                        },
                        "cpu",
                        "wall",
                        0,
                    ),
                    pair(r["cpu_last_char_after_speech_ms"], "median", "p95", 0),
                    f"{100 * r['chars_before_audio_end']:.0f}%",
                ]
            )
        )
    if args.json:
        harness.write_json(
            args.json,
            rows,
            checkpoint=str(args.checkpoint),
            n=len(audio),
            kinds=list(kinds),
            cer_offline=metrics(offline, references)["cer"],
            cer_soft=metrics(soft, references)["cer"],
            stops=stops,
            load_average=list(os.getloadavg()),
        )
    print(f"load average {' '.join(f'{x:.1f}' for x in os.getloadavg())}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
