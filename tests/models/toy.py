"""A toy batch shared by the model tests: three sources of lengths 7, 4 and 1."""

import torch


def toy_batch(seed=0, b=3, s=7, t=5, vocab=11):
    """``src (B, S)`` padded with 0, ``src_len (B,)``, ``tgt_in (B, T)`` starting with BOS=1."""
    g = torch.Generator().manual_seed(seed)
    src = torch.randint(4, vocab, (b, s), generator=g)
    src_len = torch.tensor([7, 4, 1])[:b]
    src = src.masked_fill(torch.arange(s) >= src_len[:, None], 0)
    tgt_in = torch.randint(4, vocab, (b, t), generator=g)
    tgt_in[:, 0] = 1
    return src, src_len, tgt_in
