"""What a run's ``trainer.json`` holds beside the weights, and its checks: the random states
(saved and restored so that a resumed run draws what an uninterrupted one would), and the
refusal of a hand-edited or foreign ``trainer.json`` that resuming could not continue from."""

from __future__ import annotations

import math
import random
from pathlib import Path

import torch

from attnkit.checks import clipped, got, quoted
from attnkit.train.checkpoint import CheckpointError

__all__ = ["check_trainer_state", "differences", "rng_state", "seed_everything", "set_rng_state"]


def rng_state() -> dict:
    """The random states of PyTorch and Python, as JSON values."""
    return {"torch": torch.get_rng_state().tolist(), "python": _jsonable(random.getstate())}


def set_rng_state(state: dict) -> None:
    """Restore the random states :func:`rng_state` returned."""
    torch.set_rng_state(torch.tensor(state["torch"], dtype=torch.uint8))
    random.setstate(_tupled(state["python"]))


def _restorable(state) -> str | None:
    """Why the RNG states ``state`` (as :func:`rng_state` wrote them) cannot be restored, or
    None: they are tried on generators of their own, so nothing changes here."""
    try:
        torch.Generator().set_state(torch.tensor(state["torch"], dtype=torch.uint8))
        random.Random().setstate(_tupled(state["python"]))
    except (KeyError, TypeError, ValueError, RuntimeError, OverflowError, IndexError) as exc:
        return clipped(f"{type(exc).__name__}: {exc}")
    return None


_COUNTS = ("step", "epoch", "batch_in_epoch", "bad_evals")
# The largest count a trainer.json may hold: a trillion steps is more than any run takes, and a
# larger one (1e18) would make a resumed run stop at once, having trained nothing.
MAX_COUNT = 10**12
_SCALER = ("scale", "growth_factor", "backoff_factor", "growth_interval", "_growth_tracker")


def check_trainer_state(st: dict, path: Path) -> None:
    """Refuse a ``trainer.json`` (``path``) that resuming cannot continue from: every key
    :meth:`attnkit.train.Trainer.resume` reads, of the type
    :meth:`attnkit.train.Trainer.save` writes.

    Raises:
        CheckpointError: naming the file and the key, what it should be and what it is.
    """

    def refuse(key: str, expected: str, value) -> None:
        raise CheckpointError(f"{path}: {key}: expected {expected}, got {got(value)}")

    wanted = {
        **dict.fromkeys(_COUNTS, f"an int from 0 to {MAX_COUNT:,}"),
        "best": "a finite number or null",
        "history": "a list of objects",
        "train_config": "an object",
        "rng": "the random states training saves",
    }
    for key, expected in wanted.items():
        if key not in st:
            raise CheckpointError(f"{path}: {key}: missing (expected {expected})")
    for key in _COUNTS:
        value = st[key]
        if not isinstance(value, int) or isinstance(value, bool) or not 0 <= value <= MAX_COUNT:
            refuse(key, wanted[key], value)
    best = st["best"]
    if best is not None and (
        not isinstance(best, (int, float)) or isinstance(best, bool) or not math.isfinite(best)
    ):
        refuse("best", wanted["best"], best)
    if not isinstance(st["history"], list) or not all(isinstance(h, dict) for h in st["history"]):
        refuse("history", wanted["history"], st["history"])
    if not isinstance(st["train_config"], dict):
        refuse("train_config", wanted["train_config"], st["train_config"])
    rngs = {"rng": st["rng"]}
    if "rng_by_rank" in st:
        if not isinstance(st["rng_by_rank"], list) or not st["rng_by_rank"]:
            refuse("rng_by_rank", "a non-empty list of random states", st["rng_by_rank"])
        rngs.update({f"rng_by_rank[{i}]": r for i, r in enumerate(st["rng_by_rank"])})
    for key, state in rngs.items():
        reason = _restorable(state)
        if reason is not None:
            raise CheckpointError(
                f"{path}: {key}: not a random state this PyTorch and Python can restore ({reason})"
            )
    scaler = st.get("scaler", {key: 1 for key in _SCALER})
    if not isinstance(scaler, dict) or not all(
        isinstance(scaler.get(key), (int, float))
        and not isinstance(scaler.get(key), bool)
        and math.isfinite(scaler[key])
        for key in _SCALER
    ):
        refuse("scaler", f"an object of finite numbers ({', '.join(_SCALER)})", scaler)


def seed_everything(seed: int) -> None:
    """Seed PyTorch's and Python's random generators."""
    torch.manual_seed(seed)
    random.seed(seed)


def _jsonable(x):
    return [_jsonable(v) for v in x] if isinstance(x, (tuple, list)) else x


def _tupled(x):
    return tuple(_tupled(v) for v in x) if isinstance(x, list) else x


def differences(saved: dict, now: dict, prefix: str = "") -> list[str]:
    """``"key: saved value, now value"`` for each (dotted, nested) key whose values differ."""
    out = []
    for key in sorted(set(saved) | set(now), key=str):
        a, b = saved.get(key), now.get(key)
        if isinstance(a, dict) and isinstance(b, dict):
            out += differences(a, b, f"{prefix}{key}.")
        elif a != b:
            out.append(f"{prefix}{key}: {quoted(a)} saved, {quoted(b)} now")
    return out
