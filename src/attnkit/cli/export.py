"""``attnkit export``: a checkpoint's model as ONNX graphs plus the JSON that decodes with them
(docs/deploy.md), as a CTranslate2 model (Transformer translation models), or as a checkpoint
for inference only (the built-in models, docs/models.md)."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

from attnkit.cli import common
from attnkit.data import load_vocab
from attnkit.decoding import MAX_OUTPUT_TOKENS
from attnkit.export import (
    CARD,
    DEFAULT_OPSET,
    OPSETS,
    RUNNER_FILE,
    check_out,
    export_ctranslate2,
    export_onnx,
    write_card,
)
from attnkit.tasks import asr, loading, ocr, translate
from attnkit.train import CheckpointError, load_checkpoint, resolve_checkpoint, save_checkpoint

FORMATS = ("onnx", "ctranslate2", "checkpoint")
TASKS = ("translate", "ocr", "asr")


def add_parser(sub: common.SubParsers) -> None:
    p = sub.add_parser(
        "export",
        help="export a checkpoint to ONNX for inference outside Python",
        description="onnx: write the model's encoder and one decoder step (a "
        "CTC model: its encoder and classifier) as ONNX graphs; attnkit.json: "
        "the vocabulary, the special ids, the length limit, the decoding settings "
        "(the decoding options below; default: the task's, as attnkit "
        "translate, read and transcribe decode) and what each graph input and "
        f"output means; and {RUNNER_FILE}, which decodes with them using numpy "
        "only. checkpoint: write a checkpoint for inference "
        "only (the model's weights, its settings and vocabulary; no optimizer or "
        "trainer state), as the built-in models are shipped.",
    )
    p.add_argument("--checkpoint", type=Path, required=True, help="a run's checkpoint folder")
    p.add_argument("--format", default="onnx", help=f"one of {', '.join(FORMATS)} (default onnx)")
    p.add_argument(
        "--opset",
        type=int,
        default=DEFAULT_OPSET,
        help=f"ONNX opset, one of {', '.join(map(str, OPSETS))} (default {DEFAULT_OPSET})",
    )
    p.add_argument(
        "--quantize",
        choices=("int8", "float16"),
        help="onnx: int8 stores the graphs' weights as int8 (onnxruntime's dynamic "
        "quantisation, weight-only int8 for GRUs and convolutions: 0.27-0.29 of "
        "the float32 size for the built-in models; docs/deploy.md gives their "
        "speed and accuracy against float32); ctranslate2: int8 weights, run with "
        "compute_type='int8'; checkpoint: float16 stores the weights as float16 (half "
        "the size; read back as float32)",
    )
    p.add_argument(
        "--out",
        type=Path,
        required=True,
        help="folder for the files: new, empty or an earlier export, which is "
        "replaced whole once the new export is written",
    )
    p.add_argument(
        "--force",
        action="store_true",
        help="replace --out even when it holds other files (they are deleted)",
    )
    common.add_decoding_args(p, beam=None, pick=False)
    p.set_defaults(run=run_export)


def run_export(args: argparse.Namespace) -> int:
    if args.format not in FORMATS:
        raise ValueError(f"format: expected one of {', '.join(FORMATS)}, got {args.format!r}")
    if args.opset not in OPSETS:
        raise ValueError(f"opset: expected one of {', '.join(map(str, OPSETS))}, got {args.opset}")
    out = check_out(args.out, reading=resolve_checkpoint(args.checkpoint), force=args.force)
    task = load_checkpoint(args.checkpoint).config.get("task")
    if task not in TASKS:
        raise CheckpointError(
            f"{args.checkpoint}: a checkpoint of task {task!r} cannot be "
            f"exported; expected one of {', '.join(TASKS)}"
        )
    args.default_beam = common.TASK_BEAM[task]
    decoding = common.decoding(args)
    if (args.quantize == "float16") != (args.format == "checkpoint" and args.quantize is not None):
        raise ValueError(
            f"--quantize: {args.quantize} is not a choice of --format {args.format} "
            "(int8: onnx and ctranslate2; float16: checkpoint)"
        )
    if args.format == "ctranslate2":
        return _export_ctranslate2(args, task, out)
    if args.format == "checkpoint":
        given = _decoding_options(args)
        if given:
            raise ValueError(
                f"{given[0]}: a decoding option, written by --format onnx only "
                "(a checkpoint decodes as the command that reads it is told)"
            )
        model, ck = loading.load_task_model(args.checkpoint, task)
        weights = {
            k: v.half() if args.quantize and v.is_floating_point() else v
            for k, v in model.state_dict().items()
        }
        card = out / CARD
        kept = card.read_text("utf-8") if card.is_file() else None  # its author's, maybe
        save_checkpoint(out, model=weights, config=ck.config, vocab=ck.vocab)
        size = sum(f.stat().st_size for f in args.out.iterdir()) / 2**20
        print(f"wrote {args.out} (an inference checkpoint of task {task}, {size:.1f} MiB)")
        if kept is not None:
            card.write_text(kept, "utf-8")
            print(f"kept {card} as it was")
        else:
            write_card(
                out,
                source=ck.path,
                config=ck.config,
                trainer_state=ck.trainer_state,
                parameters=sum(p.numel() for p in model.parameters()),
            )
            print(
                f"wrote {card}: a model card drafted from the checkpoint; complete its TODO lines"
            )
        return 0
    if importlib.util.find_spec("onnx") is None:
        raise ValueError("format: 'onnx' needs the onnx package: pip install 'attnkit[export]'")
    model, ck = loading.load_task_model(args.checkpoint, task)
    if task == "translate":
        vocab = {"src": ck.vocab["src"], "tgt": ck.vocab["tgt"]}
        max_len = {
            "input": "src_len",
            "ratio": translate.MAX_LEN_RATIO,
            "extra": ck.config.get("max_len_extra", 10),
            "rounding": "ceil",
            "at_most": MAX_OUTPUT_TOKENS,
        }
    elif task == "asr":
        vocab = {"tgt": ck.vocab}
        max_len = {
            "input": "lengths",
            "ratio": asr.CHARS_PER_FRAME,
            "extra": asr.EXTRA_CHARS,
            "rounding": "ceil",
            "at_most": MAX_OUTPUT_TOKENS,
        }
    else:  # the attention head's limit is on the encoder steps, the decoder state's lengths
        vocab = {"tgt": ck.vocab}
        max_len = {
            "input": "state.lengths",
            "ratio": 1 / ocr.STEPS_PER_CHAR,
            "extra": ocr.EXTRA_CHARS,
            "rounding": "floor",
            "at_most": MAX_OUTPUT_TOKENS,
        }
    meta = export_onnx(
        model,
        out,
        task=task,
        vocab=vocab,
        max_len=max_len,
        decoding=decoding,
        opset=args.opset,
        force=args.force,
        quantize=args.quantize,
    )
    files = (
        [meta["encoder"]["file"]]
        + ([meta["decoder_step"]["file"]] if "decoder_step" in meta else [])
        + ["attnkit.json", RUNNER_FILE]
    )
    method = (
        "CTC best path" if meta["decoding"]["method"] == "ctc_best_path" else decoding.describe()
    )
    size = sum((args.out / f).stat().st_size for f in files if f.endswith(".onnx")) / 2**20
    print(
        f"wrote {', '.join(str(args.out / f) for f in files)} (ONNX opset {args.opset}"
        f"{', int8 weights' if args.quantize else ''}, {size:.1f} MiB; decoding: {method})"
    )
    return 0


def _export_ctranslate2(args: argparse.Namespace, task: str, out: Path) -> int:
    if task != "translate":
        raise CheckpointError(
            f"{args.checkpoint}: a checkpoint of task {task!r} cannot be exported as "
            "ctranslate2; expected translate (a Transformer)"
        )
    given = _decoding_options(args)
    if given:
        raise ValueError(
            f"{given[0]}: a decoding option of --format onnx; CTranslate2 takes its own at "
            "translate time (attnkit_ct2.json names those that decode as attnkit does)"
        )
    model, ck = loading.load_task_model(args.checkpoint, task)
    meta = export_ctranslate2(
        model,
        out,
        src_vocab=load_vocab(ck.vocab["src"]),
        tgt_vocab=load_vocab(ck.vocab["tgt"]),
        quantize=args.quantize,
        max_len={
            "ratio": translate.MAX_LEN_RATIO,
            "extra": ck.config.get("max_len_extra", 10),
            "rounding": "ceil",
            "at_most": MAX_OUTPUT_TOKENS,
        },
    )
    size = sum(f.stat().st_size for f in args.out.iterdir()) / 2**20
    print(
        f"wrote {args.out} (a CTranslate2 model, {meta['compute_type']} weights, {size:.1f} "
        f"MiB; translate with compute_type={meta['compute_type']!r}, tokenise as "
        f"{args.out / 'attnkit_ct2.json'} says)"
    )
    return 0


def _decoding_options(args: argparse.Namespace) -> list[str]:
    """The decoding options given on the command line."""
    given = [
        opt
        for opt in ("--beam", "--max-len", "--sample", *common.SAMPLING_OPTIONS)
        if getattr(args, opt[2:].replace("-", "_")) is not None
    ]
    return (
        given
        + [opt for opt, name, default in common.BEAM_OPTIONS if getattr(args, name) != default]
        + ["--no-loop-stop"] * args.no_loop_stop
    )
