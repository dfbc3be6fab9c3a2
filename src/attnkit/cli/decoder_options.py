"""The options of attention decoders' alignments and losses (``train ocr``, ``train asr``) and
of joint CTC/attention decoding with shallow fusion (``read``, ``transcribe``)."""

from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from attnkit.cli.argtypes import non_negative_float, non_negative_int, positive_int, probability
from attnkit.cli.common import Options
from attnkit.decoding import Decoding
from attnkit.models.decoder import ALIGNMENT_CHOICES

__all__ = [
    "add_alignment_args",
    "add_joint_args",
    "add_loss_args",
    "alignment_config",
    "joint_decoding",
]

# option -> (the alignments it belongs to, its keyword in the alignment module)
ALIGNMENT_OPTIONS = {
    "chunk": (("mocha",), "chunk"),
    "half_width": (("local_p",), "half_width"),
    "components": (("gmm",), "components"),
    "energy_noise": (("monotonic", "mocha"), "noise"),
    "energy_offset": (("monotonic", "mocha"), "r_init"),
}


def add_alignment_args(group: Options) -> None:
    """``--alignment`` and the options of each alignment, in the model group ``group``."""
    group.add_argument(
        "--alignment",
        choices=ALIGNMENT_CHOICES,
        default="softmax",
        help="how the attention decoder aligns: softmax of the score (default), "
        "monotonic (Raffel et al. 2017), mocha (Chiu & Raffel 2018), "
        "local_p (Luong et al. 2015), gmm (Graves 2013)",
    )
    group.add_argument(
        "--chunk",
        type=positive_int,
        metavar="W",
        help="mocha: keys attended up to each monotonic stop (default 4)",
    )
    group.add_argument(
        "--half-width",
        type=non_negative_int,
        metavar="D",
        help="local_p: keys each side of the predicted centre (default 10)",
    )
    group.add_argument(
        "--components",
        type=positive_int,
        metavar="K",
        help="gmm: Gaussians of the mixture (default 5)",
    )
    group.add_argument(
        "--energy-noise",
        type=float,
        metavar="STD",
        help="monotonic, mocha: std of the noise on the energies in training (default 1)",
    )
    group.add_argument(
        "--energy-offset",
        type=float,
        metavar="R",
        help="monotonic, mocha: the energies' initial offset r (default -4: "
        "stop probabilities of 0.02 at first, for many keys per output; "
        "0 gives 0.5, about one listener step per character)",
    )


def add_loss_args(group: Options, *, head: str, ctc: str, diagonal: str, order: str) -> None:
    """``--ctc-weight``, ``--guided-attention`` and ``--sortagrad`` of a recogniser whose
    attention decoder reads a sequence of steps, their help in the task's words: ``head``
    (which head they train, or ""), ``ctc`` (what the CTC head is), ``diagonal`` (of what)
    and ``order`` (the batches' first)."""
    group.add_argument(
        "--ctc-weight",
        type=probability,
        default=0.0,
        help=f"{head}w in (1 - w) * cross-entropy + w * CTC{ctc}",
    )
    group.add_argument(
        "--guided-attention",
        type=non_negative_float,
        default=0.0,
        help=f"{head}weight of the guided attention loss (Tachibana et al. "
        f"2017: attention far from the diagonal of {diagonal} costs; 0: "
        "none)",
    )
    group.add_argument(
        "--sortagrad",
        type=non_negative_int,
        default=0,
        metavar="N",
        help=f"the first N epochs take their batches {order} first (SortaGrad, "
        "Amodei et al. 2016; 0: shuffled)",
    )


def alignment_config(args: argparse.Namespace) -> dict:
    """``{"alignment": ..., "alignment_options": ...}`` for the decoder's model config.

    Raises:
        ValueError: naming an option that belongs to another alignment than ``--alignment``.
    """
    options = {}
    for name, (owners, keyword) in ALIGNMENT_OPTIONS.items():
        value = getattr(args, name)
        if value is None:
            continue
        if args.alignment not in owners:
            raise ValueError(
                f"--{name.replace('_', '-')}: an option of --alignment "
                f"{' or '.join(owners)}, got --alignment {args.alignment}"
            )
        options[keyword] = value
    return {"alignment": args.alignment, "alignment_options": options or None}


def add_joint_args(p: Options) -> None:
    """``--ctc-weight``: joint CTC/attention decoding; ``--lm``, ``--lm-weight``: shallow
    fusion of a character LM (``attnkit train lm``)."""
    group = p.add_argument_group("joint CTC/attention decoding (models trained with a CTC weight)")
    group.add_argument(
        "--ctc-weight",
        type=float,
        default=0.0,
        metavar="LAMBDA",
        help="rank beam hypotheses by (1 - LAMBDA) log p_attention + LAMBDA "
        "log p_CTC, with the end decided by CTC (default 0: attention "
        "alone)",
    )
    group.add_argument(
        "--lm",
        type=Path,
        metavar="CHECKPOINT",
        help="a character LM trained with `attnkit train lm --vocab-from` this recogniser",
    )
    group.add_argument(
        "--lm-weight",
        type=float,
        default=0.0,
        metavar="BETA",
        help="add BETA log p_LM to each token's score (shallow fusion; needs --lm)",
    )


def joint_decoding(args: argparse.Namespace, decoding: Decoding) -> Decoding:
    """``decoding`` with the ``--ctc-weight`` and ``--lm-weight`` of :func:`add_joint_args`.

    Raises:
        ValueError: ``--lm`` without ``--lm-weight`` or the reverse.
    """
    if (args.lm is None) != (args.lm_weight == 0):
        raise ValueError(
            "--lm, --lm-weight: give both (a language model and its weight) or neither"
        )
    return dataclasses.replace(decoding, ctc_weight=args.ctc_weight, lm_weight=args.lm_weight)
