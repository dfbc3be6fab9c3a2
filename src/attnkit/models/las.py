"""Listen, Attend and Spell (Chan et al. 2016): a pyramidal BiLSTM listener, an attending speller.

Shapes: ``B`` batch, ``T`` feature frames, ``F`` features per frame (80 log-mels), ``S = T // 8``
listener steps, ``L`` listener hidden size (outputs ``2L``), ``U`` output characters, ``V``
vocabulary.

* **Listener** (``listener="bi"``, :class:`Listener`): a BiLSTM over the frames, then 3
  pyramidal BiLSTM layers; each concatenates frames ``2j`` and ``2j + 1`` (halving the time
  axis, doubling the features) before its BiLSTM. An odd length drops its last frame at that
  halving: length ``n`` becomes ``n // 2``, so a pair never mixes a frame with padding. Every
  BiLSTM is a :class:`attnkit.models.rnn.BiRNN` (equal to a packed bidirectional LSTM, without
  packing's CPU cost), so padding never reaches the backward direction, and outputs past each
  length are zero. Its features are normalised per utterance by the caller.
* **Causal listener** (``listener="uni"``, :class:`CausalListener`): the same pyramid of
  unidirectional LSTMs, so listener step ``j`` depends on frames ``< 8 (j + 1)`` only, and the
  features are normalised with per-bin statistics of the training data stored in the model:
  nothing reads ahead, which is what transcribing while the audio arrives needs (the
  unidirectional LSTM encoder of Chiu et al. 2018's streaming LAS; a bounded look-ahead, as
  the latency-controlled BiLSTM of Fan et al. 2018, would trade latency for accuracy). With
  a hard monotonic or MoChA speller the model streams (:meth:`LAS.stream_listen`,
  :meth:`LAS.stream_step`).
* **Speller**: :class:`attnkit.models.AttentionDecoder` over the listener output, with key and
  value projections (LAS's ``phi``/``psi``), the context fed with the embedding, and (by
  default) Chorowski et al.'s location-aware score through attnkit's one-step path.
* **CTC head** (optional): a linear layer on the listener output for a CTC auxiliary loss,
  giving :data:`CTC_LABELS_PER_STEP` label distributions per listener step (one per 20 ms):
  one per 80 ms step would be fewer than the characters of ordinary speech (12-17 a second),
  and CTC cannot emit more labels than it has frames. The CTC blank is the padding id 0, never
  a transcript character.
* **Speller as a language model**: :meth:`LAS.language_model` runs the speller on text
  alone, with the context held at zero and no attention, so it can be trained on transcripts
  before joint training; the listener is not used.
"""

from __future__ import annotations

from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn

from attnkit.checks import check_positive_int, check_probability, quoted
from attnkit.models.decoder import AttentionDecoder
from attnkit.models.registry import Model
from attnkit.models.rnn import LSTM, BiRNN, longest_first
from attnkit.ops import Linear, exporting

__all__ = ["LISTENERS", "LAS", "CausalListener", "LASStream", "Listener", "ListenerStream"]

HALVINGS = 3
MIN_FRAMES = 2**HALVINGS  # frames needed to keep one listener step after the halvings
CTC_LABELS_PER_STEP = 4
LISTENERS = ("bi", "uni")  # bidirectional (Listener) or unidirectional (CausalListener)
FEATURE_EPS = 1e-5  # the floor of a stored feature std (as in per-utterance normalisation)


def check_lengths(lengths: torch.Tensor, frames: int) -> None:
    """Raise a ValueError naming ``lengths`` unless every length is in ``[8, frames]``."""
    if lengths.dim() != 1 or lengths.numel() == 0:
        raise ValueError(f"lengths: expected shape (B,), got {tuple(lengths.shape)}")
    short = lengths < MIN_FRAMES
    if bool(short.any()):
        raise ValueError(
            f"lengths: utterances need at least {MIN_FRAMES} frames ({MIN_FRAMES * 10} ms) "
            f"for the listener's {HALVINGS} halvings, got {lengths[short].tolist()} at "
            f"batch positions {short.nonzero().flatten().tolist()}"
        )
    if int(lengths.max()) > frames:
        raise ValueError(
            f"lengths: expected at most {frames} (the padded frames), got {int(lengths.max())}"
        )


def check_features(features: torch.Tensor, size: int) -> None:
    """Raise a ValueError naming ``features`` unless it is ``(B, T, size)``."""
    if features.dim() != 3 or features.shape[-1] != size:
        raise ValueError(f"features: expected shape (B, T, {size}), got {tuple(features.shape)}")


def listener_settings(features: int, hidden: int, dropout: float) -> tuple[int, int, nn.Module]:
    """A listener's checked ``features`` and ``hidden``, and its dropout between layers."""
    check_positive_int("features", features)
    check_positive_int("hidden", hidden)
    check_probability("dropout", dropout)
    return features, hidden, nn.Dropout(dropout)


def halve(x: torch.Tensor) -> torch.Tensor:
    """Frames ``2j`` and ``2j + 1`` side by side: ``(B, T, D) -> (B, T // 2, 2D)``; an odd
    last frame is dropped."""
    b, t, d = x.shape
    return x[:, : t - t % 2].reshape(b, t // 2, 2 * d)


class Listener(nn.Module):
    """Pyramidal BiLSTM encoder: ``T`` frames in, ``T // 8`` steps out.

    Args:
        features: ``F``, input features per frame.
        hidden: ``L``, hidden size of each direction of every BiLSTM (outputs ``2L``).
        dropout: between layers.

    Shape:
        ``forward(features (B, T, F), lengths (B,))`` -> ``(outputs (B, T // 8, 2L),
        lengths (B,))``; output lengths are ``n // 2 // 2 // 2 = n // 8`` (an odd length drops
        its last frame at each halving) and outputs past them are zero.

    Raises:
        ValueError: ``lengths`` holds an utterance shorter than 8 frames (it would have no
            step left after the halvings), or lengths outside ``[1, T]``.

    Example:
        >>> out, lengths = Listener(80, 16)(torch.randn(2, 50, 80), torch.tensor([50, 17]))
        >>> out.shape, lengths.tolist()
        (torch.Size([2, 6, 32]), [6, 2])
    """

    def __init__(self, features: int, hidden: int = 256, *, dropout: float = 0.0):
        super().__init__()
        self.features, self.hidden, self.drop = listener_settings(features, hidden, dropout)
        self.first = BiRNN(features, hidden)
        self.pyramid = nn.ModuleList(BiRNN(4 * hidden, hidden) for _ in range(HALVINGS))

    @property
    def output_dim(self) -> int:
        return 2 * self.hidden

    def forward(self, features: torch.Tensor, lengths: torch.Tensor):
        check_features(features, self.features)
        if not exporting():  # the check reads the lengths: an exported graph cannot
            check_lengths(lengths, features.shape[1])
        lengths = lengths.to(features.device)
        order = longest_first(features, lengths)  # (halving keeps the order)
        if order is not None:
            features, lengths = features.index_select(0, order), lengths[order]
        x = self.first(features, lengths)  # (B, T, 2L)
        for lstm in self.pyramid:
            x, lengths = halve(x), lengths // 2  # (B, T/2, 4L): frames 2j, 2j+1
            x = lstm(self.drop(x), lengths)  # (B, T/2, 2L)
        if order is not None:
            back = order.argsort()
            x, lengths = x.index_select(0, back), lengths[back]
        return x, lengths


class ListenerStream(NamedTuple):
    """What :meth:`CausalListener.stream` keeps between chunks: each LSTM's ``(h, c)``
    (``None`` before its first step) and, per halving, the frame ``(B, 0 or 1, D)`` still
    waiting for its pair."""

    rnn: tuple[tuple[torch.Tensor, torch.Tensor] | None, ...]
    waiting: tuple[torch.Tensor | None, ...]


class CausalListener(nn.Module):
    """Pyramidal unidirectional LSTM encoder: ``T`` frames in, ``T // 8`` steps out, step
    ``j`` computed from frames ``< 8 (j + 1)`` only.

    Features are normalised inside, with per-bin ``feature_mean`` and ``feature_std`` stored
    in the model (buffers, saved with the weights; :meth:`set_statistics` from the training
    data), so an utterance needs no statistics of its own and frames can be encoded as they
    arrive: :meth:`stream` over consecutive chunks equals :meth:`forward` over all of them.

    Args:
        features: ``F``, input features per frame (raw log-mels).
        hidden: ``L``, hidden size of every LSTM (outputs ``L``).
        dropout: between layers.

    Shape:
        ``forward(features (B, T, F), lengths (B,))`` -> ``(outputs (B, T // 8, L),
        lengths (B,))``, lengths ``n // 8``, outputs past them zero; ``stream(features
        (B, t, F), state)`` -> ``(outputs (B, s, L), state)``.

    Example:
        >>> enc = CausalListener(80, 16).double().eval()
        >>> x = torch.randn(1, 50, 80, dtype=torch.float64)
        >>> out, lengths = enc(x, torch.tensor([50]))
        >>> first, state = enc.stream(x[:, :21], enc.stream_start())
        >>> rest, state = enc.stream(x[:, 21:], state)
        >>> out.shape, first.shape[1]
        (torch.Size([1, 6, 16]), 2)

        Streamed and at once agree to rounding: each output (``|h| < 1``) lies within ``4 n u``
        of the exact value, ``n`` < 8,000 roundings along the layers' chain (50 steps of 80 + 16
        products and the three halvings' over fewer steps), ``u = 2^-53`` in float64:

        >>> bool(((torch.cat([first, rest], 1) - out).abs() <= 2 * 4 * 8000 * 2**-53).all())
        True
    """

    # buffers (register_buffer), typed for mypy
    feature_mean: torch.Tensor
    feature_std: torch.Tensor

    def __init__(self, features: int, hidden: int = 256, *, dropout: float = 0.0):
        super().__init__()
        self.features, self.hidden, self.drop = listener_settings(features, hidden, dropout)
        self.first = LSTM(features, hidden, batch_first=True)
        self.pyramid = nn.ModuleList(
            LSTM(2 * hidden, hidden, batch_first=True) for _ in range(HALVINGS)
        )
        self.register_buffer("feature_mean", torch.zeros(features))
        self.register_buffer("feature_std", torch.ones(features))

    @property
    def output_dim(self) -> int:
        return self.hidden

    def set_statistics(self, mean: torch.Tensor, std: torch.Tensor) -> None:
        """Store the per-bin ``mean`` and ``std`` ``(F,)`` the features are normalised with
        (``std`` floored at 1e-5)."""
        for name, value in (("mean", mean), ("std", std)):
            if not isinstance(value, torch.Tensor) or value.shape != (self.features,):
                got = (
                    tuple(value.shape) if isinstance(value, torch.Tensor) else type(value).__name__
                )
                raise ValueError(f"{name}: expected shape ({self.features},), got {got}")
            if not bool(torch.isfinite(value).all()):
                raise ValueError(f"{name}: expected finite values, got {value.tolist()[:4]}...")
        with torch.no_grad():
            self.feature_mean.copy_(mean)
            self.feature_std.copy_(std.clamp_min(FEATURE_EPS))

    def normalise(self, features: torch.Tensor) -> torch.Tensor:
        """``(features - mean) / std`` per bin, ``(B, T, F)``."""
        return (features - self.feature_mean) / self.feature_std

    def forward(self, features: torch.Tensor, lengths: torch.Tensor):
        check_features(features, self.features)
        if not exporting():
            check_lengths(lengths, features.shape[1])
        lengths = lengths.to(features.device)
        x, _ = self.first(self.normalise(features))  # (B, T, L)
        for lstm in self.pyramid:
            x, lengths = halve(x), lengths // 2  # (B, T/2, 2L)
            x, _ = lstm(self.drop(x))  # (B, T/2, L): step t sees steps <= t only
        valid = torch.arange(x.shape[1], device=x.device) < lengths[:, None]  # (B, S)
        return x * valid[..., None].to(x.dtype), lengths

    def stream_start(self) -> ListenerStream:
        """The state before the first frame."""
        return ListenerStream((None,) * (1 + HALVINGS), (None,) * HALVINGS)

    def stream(
        self, features: torch.Tensor, state: ListenerStream
    ) -> tuple[torch.Tensor, ListenerStream]:
        """The next listener steps ``(B, s, L)`` from the next frames ``(B, t, F)`` of every
        utterance of the batch (``s`` may be 0): the steps whose 8 frames are all in."""
        check_features(features, self.features)
        rnn, waiting = list(state.rnn), list(state.waiting)
        b = features.shape[0]
        x = features.new_zeros(b, 0, self.hidden)  # (B, t, L)
        if features.shape[1]:
            x, rnn[0] = self.first(self.normalise(features), rnn[0])
        for i, lstm in enumerate(self.pyramid):
            left = waiting[i]
            if left is not None:  # the frame left over from the chunks before
                x = torch.cat([left, x], 1)
            even = x.shape[1] - x.shape[1] % 2
            waiting[i] = x[:, even:]  # (B, 0 or 1, L)
            if even == 0:
                x = x.new_zeros(b, 0, self.hidden)
                continue
            x, rnn[i + 1] = lstm(self.drop(halve(x[:, :even])), rnn[i + 1])  # (B, t', L)
        return x, ListenerStream(tuple(rnn), tuple(waiting))


class LASStream(NamedTuple):
    """State of a streaming :class:`LAS`: the listener's, and the speller's over the steps
    listened to so far (None before the first)."""

    listener: ListenerStream
    speller: dict | None


class LAS(Model, name="las"):
    """Listen, Attend and Spell: :class:`Listener` + :class:`AttentionDecoder` speller.

    Args:
        vocab: ``V`` output characters (id 0 padding, also the CTC blank).
        features: ``F`` per frame (80 log-mels).
        listener_hidden: ``L`` per direction of the listener's BiLSTMs (``"bi"``), or of
            its LSTMs (``"uni"``).
        listener: ``"bi"`` (:class:`Listener`: give it features normalised per utterance)
            or ``"uni"`` (:class:`CausalListener`: give it raw log-mels, it normalises them
            with the statistics stored by ``model.listener.set_statistics``; streams with a
            hard monotonic or MoChA ``alignment``).
        hidden: the speller's LSTMCell size; emb: its character embedding size.
        layers: the speller's stacked LSTMCells (1 or 2 in the paper).
        score: the speller's attention score ("location", "additive", "dot"...).
        key_value_dim: size of the key and value projections of the listener output.
        attn_dim: additive/location attention size (default ``hidden``).
        ctc: add a CTC head on the listener output (see :meth:`forward`).
        dropout: in the listener (between layers) and the speller.
        alignment, alignment_options: the speller's alignment (``"softmax"`` of the score, or
            monotonic, MoChA, local-p, GMM: :class:`attnkit.models.AttentionDecoder`).

    Shape:
        - ``forward(features (B, T, F), lengths (B,), tgt_in (B, U))`` -> logits
          ``(B, U, V)``, weights ``(B, U, S)``; ``S = T // 8``.
        - ``start(features, lengths)`` -> state; ``step(tokens (N,), state)`` -> log-probs
          ``(N, V)``, state, weights ``(N, S)``.
        - Streaming (one utterance in pieces): ``stream_listen(features (B, t, F), state)``
          -> state; ``stream_step(tokens (B,), state, final=...)`` -> log-probs ``(B, V)``,
          state, weights ``(B, S so far)``, or None while the step needs audio not yet
          listened to.

    Example:
        >>> model = LAS(10, features=8, listener_hidden=8, hidden=16, emb=8, key_value_dim=8)
        >>> logits, w = model(torch.randn(2, 40, 8), torch.tensor([40, 24]),
        ...                   torch.ones(2, 5, dtype=torch.long))
        >>> logits.shape, w.shape
        (torch.Size([2, 5, 10]), torch.Size([2, 5, 5]))
    """

    def __init__(
        self,
        vocab: int,
        *,
        features: int = 80,
        listener_hidden: int = 256,
        hidden: int = 256,
        emb: int = 64,
        layers: int = 1,
        score: str = "location",
        key_value_dim: int = 128,
        attn_dim: int | None = None,
        ctc: bool = False,
        dropout: float = 0.0,
        alignment: str = "softmax",
        alignment_options: dict | None = None,
        listener: str = "bi",
    ):
        super().__init__()
        check_positive_int("vocab", vocab)
        if listener not in LISTENERS:
            raise ValueError(
                f"listener: expected one of {', '.join(LISTENERS)}, got {quoted(listener)}"
            )
        kind = Listener if listener == "bi" else CausalListener
        self.listener: Listener | CausalListener = kind(features, listener_hidden, dropout=dropout)
        self.speller = AttentionDecoder(
            vocab,
            self.listener.output_dim,
            hidden=hidden,
            emb=emb,
            score=score,
            layers=layers,
            key_value_dim=key_value_dim,
            attn_dim=attn_dim,
            dropout=dropout,
            alignment=alignment,
            alignment_options=alignment_options,
        )
        self.ctc_head = (
            Linear(self.listener.output_dim, CTC_LABELS_PER_STEP * vocab) if ctc else None
        )

    # ------------------------------------------------------------------ decoding interface

    def start(self, features: torch.Tensor, lengths: torch.Tensor) -> dict:
        """Listen; returns the speller's state before the first character."""
        memory, mem_lengths = self.listener(features, lengths)
        return self.speller.start(memory, mem_lengths)

    def step(self, tokens: torch.Tensor, state: dict):
        """One character: tokens ``(N,)`` -> log-probs ``(N, V)``, state, weights ``(N, S)``."""
        return self.speller.step(tokens, state)

    @property
    def normalises_input(self) -> bool:
        """True when the listener normalises raw log-mels itself (``listener="uni"``, with
        stored statistics); False when it takes features normalised per utterance."""
        return isinstance(self.listener, CausalListener)

    # ------------------------------------------------------------------ streaming

    def check_streaming(self) -> None:
        """Raise a ValueError saying what is missing unless the model can transcribe while
        the audio arrives: a causal listener and a hard monotonic or MoChA speller."""
        missing = []
        if not self.normalises_input:
            missing.append("a unidirectional listener (listener 'uni', got 'bi')")
        if not self.speller.streams:
            missing.append(
                f"a hard monotonic alignment ('monotonic' or 'mocha', got "
                f"{self.speller.alignment_name!r})"
            )
        if missing:
            raise ValueError(f"model: streaming needs {' and '.join(missing)}")

    def stream_start(self) -> LASStream:
        """The state before any audio (see :meth:`stream_listen`)."""
        self.check_streaming()
        assert isinstance(self.listener, CausalListener)  # as check_streaming found
        return LASStream(self.listener.stream_start(), None)

    def stream_listen(self, features: torch.Tensor, state: LASStream) -> LASStream:
        """Listen to the next frames ``(B, t, F)`` (raw log-mels, every utterance of the
        batch as far as the others): the listener steps they complete are appended to the
        speller's memory (:meth:`attnkit.models.AttentionDecoder.extend`)."""
        # a stream's state comes from stream_start, which checked for a causal listener
        assert isinstance(self.listener, CausalListener)
        steps, listened = self.listener.stream(features, state.listener)  # (B, s, L)
        speller = state.speller
        if steps.shape[1]:
            speller = self.speller.extend(speller, steps)
        return LASStream(listened, speller)

    def stream_step(self, tokens: torch.Tensor, state: LASStream, *, final: bool):
        """:meth:`step` over the memory listened to so far, or None when it cannot be decided
        yet: a hard monotonic step that finds no stop among the listener steps so far waits
        for more (``final=False``); after the last frames (``final=True``) it attends to
        nothing, as it does over a whole utterance. Equals :meth:`step` over the whole
        utterance whenever it is not None.

        Raises:
            ValueError: ``final`` with fewer than 8 frames listened to (no listener step).
        """
        if state.speller is None:
            if final:
                raise ValueError(
                    f"features: utterances need at least {MIN_FRAMES} frames "
                    f"({MIN_FRAMES * 10} ms) for the listener's {HALVINGS} "
                    "halvings"
                )
            return None
        log_probs, speller, weights = self.speller.step(tokens, state.speller)
        if not final and not bool(weights.ne(0).any(-1).all()):  # a row found no stop yet
            return None
        return log_probs, LASStream(state.listener, speller), weights

    @property
    def has_ctc(self) -> bool:
        """True with a CTC head (joint CTC/attention decoding can score with it)."""
        return self.ctc_head is not None

    def start_joint(self, features: torch.Tensor, lengths: torch.Tensor):
        """Listen once: the speller's state, the CTC head's log-probs ``(B, 4S, V)`` and its
        frames ``(B,)`` (for :mod:`attnkit.decoding.ctc_prefix`)."""
        if not self.has_ctc:
            raise ValueError("model: this LAS was built without a CTC head (ctc=False)")
        memory, mem_lengths = self.listener(features, lengths)
        log_probs, ctc_lengths = self._ctc(memory, mem_lengths)
        return self.speller.start(memory, mem_lengths), log_probs, ctc_lengths

    @staticmethod
    def steps(lengths: torch.Tensor) -> torch.Tensor:
        """Listener steps ``S`` ``(B,)`` of utterances of ``lengths`` ``(B,)`` frames: the
        listener halves them 3 times (``n // 8``)."""
        return lengths // MIN_FRAMES

    def _ctc(self, memory: torch.Tensor, mem_lengths: torch.Tensor):
        """CTC log-probs ``(B, 4S, V)``: listener step ``j`` gives frames ``4j .. 4j + 3``."""
        assert self.ctc_head is not None  # the callers check has_ctc
        b, s = memory.shape[:2]
        ctc = self.ctc_head(memory).reshape(b, CTC_LABELS_PER_STEP * s, -1)  # (B, 4S, V)
        return F.log_softmax(ctc, dim=-1), CTC_LABELS_PER_STEP * mem_lengths

    # ------------------------------------------------------------------ training

    def forward(
        self,
        features: torch.Tensor,
        lengths: torch.Tensor,
        tgt_in: torch.Tensor,
        *,
        teacher_forcing: float = 1.0,
        generator: torch.Generator | None = None,
        with_ctc: bool = False,
    ):
        """Logits ``(B, U, V)`` and weights ``(B, U, S)``; ``tgt_in`` ``(B, U)`` starts with BOS.

        With ``teacher_forcing < 1`` each example feeds back its own greedy prediction at a
        step with probability ``1 - teacher_forcing``. With ``with_ctc`` (the model needs
        ``ctc=True``) a third item ``(ctc_log_probs (4S, B, V), ctc_lengths (B,))`` is
        returned, in the layout of :func:`torch.nn.functional.ctc_loss`: the 4 label
        distributions of listener step ``j`` are CTC frames ``4j`` to ``4j + 3``.
        """
        if with_ctc and self.ctc_head is None:
            raise ValueError("with_ctc: this model was built without a CTC head (ctc=False)")
        memory, mem_lengths = self.listener(features, lengths)  # (B, S, 2L or L), (B,)
        logits, weights = self.speller(
            memory, mem_lengths, tgt_in, teacher_forcing=teacher_forcing, generator=generator
        )
        if not with_ctc:
            return logits, weights
        log_probs, ctc_lengths = self._ctc(memory, mem_lengths)
        return logits, weights, (log_probs.transpose(0, 1), ctc_lengths)  # (4S, B, V)

    def language_model(self, tgt_in: torch.Tensor) -> torch.Tensor:
        """The speller alone as a character LM: logits ``(B, U, V)`` of ``tgt_in (B, U)``.

        The context fed with each embedding is zero and nothing is attended; only the
        embedding, the LSTMCells and the output layer are used (and get gradients).
        """
        return self.speller.language_model(tgt_in)
