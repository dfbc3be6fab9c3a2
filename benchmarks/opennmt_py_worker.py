"""OpenNMT-py's side of ``python -m benchmarks.opennmt_py``: run in a process of its own whose
``PYTHONPATH`` holds the private OpenNMT-py folder (``--install DIR``) and its stubs, so
attnkit's own processes never import OpenNMT-py. It imports nothing of attnkit.

``python benchmarks/opennmt_py_worker.py JOB.json`` reads a job and writes its answer as JSON
to the job's ``"answer"`` path:

* ``{"do": "translate", "model", "subword_model", "texts", "beam", "batch", "threads",
  "max_length", "length_penalty", "alpha"}``: OpenNMT-py's own inference engine
  (:class:`onmt.inference_engine.InferenceEnginePY`, what ``onmt_translate`` runs) with its
  ``sentencepiece`` transform decodes ``texts``; answers ``{"outputs", "seconds",
  "cpu_seconds", "versions"}``: wall and this process's CPU seconds of ``infer_list`` alone
  (tokenise, decode, detokenise: the model is loaded before);
* ``{"do": "train", "config", "folder"}``: ``onmt_train -config CONFIG`` run in ``folder``
  (the paths of the config are relative to it) until it stops or is stopped: the budget is
  the caller's (:mod:`benchmarks.opennmt_py_training`); answers ``{"versions"}``;
* ``{"do": "log_probs", "model", "src", "tgt"}``: teacher-forced log-probabilities of the
  target ids ``tgt`` (each row ``[BOS, ..., EOS]``) given ``src`` (lists of ids) from the
  model as OpenNMT-py's own loader (:func:`onmt.model_builder.load_test_model`) builds it;
  answers ``{"log_probs"}``, one ``(len(tgt) - 1, V)`` list per row.

What OpenNMT-py 3.5.1 needs to run on a torch newer than its ``torch<2.3`` pin (the shim,
applied here and described in docs/deploy.md): its checkpoints pickle an
``argparse.Namespace``, which ``torch.load``'s default ``weights_only=True`` (torch >= 2.6)
refuses, so ``argparse.Namespace`` is added to torch's safe globals; and ``spacy`` and
``fasttext``, imported at start-up by two transforms never used here (terminology, clean),
are stub modules (``DIR/attnkit-stubs``, written by ``--install``).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch


def _translate(job: dict) -> dict:
    from onmt.inference_engine import InferenceEnginePY
    from onmt.opts import translate_opts
    from onmt.utils.parse import ArgumentParser

    parser = ArgumentParser(description="translate.py")
    translate_opts(parser)
    # -output: where OpenNMT-py also writes the predictions (default pred.txt in the cwd)
    argv = ["-model", job["model"], "-src", "-", "-output", job["answer"] + ".pred.txt"]
    argv += ["-gpu", "-1", "-seed", "0"]
    argv += ["-beam_size", str(job["beam"]), "-batch_size", str(job["batch"])]
    argv += ["-batch_type", "sents", "-max_length", str(job["max_length"])]
    argv += ["-max_length_ratio", "0", "-length_penalty", job["length_penalty"]]
    argv += ["-alpha", str(job["alpha"]), "-transforms", "sentencepiece"]
    argv += ["-src_subword_model", job["subword_model"]]
    argv += ["-tgt_subword_model", job["subword_model"]]
    opt = parser.parse_args(argv)
    # what onmt/bin/translate.py's translate() does before it builds the engine
    ArgumentParser.validate_translate_opts(opt)
    ArgumentParser._get_all_transform_translate(opt)
    ArgumentParser._validate_transforms_opts(opt)
    ArgumentParser.validate_translate_opts_dynamic(opt)
    engine = InferenceEnginePY(opt)
    start, cpu = time.perf_counter(), time.process_time()
    _, predictions = engine.infer_list(job["texts"])
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    engine.terminate()
    import onmt

    return {
        "outputs": [p[0] for p in predictions],
        "seconds": seconds,
        "cpu_seconds": cpu,
        "versions": {"OpenNMT-py": onmt.__version__, "torch": torch.__version__},
    }


def _train(job: dict) -> dict:
    import os

    import onmt
    from onmt.bin.train import main

    os.chdir(job["folder"])
    sys.argv = ["onmt_train", "-config", job["config"]]
    main()
    return {"versions": {"OpenNMT-py": onmt.__version__, "torch": torch.__version__}}


def _pad(rows: list[list[int]], pad: int) -> torch.Tensor:
    width = max(len(r) for r in rows)
    return torch.tensor([r + [pad] * (width - len(r)) for r in rows])


@torch.no_grad()
def _log_probs(job: dict) -> dict:
    from onmt.constants import DefaultTokens
    from onmt.model_builder import load_test_model

    opt = argparse.Namespace(
        models=[job["model"]], gpu=-1, world_size=1, precision="fp32", quant_type=""
    )
    opt.quant_layers, opt.gpu_ranks, opt.parallel_mode = [], [], "data_parallel"
    vocabs, model, _ = load_test_model(opt)
    pad = vocabs["tgt"][DefaultTokens.PAD]
    src, tgt = _pad(job["src"], pad), _pad(job["tgt"], pad)
    src_len = torch.tensor([len(r) for r in job["src"]])
    dec_out, _ = model(src[..., None], tgt[..., None], src_len)  # (B, T - 1, D)
    log_probs = torch.log_softmax(model.generator(dec_out), dim=-1)  # (B, T - 1, V)
    return {"log_probs": [lp[: len(t) - 1].tolist() for lp, t in zip(log_probs, job["tgt"])]}


def main(argv: list[str] | None = None) -> int:
    job = json.loads(Path((argv or sys.argv[1:])[0]).read_text(encoding="utf-8"))
    torch.set_num_threads(job.get("threads") or 1)
    # OpenNMT-py's checkpoints hold an argparse.Namespace (see the module docstring)
    torch.serialization.add_safe_globals([argparse.Namespace])
    answer = {"translate": _translate, "train": _train, "log_probs": _log_probs}[job["do"]](job)
    Path(job["answer"]).write_text(json.dumps(answer), encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
