"""Speech recognition as a :class:`attnkit.train.Task`: Listen, Attend and Spell on log-mels.

Utterances are :class:`attnkit.data.SpeechSet` features ``(T, 80)`` (built-in espeak-ng speech
or the user's WAVs), normalised per utterance; transcripts are character sequences
(:class:`attnkit.data.CharVocab`). The model is a :class:`attnkit.models.LAS` built by the
model registry from its config (``{"name": "las", ...}``), so a checkpoint alone rebuilds it.

:class:`SpellerPretraining` is the task of training the speller alone as a character language
model on the transcripts first, run by the same :class:`attnkit.train.Trainer` (checkpoints,
resume).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

import torch
import torch.nn.functional as F

from attnkit.data import (
    CharVocab,
    DataError,
    SpeechSet,
    load_vocab,
    pad_batch,
    pad_features,
    read_manifest,
)
from attnkit.decoding import Decoding, Hypotheses, decode_batches
from attnkit.models import LAS, build_model
from attnkit.models.las import HALVINGS, MIN_FRAMES
from attnkit.plot import plot_alignment
from attnkit.tasks import metrics as scores
from attnkit.tasks.batching import length_batches
from attnkit.tasks.evaluator import Evaluator, Example, Output, pictures, texts_of
from attnkit.tasks.explore import speech_example
from attnkit.tokens import BOS, EOS, PAD
from attnkit.train import Batches, TeacherForcing

__all__ = ["SpeechEvaluator", "SpeechTask", "SpellerPretraining", "metrics", "plot_transcription",
           "transcribe"]

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


def check_frames(utterances: SpeechSet) -> None:
    """Raises a :class:`DataError` naming the first utterance shorter than 8 frames (80 ms)."""
    for frames, origin in zip(utterances.frames, utterances.origins):
        if frames < MIN_FRAMES:
            raise DataError(f"{origin}: {frames} feature frames; the listener's "
                            f"{HALVINGS} halvings need at least {MIN_FRAMES}")


@torch.no_grad()
def transcribe(model: LAS, vocab: CharVocab, features: Sequence[torch.Tensor], *,
               decoding: Decoding | None = None, weights: bool = False,
               batch_size: int = 32, lm=None) -> tuple[list[str], list[Hypotheses]]:
    """Transcripts of the utterances ``features[i]`` ``(T_i, F)`` decoded as ``decoding``
    says (default greedy; ``lm``: the language model of ``decoding.lm_weight``), and per batch
    the raw hypotheses (tokens, and with ``weights`` the attention weights for plots). An
    output has at most ``ceil(0.3 * T_i) + 10`` characters (EOS included).

    Raises:
        ValueError: an utterance shorter than 8 frames.
    """
    texts, raws = [], []
    for _, hyp in decode_batches(
            model, features, pad_features,  # (B, T, F), (B,)
            max_len=lambda n: (n.float() * CHARS_PER_FRAME).ceil().long() + EXTRA_CHARS,
            decoding=decoding, batch_size=batch_size, lm=lm, weights=weights):
        texts += [vocab.decode(row) for row in hyp.best().tokens]
        raws.append(hyp)
    return texts, raws


def plot_transcription(hyp: Hypotheses, i: int, features: torch.Tensor, vocab: CharVocab,
                       path: str | Path, *, title: str | None = None) -> Path | None:
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
    return plot_alignment(hyp.weights[i, :n, :steps], background, labels, path, steps=steps,
                          origin="lower", title=title or vocab.decode(hyp.tokens[i]))


class SpeechTask:
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
        max_valid: validation utterances decoded at each evaluation.

    Raises:
        DataError: an utterance shorter than 8 frames (80 ms), named by its origin.
    """

    def __init__(self, train: SpeechSet, valid: SpeechSet, *, model_config: dict,
                 vocab: CharVocab | None = None, batch_size: int = 32, seed: int = 0,
                 label_smoothing: float = 0.1, teacher_forcing: float | TeacherForcing = 1.0,
                 ctc_weight: float = 0.0, max_valid: int = 300, data: dict | None = None):
        if len(train) == 0:
            raise ValueError("train: expected at least one utterance")
        if not isinstance(batch_size, int) or batch_size < 1:
            raise ValueError(f"batch_size: expected a positive int, got {batch_size!r}")
        if not 0.0 <= ctc_weight <= 1.0:
            raise ValueError(f"ctc_weight: expected a number in [0, 1], got {ctc_weight!r}")
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
        self.model_config = {"name": "las", **model_config, "vocab": len(self.char_vocab),
                             "features": train.features[0].shape[1], "ctc": ctc_weight > 0}
        self.data = data or {}
        self.transcript_ids = [self.char_vocab.encode(t) for t in train.transcripts]

    def build_model(self) -> LAS:
        return build_model(self.model_config)

    def batches(self, epoch: int) -> Batches:
        """Shuffled (seeded by epoch) batches of similar utterance lengths, built when indexed
        (features read and made float32 then)."""
        return Batches(length_batches(self.train.frames, self.batch_size, seed=self.seed,
                                      epoch=epoch), self._collate)

    def text_batch(self, idx: list[int]) -> dict:
        """Transcripts ``idx`` as ``tgt_in``/``tgt_out`` ``(B, U)`` (BOS/EOS added) and
        ``chars``/``char_lengths`` (CTC targets)."""
        tgt, _ = pad_batch([[BOS] + self.transcript_ids[i] + [EOS] for i in idx])
        chars, char_lengths = pad_batch([self.transcript_ids[i] for i in idx])
        return {"tgt_in": tgt[:, :-1], "tgt_out": tgt[:, 1:], "chars": chars,
                "char_lengths": char_lengths}

    def _collate(self, idx: list[int]) -> dict:
        features, lengths = pad_features([self.train.features[i] for i in idx])
        return {"features": features, "lengths": lengths, **self.text_batch(idx)}

    def cross_entropy(self, logits: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
        """Mean label-smoothed cross-entropy of ``logits (B, U, V)`` over the non-padding
        ``target (B, U)``."""
        return F.cross_entropy(logits.flatten(0, 1), target.flatten(), ignore_index=PAD,
                               label_smoothing=self.label_smoothing)

    def loss(self, model: LAS, batch: dict, step: int = 0) -> tuple[torch.Tensor, int]:
        out = model(batch["features"], batch["lengths"], batch["tgt_in"],
                    teacher_forcing=self.teacher_forcing.ratio(step),
                    with_ctc=self.ctc_weight > 0)
        target = batch["tgt_out"]
        loss = self.cross_entropy(out[0], target)
        if self.ctc_weight > 0:
            log_probs, listener_lengths = out[2]  # (S, B, V), (B,)
            ctc = F.ctc_loss(log_probs, batch["chars"], listener_lengths, batch["char_lengths"],
                             blank=PAD, zero_infinity=True)
            loss = (1 - self.ctc_weight) * loss + self.ctc_weight * ctc
        return loss, int((target != PAD).sum())

    def evaluate(self, model: LAS) -> dict[str, float]:
        outs, _ = transcribe(model, self.char_vocab, self.valid.features)
        return metrics(outs, self.valid.transcripts)

    def pictures(self, model, folder: Path, n: int) -> list[Path]:
        """Attention pictures of the first ``n`` validation examples in ``folder``."""
        return pictures(SpeechEvaluator(model, self.config(), self.vocab()), self.valid.features[:n], folder)

    def config(self) -> dict:
        return {"task": "asr", "model": self.model_config, "data": self.data,
                "batching": {"batch_size": self.batch_size, "seed": self.seed,
                             "label_smoothing": self.label_smoothing,
                             "ctc_weight": self.ctc_weight,
                             "teacher_forcing": asdict(self.teacher_forcing)}}

    def vocab(self) -> dict:
        return self.char_vocab.to_json()


class SpellerPretraining:
    """The speller of a LAS model trained alone as a character language model on the
    transcripts of a :class:`SpeechTask`, before it learns to attend, as a task for
    :class:`attnkit.train.Trainer`.

    The context is zero and nothing is attended (:meth:`attnkit.models.LAS.language_model`),
    so only the speller's embedding, cells and output layer get gradients; the listener and
    the attention are untouched. Validation: next-character ``accuracy`` and ``loss`` on the
    validation transcripts, teacher-forced. Batches group transcripts of similar length.
    Single process only: the language model is not the model's ``forward``, which
    ``DistributedDataParallel`` needs.
    """

    def __init__(self, task: SpeechTask):
        self.task = task
        self._valid = [task.char_vocab.encode(t) for t in task.valid.transcripts]

    def batches(self, epoch: int) -> Batches:
        """Shuffled (seeded by epoch) batches of transcripts of similar length, built when
        indexed."""
        lengths = [len(t) for t in self.task.transcript_ids]
        return Batches(length_batches(lengths, self.task.batch_size, seed=self.task.seed,
                                      epoch=epoch), self.task.text_batch)

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


class SpeechEvaluator(Evaluator, task="asr"):
    """A speech checkpoint's model and characters: transcribes log-mel features and reads
    manifests of labelled WAVs (:mod:`attnkit.tasks.evaluator`)."""

    data = "a manifest of wav_path<TAB>transcript lines (paths relative to it)"
    metrics = ("cer", "wer", "exact")

    def __init__(self, model: LAS, config: dict, vocab: dict):
        super().__init__(model, config, vocab)
        self.char_vocab = load_vocab(vocab)

    def read(self, path) -> list[Example]:
        utterances = read_manifest(path, normalize=True)
        check_frames(utterances)
        return [Example(f, t, o) for f, t, o in
                zip(utterances.features, utterances.transcripts, utterances.origins)]

    def decode(self, inputs: Sequence[torch.Tensor], decoding: Decoding | None = None, *,
               weights: bool = False) -> list[Output]:
        _, raws = transcribe(self.model, self.char_vocab, inputs, decoding=decoding,
                             lm=self.lm, weights=weights)
        outputs = []
        for hyp in raws:
            for i, texts in enumerate(texts_of(hyp, self.char_vocab)):
                features = inputs[len(outputs)]
                outputs.append(Output(
                    texts, functools.partial(plot_transcription, hyp, i, features,
                                             self.char_vocab),
                    functools.partial(speech_example, self.model, hyp, i, features,
                                      self.char_vocab) if weights else None))
        return outputs
