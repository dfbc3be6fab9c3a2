"""Text-line recognition as a :class:`attnkit.train.Task`: batching, CTC or attention loss,
character error rate and line accuracy, pictures of where the model looks."""

from __future__ import annotations

import functools
from collections.abc import Sequence
from contextlib import AbstractContextManager, nullcontext
from dataclasses import asdict
from pathlib import Path
from typing import NamedTuple, cast

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
    ALPHABET,
    CharVocab,
    DataError,
    LineFolder,
    load_line_image,
    pad_batch,
    pad_images,
)
from attnkit.data.augment.augmentation import example_rng
from attnkit.data.augment.line_augment import LineAugment, background
from attnkit.data.corpora.reading import read_corpus
from attnkit.decoding import Decoding, check_ctc_decoding, decode, decode_ctc
from attnkit.diagnose.plots import plot_alignment
from attnkit.models import CRNN, build_model, guided_attention_loss
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
from attnkit.tasks.explore import line_example
from attnkit.tasks.route import Refused, Route, Upload
from attnkit.tokens import BOS, EOS, PAD
from attnkit.train import Batches, TeacherForcing

LABELS = "labels.tsv"  # a folder's labels, as attnkit train ocr --labels defaults
# The attention head reads at most one character per two encoder steps, + 2 (EOS included).
STEPS_PER_CHAR, EXTRA_CHARS = 2, 2

__all__ = [
    "EXTRA_CHARS",
    "STEPS_PER_CHAR",
    "OcrEvaluator",
    "OcrTask",
    "Reading",
    "line_metrics",
    "plot_line",
    "read_lines",
    "recognise",
]

Line = tuple[torch.Tensor, str]  # (image (32, W): uint8 gray levels, or float in [0, 1], text)


def line_metrics(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    """Character error rate (jiwer), ``char_accuracy = 1 - CER`` (below 0 when the outputs
    hold more errors than the references hold characters) and exact line accuracy."""
    cer = scores.cer(hypotheses, references)
    return {
        "cer": cer,
        "char_accuracy": 1.0 - cer,
        "line_accuracy": scores.exact_match(hypotheses, references),
    }


def _ctc_steps_needed(ids: Sequence[int]) -> int:
    """CTC needs one step per label plus a blank between repeated labels."""
    return len(ids) + sum(a == b for a, b in zip(ids, ids[1:]))


def _sizes(lines: Sequence[Line], name: str) -> tuple[list[int], list[str]]:
    """The lines' widths and texts; a :class:`LineFolder`'s without decoding its images."""
    if isinstance(lines, LineFolder):
        return lines.widths, lines.texts
    for i, (image, _) in enumerate(lines):
        if image.dim() != 2 or image.shape[0] != 32:
            raise DataError(
                f"{name}[{i}]: expected a (32, W) image with W >= 2, got {tuple(image.shape)}"
            )
    return [image.shape[1] for image, _ in lines], [text for _, text in lines]


def _check_lines(
    widths: Sequence[int], texts: Sequence[str], vocab: CharVocab, name: str, ctc: bool
) -> None:
    bad_chars: dict[str, int] = {}
    too_long: list[int] = []
    for i, (width, text) in enumerate(zip(widths, texts)):
        if width < 2:
            raise DataError(f"{name}[{i}]: expected a (32, W) image with W >= 2, got {(32, width)}")
        if not text:
            raise DataError(f"{name}[{i}]: empty text")
        unknown = {c for c in text if c not in vocab.index}
        if unknown:
            bad_chars.setdefault("".join(sorted(unknown)), i)
        elif ctc and _ctc_steps_needed(vocab.encode(text)) > width // 2:
            too_long.append(i)
    if bad_chars:
        chars = "".join(sorted(set("".join(bad_chars))))
        raise DataError(
            f"{name}: characters outside the alphabet: {quoted(chars)} (first in line "
            f"{min(bad_chars.values())}); add them to the alphabet or fix the labels"
        )
    if too_long:
        i = too_long[0]
        raise DataError(
            f"{name}: {len(too_long)} line(s) have more characters than the CTC head has steps "
            f"(W // 2), e.g. line {i}: {texts[i][:40]!r} needs "
            f"{_ctc_steps_needed(vocab.encode(texts[i]))} steps, its image is "
            f"{widths[i]} px wide ({widths[i] // 2} steps)"
        )


class Reading(NamedTuple):
    """One line read by :func:`read_lines`: its texts, best first (one, or the n-best or
    sampled outputs of the attention head), the attention ``weights`` of the best one's
    characters over the line's ``steps`` (see :func:`recognise`) and the ``self_attention``
    ``(H, T, T)`` of the model's layer between its RNNs over the line's ``T`` steps (queries,
    keys; ``H = 1`` for one head), None without ``weights`` or without that layer; ``scores``:
    each text's score (the attention head: :attr:`attnkit.decoding.Hypotheses.scores`; the
    CTC head: the log-probability of its best path, summed over the steps)."""

    texts: list[str]
    weights: torch.Tensor | None
    steps: int
    self_attention: torch.Tensor | None = None
    scores: list[float] | None = None
    tokens: list[list[tuple[str, float]]] | None = None


@torch.no_grad()
def read_lines(
    model: CRNN,
    vocab: CharVocab,
    images: Sequence[torch.Tensor],
    *,
    decoding: Decoding | None = None,
    weights: bool = False,
    batch_size: int = 32,
    lm=None,
) -> list[Reading]:
    """Read line images ``(32, W)``: one :class:`Reading` per image, in order; its
    ``weights`` and ``self_attention`` only with ``weights`` (else None), recorded in the pass
    that reads the lines.

    Either head decodes as ``decoding`` says (default greedy; ``lm``: the language model of
    ``decoding.lm_weight``): the attention head by :func:`attnkit.decoding.decode`, the CTC
    head by :func:`attnkit.decoding.decode_ctc` (greedy: the best path; a beam: CTC prefix
    beam search), which refuses sampling, ``ctc_weight``, ``coverage_penalty`` and
    ``max_len``."""
    decoding = decoding or Decoding()
    if model.head_kind == "ctc":
        check_ctc_decoding(decoding)
    model.eval()
    device = next(model.parameters()).device
    generator = decoding.generator(device)
    order = sorted(range(len(images)), key=lambda i: images[i].shape[1])  # little padding
    results = {}
    for s in range(0, len(order), batch_size):
        idx = order[s : s + batch_size]
        batch, widths = pad_images([images[i] for i in idx])
        batch, widths = batch.to(device), widths.to(device)
        attention = model.attention if weights else None
        recorder: AbstractContextManager[list[torch.Tensor]] = (
            attention.recording_weights() if attention is not None else nullcontext([])
        )
        with recorder as found:
            if model.head_kind == "ctc":
                log_probs, steps = model(batch, widths)
            else:
                steps = model.steps(widths)
                hyp = decode(
                    model,
                    batch,
                    widths,
                    max_len=steps // STEPS_PER_CHAR + EXTRA_CHARS,
                    decoding=decoding,
                    generator=generator,
                    lm=lm,
                    weights=weights,
                )
        att = None
        if found:  # the batch's one encoding: (B, T, T), or (B, H, T, T) with heads
            att = found[0] if found[0].dim() == 4 else found[0][:, None]  # (B, H, T, T)
        if model.head_kind == "ctc":
            hyp = decode_ctc(log_probs, steps, decoding=decoding, lm=lm)
            best = hyp.best()
            for j, (i, texts, ranked, tokens) in enumerate(
                zip(idx, texts_of(hyp, vocab), scores_of(hyp), tokens_of(hyp, vocab))
            ):
                n = int(steps[j])
                own = None if att is None else att[j, :, :n, :n]  # (H, T, T)
                # the CTC head's characters: the self-attention rows where each was emitted
                # (the best path's frames; a prefix beam keeps none)
                w = None
                if own is not None and best.weights is not None:
                    emitted = best.weights[j, : int(best.lengths[j]) - 1, :n].argmax(-1)
                    w = own.mean(0)[emitted]
                results[i] = Reading(texts, w, n, own, ranked, tokens)
        else:
            best = hyp.best()
            for j, (i, texts, ranked, tokens) in enumerate(
                zip(idx, texts_of(hyp, vocab), scores_of(hyp), tokens_of(hyp, vocab))
            ):
                n, length = int(best.lengths[j]), int(steps[j])
                w = None if best.weights is None else best.weights[j, :n]
                own = None if att is None else att[j, :, :length, :length]  # (H, T, T)
                results[i] = Reading(texts, w, length, own, ranked, tokens)
    return [results[i] for i in range(len(images))]


def recognise(
    model: CRNN,
    vocab: CharVocab,
    images: Sequence[torch.Tensor],
    *,
    decoding: Decoding | None = None,
    weights: bool = False,
    batch_size: int = 32,
    lm=None,
):
    """Read line images ``(32, W)``; returns the texts and, per line, the weights of each
    output character over the ``T`` steps (with ``weights``: ``(len + 1, T)`` with EOS for
    the attention head; for CTC with an attention layer, the self-attention rows of the steps
    where each character was emitted; else None) and the line's steps. Decoding as in
    :func:`read_lines`."""
    found = read_lines(
        model, vocab, images, decoding=decoding, weights=weights, batch_size=batch_size, lm=lm
    )
    return [r.texts[0] for r in found], [r.weights for r in found], [r.steps for r in found]


def plot_line(
    image: torch.Tensor,
    text: str,
    weights,
    steps: int,
    path: str | Path,
    *,
    eos: bool,
    self_attention: torch.Tensor | None = None,
    title: str | None = None,
) -> Path | None:
    """The line image with each output character's attention over its columns (see
    :func:`recognise`) and, given the ``self_attention`` ``(H, T, T)`` of a :class:`Reading`,
    its mean over heads as a heat-map under the image (``title`` default: the text); None
    when the model gives no weights."""
    if weights is None:
        return None
    labels = list(text) + (["<eos>"] if eos else [])
    labels = labels[: weights.shape[0]]
    background = pad_images([image])[0][0, 0]  # (32, W) in [0, 1]
    # (the attention head's weights span the batch's padded steps; the line has `steps`)
    return plot_alignment(
        weights[: len(labels), :steps],
        background,
        labels,
        path,
        steps=steps,
        self_attention=None if self_attention is None else self_attention.mean(0),
        title=title or text or "(empty)",
    )


class OcrTask:
    """Batches, loss and metrics for ``(image (32, W), text)`` lines.

    Args:
        train, valid: sequences of ``(image, text)``: lists, or :class:`attnkit.data.LineFolder`
            (images read from disk when a batch needs them, so memory does not grow with the
            training lines; the first ``max_valid`` validation lines are read once). Every
            character must be in ``vocab``, and with the CTC head every line needs ``W // 2``
            steps for its characters (checked up front: a :class:`DataError` names the line,
            never a crash inside CTC).
        model_config: the model's registry config (``name`` defaults to ``"crnn"``); ``vocab``
            is set from the characters.
        vocab: the characters (kept as ``chars``); default ``CharVocab(ALPHABET)``.
        batch_size: lines per batch (batches group similar widths).
        label_smoothing, teacher_forcing: attention head only.
        ctc_weight: attention head only: ``w`` in ``loss = (1 - w) * cross-entropy + w * CTC``
            of an auxiliary CTC head (0: none; sets the model's ``ctc``).
        guided_attention: attention head only: the weight of
            :func:`attnkit.models.guided_attention_loss` added to the loss (0: none).
        sortagrad: the first ``sortagrad`` epochs take their batches narrowest first
            (SortaGrad, Amodei et al. 2016: the model learns to read, and the attention head to
            align, on short lines before long ones); 0: every epoch shuffled.
        max_valid: validation lines read at each evaluation.
        augment: line augmentations (:mod:`attnkit.data.augment.line_augment`) applied to each
            training line as its batch is built, drawn from
            :func:`attnkit.data.augment.augmentation.example_rng` ``(seed, epoch, index)`` (so a
            resumed run sees the same lines); never to validation lines. A line that augmentation
            leaves narrower than its characters need (``W // 2`` CTC steps) is padded on the
            right with its background. None or empty: none.
    """

    def __init__(
        self,
        train: Sequence[Line],
        valid: Sequence[Line],
        *,
        model_config: dict,
        vocab: CharVocab | None = None,
        batch_size: int = 32,
        seed: int = 0,
        label_smoothing: float = 0.0,
        teacher_forcing: float | TeacherForcing = 1.0,
        ctc_weight: float = 0.0,
        guided_attention: float = 0.0,
        sortagrad: int = 0,
        max_valid: int = 300,
        data: dict | None = None,
        augment: LineAugment | Sequence | None = None,
    ):
        if not train:
            raise ValueError("train: expected at least one (image, text) line")
        check_positive_int("batch_size", batch_size)
        check_fraction("ctc_weight", ctc_weight)
        self.chars = vocab or CharVocab(list(ALPHABET))
        self.model_config = {"name": "crnn", **model_config, "vocab": len(self.chars)}
        self.ctc = self.model_config.get("head", "ctc") == "ctc"
        if ctc_weight > 0 and self.ctc:
            raise ValueError("ctc_weight: only for the attention head (the CTC head is CTC)")
        self.ctc_weight = float(ctc_weight)
        guided_attention = check_non_negative("guided_attention", guided_attention)
        if guided_attention > 0 and self.ctc:
            raise ValueError(
                "guided_attention: only for the attention head (CTC has no attention weights)"
            )
        self.guided_attention = guided_attention
        self.sortagrad = check_non_negative_int("sortagrad", sortagrad, "epochs")
        if self.ctc_weight > 0:
            self.model_config["ctc"] = True
        self.train, self.valid = train, list(valid[:max_valid])
        with_ctc = self.ctc or self.ctc_weight > 0
        self._widths, self._texts = _sizes(train, "train")
        _check_lines(self._widths, self._texts, self.chars, "train", with_ctc)
        _check_lines(*_sizes(self.valid, "valid"), self.chars, "valid", with_ctc)
        if not isinstance(teacher_forcing, TeacherForcing):
            teacher_forcing = TeacherForcing(start=teacher_forcing)
        self.batch_size, self.seed = batch_size, seed
        self.label_smoothing, self.teacher_forcing = label_smoothing, teacher_forcing
        self.data = data or {}
        if augment is not None and not isinstance(augment, LineAugment):
            augment = LineAugment(augment)
        self.augment = augment if augment else None

    def build_model(self) -> CRNN:
        return cast(CRNN, build_model(self.model_config))  # of model_config's class

    def batches(self, epoch: int) -> Batches:
        """Shuffled (seeded by epoch) batches of similar widths, narrowest first in the first
        ``sortagrad`` epochs, built when indexed (images read, augmented and made float32 in
        [0, 1] then)."""
        return Batches(
            length_batches(
                self._widths,
                self.batch_size,
                seed=self.seed,
                epoch=epoch,
                ascending=epoch < self.sortagrad,
            ),
            functools.partial(self._collate, epoch=epoch),
        )

    def training_line(self, i: int, epoch: int) -> torch.Tensor:
        """Training line ``i`` ``(32, W)`` as epoch ``epoch`` trains on it: augmented, when
        the task augments, by the draws of ``(seed, epoch, i)``."""
        image = self.train[i][0]
        if self.augment is None:
            return image
        image = self.augment(image, example_rng(self.seed, epoch, i))
        if self.ctc or self.ctc_weight > 0:  # the CTC head needs W // 2 steps for the text
            need = 2 * _ctc_steps_needed(self.chars.encode(self._texts[i]))
            if image.shape[1] < need:
                fill = background(image.float().numpy())
                fill = round(fill) if image.dtype == torch.uint8 else fill
                image = torch.cat(
                    [image, image.new_full((image.shape[0], need - image.shape[1]), fill)], dim=1
                )
        return image

    def _collate(self, idx: list[int], epoch: int = 0) -> dict:
        images, widths = pad_images([self.training_line(i, epoch) for i in idx])
        batch = {"images": images, "widths": widths}
        ids = [self.chars.encode(self._texts[i]) for i in idx]
        if self.ctc or self.ctc_weight > 0:
            batch["targets"], batch["target_lengths"] = pad_batch(ids)
        if not self.ctc:
            tgt, _ = pad_batch([[BOS] + seq + [EOS] for seq in ids])
            batch["tgt_in"], batch["tgt_out"] = tgt[:, :-1], tgt[:, 1:]
        return batch

    def loss(self, model: CRNN, batch: dict, step: int = 0) -> tuple[torch.Tensor, int]:
        if self.ctc:
            log_probs, steps = model(batch["images"], batch["widths"])
            loss = F.ctc_loss(
                log_probs.transpose(0, 1),
                batch["targets"],
                steps,
                batch["target_lengths"],
                blank=PAD,
            )
            return loss, int(batch["target_lengths"].sum())
        out = model(
            batch["images"],
            batch["widths"],
            batch["tgt_in"],
            teacher_forcing=self.teacher_forcing.ratio(step),
            with_ctc=self.ctc_weight > 0,
        )
        target = batch["tgt_out"]
        loss = F.cross_entropy(
            out[0].flatten(0, 1),
            target.flatten(),
            ignore_index=PAD,
            label_smoothing=self.label_smoothing,
        )
        if self.ctc_weight > 0:
            log_probs, steps = out[2]
            ctc = F.ctc_loss(
                log_probs.transpose(0, 1),
                batch["targets"],
                steps,
                batch["target_lengths"],
                blank=PAD,
            )
            loss = (1 - self.ctc_weight) * loss + self.ctc_weight * ctc
        if self.guided_attention > 0:
            steps = model.steps(batch["widths"])
            loss = loss + self.guided_attention * guided_attention_loss(
                out[1], (target != PAD).sum(1), steps
            )
        return loss, int((target != PAD).sum())

    def evaluate(self, model: CRNN) -> dict[str, float]:
        texts, _, _ = recognise(model, self.chars, [image for image, _ in self.valid])
        return line_metrics(texts, [t for _, t in self.valid])

    def pictures(self, model, folder: Path, n: int) -> list[Path]:
        """Attention pictures of the first ``n`` validation examples in ``folder``."""
        return pictures(
            OcrEvaluator(model, self.config(), self.vocab()),
            [image for image, _ in self.valid[:n]],
            folder,
        )

    def config(self) -> dict:
        return task_config(
            "ocr",
            self,
            batching={
                **({"ctc_weight": self.ctc_weight} if self.ctc_weight else {}),
                **({"guided_attention": self.guided_attention} if self.guided_attention else {}),
                **({"sortagrad": self.sortagrad} if self.sortagrad else {}),
                "teacher_forcing": asdict(self.teacher_forcing),
            },
            **({"augment": self.augment.config()} if self.augment else {}),
        )

    def vocab(self) -> dict:
        return self.chars.to_json()


def _served_decoding(evaluator: OcrEvaluator, decoding: Decoding) -> None:
    """A server's request to a model with a CTC head: the best path or a prefix beam, as
    :func:`attnkit.decoding.decode_ctc` takes (:func:`read_lines` refuses the others too,
    after the request was queued)."""
    if getattr(evaluator.model, "head_kind", None) != "ctc":
        return
    try:
        check_ctc_decoding(decoding)
    except ValueError as exc:
        field = str(exc).partition(":")[0]
        raise Refused(f"decoding.{field}", f"decoding.{exc}") from None


class OcrEvaluator(Evaluator, task="ocr"):
    """An OCR checkpoint's model and characters: reads line images and folders of labelled
    lines (:mod:`attnkit.tasks.evaluator`)."""

    data = (
        "a folder of line images with labels.tsv (filename<TAB>text), or that TSV; a "
        "folder of NAME.png + NAME.gt.txt pairs; ALTO or PAGE-XML pages (.xml, a folder "
        "or a .lst list); or hf:PATH[:SPLIT]"
    )
    metrics = ("cer", "wer", "exact")
    route = Route(
        "/read", "read a text line", upload=Upload("image"), check_decoding=_served_decoding
    )

    def __init__(self, model: CRNN, config: dict, vocab: dict):
        super().__init__(model, config, vocab)
        self.chars = CharVocab.from_json(vocab)

    def read(self, path, **options) -> list[Example]:
        """The lines of ``path`` in any OCR corpus format
        (:mod:`attnkit.data.corpora.line_formats`), each image file its origin."""
        lines = read_corpus("ocr", path, **{"role": "test", **options})
        return [Example(image, text, str(lines.path(i))) for i, (image, text) in enumerate(lines)]

    def load_inputs(self, items: Sequence[str]) -> tuple[list, list[str]]:
        """Line images ``(1, H, W)`` from image files."""
        return [load_line_image(Path(p)) for p in items], list(items)

    def decode(
        self,
        inputs: Sequence[torch.Tensor],
        decoding: Decoding | None = None,
        *,
        weights: bool = False,
    ) -> list[Output]:
        eos = self.model.head_kind == "attention"
        return [
            Output(
                r.texts,
                functools.partial(
                    plot_line,
                    image,
                    r.texts[0],
                    r.weights,
                    r.steps,
                    eos=eos,
                    self_attention=r.self_attention,
                ),
                functools.partial(line_example, self.model, image, r) if weights else None,
                r.scores,
                r.tokens,
            )
            for image, r in zip(
                inputs,
                read_lines(
                    self.model, self.chars, inputs, decoding=decoding, lm=self.lm, weights=weights
                ),
            )
        ]
