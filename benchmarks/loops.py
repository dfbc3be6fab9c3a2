"""Loop stopping on the built-in models: how early loops stop, and that nothing else changes.

    python -m benchmarks.loops --json results/loops.json
    python -m benchmarks.loops --smoke          # checks the script, a minute

* **noise**: ``builtin:asr-digits`` transcribes white noise (every ``--seeds`` seed at 10 s,
  amplitude 0.01; 30 s, 0.1; 60 s, 0.001), greedy and beam 5 (the CLI's default), with the
  loop check and without: decoder steps, output length and whether it stopped;
* **legitimate outputs**: ``builtin:translate-dates`` on ``--pairs`` test pairs plus numbers
  and dates full of repeats ("one million one hundred eleven thousand one hundred eleven",
  "11 November 1111"), and ``builtin:asr-digits`` on ``--utterances`` test utterances
  (espeak-ng) plus one digit spoken eight to ten times over, greedy and beam 5: the outputs
  with and without the check (the same, or the differences are listed), and the longest run
  of still repeats (:mod:`attnkit.decoding.loops`) that any best hypothesis reached, as a
  share of the run that makes a loop (1.0 would have stopped it).
"""

from __future__ import annotations

import argparse
import json
import logging
import shutil
import sys
import tempfile

import torch

from attnkit.data import (
    generate_pairs,
    load_vocab,
    log_mel,
    resample,
    speech_dataset,
    synthesize,
)
from attnkit.decoding import Decoding
from attnkit.decoding.loops import loop_step, spans, start_loops
from attnkit.tasks import asr, translate
from attnkit.tasks.loading import load_task_model
from benchmarks import harness

NOISE = ((10, 0.01), (30, 0.1), (60, 0.001))  # (seconds, amplitude)
SEARCHES = {"greedy": 1, "beam 5": 5}
REPEATS_SPOKEN = (
    "zero zero zero zero zero zero zero zero",
    "eight eight eight eight eight eight eight eight",
    "one one one one one one one one one one",
)
REPEATS_WRITTEN = (
    "<en> one million one hundred eleven thousand one hundred eleven",
    "<en> one hundred thousand",
    "<en> nine million",
    "<en> 11 November 1111",
    "<de> neun Millionen",
)


def decoding(beam: int, loop_stop: bool) -> Decoding:
    return Decoding(beam=beam, length_penalty=1.0 if beam > 1 else 0.0, loop_stop=loop_stop)


def counting(model):
    """``model`` whose ``step`` counts its calls in ``model.calls``."""
    step = model.step
    model.calls = 0

    def counted(tokens, state):
        model.calls += 1
        return step(tokens, state)

    model.step = counted
    return model


def still_share(raws) -> float:
    """The longest run of still repeats of any best hypothesis of ``raws`` (decoded with
    weights), as a share of the run that makes a loop of its period."""
    need = spans().float()
    share = 0.0
    for hyp in raws:
        hyp = hyp.best()
        state = start_loops(hyp.tokens.shape[0])
        for t in range(hyp.tokens.shape[1]):
            state, _ = loop_step(state, hyp.tokens[:, t], hyp.weights[:, t])
            live = (t < hyp.lengths)[:, None]  # (B, 1)
            share = max(share, float((state.runs.float() / need * live).max()))
    return share


def noise_rows(seeds: int, noise) -> list[dict]:
    model, ck = load_task_model("builtin:asr-digits", "asr")
    model, vocab = counting(model), load_vocab(ck.vocab)
    rows = []
    for seed in range(seeds):
        for seconds, amplitude in noise:
            g = torch.Generator().manual_seed(seed)
            features = log_mel(
                amplitude * torch.randn(int(16000 * seconds), generator=g), normalize=True
            )
            for search, beam in SEARCHES.items():
                row = {"seed": seed, "seconds": seconds, "amplitude": amplitude, "search": search}
                for stop in (True, False):
                    model.calls = 0
                    texts, raws = asr.transcribe(
                        model, vocab, [features], decoding=decoding(beam, stop)
                    )
                    row["stop" if stop else "no_stop"] = {
                        "steps": model.calls,
                        "chars": len(texts[0]),
                        "end": texts[0][-48:],
                        "stopped": bool(raws[0].best().looped[0]) if stop else None,
                    }
                rows.append(row)
                print(json.dumps(row), flush=True)
    return rows


def compare(name: str, run) -> dict:
    """``run(decoding, weights) -> (texts, raws)`` with and without the check, per search."""
    out = {}
    for search, beam in SEARCHES.items():
        on, raws = run(decoding(beam, True), True)
        off, _ = run(decoding(beam, False), False)
        out[search] = {
            "outputs": len(on),
            "differ": [(a, b) for a, b in zip(on, off) if a != b],
            "stopped": sum(int(h.looped.sum()) for h in raws),
            "still_share": round(still_share(raws), 3),
        }
        print(name, search, json.dumps(out[search]), flush=True)
    return out


def legitimate(pairs: int, utterances: int) -> dict:
    model, ck = load_task_model("builtin:translate-dates", "translate")
    src, tgt = load_vocab(ck.vocab["src"]), load_vocab(ck.vocab["tgt"])
    texts = [s for s, _ in generate_pairs(pairs, split="test", seed=1)] + list(REPEATS_WRITTEN)
    result = {
        "translate-dates": compare(
            "translate-dates",
            lambda d, w: translate.translate_texts(
                model,
                src,
                tgt,
                texts,
                decoding=d,
                weights=w,
                max_len_extra=ck.config["max_len_extra"],
            ),
        )
    }
    if shutil.which("espeak-ng") is None:
        print("espeak-ng not installed: no speech", file=sys.stderr)
        return result
    model, ck = load_task_model("builtin:asr-digits", "asr")
    vocab = load_vocab(ck.vocab)
    with tempfile.TemporaryDirectory() as cache:
        data = speech_dataset(
            utterances,
            split="test",
            seed=1,
            cache_dir=cache,
            kinds=("digits", "numbers"),
            normalize=True,
        )
        features = list(data.features)  # read from the cache before it is removed
    for text in REPEATS_SPOKEN:
        samples, rate = synthesize(text, voice="en-us+m6", speed=165)
        features.append(log_mel(resample(samples, rate, 16000), normalize=True))
    result["asr-digits"] = compare(
        "asr-digits", lambda d, w: asr.transcribe(model, vocab, features, decoding=d, weights=w)
    )
    return result


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seeds", type=int, default=4, help="noise recordings per length")
    p.add_argument("--pairs", type=int, default=1000, help="translate-dates test pairs")
    p.add_argument("--utterances", type=int, default=100, help="asr-digits test utterances")
    p.add_argument("--smoke", action="store_true", help="one short noise, a few examples")
    p.add_argument("--json", help="write the results there")
    args = p.parse_args(argv)
    logging.basicConfig(level=logging.ERROR)  # the loop warnings are what is counted here
    torch.set_num_threads(1)
    if args.smoke:
        args.seeds, args.pairs, args.utterances = 1, 8, 2
    results = {
        "noise": noise_rows(args.seeds, NOISE[:1] if args.smoke else NOISE),
        "legitimate": legitimate(args.pairs, args.utterances),
    }
    if args.json:
        harness.save_run(args.json, {**harness.run_info(), **results})
    return 0


if __name__ == "__main__":
    sys.exit(main())
