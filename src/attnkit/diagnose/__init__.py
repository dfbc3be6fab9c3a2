"""Seeing and checking attention: the attention doctor, heat-maps and the alignment explorer.

- :mod:`~attnkit.diagnose.checkup`: :func:`doctor` probes any attention module for the classic
  bugs (mask polarity, padding, NaN from masked rows, precision, ...), :func:`assert_healthy`
  is its pytest helper;
- :mod:`~attnkit.diagnose.plots`: :func:`plot_attention`, :func:`plot_alignment` and
  :func:`plot_image_attention`, heat-maps written to image files;
- :mod:`~attnkit.diagnose.explorer`: :func:`write_explorer`, one self-contained HTML page of a
  model's outputs and their attention (its page, style and script are the package data files
  beside it).
"""

from attnkit.diagnose.checkup import CHECKS, Finding, Report, assert_healthy, doctor
from attnkit.diagnose.explorer import Example, Hypothesis, explorer_html, write_explorer
from attnkit.diagnose.plots import plot_alignment, plot_attention, plot_image_attention

__all__ = [
    "CHECKS",
    "Example",
    "Finding",
    "Hypothesis",
    "Report",
    "assert_healthy",
    "doctor",
    "explorer_html",
    "plot_alignment",
    "plot_attention",
    "plot_image_attention",
    "write_explorer",
]
