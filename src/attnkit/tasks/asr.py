"""Speech recognition as a :class:`attnkit.train.Task`: Listen, Attend and Spell on log-mels.

Utterances are :class:`attnkit.data.SpeechSet` features ``(T, 80)`` (built-in espeak-ng speech
or the user's WAVs): normalised per utterance for a model with a bidirectional listener, raw
log-mels for one with a causal listener, which normalises them with statistics of the training
data stored in it (:attr:`attnkit.models.LAS.normalises_input`); transcripts are character
sequences (:class:`attnkit.data.CharVocab`). The model is a :class:`attnkit.models.LAS` built by the
model registry from its config (``{"name": "las", ...}``), so a checkpoint alone rebuilds it.

:class:`SpellerPretraining` is the task of training the speller alone as a character language
model on the transcripts first, run by the same :class:`attnkit.train.Trainer` (checkpoints,
resume).

:func:`transcribe_stream` transcribes audio chunk by chunk with a model that streams
(:meth:`attnkit.models.LAS.check_streaming`), emitting each character as soon as its hard
monotonic attention has stopped within the audio so far: the same characters as
:func:`transcribe` greedily over the whole utterance.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Iterator, Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any, NamedTuple, cast

import torch
import torch.nn.functional as F

import attnkit.tasks.metrics as scores
from attnkit.checks import (
    check_fraction,
    check_non_negative,
    check_non_negative_int,
    check_positive_int,
    quoted,
)
from attnkit.data import (
    CharVocab,
    DataError,
    SpeechSet,
    feature_statistics,
    load_vocab,
    log_mel,
    log_mel_stream,
    pad_batch,
    pad_features,
    resample,
)
from attnkit.data.audio.features import SAMPLE_RATE, frame_count, samples_needed
from attnkit.data.audio.files import MAX_SECONDS, read_audio
from attnkit.data.augment.audio_augment import SpeechAugment
from attnkit.data.augment.augmentation import example_rng
from attnkit.data.corpora.reading import read_corpus
from attnkit.decoding import Decoding, Hypotheses, decode_batches, stream_feed, stream_start
from attnkit.diagnose.plots import plot_alignment
from attnkit.models import LAS, build_model, guided_attention_loss
from attnkit.models.las import HALVINGS, MIN_FRAMES, CausalListener
from attnkit.tasks.batching import length_batches, task_config
from attnkit.tasks.evaluator import (
    Evaluator,
    Example,
    Output,
    pictures,
    scores_of,
    texts_of,
    tokens_of,
)
from attnkit.tasks.explore import speech_example
from attnkit.tasks.route import Route, Upload
from attnkit.tokens import BOS, EOS, PAD
from attnkit.train import Batches, TeacherForcing

__all__ = [
    "AsrEvaluator",
    "AsrTask",
    "SpellerPretraining",
    "StreamedChunk",
    "max_chars",
    "metrics",
    "plot_transcription",
    "transcribe",
    "transcribe_stream",
    "wav_samples",
]

# Output length cap: characters per feature frame (fast speech is ~0.17 at 10 ms), plus a margin.
CHARS_PER_FRAME = 0.3
EXTRA_CHARS = 10


def metrics(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """Character and word error rates (jiwer) and ``"1-cer"``, which training maximises (the
    CER minimised). It is not an accuracy: the CER exceeds 1, and ``1-cer`` is negative,
    when the outputs hold more errors than the references hold characters (an untrained
    model's long outputs)."""
    cer = scores.cer(hypotheses, references)
    return {"cer": cer, "wer": scores.wer(hypotheses, references), "1-cer": 1.0 - cer}


def max_chars(frames: torch.Tensor) -> torch.Tensor:
    """The output limit, EOS included, of utterances of ``frames (B,)`` feature frames:
    ``ceil(0.3 T) + 10``."""
    return (frames.float() * CHARS_PER_FRAME).ceil().long() + EXTRA_CHARS


def check_frames(utterances: SpeechSet) -> None:
    """Raises a :class:`DataError` naming the first utterance shorter than 8 frames (80 ms)."""
    for frames, origin in zip(utterances.frames, utterances.origins):
        if frames < MIN_FRAMES:
            raise DataError(
                f"{origin}: {frames} feature frames; the listener's "
                f"{HALVINGS} halvings need at least {MIN_FRAMES}"
            )


@torch.no_grad()
def transcribe(
    model: LAS,
    vocab: CharVocab,
    features: Sequence[torch.Tensor],
    *,
    decoding: Decoding | None = None,
    weights: bool = False,
    batch_size: int = 32,
    lm=None,
) -> tuple[list[str], list[Hypotheses]]:
    """Transcripts of the utterances ``features[i]`` ``(T_i, F)`` decoded as ``decoding``
    says (default greedy; ``lm``: the language model of ``decoding.lm_weight``), and per batch
    the raw hypotheses (tokens, and with ``weights`` the attention weights for plots). An
    output has at most ``ceil(0.3 * T_i) + 10`` characters (EOS included).

    Raises:
        ValueError: an utterance shorter than 8 frames.
    """
    texts, raws = [], []
    for _, hyp in decode_batches(
        model,
        features,
        pad_features,  # (B, T, F), (B,)
        max_len=max_chars,
        decoding=decoding,
        batch_size=batch_size,
        lm=lm,
        weights=weights,
    ):
        texts += [vocab.decode(row) for row in hyp.best().tokens]
        raws.append(hyp)
    return texts, raws


def wav_samples(path: str | Path, *, max_seconds: float | None = MAX_SECONDS) -> torch.Tensor:
    """The samples ``(N,)`` of an audio file (WAV, FLAC, OGG Vorbis or Opus, MP3:
    :func:`attnkit.data.audio.files.read_audio`) at the model rate (16 kHz).

    Raises:
        DataError: naming the file: unreadable, of a codec not read, longer than
            ``max_seconds``, or shorter than the 8 feature frames (80 ms) a recogniser needs.
    """
    samples, rate = read_audio(path, max_seconds=max_seconds)
    samples = resample(samples, rate, SAMPLE_RATE)
    frames = frame_count(samples.numel())
    if frames < MIN_FRAMES:
        ms = samples.numel() / SAMPLE_RATE * 1000
        raise DataError(
            f"{path}: {frames} feature frames ({ms:.0f} ms of audio); the "
            f"recogniser needs at least {MIN_FRAMES} (80 ms)"
        )
    return samples


class StreamedChunk(NamedTuple):
    """What :func:`transcribe_stream` did with one chunk of audio.

    Attributes:
        index: the chunk's number, from 0.
        end_s: the audio received with it, in seconds from the start.
        text: the characters emitted after it (possibly none).
        heard_s: for each character of ``text``, the audio its attention read up to: the end
            of the window of the last frame of the listener step it stopped at (at most the
            audio's length), in seconds from the start; None for a character whose attention
            found no stop (read nothing).
        compute_s: the wall-clock seconds spent on the chunk (features, listener, speller).
        cpu_s: the CPU seconds this thread spent on it (on a machine that other work also
            loads, wall-clock time includes the waits for a core).
    """

    index: int  # type: ignore[assignment]  # the field shadows tuple.index, as named
    end_s: float
    text: str
    heard_s: list[float | None]
    compute_s: float
    cpu_s: float


def transcribe_stream(
    model: LAS,
    vocab: CharVocab,
    samples: torch.Tensor,
    *,
    chunk_ms: float = 200.0,
    max_len: int | None = None,
    loop_stop: bool = True,
    realtime: bool = False,
) -> Iterator[StreamedChunk]:
    """Transcribe ``samples (N,)`` (16 kHz) as if they arrived ``chunk_ms`` at a time: after
    each chunk, the characters greedy decoding has decided (:func:`attnkit.decoding.stream_feed`
    over :func:`attnkit.data.log_mel_stream` frames). Together they are :func:`transcribe`'s
    greedy transcript of the whole utterance (``max_len``: its output limit, EOS included;
    default ``ceil(0.3 T) + 10`` of the utterance's ``T`` frames; ``loop_stop``: as
    :class:`attnkit.decoding.Decoding`'s, stop an output that loops). With ``realtime`` each
    chunk is processed only once its audio would have been recorded, counting from the
    first chunk's processing (a sleep, not counted in its times).

    Raises:
        ValueError: a model that cannot stream (the message says what it lacks), ``chunk_ms``
            not positive, or audio shorter than 8 frames (80 ms).
    """
    if not isinstance(chunk_ms, (int, float)) or isinstance(chunk_ms, bool) or chunk_ms <= 0:
        raise ValueError(f"chunk_ms: expected a positive number, got {quoted(chunk_ms)}")
    if samples.dim() != 1 or frame_count(samples.numel()) < MIN_FRAMES:
        raise ValueError(
            f"samples: expected (N,) samples of at least {MIN_FRAMES} feature "
            f"frames (80 ms), got {tuple(samples.shape)}"
        )
    model.eval()
    device = next(model.parameters()).device
    step = max(1, round(chunk_ms * SAMPLE_RATE / 1000))
    n = samples.numel()

    def limit(frames: int) -> int:
        return max_len or int(max_chars(torch.tensor([frames]))[0])

    mel, state = None, stream_start(model, device=device, loop_stop=loop_stop)
    started = time.perf_counter()
    for index, start in enumerate(range(0, n, step)):
        end = min(n, start + step)
        if realtime:
            time.sleep(max(0.0, started + end / SAMPLE_RATE - time.perf_counter()))
        begin, begin_cpu = time.perf_counter(), time.thread_time()
        frames, mel = log_mel_stream(samples[start:end], mel, final=end == n)  # (t, F)
        with torch.no_grad():
            state, emitted = stream_feed(
                model, state, frames[None].to(device), final=end == n, max_len=limit
            )
        heard = [
            min(n, samples_needed(e.reach * MIN_FRAMES)) / SAMPLE_RATE if e.reach else None
            for e in emitted
        ]
        yield StreamedChunk(
            index,
            end / SAMPLE_RATE,
            vocab.decode(e.token for e in emitted),
            heard,
            time.perf_counter() - begin,
            time.thread_time() - begin_cpu,
        )


def plot_transcription(
    hyp: Hypotheses,
    i: int,
    features: torch.Tensor,
    vocab: CharVocab,
    path: str | Path,
    *,
    title: str | None = None,
) -> Path | None:
    """Alignment of example ``i`` of ``hyp``: its characters (EOS included) over the
    spectrogram ``features (T, F)``, one listener step per 8 frames; None when ``hyp`` was
    decoded without ``weights``."""
    hyp = hyp.best()
    if hyp.weights is None:
        return None
    steps = features.shape[0] // MIN_FRAMES
    n = int(hyp.lengths[i])
    labels = [vocab.piece(t) for t in hyp.tokens[i, :n]]
    background = features[: steps * MIN_FRAMES].T  # (F, 8 S): the frames the steps cover
    return plot_alignment(
        hyp.weights[i, :n, :steps],
        background,
        labels,
        path,
        steps=steps,
        origin="lower",
        title=title or vocab.decode(hyp.tokens[i]),
    )


class AsrTask:
    """Batches, loss and metrics for (features, transcript) utterances.

    Args:
        train, valid: :class:`attnkit.data.SpeechSet` (features ``(T_i, F)``); features on
            disk (:class:`attnkit.data.FeaturesOnDisk`) are read when a batch needs them, so
            memory does not grow with the training utterances; the first ``max_valid``
            validation utterances are read once.
        model_config: the model's registry config (``name`` defaults to ``"las"``); ``vocab``,
            ``features`` and ``ctc`` are set from the data and ``ctc_weight``.
        vocab: characters (default: built from the training transcripts).
        batch_size: utterances per batch (batches group similar lengths).
        label_smoothing: of the masked cross-entropy.
        teacher_forcing: probability of feeding the reference character, or a
            :class:`attnkit.train.TeacherForcing` schedule over training steps.
        ctc_weight: ``w`` in ``loss = (1 - w) * cross-entropy + w * CTC`` (0: no CTC head).
        guided_attention: the weight of :func:`attnkit.models.guided_attention_loss` added
            to the loss (0: none): the speller's attention is led to the diagonal of
            (character, listener step) early in training.
        sortagrad: the first ``sortagrad`` epochs take their batches shortest first
            (SortaGrad, Amodei et al. 2016: the attention learns to align on short utterances
            before long ones); 0: every epoch shuffled.
        max_valid: validation utterances decoded at each evaluation.
        augment: speech augmentations (:mod:`attnkit.data.augment.audio_augment`) applied to each
            training utterance as its batch is built, drawn from
            :func:`attnkit.data.augment.augmentation.example_rng` ``(seed, epoch, index)`` (so a
            resumed run sees the same utterances); never to validation utterances. Those that change
            the audio need a training set that keeps it (:meth:`FeaturesOnDisk.samples
            <attnkit.data.FeaturesOnDisk.samples>`: a corpus, or built-in speech made with
            ``audio=True``). An utterance that augmentation leaves shorter than 8 frames is
            taken as stored. None or empty: none.

    Raises:
        DataError: an utterance shorter than 8 frames (80 ms), named by its origin.
        ValueError: ``augment`` changes the audio of a training set that keeps features
            only.
    """

    def __init__(
        self,
        train: SpeechSet,
        valid: SpeechSet,
        *,
        model_config: dict,
        vocab: CharVocab | None = None,
        batch_size: int = 32,
        seed: int = 0,
        label_smoothing: float = 0.1,
        teacher_forcing: float | TeacherForcing = 1.0,
        ctc_weight: float = 0.0,
        guided_attention: float = 0.0,
        sortagrad: int = 0,
        max_valid: int = 300,
        data: dict | None = None,
        augment: SpeechAugment | Sequence | None = None,
    ):
        if len(train) == 0:
            raise ValueError("train: expected at least one utterance")
        check_positive_int("batch_size", batch_size)
        check_fraction("ctc_weight", ctc_weight)
        for s in (train, valid):
            check_frames(s)
        self.train = train
        valid = valid.head(max_valid)
        self.valid = SpeechSet(list(valid.features), valid.transcripts, valid.origins)
        self.char_vocab = vocab or CharVocab.build(train.transcripts)
        self.batch_size, self.seed = batch_size, seed
        if not isinstance(teacher_forcing, TeacherForcing):
            teacher_forcing = TeacherForcing(start=teacher_forcing)
        self.label_smoothing, self.teacher_forcing = label_smoothing, teacher_forcing
        self.ctc_weight = ctc_weight
        self.guided_attention = check_non_negative("guided_attention", guided_attention)
        self.sortagrad = check_non_negative_int("sortagrad", sortagrad, "epochs")
        self.model_config = {
            "name": "las",
            **model_config,
            "vocab": len(self.char_vocab),
            "features": train.features[0].shape[1],
            "ctc": ctc_weight > 0,
        }
        self.data = data or {}
        if augment is not None and not isinstance(augment, SpeechAugment):
            augment = SpeechAugment(augment)
        self.augment = augment if augment else None
        if (
            self.augment is not None
            and self.augment.needs_samples
            and not getattr(train.features, "has_samples", False)
        ):
            changing = ", ".join(a.name for a in self.augment if a.stage != "features")
            raise ValueError(
                f"augment: {changing} change the audio, and these training "
                "utterances keep features only; train on a corpus, or on "
                "built-in speech made with speech_dataset(..., audio=True)"
            )
        self.transcript_ids = _Encoded(train.transcripts, self.char_vocab)

    def build_model(self) -> LAS:
        """The model of :attr:`model_config`; one that normalises its input
        (:attr:`attnkit.models.LAS.normalises_input`) stores the statistics of the training
        features, each mel bin's mean and std over all frames."""
        model = cast(LAS, build_model(self.model_config))  # model_config names a LAS
        if model.normalises_input:  # its listener is a CausalListener
            listener = cast(CausalListener, model.listener)
            listener.set_statistics(*feature_statistics(self.train.features))
        return model

    def batches(self, epoch: int) -> Batches:
        """Shuffled (seeded by epoch) batches of similar utterance lengths, shortest first in
        the first ``sortagrad`` epochs, built when indexed (features read, augmented and made
        float32 then)."""
        return Batches(
            length_batches(
                self.train.frames,
                self.batch_size,
                seed=self.seed,
                epoch=epoch,
                ascending=epoch < self.sortagrad,
            ),
            functools.partial(self._collate, epoch=epoch),
        )

    def training_features(self, i: int, epoch: int) -> torch.Tensor:
        """The features ``(T, F)`` of training utterance ``i`` as epoch ``epoch`` trains on
        them: augmented, when the task augments, by the draws of ``(seed, epoch, i)``."""
        features = self.train.features
        if self.augment is None:
            return features[i]
        out = self.augment(
            example_rng(self.seed, epoch, i),
            samples=functools.partial(cast(Any, features).samples, i)  # kept audio
            if getattr(features, "has_samples", False)
            else None,
            features=functools.partial(features.__getitem__, i),
            normalize=getattr(features, "normalize", False),
        )
        return out if out.shape[0] >= MIN_FRAMES else features[i]

    def text_batch(self, idx: list[int]) -> dict:
        """Transcripts ``idx`` as ``tgt_in``/``tgt_out`` ``(B, U)`` (BOS/EOS added) and
        ``chars``/``char_lengths`` (CTC targets)."""
        tgt, _ = pad_batch([[BOS] + self.transcript_ids[i] + [EOS] for i in idx])
        chars, char_lengths = pad_batch([self.transcript_ids[i] for i in idx])
        return {
            "tgt_in": tgt[:, :-1],
            "tgt_out": tgt[:, 1:],
            "chars": chars,
            "char_lengths": char_lengths,
        }

    def _collate(self, idx: list[int], epoch: int = 0) -> dict:
        features, lengths = pad_features([self.training_features(i, epoch).float() for i in idx])
        return {"features": features, "lengths": lengths, **self.text_batch(idx)}

    def cross_entropy(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Mean label-smoothed cross-entropy of ``logits (B, U, V)`` over the non-padding
        ``target (B, U)``."""
        return F.cross_entropy(
            logits.flatten(0, 1),
            target.flatten(),
            ignore_index=PAD,
            label_smoothing=self.label_smoothing,
        )

    def loss(self, model: LAS, batch: dict, step: int = 0) -> tuple[torch.Tensor, int]:
        out = model(
            batch["features"],
            batch["lengths"],
            batch["tgt_in"],
            teacher_forcing=self.teacher_forcing.ratio(step),
            with_ctc=self.ctc_weight > 0,
        )
        target = batch["tgt_out"]
        loss = self.cross_entropy(out[0], target)
        if self.ctc_weight > 0:
            log_probs, listener_lengths = out[2]  # (S, B, V), (B,)
            ctc = F.ctc_loss(
                log_probs,
                batch["chars"],
                listener_lengths,
                batch["char_lengths"],
                blank=PAD,
                zero_infinity=True,
            )
            loss = (1 - self.ctc_weight) * loss + self.ctc_weight * ctc
        if self.guided_attention > 0:
            loss = loss + self.guided_attention * guided_attention_loss(
                out[1], (target != PAD).sum(1), model.steps(batch["lengths"])
            )
        return loss, int((target != PAD).sum())

    def evaluate(self, model: LAS) -> dict[str, float]:
        outs, _ = transcribe(model, self.char_vocab, self.valid.features)
        return metrics(outs, self.valid.transcripts)

    def pictures(self, model, folder: Path, n: int) -> list[Path]:
        """Attention pictures of the first ``n`` validation examples in ``folder``."""
        return pictures(
            AsrEvaluator(model, self.config(), self.vocab()), self.valid.features[:n], folder
        )

    def config(self) -> dict:
        return task_config(
            "asr",
            self,
            batching={
                "ctc_weight": self.ctc_weight,
                **({"guided_attention": self.guided_attention} if self.guided_attention else {}),
                **({"sortagrad": self.sortagrad} if self.sortagrad else {}),
                "teacher_forcing": asdict(self.teacher_forcing),
            },
            **({"augment": self.augment.config()} if self.augment else {}),
        )

    def vocab(self) -> dict:
        return self.char_vocab.to_json()


class _Encoded(Sequence):
    """The character ids of ``texts[i]``, encoded when indexed: a corpus's transcripts stay
    packed (:class:`attnkit.data.corpora.utterances.PackedTexts`) rather than held as lists of
    ids."""

    def __init__(self, texts: Sequence[str], vocab: CharVocab):
        self.texts, self.vocab = texts, vocab

    def __len__(self) -> int:
        return len(self.texts)

    def __getitem__(self, i: int) -> list[int]:  # type: ignore[override]  # no slices: unused
        return self.vocab.encode(self.texts[i])


class SpellerPretraining:
    """The speller of a LAS model trained alone as a character language model on the
    transcripts of a :class:`AsrTask`, before it learns to attend, as a task for
    :class:`attnkit.train.Trainer`.

    The context is zero and nothing is attended (:meth:`attnkit.models.LAS.language_model`),
    so only the speller's embedding, cells and output layer get gradients; the listener and
    the attention are untouched. Validation: next-character ``accuracy`` and ``loss`` on the
    validation transcripts, teacher-forced. Batches group transcripts of similar length.
    Single process only: the language model is not the model's ``forward``, which
    ``DistributedDataParallel`` needs.
    """

    def __init__(self, task: AsrTask):
        self.task = task
        self._valid = [task.char_vocab.encode(t) for t in task.valid.transcripts]

    def batches(self, epoch: int) -> Batches:
        """Shuffled (seeded by epoch) batches of transcripts of similar length, built when
        indexed."""
        lengths = [len(t) for t in self.task.transcript_ids]
        return Batches(
            length_batches(lengths, self.task.batch_size, seed=self.task.seed, epoch=epoch),
            self.task.text_batch,
        )

    def loss(self, model: LAS, batch: dict, step: int = 0) -> tuple[torch.Tensor, int]:
        logits = model.language_model(batch["tgt_in"])
        target = batch["tgt_out"]
        return self.task.cross_entropy(logits, target), int((target != PAD).sum())

    @torch.no_grad()
    def evaluate(self, model: LAS) -> dict[str, float]:
        device = next(model.parameters()).device
        tgt, _ = pad_batch([[BOS] + ids + [EOS] for ids in self._valid])
        tgt = tgt.to(device)
        logits = model.language_model(tgt[:, :-1])
        target = tgt[:, 1:]
        real = target != PAD
        correct = (logits.argmax(-1) == target) & real
        loss = F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=PAD)
        return {"accuracy": float(correct.sum() / real.sum()), "loss": float(loss)}

    def config(self) -> dict:
        return {**self.task.config(), "task": "asr-speller-lm"}

    def vocab(self) -> dict:
        return self.task.vocab()


def _served_audio(evaluator: AsrEvaluator, given: dict, *, max_seconds: float) -> torch.Tensor:
    """The features ``(T, 80)`` of the audio file a server was sent, refused past
    ``max_seconds``."""
    return evaluator.features(wav_samples(given["audio"], max_seconds=max_seconds))


class AsrEvaluator(Evaluator, task="asr"):
    """A speech checkpoint's model and characters: transcribes log-mel features and reads
    manifests of labelled WAVs (:mod:`attnkit.tasks.evaluator`)."""

    data = (
        "a manifest of wav_path<TAB>transcript lines (paths relative to it or absolute), "
        "or a Kaldi/ESPnet data directory, a LibriSpeech folder, a Common Voice TSV or a "
        "JSON-lines manifest (--format)"
    )
    metrics = ("cer", "wer", "exact")
    route = Route(
        "/transcribe",
        "transcribe a WAV file",
        upload=Upload("audio", kind="audio"),
        read=_served_audio,
    )

    def __init__(self, model: LAS, config: dict, vocab: dict):
        super().__init__(model, config, vocab)
        self.char_vocab = load_vocab(vocab)

    @property
    def normalize(self) -> bool:
        """Whether the model takes features normalised per utterance (else raw log-mels)."""
        return not self.model.normalises_input

    def features(self, samples: torch.Tensor) -> torch.Tensor:
        """The log-mel features ``(T, 80)`` of ``samples (N,)`` (16 kHz, :func:`wav_samples`)
        as the model takes them."""
        return log_mel(samples, normalize=self.normalize)

    def read(self, path, **options) -> list[Example]:
        """The utterances of a corpus in any speech format
        (:mod:`attnkit.data.corpora.speech_formats`; ``options``: ``format`` and the format's
        options), features as the model takes them, utterances shorter than the listener needs
        counted as unusable."""
        utterances = read_corpus(
            "asr", path, normalize=self.normalize, min_frames=MIN_FRAMES, **options
        )
        check_frames(utterances)
        return [
            Example(f, t, o)
            for f, t, o in zip(utterances.features, utterances.transcripts, utterances.origins)
        ]

    def load_inputs(self, items: Sequence[str]) -> tuple[list, list[str]]:
        """Log-mel features ``(T, F)`` from audio files."""
        return [self.features(wav_samples(Path(p))) for p in items], list(items)

    def decode(
        self,
        inputs: Sequence[torch.Tensor],
        decoding: Decoding | None = None,
        *,
        weights: bool = False,
    ) -> list[Output]:
        _, raws = transcribe(
            self.model, self.char_vocab, inputs, decoding=decoding, lm=self.lm, weights=weights
        )
        outputs: list[Output] = []
        for hyp in raws:
            for i, (texts, ranked, tokens) in enumerate(
                zip(texts_of(hyp, self.char_vocab), scores_of(hyp), tokens_of(hyp, self.char_vocab))
            ):
                features = inputs[len(outputs)]
                outputs.append(
                    Output(
                        texts,
                        functools.partial(plot_transcription, hyp, i, features, self.char_vocab),
                        functools.partial(
                            speech_example, self.model, hyp, i, features, self.char_vocab
                        )
                        if weights
                        else None,
                        ranked,
                        tokens,
                    )
                )
        return outputs
