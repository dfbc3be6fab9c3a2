"""``attnkit train asr`` and ``attnkit transcribe``: Listen, Attend and Spell on speech."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence
from pathlib import Path

import torch

from attnkit.attention.scores import SCORES
from attnkit.cli import argtypes, common, corpus, inference, recipes
from attnkit.cli.augment import add_speech_args, speech_augmentations
from attnkit.cli.decoder_options import (
    add_alignment_args,
    add_loss_args,
    alignment_config,
    joint_decoding,
)
from attnkit.data import CharVocab, SpeechSet, load_vocab
from attnkit.data.corpora.speech_sets import JoinedFeatures, joined_speech
from attnkit.data.worlds.speech import ENGINES, ESPEAK_CONSONANTS, KINDS, speech_dataset
from attnkit.decoding import Decoding, Hypotheses
from attnkit.models.las import LAS, LISTENERS, MIN_FRAMES
from attnkit.tasks import loading
from attnkit.tasks.asr import (
    AsrTask,
    SpellerPretraining,
    plot_transcription,
    transcribe,
    transcribe_stream,
    wav_samples,
)
from attnkit.train import CheckpointError, distributed

log = logging.getLogger("attnkit")

DEFAULT_CACHE = Path("~/.cache/attnkit/speech")
DESCRIPTION = (
    "Train on your speech corpus (attnkit's manifests of wav_path<TAB>transcript, "
    "Kaldi/ESPnet data directories, LibriSpeech, Common Voice, NeMo JSON lines, "
    "CMU's AN4; "
    "WAV, FLAC, OGG or MP3 audio) or on built-in speech synthesised with espeak-ng, "
    "festival and gnuspeech."
)
PRETRAIN_DIR = "speller-lm"  # the speller's pre-training run, inside --out
MODEL_OPTIONS = (
    "listener",
    "listener_hidden",
    "hidden",
    "emb",
    "layers",
    "score",
    "key_value_dim",
    "attn_dim",
    "dropout",
)
STREAM_HELP = "attnkit train asr --listener uni --alignment monotonic (or mocha)"
DEFAULT_CHUNK_MS = 200.0


def add_train_parser(train_sub: common.SubParsers) -> None:
    p, data = common.add_task_parser(
        train_sub,
        "asr",
        help="train a Listen-Attend-Spell speech recogniser",
        description=DESCRIPTION,
        files="a speech corpus (a manifest of "
        "wav_path<TAB>transcript, a Kaldi/ESPnet data directory, a LibriSpeech folder, a Common "
        "Voice TSV or a JSON-lines manifest: --format)",
        valid="a speech corpus",
        n_train=4000,
        n_valid=200,
    )
    data.add_argument(
        "--kinds",
        type=argtypes.choice_list(KINDS, "kind list"),
        default=("digits", "numbers"),
        help="built-in utterances, comma-separated (default digits,numbers)",
    )
    data.add_argument(
        "--engines",
        type=argtypes.choice_list(ENGINES, "engine list"),
        default=("espeak-ng",),
        help="synthesisers of the built-in utterances, comma-separated "
        f"({', '.join(ENGINES)}; default espeak-ng; festival needs Debian's "
        "festival and festvox voices, accented (festival's Italian, Finnish, "
        "Czech and Catalan voices saying English) theirs, gnuspeech Node.js "
        "and an npm package, "
        "pico the PyPI package py-nanotts: make install puts them in place)",
    )
    data.add_argument(
        "--synthetic-share",
        type=argtypes.proportion,
        default=0.0,
        metavar="P",
        help="with --train: that share of the training utterances are built-in synthesised "
        "ones (--kinds, --engines, --data-seed; their training voices), mixed with --train's "
        "(validation: --valid's alone; default 0: none)",
    )
    data.add_argument(
        "--say-oh",
        type=argtypes.probability,
        default=0.0,
        metavar="P",
        help='built-in training digit strings say each zero as "oh" with probability P, '
        'their transcripts keeping "zero" (people reading digits aloud say both; AN4\'s '
        'references write OH as ZERO); default 0: always "zero"',
    )
    data.add_argument(
        "--espeak-consonants",
        metavar="LOW,HIGH",
        type=argtypes.int_range(*ESPEAK_CONSONANTS, "loudness range"),
        help="built-in training speech: espeak-ng says unvoiced consonants (f, s, "
        "t, k ...) at a loudness drawn per utterance from LOW-HIGH percent "
        "(e.g. 15,100; default: each voice's own), as recorded voices often "
        "say them more quietly; validation keeps the voices' own",
    )
    data.add_argument(
        "--cache-dir",
        type=Path,
        default=DEFAULT_CACHE,
        help=f"built-in speech features are cached here (default {DEFAULT_CACHE})",
    )
    data.add_argument(
        "--workers",
        type=argtypes.positive_int,
        default=2,
        help="synthesiser processes at a time when synthesising",
    )
    corpus.add_limit_arg(data, "asr")
    corpus.add_format_args(p, "asr")
    model = p.add_argument_group("model")
    model.add_argument(
        "--listener",
        choices=LISTENERS,
        default="bi",
        help="bi: pyramidal BiLSTMs over features normalised per utterance "
        "(default); uni: unidirectional LSTMs over log-mels normalised "
        "with the training data's statistics (stored in the checkpoint), "
        "which with --alignment monotonic or mocha can transcribe while "
        "the audio arrives (transcribe --stream)",
    )
    model.add_argument(
        "--listener-hidden",
        type=argtypes.positive_int,
        default=128,
        help="per direction of the listener's BiLSTMs (uni: of its LSTMs)",
    )
    model.add_argument(
        "--hidden", type=argtypes.positive_int, default=256, help="speller LSTMCell size"
    )
    model.add_argument(
        "--emb", type=argtypes.positive_int, default=64, help="character embedding size"
    )
    model.add_argument("--layers", type=int, choices=(1, 2), default=1, help="speller LSTMCells")
    model.add_argument(
        "--score",
        choices=SCORES,
        default="location",
        help="the speller's attention score (default location; softmax and local_p alignments)",
    )
    add_alignment_args(model)
    model.add_argument("--key-value-dim", type=argtypes.positive_int, default=128)
    model.add_argument(
        "--attn-dim",
        type=argtypes.positive_int,
        help="additive/location attention size (default --hidden)",
    )
    model.add_argument("--dropout", type=argtypes.proportion, default=0.0)
    add_loss_args(
        model,
        head="",
        ctc=" (0: no CTC head)",
        diagonal="(character, listener step)",
        order="shortest",
    )
    model.add_argument(
        "--pretrain-lm-steps",
        type=int,
        default=0,
        metavar="N",
        help="first train the speller alone as a character LM on the training "
        f"transcripts for N steps (checkpointed in OUT/{PRETRAIN_DIR}; "
        "single process)",
    )
    add_speech_args(p)
    common.add_training_args(p, batch_size=32, lr=1e-3)
    p.set_defaults(run=run_train)


def _speech(
    args: argparse.Namespace, normalize: bool, audio: bool = False
) -> tuple[SpeechSet, SpeechSet]:
    """The training and validation utterances, normalised per utterance with ``normalize``
    (else raw log-mels, for a listener that normalises them itself); with ``audio`` built-in
    training speech keeps its samples too (for augmentation of the audio)."""
    if args.espeak_consonants and (args.train or "espeak-ng" not in args.engines):
        given = f"--train {args.train}" if args.train else f"--engines {','.join(args.engines)}"
        raise ValueError(
            f"--espeak-consonants: only espeak-ng's built-in training speech takes it (got {given})"
        )
    kw = {
        "seed": common.data_seed(args),
        "cache_dir": args.cache_dir.expanduser(),
        "kinds": args.kinds,
        "engines": args.engines,
        "normalize": normalize,
        "workers": args.workers,
    }
    if args.train:
        read = {"normalize": normalize, "max_seconds": args.max_seconds, "min_frames": MIN_FRAMES}
        train, valid = corpus.read_splits("asr", args, **read)
        n = common.synthetic_count(len(train), args.synthetic_share)
        if n:
            log.info("mixing %d built-in utterances with the %d of --train", n, len(train))
            built_in = speech_dataset(n, split="train", audio=audio, oh=args.say_oh, **kw)
            train = joined_speech([train, built_in])
        if valid is not None:
            return train, valid
        n = min(100, len(train))
        log.warning("no --valid manifest: validating on the first %d training utterances", n)
        return train, train.head(n)
    if args.synthetic_share:
        raise ValueError(
            "--synthetic-share: mixes built-in utterances with --train's; give --train "
            "(without it every utterance is built-in)"
        )
    return (
        speech_dataset(
            args.n_train,
            split="train",
            audio=audio,
            consonants=args.espeak_consonants,
            oh=args.say_oh,
            **kw,
        ),
        speech_dataset(args.n_valid, split="valid", **kw),
    )


def run_train(args: argparse.Namespace) -> int:
    recipes.check_corpus(args.recipe, args.train)
    if args.pretrain_lm_steps < 0:
        raise ValueError(
            f"--pretrain-lm-steps: expected a non-negative int, got {args.pretrain_lm_steps}"
        )
    if args.pretrain_lm_steps and distributed.world_size() > 1:
        raise ValueError(
            "--pretrain-lm-steps: the speller's pre-training runs in one process; "
            "pre-train without torchrun, then --resume under torchrun"
        )
    torch.manual_seed(args.seed)
    pretrain_dir = args.out / PRETRAIN_DIR
    wanted = {
        "name": "las",
        **{k: getattr(args, k) for k in MODEL_OPTIONS},
        **alignment_config(args),
    }
    ck, init = common.run_checkpoints(
        args, "asr", pending=pretrain_dir if args.pretrain_lm_steps else None, model=wanted
    )
    start = ck or init
    if start is not None and bool(start.config["model"].get("ctc")) != (args.ctc_weight > 0):
        has = bool(start.config["model"].get("ctc"))
        raise CheckpointError(
            f"{start.path}: its model {'has a' if has else 'has no'} CTC head; "
            f"--ctc-weight {'above 0' if has else '0'} trains it "
            f"(got --ctc-weight {args.ctc_weight:g})"
        )
    model_config = start.config["model"] if start is not None else wanted
    per_utterance = model_config.get("listener", "bi") == "bi"
    augmentations = speech_augmentations(args, ck)
    train, valid = _speech(args, per_utterance, augmentations.needs_samples)
    data = (
        {
            "train": str(args.train),
            "valid": str(args.valid),
            **({"format": args.format} if args.format else {}),
            **(
                {
                    "synthetic_share": args.synthetic_share,
                    "n_synthetic": len(train.features.parts[-1]),
                    "built_in": list(args.kinds),
                    "engines": list(args.engines),
                    **({"say_oh": args.say_oh} if args.say_oh else {}),
                }
                if isinstance(train.features, JoinedFeatures)
                else {}
            ),
        }
        if args.train
        else {
            "built_in": list(args.kinds),
            "engines": list(args.engines),
            **(
                {"espeak_consonants": list(args.espeak_consonants)}
                if args.espeak_consonants
                else {}
            ),
            **({"say_oh": args.say_oh} if args.say_oh else {}),
            "n_train": args.n_train,
            "n_valid": args.n_valid,
            "normalize": per_utterance,
        }
    )
    task = AsrTask(
        train,
        valid,
        model_config=model_config,
        **common.sequence_task_options(args, "ctc_weight", "guided_attention", "sortagrad"),
        data=data,
        vocab=load_vocab(start.vocab) if start is not None else None,
        augment=augmentations,
    )
    model = task.build_model().to(args.device)
    if start is None and args.pretrain_lm_steps:
        _pretrain_speller(model, task, args, pretrain_dir)
    if (
        common.train_and_report(model, task, args, metric="1-cer", tiebreak="-wer", init=init)
        is not None
    ):
        _samples_and_plots(model, task, args.out, args.plot)
    return 0


def _pretrain_speller(model: LAS, task: AsrTask, args: argparse.Namespace, folder: Path) -> None:
    """Train the speller alone as a language model for ``--pretrain-lm-steps`` steps (in
    ``folder``; an interrupted pre-training resumes with ``--resume``)."""
    config = common.training_config(
        args, max_steps=args.pretrain_lm_steps, warmup=min(args.warmup, args.pretrain_lm_steps - 1)
    )
    trainer = common.typed_trainer(model, SpellerPretraining(task), config, folder)
    if args.resume and (folder / "checkpoint").exists():
        trainer.resume()
    result = trainer.fit()
    common.stop_if_signalled(result, trainer.checkpoint_dir)
    scores = (
        ", ".join(f"{k} {v:.4f}" for k, v in result.history[-1].items() if k != "step")
        if result.history
        else "no validation"
    )
    print(
        f"speller pre-trained as a language model for {result.step} steps "
        f"({result.stopped}); held-out next character: {scores}"
    )


def _samples_and_plots(model: LAS, task: AsrTask, out: Path, n_plots: int) -> None:
    features = task.valid.features[: max(n_plots, 5)]
    outs, raws = transcribe(model, task.char_vocab, features, weights=n_plots > 0)
    for ref, hyp in list(zip(task.valid.transcripts, outs))[:5]:
        print(f"  {hyp}" + ("" if hyp == ref else f"   (reference: {ref})"))
    _plot_all(raws, features[:n_plots], task.char_vocab, out)


def _plot_all(
    raws: list[Hypotheses], features: Sequence[torch.Tensor], vocab: CharVocab, folder: Path
) -> None:
    offset = 0
    for hyp in raws:
        for i in range(hyp.tokens.shape[0]):
            if offset + i < len(features):
                path = plot_transcription(
                    hyp, i, features[offset + i], vocab, folder / f"alignment_{offset + i}.png"
                )
                print(f"  wrote {path}")
        offset += hyp.tokens.shape[0]


def add_transcribe_parser(sub: common.SubParsers) -> None:
    p = sub.add_parser("transcribe", help="transcribe audio files with a trained asr checkpoint")
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument(
        "wav",
        type=Path,
        nargs="*",
        help="audio files (WAV, FLAC, OGG, MP3; any "
        "rate); -: read their paths from standard input, one a line, each printed "
        "as soon as it is read",
    )
    inference.add_inference_args(p, "asr", plot="folder for one alignment picture per file")
    stream = p.add_argument_group(
        "streaming (a model trained with --listener uni and --alignment monotonic or mocha)"
    )
    stream.add_argument(
        "--stream",
        action="store_true",
        help="feed each file's audio in chunks and print every character as "
        "soon as it is decided (greedy: the same transcript as "
        "--beam 1); the latency goes to stderr",
    )
    stream.add_argument(
        "--chunk-ms",
        type=argtypes.positive_float,
        metavar="MS",
        help=f"with --stream: milliseconds of audio per chunk (default {DEFAULT_CHUNK_MS:g})",
    )
    stream.add_argument(
        "--realtime",
        action="store_true",
        help="with --stream: process each chunk only once its audio would "
        "have been recorded (sleep until then)",
    )
    p.set_defaults(run=run_transcribe)


def run_transcribe(args: argparse.Namespace) -> int:
    if args.stream:
        return run_stream(args)
    if args.chunk_ms is not None or args.realtime:
        raise ValueError(
            f"{'--chunk-ms' if args.chunk_ms is not None else '--realtime'}: an option of --stream"
        )
    return inference.decode_files(
        args,
        "asr",
        joint_decoding(args, common.decoding(args)),
        args.wav,
        lambda path: wav_samples(path, max_seconds=args.max_seconds),
        expected="audio files",
        picture="alignment",
        prepare=lambda evaluator, samples: evaluator.features(samples),
    )


def run_stream(args: argparse.Namespace) -> int:
    """``transcribe --stream``: each file chunk by chunk, its characters printed as they are
    emitted, one line per file; a latency line per file on stderr."""
    args.default_beam = 1
    decoding = joint_decoding(args, common.decoding(args))
    greedy = Decoding(max_len=decoding.max_len, loop_stop=decoding.loop_stop)
    if decoding != greedy or common.wants_weights(args):
        raise ValueError(
            "--stream: decodes greedily as the audio arrives; --beam, --sample, "
            "--ctc-weight, --lm, --plot and --html do not apply"
        )
    audio = [wav_samples(path, max_seconds=args.max_seconds) for path in args.wav]
    evaluator = loading.load_evaluator(args.checkpoint, args.device, "asr")
    try:
        evaluator.model.check_streaming()
    except ValueError as exc:
        missing = str(exc).removeprefix("model: ")
        raise ValueError(
            f"--stream: {args.checkpoint} cannot stream ({missing}); train one with `{STREAM_HELP}`"
        ) from None
    chunk_ms = args.chunk_ms or DEFAULT_CHUNK_MS
    for path, samples in zip(args.wav, audio):
        chunks = []
        for chunk in transcribe_stream(
            evaluator.model,
            evaluator.char_vocab,
            samples,
            chunk_ms=chunk_ms,
            max_len=decoding.max_len,
            loop_stop=decoding.loop_stop,
            realtime=args.realtime,
        ):
            print(chunk.text, end="", flush=True)
            chunks.append(chunk)
        print()
        compute = [c.compute_s * 1000 for c in chunks]
        print(
            f"{path}: {chunks[-1].end_s:.2f} s of audio in {len(chunks)} chunks of "
            f"{chunk_ms:g} ms; compute per chunk {sum(compute) / len(compute):.1f} ms "
            f"mean, {max(compute):.1f} ms max",
            file=sys.stderr,
        )
    return 0
