"""The special token ids every vocabulary and model shares.

Id 0 is padding (and the CTC blank), 1 begins and 2 ends a sequence, 3 stands for anything
outside the vocabulary.
"""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["BOS", "EOS", "PAD", "SPECIALS", "UNK", "content_ids"]

PAD, BOS, EOS, UNK = 0, 1, 2, 3
SPECIALS = ("<pad>", "<bos>", "<eos>", "<unk>")


def content_ids(ids: Iterable[int]) -> list[int]:
    """``ids`` as ints up to the first ``<eos>``, without ``<pad>`` and ``<bos>``."""
    out = []
    for i in map(int, ids):
        if i == EOS:
            break
        if i not in (PAD, BOS):
            out.append(i)
    return out
