"""A small CNN that turns an image into a grid of feature vectors, the memory that image
models attend over (the "annotation vectors" of Show-Attend-Tell, the image regions of a
stacked attention network)."""

from __future__ import annotations

import torch
from torch import nn

from attnkit.checks import check_positive_int, check_tensor, quoted

__all__ = ["GridEncoder"]


class GridEncoder(nn.Module):
    """Conv blocks (3x3 conv, batch norm, ReLU, 2x2 max-pool), each halving the image, then
    each cell's centre ``(x, y)`` in ``[-1, 1]`` appended to its features, so that what reads
    the grid knows where a cell is (as the relation networks of Santoro et al. 2017 do).

    Args:
        image_size: ``S``, the side of the square images; divisible by ``2 ** len(channels)``.
        channels: output channels of each block.

    Shape:
        ``forward(images (B, 3, S, S))`` -> ``(B, L, D)``: ``L = side ** 2`` cells in row-major
        order (``side = S / 2 ** len(channels)``), ``D = channels[-1] + 2``.

    Example:
        >>> enc = GridEncoder(32, (4, 8))
        >>> enc(torch.rand(2, 3, 32, 32)).shape, enc.side, enc.dim
        (torch.Size([2, 64, 10]), 8, 10)
    """

    coords: torch.Tensor  # a buffer (register_buffer), typed for mypy

    def __init__(self, image_size: int, channels: tuple[int, ...]):
        super().__init__()
        check_positive_int("image_size", image_size)
        if not channels or not all(isinstance(c, int) and c > 0 for c in channels):
            raise ValueError(f"channels: expected positive ints, got {quoted(channels)}")
        scale = 2 ** len(channels)
        if image_size % scale:
            raise ValueError(
                f"image_size: expected a multiple of 2 ** len(channels) = {scale}, got {image_size}"
            )
        blocks, c_in = [], 3
        for c_out in channels:
            blocks += [
                nn.Conv2d(c_in, c_out, 3, padding=1, bias=False),
                nn.BatchNorm2d(c_out),
                nn.ReLU(inplace=True),
                nn.MaxPool2d(2),
            ]
            c_in = c_out
        self.cnn = nn.Sequential(*blocks)
        self.image_size, self.side, self.dim = image_size, image_size // scale, channels[-1] + 2
        centres = torch.linspace(-1.0, 1.0, self.side)
        y, x = torch.meshgrid(centres, centres, indexing="ij")
        self.register_buffer("coords", torch.stack([x, y], -1).reshape(-1, 2), persistent=False)

    def forward(self, images: torch.Tensor) -> torch.Tensor:
        check_tensor("images", images, ndim=4)
        s = self.image_size
        if tuple(images.shape[1:]) != (3, s, s):
            raise ValueError(
                f"images: expected shape (B, 3, {s}, {s}) (RGB at the model's "
                f"image_size), got {tuple(images.shape)}"
            )
        features = self.cnn(images).flatten(2).transpose(1, 2)  # (B, L, C)
        coords = self.coords.to(features.dtype).expand(features.shape[0], -1, -1)  # (B, L, 2)
        return torch.cat([features, coords], dim=-1)  # (B, L, D)
