"""What a test needs from the machine beyond the Python environment, as pytest marks that skip
with the reason (and how to install it) where it is missing: the speech engines and voices and
the fonts that ``make test`` installs (the Makefile's ``system`` target and the venv).

A test that reads the machine's fonts or voices states its need with one of these marks, and
asserts only what holds with exactly what ``make test`` installs: a machine where an install
failed skips it, and one with more fonts gives it the same ones (:func:`default_fonts`).

    @needs_voice("festival", "kal_diphone")
    def test_festival_speaks(): ...

    @needs_fonts
    def test_reads_lines(): ... generate_lines(..., fonts=default_fonts("test")) ...
"""

from __future__ import annotations

import importlib.util
import shutil
from pathlib import Path

import pytest

from attnkit.data.worlds import lines, synthesis

__all__ = ["DEFAULT_FAMILIES", "default_fonts", "missing_voices", "needs_fonts", "needs_voice"]

# The font families make test installs (make system: fonts-liberation, fonts-freefont-ttf),
# beside Debian's default fonts-dejavu and matplotlib's own DejaVu. The Makefile's
# FONT_PACKAGES (make fonts) are not among them.
DEFAULT_FAMILIES = {
    "dejavu": "fonts-dejavu",
    "liberation": "fonts-liberation",
    "freefont": "fonts-freefont-ttf",
}
FESTIVAL_VOICES = Path("/usr/share/festival/voices")


def _installed_families() -> set[str]:
    return {lines.font_family(p) for p in lines._font_files() if lines.FONT_ROOT in p.parents}


def _missing_font_packages() -> list[str]:
    found = _installed_families()
    return [package for family, package in DEFAULT_FAMILIES.items() if family not in found]


def default_fonts(split: str = "train", fonts: str | None = None) -> list[Path]:
    """The fonts of ``split`` (``fonts``: its ``"families"`` or ``"faces"``) among those
    ``make test`` installs (:data:`DEFAULT_FAMILIES`), whatever else the machine has: for
    ``generate_lines(fonts=...)`` in tests whose figures depend on the fonts drawn."""
    chosen = lines._split_fonts(split, fonts)
    return [p for p in chosen if lines.font_family(p) in DEFAULT_FAMILIES]


needs_fonts = pytest.mark.skipif(
    bool(_missing_font_packages()),
    reason=f"the fonts make test installs are missing: apt-get install "
    f"{' '.join(_missing_font_packages())} (make system)",
)


def _gnuspeech_missing() -> str:
    try:
        synthesis.gnuspeech_folder()
    except RuntimeError as exc:
        return str(exc)
    return ""


def missing_voices(engine: str, *voices: str) -> str:
    """Why ``engine`` (one of :data:`attnkit.data.worlds.synthesis.ENGINES`) cannot speak with
    ``voices`` on this machine, with how to install it; ``""`` when it can. For festival and
    its accented voices, ``voices`` are the folder names of
    ``/usr/share/festival/voices/*/``."""
    if engine == "espeak-ng":
        return (
            ""
            if shutil.which("espeak-ng")
            else "espeak-ng not installed (apt-get install espeak-ng; make system)"
        )
    if engine in ("festival", "accented"):
        if shutil.which("festival") is None:
            return "festival not installed (apt-get install festival; make system)"
        packages = {
            **synthesis.FESTIVAL_VOICES,
            **{v: a.package for v, a in synthesis.FESTIVAL_ACCENTS.items()},
        }
        lacking = [v for v in voices if not any(FESTIVAL_VOICES.glob(f"*/{v}"))]
        return (
            (
                f"festival voices not installed: {', '.join(lacking)} (apt-get install "
                f"{' '.join(packages.get(v, v) for v in lacking)}; make system)"
            )
            if lacking
            else ""
        )
    if engine == "gnuspeech":
        return _gnuspeech_missing()
    if engine == "pico":
        return (
            ""
            if importlib.util.find_spec("py_nanotts")
            else (
                f"{synthesis.PICO_PACKAGE} not installed "
                "(pip install 'attnkit[speech]'; make install)"
            )
        )
    raise ValueError(f"engine: expected one of {', '.join(synthesis.ENGINES)}, got {engine!r}")


def needs_voice(engine: str, *voices: str) -> pytest.MarkDecorator:
    """Skip unless ``engine`` can speak with ``voices`` here (:func:`missing_voices`)."""
    why = missing_voices(engine, *voices)
    return pytest.mark.skipif(bool(why), reason=why)
