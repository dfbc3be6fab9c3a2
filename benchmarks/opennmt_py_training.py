"""OpenNMT-py trained as attnkit's Multi30k recipe trains, for the same time on the same machine.

``python -m benchmarks.opennmt_py_training --data DIR --checkpoint CKPT --out OUT
--time-budget 7200 --threads 1`` writes into OUT the corpus's training and validation files
(DIR: ``data/task1/raw`` of the public repository multi30k/dataset), the SentencePiece model
of the attnkit checkpoint CKPT (the recipe's joint unigram vocabulary of 8,000 pieces) with
its pieces as OpenNMT-py's vocabulary, and ``config.yaml`` (:func:`config`): the recipe
``multi30k-en-de`` in OpenNMT-py's options. Then it runs ``onmt_train`` in a process of its own
(:mod:`benchmarks.opennmt_py_worker`, OpenNMT-py from ``--onmt``) and stops it when the budget
is spent; a checkpoint is saved every ``--save-every`` steps, and ``OUT/start.json`` holds the
time the process started, so that each checkpoint's age is its file's time less that.

``python -m benchmarks.opennmt_py_training --data DIR --out OUT --score --minutes 30 60 90
120 --attnkit RUN --json results/opennmt_py_training.json`` takes, for each time, the last
checkpoint saved before it and scores it as attnkit's trainer validates (greedy, the first 500
validation pairs, sacreBLEU) and as ``benchmarks.multi30k`` tests (beam 5, length penalty 1,
test_2016_flickr, test_2017_flickr, test_2017_mscoco; each checkpoint's BLEU kept in
``OUT/scores.json``, so a rerun translates only what is new); with ``--attnkit RUN`` (an ``attnkit
train`` run folder) the table holds attnkit's validation BLEU at the same times beside them
(its ``history.json``, timed by the run's event files), and the time each reached BLEU 30 and
35 on validation (every OpenNMT-py checkpoint validated alike).

The recipe in OpenNMT-py's options (:func:`config`): the same model (Transformer, pre-norm,
d_model 256, 4 heads, 3 + 3 layers, feed-forward 1,024, dropout 0.2 on sub-layers and
attention, one embedding for source, target and output; with ``--model rnn`` the recipe
``multi30k-en-de-rnn``: Luong's GRU decoder of 256 with input feeding and the general score,
embeddings of 256, dropout 0.3, its initial state from the encoder's final one, over a
bidirectional GRU encoder whose two directions OpenNMT-py gives half of ``hidden_size`` each,
128, where attnkit's have 256 each), label smoothing 0.1, batches of 128
sentences, gradient norm clipped at 1, Adam with attnkit's schedule written as OpenNMT-py's
``noam``: linear warm-up over 400 steps to 1e-3, then ``1e-3 * sqrt(400 / step)``
(``learning_rate = 1e-3 * sqrt(256 * 400)``). What differs: attnkit's AdamW decays weights by
0.01 (OpenNMT-py's Adam has no decoupled decay: none here), and two pieces of the
vocabulary (a no-break space and a tab) cannot be written in OpenNMT-py's vocabulary file and
read as ``<unk>``.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import re
import subprocess
import sys
import time
from pathlib import Path

import sacrebleu

from benchmarks import harness
from benchmarks.opennmt_py import check_install, load_translation, run_worker

TEST_SETS = ("test_2016_flickr", "test_2017_flickr", "test_2017_mscoco")
VALID = 500  # the validation pairs attnkit's trainer decodes (TranslateTask's max_valid)
SUBWORDS, VOCAB, CONFIG = "sentencepiece.model", "vocab.txt", "config.yaml"
START, SCORES = "start.json", "scores.json"
CHECKPOINT = re.compile(r"model_step_(\d+)\.pt$")


# The model options of each recipe in OpenNMT-py's terms (module docstring).
MODELS = {
    "transformer": """\
encoder_type: transformer
decoder_type: transformer
enc_layers: 3
dec_layers: 3
heads: 4
hidden_size: 256
word_vec_size: 256
transformer_ff: 1024
dropout: [0.2]
attention_dropout: [0.2]
position_encoding: true
share_embeddings: true
share_decoder_embeddings: true
layer_norm: standard
add_qkvbias: true
""",
    "rnn": """\
encoder_type: brnn
decoder_type: rnn
rnn_type: GRU
enc_layers: 1
dec_layers: 1
hidden_size: 256
word_vec_size: 256
global_attention: general
input_feed: 1
bridge: true
dropout: [0.3]
share_embeddings: false
share_decoder_embeddings: false
""",
}


def config(save_every: int, model: str = "transformer") -> str:
    """``onmt_train``'s YAML config: the recipe ``multi30k-en-de`` (``model`` "transformer")
    or ``multi30k-en-de-rnn`` ("rnn"), module docstring."""
    d_model, warmup, peak = 256, 400, 1e-3
    return f"""\
save_data: run/data
src_vocab: {VOCAB}
share_vocab: true
src_vocab_size: 8000
tgt_vocab_size: 8000
vocab_size_multiple: 1
data:
  corpus_1:
    path_src: train.en
    path_tgt: train.de
    transforms: [sentencepiece]
  valid:
    path_src: val.en
    path_tgt: val.de
    transforms: [sentencepiece]
src_subword_model: {SUBWORDS}
tgt_subword_model: {SUBWORDS}
save_model: run/model
save_checkpoint_steps: {save_every}
keep_checkpoint: -1
seed: 0
train_steps: 1000000
valid_steps: 100000000
report_every: 50
num_workers: 0
batch_type: sents
batch_size: 128
valid_batch_size: 64
optim: adam
adam_beta1: 0.9
adam_beta2: 0.999
weight_decay: 0.0
learning_rate: {peak * math.sqrt(d_model * warmup):.6g}
decay_method: noam
warmup_steps: {warmup}
max_grad_norm: 1.0
label_smoothing: 0.1
param_init: 0
param_init_glorot: true
{MODELS[model]}model_dtype: fp32
"""


def read_gz(path: Path) -> list[str]:
    if not path.exists():
        raise ValueError(f"--data: {path} not found (expected the multi30k/dataset layout)")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def prepare(
    out: Path, data: Path, checkpoint: Path, save_every: int, model: str = "transformer"
) -> None:
    """Corpus files, SentencePiece model, vocabulary and config (of ``model``) in ``out``."""
    _, vocab = load_translation(checkpoint, transformer=False)
    out.mkdir(parents=True, exist_ok=True)
    for part in ("train", "val"):
        for lang in ("en", "de"):
            lines = read_gz(data / f"{part}.{lang}.gz")
            (out / f"{part}.{lang}").write_text("".join(f"{x}\n" for x in lines), "utf-8")
    (out / SUBWORDS).write_bytes(vocab.model)
    sp = vocab.sp
    # OpenNMT-py adds its own specials, and reads "PIECE COUNT" split at white space
    ids = (i for i in range(sp.get_piece_size()) if not (sp.is_control(i) or sp.is_unknown(i)))
    kept = [p for p in map(sp.id_to_piece, ids) if p.split() == [p]]
    (out / VOCAB).write_text("".join(f"{p}\t1\n" for p in kept), "utf-8")
    (out / CONFIG).write_text(config(save_every, model), "utf-8")


def train(out: Path, onmt: Path, threads: int, budget: float) -> None:
    """``onmt_train`` in ``out`` until it ends or ``budget`` seconds have passed."""
    check_install(onmt)
    (out / START).write_text(json.dumps({"start": time.time(), "budget_s": budget}))
    job = {"do": "train", "config": CONFIG, "folder": str(out.resolve())}
    try:
        run_worker(onmt, job, threads, timeout=budget)
    except subprocess.TimeoutExpired:
        print(f"OpenNMT-py stopped after {budget:.0f} s")


def checkpoints(out: Path) -> list[tuple[float, int, Path]]:
    """``(seconds since the start, step, path)`` of each checkpoint in ``out``, oldest first."""
    start = json.loads((out / START).read_text())["start"]
    found = []
    for path in (out / "run").glob("model_step_*.pt"):
        if match := CHECKPOINT.search(path.name):
            found.append((path.stat().st_mtime - start, int(match.group(1)), path))
    return sorted(found)


def translate(onmt: Path, model: Path, out: Path, texts: list[str], beam: int, threads: int):
    job = {
        "do": "translate",
        "model": str(model),
        "subword_model": str(out / SUBWORDS),
        "texts": texts,
        "beam": beam,
        "batch": 32,
        "max_length": 128,
        "length_penalty": "wu" if beam > 1 else "none",
        "alpha": 1.0 if beam > 1 else 0.0,
    }
    return run_worker(onmt, job, threads)["outputs"]


def bleu(outputs: list[str], refs: list[str]) -> float:
    return round(sacrebleu.corpus_bleu(outputs, [refs]).score, 2)


def signature() -> str:
    """sacreBLEU's signature of :func:`bleu` (one reference; known once a score is made)."""
    metric = sacrebleu.BLEU()
    metric.corpus_score(["a"], [["a"]])
    return str(metric.get_signature())


def attnkit_curve(run: Path) -> list[tuple[float, int, float]]:
    """``(seconds since the first step, step, validation BLEU)`` of an attnkit run's
    validations, then ``(seconds, step, None)`` at its last step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    history = json.loads((run / "history.json").read_text())
    times: dict[int, float] = {}
    for events in sorted(run.glob("events.out.tfevents.*")):
        acc = EventAccumulator(str(events), size_guidance={"scalars": 0})
        acc.Reload()
        for e in acc.Scalars("train/loss"):
            times.setdefault(e.step, e.wall_time)
    first = min(times.values())
    curve = [
        (times[h["step"]] - first, h["step"], h["bleu"]) for h in history if h["step"] in times
    ]
    # the run's end, past its last validation: marks after it are not the run's
    return [*curve, (max(times.values()) - first, max(times), None)]


def reached(curve: list[tuple[float, int, float]], target: float) -> float | None:
    """Minutes until the validation BLEU first reached ``target`` (None: never)."""
    return next((round(s / 60, 1) for s, _, b in curve if b >= target), None)


class Scores:
    """BLEU of each checkpoint and set, kept in ``OUT/scores.json``: a later run (another
    ``--attnkit`` run beside, more time marks) translates only what it has not scored."""

    def __init__(self, args: argparse.Namespace):
        self.args, self.path = args, args.out / SCORES
        self.known = json.loads(self.path.read_text()) if self.path.exists() else {}

    def bleu(self, checkpoint: Path, name: str, texts: list[str], beam: int) -> float:
        """BLEU of ``checkpoint``'s translations of the set ``name``: ``texts`` (sources and
        references) at ``beam``."""
        key = f"{checkpoint.name} {name} beam {beam}"
        if key not in self.known:
            a = self.args
            outputs = translate(a.onmt, checkpoint, a.out, texts[0], beam, a.threads)
            self.known[key] = bleu(outputs, texts[1])
            self.path.write_text(json.dumps(self.known, indent=1))
        return self.known[key]


def score(args: argparse.Namespace) -> tuple[list[dict], dict]:
    check_install(args.onmt)
    saved = checkpoints(args.out)
    cache = Scores(args)
    if not saved:
        raise ValueError(f"--out: no OpenNMT-py checkpoint in {args.out / 'run'}")
    valid = [read_gz(args.data / f"val.{lang}.gz")[:VALID] for lang in ("en", "de")]
    tests = {
        name: [read_gz(args.data / f"{name}.{x}.gz") for x in ("en", "de")] for name in TEST_SETS
    }
    ours = attnkit_curve(args.attnkit) if args.attnkit else []
    # every checkpoint's validation BLEU, as attnkit's trainer records its own
    onmt_curve = [(s, step, cache.bleu(path, "valid", valid, 1)) for s, step, path in saved]
    rows = []
    for minutes in args.minutes:
        before = [c for c in saved if c[0] <= minutes * 60]
        if not before:
            continue
        seconds, step, path = before[-1]
        row = {
            "minutes": minutes,
            "opennmt_py": {"step": step, "saved_at_min": round(seconds / 60, 1)},
        }
        row["opennmt_py"]["valid_bleu_greedy"] = cache.bleu(path, "valid", valid, 1)
        for name, texts in tests.items():
            row["opennmt_py"][f"{name}_bleu"] = cache.bleu(path, name, texts, 5)
        mine = [c for c in ours[:-1] if c[0] <= minutes * 60]
        # a mark past the run's end is not the run's; to the tenth of a minute, as the table
        # reads, since a run whose time budget is the mark ends a moment before it
        if mine and minutes <= round(ours[-1][0] / 60, 1):
            row["attnkit"] = {"step": mine[-1][1], "valid_bleu_greedy": round(mine[-1][2], 2)}
        rows.append(row)
        print(json.dumps(row), flush=True)
    settings = {
        "data": "Multi30k task 1 (multi30k/dataset, data/task1/raw)",
        "onmt_checkpoints": len(saved),
        "onmt_last_step": saved[-1][1],
        "bleu_signature": signature(),
        "reach_valid_bleu_min": {
            "opennmt_py": {t: reached(onmt_curve, t) for t in (30, 35)},
            **({"attnkit": {t: reached(ours[:-1], t) for t in (30, 35)}} if ours else {}),
        },
    }
    return rows, settings


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.opennmt_py_training", description=__doc__.splitlines()[0]
    )
    p.add_argument("--data", type=Path, required=True, help="the folder of train.en.gz ...")
    p.add_argument("--out", type=Path, required=True, help="OpenNMT-py's run folder")
    p.add_argument("--checkpoint", type=Path, help="attnkit checkpoint: its vocabulary")
    p.add_argument("--onmt", type=Path, default=Path("build/onmt-py"), help="OpenNMT-py folder")
    p.add_argument("--threads", type=int, default=1)
    p.add_argument(
        "--model",
        choices=tuple(MODELS),
        default="transformer",
        help="the recipe's model: multi30k-en-de's Transformer or multi30k-en-de-rnn's RNN",
    )
    p.add_argument("--time-budget", type=float, default=7200.0, help="seconds of training")
    p.add_argument("--save-every", type=int, default=250, help="steps between checkpoints")
    p.add_argument("--score", action="store_true", help="score the checkpoints of --out")
    p.add_argument("--minutes", type=float, nargs="+", default=[30, 60, 90, 120])
    p.add_argument("--attnkit", type=Path, help="an attnkit run folder to set beside")
    p.add_argument("--json", type=Path, help="write the rows here")
    args = p.parse_args(argv)
    try:
        if args.threads < 1 or args.save_every < 1 or not args.time_budget > 0:
            raise ValueError(
                "--threads, --save-every, --time-budget: expected positive numbers, got "
                f"{args.threads}, {args.save_every}, {args.time_budget}"
            )
        if not args.score:
            if args.checkpoint is None:
                raise ValueError("--checkpoint: expected the attnkit checkpoint of the vocabulary")
            prepare(args.out, args.data, args.checkpoint, args.save_every, args.model)
            train(args.out, args.onmt, args.threads, args.time_budget)
            return 0
        rows, settings = score(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.json:
        harness.write_json(args.json, rows, threads=args.threads, **settings)
    return 0


if __name__ == "__main__":
    sys.exit(main())
