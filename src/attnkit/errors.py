"""Errors shared by every part of the package."""

from __future__ import annotations

__all__ = ["DataError"]


class DataError(ValueError):
    """Bad input data, with the file and line it came from."""
