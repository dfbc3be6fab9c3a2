"""OpenNMT-py against attnkit on the same model: decoding speed, BLEU and agreement.

``python -m benchmarks.opennmt_py --install DIR`` installs OpenNMT-py 3.5.1 and the few
packages its translate path imports into the private folder DIR (``pip install --no-deps
--target``; nothing else is touched), with stub modules for the two it imports but never uses
here (see :mod:`benchmarks.opennmt_py_worker`, which also holds the torch shim).

``python -m benchmarks.opennmt_py --checkpoint CKPT --convert OUT`` writes attnkit's
Transformer translation checkpoint CKPT as an OpenNMT-py checkpoint ``OUT/model.pt`` with the
SentencePiece model of its ``sentencepiece`` transform, ``OUT/sentencepiece.model``.

``python -m benchmarks.opennmt_py --checkpoint CKPT --data DIR --beam 5 --batch 32
--threads 2 --json results/opennmt_py_decoding.json`` converts CKPT (into ``--convert OUT``,
or a temporary folder), decodes ``DIR/test_2016_flickr.en.gz`` with OpenNMT-py's own
inference engine (in a process of its own) and with attnkit, the same model, beam, batch,
threads and output length limit, one after the other (attnkit once per ``--beam-stop`` rule:
``bound``, exact, and ``best``, OpenNMT-py's own), and prints a table: engine,
sentences/s, target tokens/s (SentencePiece pieces of the outputs, counted alike for all),
sacreBLEU against ``test_2016_flickr.de.gz`` and the outputs identical to OpenNMT-py's. With
``--json``, OpenNMT-py's row is written as soon as it is measured (with ``attnkit_started``,
the time attnkit began), then replaced by all rows and, per rule, up to 20 of the outputs
that differ from OpenNMT-py's.

The conversion (:func:`onmt_state`) maps attnkit's pre-norm Transformer
(:mod:`attnkit.models.transformer`) onto OpenNMT-py's, which has the same layout (the one
CTranslate2's spec follows, see :mod:`attnkit.export.ctranslate2_format`): interleaved
sinusoids added to embeddings scaled by ``sqrt(D)`` (written as OpenNMT-py's ``pe`` tables),
attention projections with bias (``add_qkvbias``; identity for one head, where attnkit has
none), queries scaled by ``1/sqrt(head_dim)``, LayerNorm epsilon 1e-5 (``norm_eps``), the
output projection tied to the target embedding with attnkit's bias as the generator's.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import sacrebleu
import torch

import attnkit
from attnkit.data import load_vocab
from attnkit.decoding import BEAM_STOPS, Decoding
from attnkit.export.ctranslate2_format import check_exportable, tokens_of
from attnkit.models import Transformer, sinusoids
from attnkit.tasks.loading import load_task_model
from attnkit.tasks.translate import translate_texts
from attnkit.tokens import BOS, EOS, PAD, UNK
from benchmarks import harness

ONMT_VERSION = "3.5.1"
# What OpenNMT-py's translate path imports at start-up, besides what attnkit already has
# (torch, numpy, pyyaml, rapidfuzz, regex, sacrebleu, sentencepiece, tensorboard).
PACKAGES = (f"OpenNMT-py=={ONMT_VERSION}", "configargparse", "pyonmttok>=1.37,<2", "six")
PACKAGES += ("pyahocorasick",)
STUBS = ("spacy", "fasttext")  # imported by the terminology and clean transforms only
STUB_DIR = "attnkit-stubs"
# OpenNMT-py's special tokens (onmt.constants.DefaultTokens), at attnkit's special ids
ONMT_SPECIALS = {PAD: "<blank>", BOS: "<s>", EOS: "</s>", UNK: "<unk>"}
PE_ROWS = 5000  # OpenNMT-py's PositionalEncoding max_len
MODEL, SUBWORDS = "model.pt", "sentencepiece.model"
WORKER = Path(__file__).with_name("opennmt_py_worker.py")
TEST_SET = "test_2016_flickr"
BLEU = sacrebleu.BLEU()  # cased, 13a-tokenised, detokenised outputs (sacreBLEU's defaults)
LIMITS = {"beam": 64, "batch": 1024, "threads": 256, "max_length": 1024}


# --------------------------------------------------------------------------- install


def install(folder: Path) -> None:
    """``pip install --no-deps --target folder`` OpenNMT-py and :data:`PACKAGES`, and write
    the stub modules in ``folder/attnkit-stubs``."""
    if folder.exists() and any(folder.iterdir()) and not (folder / "onmt").is_dir():
        raise ValueError(f"--install: {folder} holds other files; expected a new or empty folder")
    cmd = [sys.executable, "-m", "pip", "install", "--no-deps", "--target", str(folder)]
    if subprocess.run([*cmd, *PACKAGES]).returncode != 0:
        raise ValueError(f"--install: pip could not install {', '.join(PACKAGES)}")
    stubs = folder / STUB_DIR
    stubs.mkdir(exist_ok=True)
    for name in STUBS:
        (stubs / f"{name}.py").write_text(
            f'"""A stub: OpenNMT-py imports {name} at start-up for a transform not used by '
            'benchmarks.opennmt_py."""\n\n\ndef __getattr__(name):\n'
            f'    raise ImportError("{name} is a stub (benchmarks.opennmt_py)")\n',
            encoding="utf-8",
        )


def check_install(folder: Path) -> None:
    if not (folder / "onmt").is_dir() or not (folder / STUB_DIR).is_dir():
        raise ValueError(
            f"--onmt: no OpenNMT-py installed in {folder}; run python -m benchmarks.opennmt_py "
            f"--install {folder} first"
        )


# --------------------------------------------------------------------------- conversion


def onmt_tokens(vocab) -> list[str]:
    """The token strings of ``vocab`` by id, with OpenNMT-py's names for the specials.

    Raises:
        ValueError: a token of the vocabulary already holds one of those names.
    """
    tokens = tokens_of(vocab)
    for i, token in enumerate(tokens):
        if i not in ONMT_SPECIALS and token in ONMT_SPECIALS.values():
            raise ValueError(
                f"vocab: token {i} is {token!r}, a name OpenNMT-py keeps for a special token"
            )
    return [ONMT_SPECIALS.get(i, token) for i, token in enumerate(tokens)]


def onmt_options(model: Transformer) -> argparse.Namespace:
    """The model options of the OpenNMT-py checkpoint (OpenNMT-py fills in the others with
    its defaults, ``ArgumentParser.ckpt_model_opts``)."""
    enc, dec = list(model.encoder), list(model.decoder)
    return argparse.Namespace(
        model_type="text",
        model_task="seq2seq",
        encoder_type="transformer",
        decoder_type="transformer",
        layers=-1,
        enc_layers=len(enc),
        dec_layers=len(dec),
        hidden_size=model.d_model,
        word_vec_size=model.d_model,
        heads=enc[0].attn.heads,
        transformer_ff=enc[0].ff[0].out_features,
        position_encoding=True,
        position_encoding_type="SinusoidalInterleaved",
        pos_ffn_activation_fn="relu",
        add_qkvbias=True,
        add_ffnbias=True,
        layer_norm="standard",
        norm_eps=float(model.enc_norm.eps),
        share_embeddings=model.shared_embeddings,
        share_decoder_embeddings=True,
        self_attn_type="scaled-dot",
        max_relative_positions=0,
        dropout=[0.0],
        attention_dropout=[0.0],
        freeze_word_vecs_enc=False,
        freeze_word_vecs_dec=False,
        optim="adam",
        parallel_mode="data_parallel",
        world_size=1,
        gpu_ranks=[],
        use_ckpting=[],
        num_kv=0,
        parallel_residual=False,
        shared_layer_norm=False,
        relative_positions_buckets=0,
    )


def _attention(out: dict, prefix: str, attn, d: int) -> None:
    """q, k, v and output projections; one head has none: identity and zero bias (exact)."""
    names = ("linear_query", "linear_keys", "linear_values", "final_linear")
    if attn.heads == 1:
        projections = [(torch.eye(d), torch.zeros(d))] * 4
    else:
        parts = (attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj)
        projections = [(p.weight, p.bias) for p in parts]
    for name, (weight, bias) in zip(names, projections):
        out[f"{prefix}.{name}.weight"], out[f"{prefix}.{name}.bias"] = weight, bias


def _norm(out: dict, prefix: str, norm) -> None:
    out[f"{prefix}.weight"], out[f"{prefix}.bias"] = norm.weight, norm.bias


def _feed_forward(out: dict, prefix: str, ff, norm) -> None:
    """``ff``: Linear, ReLU, Dropout, Linear (attnkit's); OpenNMT-py's holds its LayerNorm."""
    out[f"{prefix}.w_1.weight"], out[f"{prefix}.w_1.bias"] = ff[0].weight, ff[0].bias
    out[f"{prefix}.w_2.weight"], out[f"{prefix}.w_2.bias"] = ff[3].weight, ff[3].bias
    _norm(out, f"{prefix}.layer_norm", norm)


def onmt_state(model: Transformer) -> tuple[dict, dict]:
    """OpenNMT-py's ``(model, generator)`` state dicts holding ``model``'s weights
    (float32, detached copies), named as ``onmt.model_builder.build_base_model`` names them."""
    check_exportable(model)
    d, out = model.d_model, {}
    pe = sinusoids(torch.arange(PE_ROWS), d)[:, None]  # (P, 1, D), OpenNMT-py's layout
    for side, embedding in (("encoder", model.source_embedding()), ("decoder", model.tgt_embed)):
        out[f"{side}.embeddings.make_embedding.emb_luts.0.weight"] = embedding.weight
        out[f"{side}.embeddings.make_embedding.pe.pe"] = pe
    for i, layer in enumerate(model.encoder):
        prefix = f"encoder.transformer.{i}"
        _norm(out, f"{prefix}.layer_norm", layer.norm1)
        _attention(out, f"{prefix}.self_attn", layer.attn, d)
        _feed_forward(out, f"{prefix}.feed_forward", layer.ff, layer.norm2)
    _norm(out, "encoder.layer_norm", model.enc_norm)
    for i, layer in enumerate(model.decoder):
        prefix = f"decoder.transformer_layers.{i}"
        _norm(out, f"{prefix}.layer_norm_1", layer.norm1)
        _attention(out, f"{prefix}.self_attn", layer.self_attn, d)
        _norm(out, f"{prefix}.layer_norm_2", layer.norm2)
        _attention(out, f"{prefix}.context_attn", layer.cross_attn, d)
        _feed_forward(out, f"{prefix}.feed_forward", layer.ff, layer.norm3)
    _norm(out, "decoder.layer_norm", model.dec_norm)
    generator = {"weight": model.tgt_embed.weight, "bias": model.out_bias}
    copy = lambda t: t.detach().to("cpu", torch.float32).clone()  # noqa: E731
    return {k: copy(v) for k, v in out.items()}, {k: copy(v) for k, v in generator.items()}


def convert(model: Transformer, vocab, out: Path) -> Path:
    """Write ``model`` (source and target sharing ``vocab``, a SentencePiece vocabulary) as
    the OpenNMT-py checkpoint ``out/model.pt`` and its SentencePiece model
    ``out/sentencepiece.model``; returns the checkpoint's path."""
    if getattr(vocab, "sp", None) is None:
        raise ValueError(
            "checkpoint: a SentencePiece vocabulary is needed (OpenNMT-py tokenises with its "
            f"sentencepiece transform), got a {type(vocab).__name__}"
        )
    tokens = onmt_tokens(vocab)
    state, generator = onmt_state(model)
    checkpoint = {
        "model": state,
        "generator": generator,
        "vocab": {
            "src": tokens,
            "tgt": tokens,
            "data_task": "seq2seq",
            "decoder_start_token": ONMT_SPECIALS[BOS],
        },
        "opt": onmt_options(model),
    }
    out.mkdir(parents=True, exist_ok=True)
    torch.save(checkpoint, out / MODEL)
    (out / SUBWORDS).write_bytes(vocab.model)
    return out / MODEL


def load_translation(checkpoint: Path, transformer: bool = True):
    """attnkit's translation model of ``checkpoint`` and its one vocabulary (source = target).

    ``transformer``: the model must be a Transformer (the ones this benchmark converts); a
    caller that reads only the vocabulary passes False.
    """
    model, ck = load_task_model(checkpoint, "translate")
    if transformer and not isinstance(model, Transformer):
        raise ValueError(
            f"--checkpoint: {checkpoint} holds a {model.model_name}; expected a Transformer"
        )
    if ck.vocab["src"] != ck.vocab["tgt"]:
        raise ValueError(
            f"--checkpoint: {checkpoint} has two vocabularies; this benchmark converts models "
            "with one vocabulary for source and target"
        )
    return model.eval(), load_vocab(ck.vocab["src"])


# --------------------------------------------------------------------------- OpenNMT-py


def run_worker(folder: Path, job: dict, threads: int = 1, timeout: float | None = None) -> dict:
    """Run ``job`` in :mod:`benchmarks.opennmt_py_worker` with OpenNMT-py from ``folder``.

    Raises:
        subprocess.TimeoutExpired: the job ran ``timeout`` seconds (it is stopped).
    """
    check_install(folder)
    with tempfile.TemporaryDirectory() as tmp:
        path, answer = Path(tmp) / "job.json", Path(tmp) / "answer.json"
        path.write_text(json.dumps({**job, "threads": threads, "answer": str(answer)}))
        env = {**os.environ, "OMP_NUM_THREADS": str(threads), "MKL_NUM_THREADS": str(threads)}
        env["PYTHONPATH"] = os.pathsep.join([str(folder), str(folder / STUB_DIR)])
        env["PYTHONWARNINGS"] = "ignore"
        done = subprocess.run(
            [sys.executable, str(WORKER), str(path)],
            env=env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise RuntimeError(f"OpenNMT-py failed:\n{done.stderr[-3000:]}")
        return json.loads(answer.read_text())


def onmt_log_probs(folder: Path, model_path: Path, src: list, tgt: list) -> list[torch.Tensor]:
    """Teacher-forced log-probabilities ``(len(t) - 1, V)`` per row from OpenNMT-py."""
    job = {"do": "log_probs", "model": str(model_path), "src": src, "tgt": tgt}
    return [torch.tensor(lp) for lp in run_worker(folder, job)["log_probs"]]


# --------------------------------------------------------------------------- the benchmark


def read_lines(path: Path) -> list[str]:
    if not path.exists():
        raise ValueError(f"--data: {path} not found (expected the multi30k/dataset layout)")
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return [line.rstrip("\n") for line in f]


def row(engine: str, outputs: list[str], seconds: tuple, refs: list[str], vocab, same) -> dict:
    """``seconds``: ``(wall, cpu)`` of the decoding."""
    pieces = sum(len(vocab.sp.encode(o)) for o in outputs)
    wall, cpu = seconds
    return {
        "engine": engine,
        "sentences": len(outputs),
        "seconds": round(wall, 2),
        "cpu_seconds": round(cpu, 2),
        "sentences/s": round(len(outputs) / wall, 1),
        "target tokens/s": round(pieces / wall, 1),
        "bleu": round(BLEU.corpus_score(outputs, [refs]).score, 2),
        "identical": same,
    }


def benchmark(args: argparse.Namespace) -> tuple[list[dict], dict]:
    torch.set_num_threads(args.threads)
    src = read_lines(args.data / f"{TEST_SET}.en.gz")[: args.limit]
    refs = read_lines(args.data / f"{TEST_SET}.de.gz")[: args.limit]
    model, vocab = load_translation(args.checkpoint)
    decoding = Decoding(beam=args.beam, max_len=args.max_length)
    assert decoding.length_penalty is not None  # set by Decoding for its beam
    with tempfile.TemporaryDirectory() as tmp:
        folder = args.convert or Path(tmp)
        model_path = convert(model, vocab, folder)
        job = {
            "do": "translate",
            "model": str(model_path),
            "subword_model": str(folder / SUBWORDS),
            "texts": src,
            "beam": args.beam,
            "batch": args.batch,
            "max_length": args.max_length,
            "length_penalty": "wu" if decoding.length_penalty else "none",
            "alpha": decoding.length_penalty,
        }
        onmt = run_worker(args.onmt, job, args.threads)
    onmt_name = f"OpenNMT-py {onmt['versions']['OpenNMT-py']}"
    onmt_time = (onmt["seconds"], onmt["cpu_seconds"])
    first = row(onmt_name, onmt["outputs"], onmt_time, refs, vocab, "reference")
    settings = {
        "checkpoint": str(args.checkpoint),
        "test set": TEST_SET,
        "beam": args.beam,
        "batch": args.batch,
        "threads": args.threads,
        "max_length": args.max_length,
        "length_penalty": {"type": job["length_penalty"], "alpha": job["alpha"]},
        "attnkit loop_stop": decoding.loop_stop,
        "versions": onmt["versions"],
        "bleu_signature": str(BLEU.get_signature()),  # known once BLEU has scored
    }
    print(f"OpenNMT-py: {len(src)} sentences in {onmt['seconds']:.1f} s", flush=True)
    if args.json:  # OpenNMT-py's row alone until attnkit's are there
        harness.write_json(args.json, [first], **settings, attnkit_started=time.time())
    rows = [first]
    settings["differing"] = {}
    for stop in args.beam_stop:
        decoding = Decoding(beam=args.beam, max_len=args.max_length, beam_stop=stop)
        start, cpu = time.perf_counter(), time.process_time()
        ours, _ = translate_texts(
            model, vocab, vocab, src, decoding=decoding, batch_size=args.batch
        )
        seconds = (time.perf_counter() - start, time.process_time() - cpu)
        same = sum(a == b for a, b in zip(ours, onmt["outputs"]))
        name = f"attnkit {attnkit.__version__}, beam_stop {stop}"
        rows.append(row(name, ours, seconds, refs, vocab, same))
        settings["differing"][stop] = [
            {"source": s, "attnkit": a, "opennmt_py": b}
            for s, a, b in zip(src, ours, onmt["outputs"])
            if a != b
        ][:20]
    return rows, settings


def _bounded(name: str, value: int) -> int:
    if not 1 <= value <= LIMITS[name]:
        flag = "--" + name.replace("_", "-")
        raise ValueError(f"{flag}: expected an int in [1, {LIMITS[name]}], got {value}")
    return value


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m benchmarks.opennmt_py", description=__doc__.splitlines()[0]
    )
    p.add_argument("--json", type=Path, help="write the rows here")
    p.add_argument("--threads", type=int, help="torch threads of each engine (default 1)")
    p.add_argument("--install", type=Path, metavar="DIR", help="install OpenNMT-py into DIR")
    p.add_argument(
        "--onmt",
        type=Path,
        default=Path("build/onmt-py"),
        metavar="DIR",
        help="the private OpenNMT-py folder (default build/onmt-py)",
    )
    p.add_argument("--checkpoint", type=Path, help="attnkit's Transformer translation checkpoint")
    p.add_argument("--convert", type=Path, metavar="OUT", help="write the OpenNMT-py model here")
    p.add_argument("--data", type=Path, help="the folder of test_2016_flickr.{en,de}.gz")
    p.add_argument("--beam", type=int, default=5)
    p.add_argument("--batch", type=int, default=32, help="sentences per batch (default 32)")
    p.add_argument(
        "--max-length",
        type=int,
        default=128,
        help="output tokens at most, both engines (default 128)",
    )
    p.add_argument("--limit", type=int, help="the first N sentences only")
    p.add_argument(
        "--beam-stop",
        nargs="+",
        choices=BEAM_STOPS,
        default=list(BEAM_STOPS),
        help="attnkit's rules for ending a search, a row each (default: all)",
    )
    args = p.parse_args(argv)
    try:
        if args.install is not None:
            install(args.install)
            print(f"installed OpenNMT-py {ONMT_VERSION} in {args.install}")
            return 0
        if args.checkpoint is None:
            raise ValueError("--checkpoint: expected a checkpoint (or --install DIR)")
        args.threads = _bounded("threads", 1 if args.threads is None else args.threads)
        for name in ("beam", "batch", "max_length"):
            _bounded(name, getattr(args, name))
        if args.limit is not None and args.limit < 1:
            raise ValueError(f"--limit: expected a positive int, got {args.limit}")
        if args.data is None:
            model, vocab = load_translation(args.checkpoint)
            if args.convert is None:
                raise ValueError("--convert: expected OUT (or --data DIR to run the benchmark)")
            print(f"wrote {convert(model, vocab, args.convert)} and {args.convert / SUBWORDS}")
            return 0
        check_install(args.onmt)
        rows, settings = benchmark(args)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    columns = ["engine", "sentences/s", "target tokens/s", "bleu", "identical"]
    print(f"sacreBLEU: {settings['bleu_signature']}")
    print(harness.table_header(columns))
    for r in rows:
        print(harness.table_row([r[c] for c in columns]))
    if args.json:
        harness.write_json(args.json, rows, **settings)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
