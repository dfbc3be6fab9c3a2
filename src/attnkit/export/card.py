"""A model card drafted from what a checkpoint knows, for a model exported to be shared.

The shipped models' cards (``src/attnkit/pretrained/NAME/MODEL_CARD.md``, docs/models.md) say
what a model does, the data it learnt from with every source's licence, the commands that
made it, its figures on each held-out set with the command that measures them, and its limits.
A checkpoint records part of that: the task, the model's configuration, the training data's
paths, the training options and every validation. :func:`draft_card` writes those down in the
shipped cards' sections and marks, with ``TODO``, what only its author can say: the sources'
licences, what the model is for, held-out figures and limits (Mitchell et al. 2019, "Model
Cards for Model Reporting", list the same parts).
"""

from __future__ import annotations

import math
from pathlib import Path

__all__ = ["CARD", "draft_card", "write_card"]

CARD = "MODEL_CARD.md"
TODO = "TODO:"


def _value(v) -> str:
    """A configuration or metric value as the cards write it."""
    if isinstance(v, float):
        return f"{v:.4g}" if math.isfinite(v) else str(v)
    return str(v)


def _history_table(history: list[dict]) -> list[str]:
    """The validations of ``history`` as a Markdown table: a row per validation, a column per
    metric (in the order they first appear)."""
    metrics: list[str] = []
    for row in history:
        metrics += [k for k in row if k != "step" and k not in metrics]
    lines = ["| step | " + " | ".join(metrics) + " |", "|---" * (len(metrics) + 1) + "|"]
    for row in history:
        cells = [_value(row.get(m, "")) for m in metrics]
        lines.append(f"| {row.get('step', '')} | " + " | ".join(cells) + " |")
    return lines


def draft_card(
    name: str,
    *,
    source: Path,
    config: dict,
    trainer_state: dict | None,
    parameters: int,
    size_mib: float,
) -> str:
    """The Markdown of a model card for a model named ``name``, exported from the checkpoint
    ``source`` (its ``config.json``'s ``config`` and its ``trainer.json``, None when it has
    none), with ``parameters`` weights in ``size_mib`` MiB of files."""
    task = config.get("task", "?")
    model = dict(config.get("model", {}))
    kind = model.pop("name", "?")
    trainer = trainer_state or {}
    train_config = trainer.get("train_config", {})
    history = trainer.get("history", [])
    data = config.get("data", {})
    out = [
        f"# {name} (model card)",
        "",
        f"Drafted by `attnkit export --format checkpoint` from the checkpoint `{source}`; the",
        f"lines marked `{TODO}` are for its author to write.",
        "",
        f"{TODO} what it does, for whom, on which inputs (`attnkit {task}` reads them).",
        "",
        "## Model",
        "",
        f"Task `{task}`, model `{kind}`: {parameters:,} parameters, {size_mib:.1f} MiB.",
        "",
        *(f"- `{k}`: {_value(v)}" for k, v in sorted(model.items())),
        "",
        "## Data",
        "",
        *(
            f"- {part}: `{where}`"
            for part, where in data.items()
            if isinstance(where, str) and where != "None"  # a run without --valid says None
        ),
        *([] if data else ["- built-in data (no `--train`): the task guide names its world"]),
        "",
        f"{TODO} each corpus's source, version and licence; what was held out, and how.",
        "",
        "## Recipe",
        "",
        f"{trainer.get('step', '?')} steps (epoch {trainer.get('epoch', '?')}); training options:",
        "",
        *(f"- `{k}`: {_value(v)}" for k, v in sorted(train_config.items())),
        *(f"- `batching.{k}`: {_value(v)}" for k, v in sorted(config.get("batching", {}).items())),
        "",
        f"{TODO} the command that trained it.",
        "",
        "## Figures",
        "",
    ]
    if history:
        metric = train_config.get("metric")
        best = trainer.get("best")
        if metric and best is not None:
            out += [f"Best validation {metric}: {_value(best)}.", ""]
        out += ["Validation during training:", "", *_history_table(history), ""]
    else:
        out += ["No validation was recorded.", ""]
    out += [
        f"{TODO} figures on held-out test data, each with the command that measures it",
        "(`attnkit eval --checkpoint ... --data ...`).",
        "",
        "## Limits",
        "",
        f"{TODO} where it fails or was never tried: domains, lengths, languages, voices, fonts.",
        "",
    ]
    return "\n".join(out)


def write_card(
    folder: Path,
    *,
    source: Path,
    config: dict,
    trainer_state: dict | None,
    parameters: int,
    name: str | None = None,
) -> Path:
    """:func:`draft_card` for the model exported to ``folder`` (named after the folder unless
    ``name``), written to ``folder / MODEL_CARD.md``."""
    size = sum(f.stat().st_size for f in folder.iterdir() if f.is_file()) / 2**20
    text = draft_card(
        name or folder.resolve().name,
        source=source,
        config=config,
        trainer_state=trainer_state,
        parameters=parameters,
        size_mib=size,
    )
    path = folder / CARD
    path.write_text(text, "utf-8")
    return path
