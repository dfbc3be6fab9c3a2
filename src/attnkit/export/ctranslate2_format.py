"""Export a Transformer translation model as a CTranslate2 model folder
(:func:`export_ctranslate2`; ``attnkit export --format ctranslate2``; docs/deploy.md).

The folder is what ``ctranslate2.Translator(folder)`` loads: ``model.bin`` and ``config.json``
written by CTranslate2's own spec API (:class:`ctranslate2.specs.TransformerSpec`), the token
lists (``shared_vocabulary.json``, or ``source_vocabulary.json`` and
``target_vocabulary.json``), plus what attnkit adds: the SentencePiece models
(``source.model``, ``target.model``) so users tokenise as attnkit does, ``attnkit_ct2.json``
(how to tokenise, the special tokens, the ``translate_batch`` options that decode as attnkit
does) and a short ``README.md``.

How attnkit's :class:`attnkit.models.Transformer` maps onto the spec:

* pre-norm layers with a final LayerNorm (``pre_norm=True``), ReLU feed-forward, LayerNorm
  epsilon from the model (PyTorch's 1e-5; CTranslate2's default would be 1e-6);
* embeddings multiplied by ``sqrt(D)`` (``scale_embeddings``), then positions added. attnkit's
  sinusoids interleave ``sin`` and ``cos`` with frequencies ``10000^(-2i/D)``; CTranslate2's
  built-in ones put all ``sin`` before all ``cos`` with ``10000^(-i/(D/2-1))``, so attnkit's
  are written as a table of :data:`POSITIONS` rows (CTranslate2 takes a written table as
  given): inputs and outputs are limited to that many tokens;
* every attention projects queries, keys and values with bias (fused as CTranslate2 wants:
  ``[q; k; v]`` for self-attention, ``[k; v]`` for cross-attention) and scales queries by
  ``1/sqrt(head_dim)`` (CTranslate2's default). With one head attnkit has no projections:
  identity matrices with zero bias stand for them (exact);
* the output projection is the target embedding (tied) plus attnkit's output bias;
  with ``shared_embeddings`` the source embedding is the target's too (CTranslate2 stores the
  equal tensors once).

Anything else is refused by :func:`check_exportable` with a one-line error naming the part.
"""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from attnkit.attention import Attention
from attnkit.folders import write_folder
from attnkit.models import Transformer, sinusoids
from attnkit.tokens import BOS, EOS, PAD, UNK

__all__ = [
    "CT2_FORMAT",
    "CT2_JSON",
    "CT2_NAMES",
    "POSITIONS",
    "QUANTIZATIONS",
    "check_exportable",
    "export_ctranslate2",
    "tokens_of",
    "transformer_spec",
]

CT2_FORMAT, CT2_VERSION = "attnkit-ctranslate2", 1
CT2_JSON, README = "attnkit_ct2.json", "README.md"
SOURCE_MODEL, TARGET_MODEL = "source.model", "target.model"
# Every file the export folder may hold (those CTranslate2 writes and attnkit's).
CT2_NAMES = {
    "model.bin",
    "config.json",
    "shared_vocabulary.json",
    "source_vocabulary.json",
    "target_vocabulary.json",
    SOURCE_MODEL,
    TARGET_MODEL,
    CT2_JSON,
    README,
}
# Rows of the position table: the longest input, and the longest output, in tokens. 4096
# covers attnkit translate's output limit (3 * source tokens + max_len_extra) for sources up
# to 1,300 tokens, beyond the 1,000 characters attnkit reads per line.
POSITIONS = 4096
# --quantize: CTranslate2's weight types (compute_type="int8" runs them).
QUANTIZATIONS = ("int8",)


def check_exportable(model: nn.Module) -> Transformer:
    """``model`` as a :class:`Transformer` CTranslate2 represents exactly.

    Raises:
        ValueError: one line naming the part CTranslate2 cannot represent (another model
            family, an attention other than multi-head scaled dot-product without window,
            a LayerNorm without affine parameters or of another epsilon).
    """
    if not isinstance(model, Transformer):
        name = getattr(model, "model_name", type(model).__name__)
        raise ValueError(
            f"model: CTranslate2 export takes the Transformer only, got a {name} model "
            "(RNN, LAS and CRNN decoders, and their alignment modules, have no CTranslate2 "
            "equivalent)"
        )
    for i, layer in enumerate([*model.encoder, *model.decoder]):
        act = layer.ff[1]
        if not isinstance(act, nn.ReLU):
            part = f"encoder.{i}" if i < len(model.encoder) else f"decoder.{i - len(model.encoder)}"
            raise ValueError(
                f"model: {part}.ff activates with {type(act).__name__}; this export writes ReLU"
            )
    for where, module in model.named_modules():
        if isinstance(module, Attention):
            if module.score.name != "scaled_dot":
                raise ValueError(
                    f"model: {where} scores with {module.score.name!r}; CTranslate2 has "
                    "scaled dot-product attention only"
                )
            if module.window is not None:
                raise ValueError(
                    f"model: {where} attends within a window {module.window}; CTranslate2 "
                    "has no local attention"
                )
        elif isinstance(module, nn.LayerNorm):
            if not module.elementwise_affine or module.bias is None:
                raise ValueError(
                    f"model: {where} is a LayerNorm without affine weight and bias; "
                    "CTranslate2's have both"
                )
            if module.eps != model.enc_norm.eps:
                raise ValueError(
                    f"model: {where} has LayerNorm epsilon {module.eps}, the others "
                    f"{model.enc_norm.eps}; CTranslate2 takes one for the whole model"
                )
    return model


def tokens_of(vocab: Any) -> list[str]:
    """The token strings of an attnkit vocabulary (a :class:`attnkit.data.CharVocab` or
    :class:`attnkit.data.SubwordVocab`), by id: what CTranslate2 is given and returns."""
    sp = getattr(vocab, "sp", None)
    if sp is not None:
        return [sp.id_to_piece(i) for i in range(len(vocab))]
    return list(vocab.symbols)


def _numpy(tensor: torch.Tensor) -> np.ndarray:
    return tensor.detach().to("cpu", torch.float32).contiguous().numpy()


def _linear(spec: Any, weight: torch.Tensor, bias: torch.Tensor | None) -> None:
    spec.weight = _numpy(weight)  # (out, in), as nn.Linear
    if bias is not None:
        spec.bias = _numpy(bias)


def _norm(spec: Any, norm: nn.LayerNorm) -> None:
    spec.gamma, spec.beta = _numpy(norm.weight), _numpy(norm.bias)


def _projections(attn: Attention, d: int) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """``(weight (D, D), bias (D,))`` of the q, k, v and output projections; one head has
    none, for which identity and zero bias stand (exact)."""
    if attn.heads == 1:
        eye, zero = torch.eye(d), torch.zeros(d)
        return [(eye, zero)] * 4
    return [(p.weight, p.bias) for p in (attn.q_proj, attn.k_proj, attn.v_proj, attn.out_proj)]


def _self_attention(spec: Any, attn: Attention, norm: nn.LayerNorm, d: int) -> None:
    (wq, bq), (wk, bk), (wv, bv), (wo, bo) = _projections(attn, d)
    _norm(spec.layer_norm, norm)
    _linear(spec.linear[0], torch.cat([wq, wk, wv]), torch.cat([bq, bk, bv]))
    _linear(spec.linear[1], wo, bo)


def _cross_attention(spec: Any, attn: Attention, norm: nn.LayerNorm, d: int) -> None:
    (wq, bq), (wk, bk), (wv, bv), (wo, bo) = _projections(attn, d)
    _norm(spec.layer_norm, norm)
    _linear(spec.linear[0], wq, bq)
    _linear(spec.linear[1], torch.cat([wk, wv]), torch.cat([bk, bv]))
    _linear(spec.linear[2], wo, bo)


def _feed_forward(spec: Any, ff: Any, norm: nn.LayerNorm) -> None:
    """``ff``: Linear, ReLU, Dropout, Linear (attnkit.models.transformer's)."""
    _norm(spec.layer_norm, norm)
    _linear(spec.linear_0, ff[0].weight, ff[0].bias)
    _linear(spec.linear_1, ff[3].weight, ff[3].bias)


def transformer_spec(model: Transformer, *, positions: int = POSITIONS) -> Any:
    """The :class:`ctranslate2.specs.TransformerSpec` holding ``model``'s weights (float32;
    the vocabularies are not registered). ``positions``: rows of the position table."""
    from ctranslate2.specs import common_spec
    from ctranslate2.specs import transformer_spec as ts

    check_exportable(model)
    d = model.d_model
    enc_layers: list[Any] = list(model.encoder)  # _EncoderLayer, _DecoderLayer
    dec_layers: list[Any] = list(model.decoder)
    heads = enc_layers[0].attn.heads
    encoder = ts.TransformerEncoderSpec(
        len(enc_layers), heads, pre_norm=True, activation=common_spec.Activation.RELU
    )
    decoder = ts.TransformerDecoderSpec(
        len(dec_layers),
        heads,
        pre_norm=True,
        activation=common_spec.Activation.RELU,
        # what attnkit returns as weights: the last layer's cross-attention, mean over heads
        alignment_layer=-1,
        alignment_heads=heads,
    )
    table = _numpy(sinusoids(torch.arange(positions), d))  # (P, D)
    encoder.embeddings[0].weight = _numpy(model.source_embedding().weight)
    encoder.position_encodings.encodings = table
    for spec, layer in zip(encoder.layer, enc_layers):
        _self_attention(spec.self_attention, layer.attn, layer.norm1, d)
        _feed_forward(spec.ffn, layer.ff, layer.norm2)
    _norm(encoder.layer_norm, model.enc_norm)
    decoder.embeddings.weight = _numpy(model.tgt_embed.weight)
    decoder.position_encodings.encodings = table
    for spec, layer in zip(decoder.layer, dec_layers):
        _self_attention(spec.self_attention, layer.self_attn, layer.norm1, d)
        _cross_attention(spec.attention, layer.cross_attn, layer.norm2, d)
        _feed_forward(spec.ffn, layer.ff, layer.norm3)
    _norm(decoder.layer_norm, model.dec_norm)
    _linear(decoder.projection, model.tgt_embed.weight, model.out_bias)  # tied, with bias
    return ts.TransformerSpec(encoder, decoder)


def _tokenisation(vocab: Any, model_file: str) -> dict:
    if getattr(vocab, "sp", None) is not None:
        return {
            "type": "sentencepiece",
            "model": model_file,
            "encode": f"SentencePieceProcessor(model_file='{model_file}')"
            ".encode(text, out_type=str)",
            "decode": f"SentencePieceProcessor(model_file='{model_file}').decode(tokens)",
        }
    return {
        "type": "char",
        "tags": list(vocab.tags),
        "encode": "a tag the text starts with (of tags, the longest first) is one token, then "
        "each character is one",
        "decode": "''.join(tokens)",
    }


def _readme(meta: dict) -> str:
    src, tgt = meta["tokenise"]["source"], meta["tokenise"]["target"]
    options = ", ".join(f"{k}={v!r}" for k, v in meta["translate_batch"].items())
    return (
        "# A CTranslate2 model exported by attnkit\n\n"
        "```python\nimport ctranslate2\n"
        f"translator = ctranslate2.Translator(folder, compute_type={meta['compute_type']!r})\n"
        f"results = translator.translate_batch(source_tokens, {options})\n```\n\n"
        f"Source tokens: {src['encode']}. Target text: {tgt['decode']}. An empty source is "
        f"{meta['empty_source']}. Inputs and outputs: at most {meta['positions']} tokens.\n"
        f"{CT2_JSON} says the same for programs; attnkit's docs/deploy.md compares its "
        "beam search with CTranslate2's.\n"
    )


def export_ctranslate2(
    model: nn.Module,
    out: str | Path,
    *,
    src_vocab: Any,
    tgt_vocab: Any,
    quantize: str | None = None,
    max_len: dict | None = None,
    positions: int = POSITIONS,
) -> dict:
    """Write ``model`` (a :class:`Transformer`) and its vocabularies as a CTranslate2 model
    folder ``out``, replaced whole once written (:func:`attnkit.folders.write_folder`; call
    :func:`attnkit.export.check_out` first). ``quantize="int8"`` stores the weights as int8
    (run with ``compute_type="int8"``). ``max_len``: attnkit's output length rule, written
    to the JSON. Returns the JSON written (``attnkit_ct2.json``).

    Raises:
        ValueError: ctranslate2 not installed, a part of the model CTranslate2 cannot
            represent (:func:`check_exportable`), another ``quantize``.
    """
    if importlib.util.find_spec("ctranslate2") is None:
        raise ValueError(
            "format: 'ctranslate2' needs the ctranslate2 package: pip install 'attnkit[export]'"
        )
    if quantize is not None and quantize not in QUANTIZATIONS:
        raise ValueError(
            f"quantize: expected one of {', '.join(QUANTIZATIONS)} or None, got {quantize!r}"
        )
    transformer = check_exportable(model)
    src_tokens, tgt_tokens = tokens_of(src_vocab), tokens_of(tgt_vocab)
    spec = transformer_spec(transformer, positions=positions)
    specials = dict(
        zip(("pad", "bos", "eos", "unk"), (tgt_tokens[i] for i in (PAD, BOS, EOS, UNK)))
    )
    if src_tokens[UNK] != specials["unk"]:
        raise ValueError(
            f"src_vocab: its unknown token {src_tokens[UNK]!r} is not the target's "
            f"{specials['unk']!r}; CTranslate2 takes one for both"
        )
    from ctranslate2.specs import transformer_spec as ts

    spec._config = ts.TransformerConfig(
        layer_norm_epsilon=float(transformer.enc_norm.eps),
        unk_token=specials["unk"],
        bos_token=specials["bos"],
        eos_token=specials["eos"],
        decoder_start_token=specials["bos"],
    )
    spec.register_source_vocabulary(src_tokens)
    spec.register_target_vocabulary(tgt_tokens)
    spec.validate()
    spec.optimize(quantization=quantize or "float32")
    meta = {
        "format": CT2_FORMAT,
        "version": CT2_VERSION,
        "compute_type": quantize or "float32",
        "specials": specials,
        "tokenise": {
            "source": _tokenisation(src_vocab, SOURCE_MODEL),
            "target": _tokenisation(tgt_vocab, TARGET_MODEL),
        },
        # attnkit encodes an empty text as one pad token
        "empty_source": [src_tokens[PAD]],
        "positions": positions,
        # what attnkit's greedy decoding does: it never emits pad or bos, may end at once
        # (an empty output), and reads inputs whole
        "translate_batch": {
            "beam_size": 1,
            "suppress_sequences": [[specials["pad"]], [specials["bos"]]],
            "min_decoding_length": 0,
            "max_input_length": 0,
        },
        # attnkit's output limit, for max_decoding_length (one per call in CTranslate2):
        # ceil(ratio * source tokens) + extra, at most at_most, in tokens (EOS included)
        "max_len": max_len,
    }
    with write_folder(out) as tmp:
        spec.save(str(tmp))
        for vocab, name in ((src_vocab, SOURCE_MODEL), (tgt_vocab, TARGET_MODEL)):
            if getattr(vocab, "sp", None) is not None:
                (tmp / name).write_bytes(vocab.model)
        (tmp / CT2_JSON).write_text(json.dumps(meta, indent=1) + "\n", encoding="utf-8")
        (tmp / README).write_text(_readme(meta), encoding="utf-8")
    return meta
