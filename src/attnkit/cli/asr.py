"""``attnkit train asr`` and ``attnkit transcribe``: Listen, Attend and Spell on speech."""

from __future__ import annotations

import logging
from pathlib import Path

import torch

from attnkit.attention.scores import SCORES
from attnkit.cli import common
from attnkit.cli.alignment import (
    add_alignment_args,
    add_joint_args,
    alignment_config,
    joint_decoding,
)
from attnkit.cli.lm import load_lm
from attnkit.data import (
    DataError,
    SpeechSet,
    load_vocab,
    log_mel,
    read_manifest,
    read_wav,
)
from attnkit.data import resample as resample_audio
from attnkit.data.audio import MAX_SECONDS, SAMPLE_RATE
from attnkit.data.speech import KINDS, speech_dataset
from attnkit.models.las import MIN_FRAMES
from attnkit.tasks.speech import SpeechTask, SpellerPretraining, plot_transcription, transcribe
from attnkit.train import Trainer, distributed

log = logging.getLogger("attnkit")

DEFAULT_CACHE = Path("~/.cache/attnkit/speech")
DESCRIPTION = ("Train on your WAVs (manifests of wav_path<TAB>transcript) or on built-in speech "
               "synthesised with espeak-ng.")
PRETRAIN_DIR = "speller-lm"  # the speller's pre-training run, inside --out
MODEL_OPTIONS = ("listener_hidden", "hidden", "emb", "layers", "score", "key_value_dim",
                 "attn_dim", "dropout")


def add_train_parser(train_sub) -> None:
    p, data = common.add_task_parser(
        train_sub, "asr", help="train a Listen-Attend-Spell speech recogniser",
        description=DESCRIPTION, files="manifest of wav_path<TAB>transcript",
        valid="a manifest", n_train=4000, n_valid=200)
    data.add_argument("--kinds", type=common.choice_list(KINDS, "kind list"),
                      default=("digits", "numbers"),
                      help="built-in utterances, comma-separated (default digits,numbers)")
    data.add_argument("--cache-dir", type=Path, default=DEFAULT_CACHE,
                      help=f"built-in speech features are cached here (default {DEFAULT_CACHE})")
    data.add_argument("--workers", type=common.positive_int, default=2,
                      help="espeak-ng processes at a time when synthesising")
    add_max_seconds_arg(data)
    model = p.add_argument_group("model")
    model.add_argument("--listener-hidden", type=common.positive_int, default=128,
                       help="per direction of the listener's BiLSTMs")
    model.add_argument("--hidden", type=common.positive_int, default=256, help="speller LSTMCell size")
    model.add_argument("--emb", type=common.positive_int, default=64, help="character embedding size")
    model.add_argument("--layers", type=int, choices=(1, 2), default=1,
                       help="speller LSTMCells")
    model.add_argument("--score", choices=SCORES, default="location",
                       help="the speller's attention score (default location; softmax and "
                            "local_p alignments)")
    add_alignment_args(model)
    model.add_argument("--key-value-dim", type=common.positive_int, default=128)
    model.add_argument("--attn-dim", type=common.positive_int, help="additive/location attention size "
                       "(default --hidden)")
    model.add_argument("--dropout", type=common.proportion, default=0.0)
    model.add_argument("--ctc-weight", type=common.probability, default=0.0,
                       help="w in (1 - w) * cross-entropy + w * CTC (0: no CTC head)")
    model.add_argument("--pretrain-lm-steps", type=int, default=0, metavar="N",
                       help="first train the speller alone as a character LM on the training "
                       f"transcripts for N steps (checkpointed in OUT/{PRETRAIN_DIR}; "
                       "single process)")
    common.add_training_args(p, batch_size=32, lr=1e-3)
    p.set_defaults(run=run_train)


def add_max_seconds_arg(p) -> None:
    """``--max-seconds``: the longest audio file read."""
    p.add_argument("--max-seconds", type=common.positive_float, default=MAX_SECONDS,
                   help=f"longest audio file, in seconds (default {MAX_SECONDS:g}): a longer "
                   "one is refused")


def _speech(args) -> tuple[SpeechSet, SpeechSet]:
    if args.train:
        train = read_manifest(args.train, normalize=True, max_seconds=args.max_seconds)
        if args.valid:
            return train, read_manifest(args.valid, normalize=True, max_seconds=args.max_seconds)
        n = min(100, len(train))
        log.warning("no --valid manifest: validating on the first %d training utterances", n)
        return train, train.head(n)
    kw = {"seed": args.seed, "cache_dir": args.cache_dir.expanduser(), "kinds": args.kinds,
          "normalize": True, "workers": args.workers}
    return (speech_dataset(args.n_train, split="train", **kw),
            speech_dataset(args.n_valid, split="valid", **kw))


def run_train(args) -> int:
    if args.pretrain_lm_steps < 0:
        raise ValueError(f"--pretrain-lm-steps: expected a non-negative int, got "
                         f"{args.pretrain_lm_steps}")
    if args.pretrain_lm_steps and distributed.world_size() > 1:
        raise ValueError("--pretrain-lm-steps: the speller's pre-training runs in one process; "
                         "pre-train without torchrun, then --resume under torchrun")
    torch.manual_seed(args.seed)
    pretrain_dir = args.out / PRETRAIN_DIR
    wanted = {"name": "las", **{k: getattr(args, k) for k in MODEL_OPTIONS},
              **alignment_config(args)}
    ck = common.existing_run(args, "asr", pending=pretrain_dir if args.pretrain_lm_steps else None,
                             model=wanted)
    train, valid = _speech(args)
    data = ({"train": str(args.train), "valid": str(args.valid)} if args.train else
            {"built_in": list(args.kinds), "n_train": args.n_train, "n_valid": args.n_valid,
             "normalize": True})
    model_config = ck.config["model"] if ck is not None else wanted
    task = SpeechTask(train, valid, model_config=model_config, batch_size=args.batch_size,
                      seed=args.seed, label_smoothing=args.label_smoothing,
                      teacher_forcing=common.teacher_forcing(args), ctc_weight=args.ctc_weight,
                      data=data, vocab=load_vocab(ck.vocab) if ck is not None else None)
    model = task.build_model().to(args.device)
    if ck is None and args.pretrain_lm_steps:
        _pretrain_speller(model, task, args, pretrain_dir)
    if common.train_and_report(model, task, args, metric="1-cer") is not None:
        _samples_and_plots(model, task, args.out, args.plot)
    return 0


def _pretrain_speller(model, task: SpeechTask, args, folder: Path) -> None:
    """Train the speller alone as a language model for ``--pretrain-lm-steps`` steps (in
    ``folder``; an interrupted pre-training resumes with ``--resume``)."""
    config = common.training_config(args, max_steps=args.pretrain_lm_steps,
                             warmup=min(args.warmup, args.pretrain_lm_steps - 1))
    trainer = Trainer(model, SpellerPretraining(task), config, folder)
    if args.resume and (folder / "checkpoint").exists():
        trainer.resume()
    result = trainer.fit()
    common.stop_if_signalled(result, trainer.checkpoint_dir)
    scores = ", ".join(f"{k} {v:.4f}" for k, v in result.history[-1].items() if k != "step") \
        if result.history else "no validation"
    print(f"speller pre-trained as a language model for {result.step} steps "
          f"({result.stopped}); held-out next character: {scores}")


def _samples_and_plots(model, task: SpeechTask, out: Path, n_plots: int) -> None:
    features = task.valid.features[: max(n_plots, 5)]
    outs, raws = transcribe(model, task.char_vocab, features, weights=n_plots > 0)
    for ref, hyp in list(zip(task.valid.transcripts, outs))[:5]:
        print(f"  {hyp}" + ("" if hyp == ref else f"   (reference: {ref})"))
    _plot_all(raws, features[:n_plots], task.char_vocab, out)


def _plot_all(raws, features, vocab, folder: Path) -> None:
    offset = 0
    for hyp in raws:
        for i in range(hyp.tokens.shape[0]):
            if offset + i < len(features):
                path = plot_transcription(hyp, i, features[offset + i], vocab,
                                          folder / f"alignment_{offset + i}.png")
                print(f"  wrote {path}")
        offset += hyp.tokens.shape[0]


def add_transcribe_parser(sub) -> None:
    p = sub.add_parser("transcribe", help="transcribe WAV files with a trained asr checkpoint")
    p.add_argument("--checkpoint", type=Path, required=True)
    p.add_argument("wav", type=Path, nargs="+", help="WAV files (PCM of 8-32 bits or float, any rate)")
    add_max_seconds_arg(p)
    common.add_decoding_args(p, beam=common.TASK_BEAM["asr"])
    add_joint_args(p)
    common.add_device_arg(p)
    p.add_argument("--plot", type=Path, help="folder for one alignment picture per file")
    common.add_html_arg(p)
    p.set_defaults(run=run_transcribe)


def wav_features(path: Path, max_seconds: float | None = MAX_SECONDS) -> torch.Tensor:
    """Normalised log-mel features ``(T, 80)`` of a WAV file, as in training.

    Raises:
        DataError: naming the file: unreadable, compressed, shorter than 80 ms or longer
            than ``max_seconds``.
    """
    samples, rate = read_wav(path, max_seconds=max_seconds)
    features = log_mel(resample_audio(samples, rate, SAMPLE_RATE), normalize=True)
    if features.shape[0] < MIN_FRAMES:
        raise DataError(f"{path}: {features.shape[0]} feature frames "
                        f"({samples.numel() / rate * 1000:.0f} ms of audio); the recogniser "
                        f"needs at least {MIN_FRAMES} (80 ms)")
    return features


def run_transcribe(args) -> int:
    decoding = joint_decoding(args, common.decoding(args))
    features = [wav_features(path, args.max_seconds) for path in args.wav]
    evaluator = common.load_evaluator(args.checkpoint, args.device, "asr")
    evaluator.lm = load_lm(args.lm, evaluator.vocab, args.device)
    outputs = evaluator.decode(features, decoding, weights=common.wants_weights(args))
    common.print_outputs(outputs, args)
    if args.plot:
        for i, output in enumerate(outputs):
            print(f"  wrote {output.draw(args.plot / f'alignment_{i}.png')}")
    common.write_html(args, outputs, names=[str(p) for p in args.wav])
    return 0
