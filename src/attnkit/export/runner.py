"""Decode with a model that ``attnkit export`` wrote: numpy only, no attnkit, no PyTorch.

``attnkit export`` copies this file next to the graphs as ``attnkit_runner.py``; with the
folder on ``sys.path`` (docs/deploy.md)::

    meta = json.load(open("FOLDER/attnkit.json"))
    src = Vocab(meta["vocab"]["src"])            # text <-> token ids (a task tag is one id)
    feed = {"src": ..., "src_len": ...}          # the encoder's inputs
    state = dict(zip(encoder_output_names, encoder.run(None, feed)))
    outputs = decode(step, state, meta, feed)    # per example: its outputs, best first

``step`` is the decoder step graph's session (``onnxruntime.InferenceSession``, or anything
with its ``run(None, feed) -> list of arrays``); a CTC model has none (pass None, and the
encoder's outputs as ``state``). :func:`decode` decodes as ``meta["decoding"]`` says: greedy,
beam search (beam, length and coverage penalties, no repeated n-grams, n-best) or sampling
(temperature, top-k, top-p, seed, samples), with the task's output length limit and, unless
``loop_stop`` is false, attnkit's stop of an output that loops (a unit of tokens repeated while
the attention's centre stands still; a warning is logged); or CTC best path. Greedy decoding
and beam search give the tokens ``attnkit`` gives (the same rules; the log-probabilities of
onnxruntime and PyTorch differ by about 1e-6, which can reorder two hypotheses that score
within that of each other). Sampling draws from the same distribution with numpy's
generator, so its draws are not those of ``attnkit --sample``.

Arrays: ``B`` examples; ``N`` rows fed to the step (``B``, ``B * beam`` or ``B * samples``,
example-major: row ``b * K + k`` belongs to example ``b``); ``V`` the output vocabulary.
"""

from __future__ import annotations

import base64
import logging

import numpy as np

__all__ = ["SPECIALS", "Vocab", "decode"]

SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")  # ids 0-3 of every vocabulary
PAD, BOS, EOS, UNK = range(4)

log = logging.getLogger(__name__)


class Vocab:
    """Text to token ids and back, for a vocabulary of attnkit.json (``meta["vocab"]``):
    characters (``symbols`` are ids 4...; a text starting with one of ``tags`` encodes it as
    one id) or SentencePiece (needs the ``sentencepiece`` package)."""

    def __init__(self, data: dict):
        self.type = data.get("type")
        if self.type == "char":
            self.symbols = [*SPECIALS, *data["symbols"]]
            self.index = {s: i for i, s in enumerate(self.symbols)}
            self.tags = sorted(data.get("tags", []), key=len, reverse=True)
        elif self.type == "sentencepiece":
            import sentencepiece

            self.sp = sentencepiece.SentencePieceProcessor(
                model_proto=base64.b64decode(data["model"])
            )
        else:
            raise ValueError(f"vocab: expected type 'char' or 'sentencepiece', got {self.type!r}")

    def encode(self, text: str) -> list[int]:
        """The ids of ``text`` (characters outside the vocabulary: ``<unk>``, id 3)."""
        if self.type == "sentencepiece":
            return self.sp.encode(text)
        tag = next((t for t in self.tags if text.startswith(t)), "")
        pieces = [tag] * bool(tag) + list(text[len(tag) :])
        return [self.index.get(p, UNK) for p in pieces]

    def decode(self, ids) -> str:
        """The text of ``ids`` up to the first ``<eos>``, without ``<pad>`` and ``<bos>``."""
        ids = [int(i) for i in ids]
        ids = [i for i in ids[: ids.index(EOS) if EOS in ids else len(ids)] if i not in (PAD, BOS)]
        if self.type == "sentencepiece":
            return self.sp.decode([i if 0 <= i < self.sp.get_piece_size() else UNK for i in ids])
        return "".join(
            self.symbols[i] if 0 <= i < len(self.symbols) else SPECIALS[UNK] for i in ids
        )


def decode(step, state: dict, meta: dict, inputs: dict | None = None) -> list[list[list[int]]]:
    """Decode a batch as ``meta["decoding"]`` says; per example, its outputs (one; the n-best
    of beam search or the samples, best first) as lists of token ids without ``<eos>``. When
    outputs were stopped because they looped, a warning is logged (on the module's logger,
    ``attnkit_runner`` for the copy).

    Args:
        step: the decoder step's session (None for a CTC model).
        state: the encoder's outputs by name (``(B, ...)`` arrays).
        meta: attnkit.json.
        inputs: the encoder's inputs by name (the length limit may read one).
    """
    d = meta["decoding"]
    if d["method"] == "ctc_best_path":
        return [[ids] for ids in _best_path(state[d["log_probs"]], state[d["lengths"]], d)]
    limit = _limit(d, {**(inputs or {}), **state})  # (B,)
    state = {s["name"]: state[s["name"]] for s in meta["state"]}
    run = _Step(step, meta)
    if d["method"] == "beam":
        tokens, looped, rows = _beam_search(run, state, limit, d)
    elif d["method"] == "sample":
        rng = np.random.default_rng(d["seed"])
        k = d["samples"]
        state = {name: np.repeat(x, k, axis=0) for name, x in state.items()}
        tokens, scores, looped = _run(
            run, state, np.repeat(limit, k), d, lambda lp: _draw(lp, d, rng)
        )
        order = np.argsort(-scores.reshape(-1, k), axis=1, kind="stable")  # (B, samples)
        rows = np.arange(len(limit))[:, None] * k + order
    else:
        tokens, _, looped = _run(run, state, limit, d, lambda lp: lp.argmax(-1))
        rows = np.arange(len(limit))[:, None]
    return _outputs(tokens, looped, rows, d)


def _outputs(
    tokens: np.ndarray, looped: np.ndarray, rows: np.ndarray, d: dict
) -> list[list[list[int]]]:
    """Per example, the contents of its rows ``rows (B, n)`` of ``tokens (N, T)``, as
    :func:`decode` returns them; logs a warning when some of them were stopped as loops
    (``looped (N,)``)."""
    sizes = [len(_content(tokens[i], d)) for i in rows.reshape(-1) if looped[i]]
    if sizes:
        log.warning(
            "%d of %d outputs stopped after %s tokens: each repeated a unit of tokens "
            "while its attention stood still (a loop); loop_stop false in "
            "attnkit.json's decoding (attnkit export --no-loop-stop) decodes them to "
            "the length limit",
            len(sizes),
            rows.size,
            ", ".join(map(str, sizes)),
        )
    return [[_content(tokens[i], d) for i in row] for row in rows]


class _Step:
    """One decoder step: ``(tokens (N,), state) -> (log_probs (N, V), state, weights (N, S)
    or None)``, the state entries the step changes replaced by its ``next.*`` outputs."""

    def __init__(self, session, meta: dict):
        self.session = session
        self.inputs = [i["name"] for i in meta["decoder_step"]["inputs"]]
        self.outputs = [o["name"] for o in meta["decoder_step"]["outputs"]]
        self.next = {s["name"]: s["next"] for s in meta["state"] if s["next"]}

    def __call__(self, tokens: np.ndarray, state: dict):
        feed = {n: tokens.astype(np.int64) if n == "tokens" else state[n] for n in self.inputs}
        out = dict(zip(self.outputs, self.session.run(None, feed)))
        state = {**state, **{name: out[n] for name, n in self.next.items()}}
        return out["log_probs"].astype(np.float32), state, out.get("weights")


def _limit(d: dict, values: dict) -> np.ndarray:
    """``(B,)`` output tokens at most (EOS included): ``max_tokens``, or the task's rule
    ``rounding(ratio * length) + extra`` (computed in float32, as attnkit does), at most
    ``at_most``."""
    rule = d["max_len"]
    length = np.asarray(values[rule["input"]])
    if d.get("max_tokens") is not None:
        return np.full(length.shape, d["max_tokens"], dtype=np.int64)
    scaled = getattr(np, rule["rounding"])(length.astype(np.float32) * np.float32(rule["ratio"]))
    limit = scaled.astype(np.int64) + rule["extra"]
    return limit if rule.get("at_most") is None else np.minimum(limit, rule["at_most"])


def _never(log_probs: np.ndarray, d: dict) -> np.ndarray:
    out = log_probs.copy()
    out[:, d["never_emit"]] = -np.inf
    return out


def _run(step, state: dict, limit: np.ndarray, d: dict, choose):
    """Greedy decoding and sampling: ``choose(log_probs (N, V)) -> tokens (N,)`` at each step
    until every row has emitted EOS, reached its limit or looped. Returns ``tokens (N, T)``
    (``pad`` after the end), the summed log-probabilities ``(N,)`` and ``(N,)`` bool: the rows
    stopped because they looped."""
    n = len(limit)
    tokens = np.full(n, d["bos"], dtype=np.int64)
    done = np.zeros(n, dtype=bool)
    looped = np.zeros(n, dtype=bool)
    loops = _start_loops(n, d)
    scores = np.zeros(n, dtype=np.float32)
    out = []
    for t in range(int(limit.max())):
        log_probs, state, w = step(tokens, state)
        tokens = choose(_never(log_probs, d))
        scores += np.where(done, 0.0, log_probs[np.arange(n), tokens]).astype(np.float32)
        tokens = np.where(done, d["pad"], tokens)
        out.append(tokens)
        if loops is not None:
            loops, now = _loop_step(loops, tokens, w, d)
            looped |= now & ~done & (tokens != d["eos"])
        done |= (tokens == d["eos"]) | (t + 1 >= limit) | looped
        if done.all():
            break
    return np.stack(out, 1), scores, looped


def _start_loops(n: int, d: dict) -> tuple | None:
    """The loop check's state of ``n`` rows that have emitted nothing (None without
    ``loop_stop``): their last ``P = loop.max_period`` tokens, the latest first (-1: none
    yet), the attention's centres at those steps (NaN: no weights), and for each period
    ``p = 1..P`` the steps in a row up to the last that repeated the token and the centre of
    ``p`` steps before; each ``(N, P)``."""
    if not d["loop_stop"]:
        return None
    p = d["loop"]["max_period"]
    return (
        np.full((n, p), -1, dtype=np.int64),
        np.full((n, p), np.nan, dtype=np.float32),
        np.zeros((n, p), dtype=np.int64),
    )


def _loop_step(loops: tuple, tokens: np.ndarray, weights: np.ndarray | None, d: dict):
    """Add one step to the loop check: ``tokens (N,)`` emitted with the attention
    ``weights (N, S)`` (or None). Returns the new state and ``(N,)`` bool: the rows that loop,
    whose last ``max((repeats - 1) * p, min_span)`` steps each repeated the token of ``p``
    steps before with the attention's centre ``sum_j j * weights[j]`` within ``tolerance`` of
    the centre then, for some period ``p``."""
    last, centres, runs = loops
    c = d["loop"]
    centre: np.ndarray
    if weights is None:
        centre = np.full(len(tokens), np.nan, dtype=np.float32)
    else:
        centre = weights.astype(np.float32) @ np.arange(weights.shape[-1], dtype=np.float32)
    still = (last == tokens[:, None]) & (np.abs(centres - centre[:, None]) <= c["tolerance"])
    runs = np.where(still, runs + 1, 0)  # NaN centres are never still
    spans = np.maximum((c["repeats"] - 1) * np.arange(1, c["max_period"] + 1), c["min_span"])
    loops = (
        np.concatenate([tokens[:, None], last[:, :-1]], 1),
        np.concatenate([centre[:, None], centres[:, :-1]], 1),
        runs,
    )
    return loops, (runs >= spans).any(-1)


def _draw(log_probs: np.ndarray, d: dict, rng: np.random.Generator) -> np.ndarray:
    """One token per row from ``softmax(log_probs / temperature)``, restricted to the
    ``top_k`` most probable and to the smallest set whose probability reaches ``top_p``."""
    logits = log_probs / np.float32(d["temperature"])  # (N, V)
    if d["top_k"] is not None and d["top_k"] < logits.shape[-1]:
        kth = np.sort(logits, axis=-1)[:, -d["top_k"]][:, None]
        logits = np.where(logits < kth, -np.inf, logits)
    if d["top_p"] is not None and d["top_p"] < 1:
        order = np.argsort(-logits, axis=-1, kind="stable")
        ranked = np.take_along_axis(logits, order, -1)
        probs = _softmax(ranked)
        ranked[np.cumsum(probs, -1) - probs >= d["top_p"]] = -np.inf  # mass before the token
        np.put_along_axis(logits, order, ranked, -1)
    probs = _softmax(logits.astype(np.float64))
    return np.array([rng.choice(len(p), p=p) for p in probs], dtype=np.int64)


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _lengths(tokens: np.ndarray, d: dict) -> np.ndarray:
    """``(N,)`` tokens up to and including the first EOS (all non-pad tokens without one)."""
    is_eos = tokens == d["eos"]
    first = np.where(is_eos.any(-1), is_eos.argmax(-1) + 1, tokens.shape[-1])
    return np.minimum(first, np.maximum((tokens != d["pad"]).sum(-1), 1))


def _length_penalty(lengths: np.ndarray, alpha: float) -> np.ndarray:
    """Wu et al. (2016): ``((5 + |Y|) / 6) ** alpha``."""
    return ((np.float32(5) + lengths.astype(np.float32)) / np.float32(6)) ** np.float32(alpha)


def _rank(scores, hyps, coverage, d) -> np.ndarray:
    """``(N,)`` ``log P / lp(|Y|) + beta * sum_j log(min(coverage_j, 1))`` over the attended
    inputs ``j``; NaN as -inf."""
    with np.errstate(invalid="ignore", divide="ignore"):
        rank = scores.reshape(-1) / _length_penalty(_lengths(hyps, d), d["length_penalty"])
        if d["coverage_penalty"] and coverage is not None:
            attended = np.where(coverage > 0, np.minimum(coverage, 1.0), 1.0)
            rank = rank + np.float32(d["coverage_penalty"]) * np.log(attended).sum(-1)
    return np.where(np.isnan(rank), -np.inf, rank).astype(np.float32)


def _ngram_ban(hyps: np.ndarray, n: int, vocab: int) -> np.ndarray:
    """``(N, V)`` bool: the tokens that would repeat an n-gram already in each hypothesis
    (those that followed an earlier occurrence of its last ``n - 1`` tokens)."""
    num, t = hyps.shape
    banned = np.zeros((num, vocab + 1), dtype=bool)
    rows = np.arange(num)[:, None]
    if n == 1 and t:
        banned[rows, hyps] = True
    elif n > 1 and t >= n:
        prefix = hyps[:, t - n + 1 :]  # (N, n-1) the last n-1 tokens
        windows = np.lib.stride_tricks.sliding_window_view(hyps, n - 1, axis=1)[:, : t - n + 1]
        match = (windows == prefix[:, None, :]).all(-1)  # (N, t-n+1) earlier equal prefixes
        banned[rows, np.where(match, hyps[:, n - 1 :], vocab)] = True  # what followed them
    return banned[:, :vocab]


def _top(x: np.ndarray, k: int):
    """The ``k`` largest values of each row and their indices, largest first; of equal values
    the lower index first (as a stable sort of the whole row orders them). A full sort of a
    beam's ``K * V`` candidates at every step was most of the runner's own time: the ``k``
    are found by partition, with the ties at the ``k``-th value taken lowest index first."""
    rows, width = x.shape
    if k >= width:
        idx = np.argsort(-x, axis=-1, kind="stable")
        return np.take_along_axis(x, idx, -1), idx
    kth = -np.partition(-x, k - 1, axis=-1)[:, k - 1 : k]  # (R, 1) the k-th largest value
    above = x > kth
    tied = x == kth
    need = k - above.sum(-1, keepdims=True)  # (R, 1) of the ties, this many lowest first
    take = above | (tied & (np.cumsum(tied, axis=-1) <= need))
    idx = np.nonzero(take)[1].reshape(rows, k)  # ascending index in each row
    order = np.argsort(-np.take_along_axis(x, idx, -1), axis=-1, kind="stable")
    idx = np.take_along_axis(idx, order, -1)
    return np.take_along_axis(x, idx, -1), idx


def _beam_search(step: _Step, state: dict, limit: np.ndarray, d: dict):
    """Batched beam search as attnkit's ``beam_search``: hypotheses extended by cumulative
    log-probability, frozen at EOS, their limit or when they loop (an example's live
    hypotheses all stop when its leading one loops), an example done when no live
    hypothesis can outrank its ``n_best`` finished ones (or, with ``beam_stop`` "best", when
    its most probable hypothesis has finished: the live ones are dropped), the finished
    ranked by :func:`_rank`.
    An example whose search is over has its ``n_best`` picked, and once half the batch is
    over their rows leave it (every array cut to the remaining rows), so the step runs on the
    examples still searching only. The state entries the step does not change (the encoder's
    outputs) are the same in every beam of an example and are only cut, never reordered.
    Returns the ``B * n_best`` hypotheses ``(B * n_best, T)``, ``(B * n_best,)`` bool: those
    stopped as loops, and the rows of each example's ``n_best`` ``(B, n_best)``, best first."""
    b, k, n_best, alpha = len(limit), d["beam"], d["n_best"], d["length_penalty"]
    limit = np.repeat(limit, k)  # (N,)
    state = {name: np.repeat(x, k, axis=0) for name, x in state.items()}
    tokens = np.full(b * k, d["bos"], dtype=np.int64)
    scores = np.zeros((b, k), dtype=np.float32)
    scores[:, 1:] = -np.inf  # all beams start identical: keep one
    done = np.zeros(b * k, dtype=bool)
    hyps = np.zeros((b * k, 0), dtype=np.int64)
    coverage = None
    looped = np.zeros(b * k, dtype=bool)
    loops = _start_loops(b * k, d)
    example, gone = np.arange(b), np.zeros(b, dtype=bool)  # (B',) the examples searching
    finished = []  # (examples (E,), hyps (E * n_best, t), looped (E * n_best,))
    steps = 0
    while example.size:
        ba = example.size
        n, base = ba * k, (np.arange(ba) * k)[:, None]  # (B', 1)
        log_probs, state, w = step(tokens, state)
        steps += 1
        vocab = log_probs.shape[-1]
        log_probs = _never(log_probs, d)
        if d["no_repeat_ngram"]:
            log_probs[_ngram_ban(hyps, d["no_repeat_ngram"], vocab)] = -np.inf
        log_probs[done] = -np.inf  # a finished hypothesis continues only with pad, at no cost
        log_probs[done, d["pad"]] = 0.0
        top, idx = _top((scores.reshape(n, 1) + log_probs).reshape(ba, k * vocab), k)
        parent = (base + idx // vocab).reshape(n)
        tokens, scores = (idx % vocab).reshape(n), top
        state = {name: x[parent] if name in step.next else x for name, x in state.items()}
        was_done = done[parent]
        hyps = np.concatenate([hyps[parent], tokens[:, None]], axis=1)
        if w is not None:
            w = np.where(was_done[:, None], 0.0, w[parent]).astype(np.float32)
            if d["coverage_penalty"]:
                coverage = w if coverage is None else coverage[parent] + w
        if loops is not None:
            loops, now = _loop_step(tuple(x[parent] for x in loops), tokens, w, d)
            live = ~was_done & (tokens != d["eos"])
            now &= live
            # When an example's leading live hypothesis loops, its other live ones are
            # variants of the loop (or worse): the example stops.
            lead = np.where(live.reshape(ba, k), scores, -np.inf).argmax(-1)  # (B',)
            now |= np.repeat(now.reshape(ba, k)[np.arange(ba), lead], k) & live
            looped = looped[parent] | now
        done = was_done | (tokens == d["eos"]) | (steps >= limit) | looped
        if d.get("beam_stop", "bound") == "best":  # the most probable finished: drop the rest
            lead = done.reshape(ba, k)[np.arange(ba), scores.argmax(-1)]
            ends = np.repeat(lead & (done.reshape(ba, k).sum(-1) >= n_best), k)
            scores = np.where((ends & ~done).reshape(ba, k), -np.inf, scores).astype(np.float32)
            done |= ends
        else:
            rank = _rank(scores, hyps, coverage, d).reshape(ba, k)
            kth = np.sort(np.where(done.reshape(ba, k), rank, -np.inf), axis=-1)[:, k - n_best]
            with np.errstate(invalid="ignore"):
                live = scores / _length_penalty(limit.reshape(ba, k), alpha)
            best_live = np.where(done.reshape(ba, k), -np.inf, live).max(-1)
            done |= np.repeat(kth > best_live, k)
        over = done.reshape(ba, k).all(-1)  # (B',) examples whose search is over
        ends = np.flatnonzero(over & ~gone)
        if ends.size:  # their n-best, best first; their rows stay until half the batch ends
            _, best = _top(_rank(scores, hyps, coverage, d).reshape(ba, k)[ends], n_best)
            pick = ((ends * k)[:, None] + best).reshape(-1)  # (E * n_best,)
            finished.append((example[ends], hyps[pick], looped[pick]))
            gone |= over
        if gone.sum() < max(ba / 2, 1):
            continue
        stay = np.flatnonzero(~gone)
        rows = ((stay * k)[:, None] + np.arange(k)).reshape(-1)
        example, gone, scores = example[stay], gone[stay], scores[stay]
        state = {name: x[rows] for name, x in state.items()}
        tokens, done, limit, hyps, looped = (x[rows] for x in (tokens, done, limit, hyps, looped))
        coverage = None if coverage is None else coverage[rows]
        loops = None if loops is None else tuple(x[rows] for x in loops)
    where = np.argsort(np.concatenate([e for e, _, _ in finished]))  # (B,) examples in order
    out = np.concatenate(
        [
            np.pad(h, ((0, 0), (0, steps - h.shape[1])), constant_values=d["pad"])
            for _, h, _ in finished
        ]
    ).reshape(b, n_best, steps)[where]
    stopped = np.concatenate([x for _, _, x in finished]).reshape(b, n_best)[where]
    return (
        out.reshape(b * n_best, steps),
        stopped.reshape(-1),
        np.arange(b * n_best).reshape(b, n_best),
    )


def _content(tokens, d: dict) -> list[int]:
    """A row's token ids before its first EOS, without pad."""
    out = []
    for i in map(int, tokens):
        if i == d["eos"]:
            break
        if i != d["pad"]:
            out.append(i)
    return out


def _best_path(log_probs: np.ndarray, lengths: np.ndarray, d: dict) -> list[list[int]]:
    """CTC best path: per example the argmax id of each of its steps, repeats merged, the
    blank and the ids in ``drop`` removed."""
    skip = {d["blank"], *d["drop"]}
    out = []
    for row, n in zip(log_probs.argmax(-1), lengths):
        ids, prev = [], d["blank"]
        for i in map(int, row[: int(n)]):
            if i != prev and i not in skip:
                ids.append(i)
            prev = i
        out.append(ids)
    return out
