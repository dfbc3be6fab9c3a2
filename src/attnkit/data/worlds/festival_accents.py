"""English spoken by festival's voices of other languages: recorded speakers of Italian,
Finnish, Czech and Catalan reading English with the accent their own phones give it.

Each English word is looked up in festival's English lexicon (CMU, with its letter-to-sound
rules for words it lacks), and each of its phones replaced by the nearest phone, or two, of
the voice's language (:data:`ACCENTS`); the word then enters the voice's lexicon with its
syllables and stress (``lex.add.entry``), so the voice's own duration and intonation models
say it. Diphthongs become two vowels, sounds the language lacks its speakers' usual stand-ins
("th" a "t", "w" a "v" or "u"), as second-language speakers say them: the words stay what a
listener hears as English, in voices and recordings unlike the English voices'.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from collections.abc import Iterable
from dataclasses import dataclass

__all__ = ["ACCENTS", "Accent", "english_pronunciations", "lexicon_entry"]


@dataclass(frozen=True)
class Accent:
    """How one festival voice says English: its Debian package, each CMU phone's stand-in
    (phones of the voice's set, space-separated; ``""``: dropped) and, for a vowel in a
    stressed syllable, the stand-in ``stressed`` gives where it differs."""

    package: str
    phones: dict[str, str]
    stressed: dict[str, str]


_CONSONANTS = {
    "b": "b",
    "d": "d",
    "f": "f",
    "g": "g",
    "k": "k",
    "l": "l",
    "m": "m",
    "n": "n",
    "p": "p",
    "r": "r",
    "s": "s",
    "t": "t",
    "v": "v",
    "z": "z",
}

# lp_diphone and pc_diphone share the Italian phone set; "1" marks a stressed vowel
_ITALIAN = {
    **_CONSONANTS,
    "aa": "a",
    "ae": "E",
    "ah": "a",
    "ao": "O",
    "aw": "a u",
    "ax": "a",
    "axr": "E r",
    "ay": "a i",
    "eh": "E",
    "er": "E r",
    "ey": "e i",
    "ih": "i",
    "iy": "i",
    "ow": "o u",
    "oy": "O i",
    "uh": "u",
    "uw": "u",
    "ch": "tS",
    "dh": "d",
    "hh": "",
    "jh": "dZ",
    "ng": "ng",
    "sh": "S",
    "th": "t",
    "w": "w",
    "y": "j",
    "zh": "Z",
}
_ITALIAN_STRESSED = {
    "aa": "a1",
    "ae": "E1",
    "ah": "a1",
    "ao": "O1",
    "aw": "a1 u",
    "ax": "a1",
    "axr": "E1 r",
    "ay": "a1 i",
    "eh": "E1",
    "er": "E1 r",
    "ey": "e1 i",
    "ih": "i1",
    "iy": "i1",
    "ow": "o1 u",
    "oy": "O1 i",
    "uh": "u1",
    "uw": "u1",
}
# Finnish: long vowels written "a:", "@" is the front a (as in "cat"); no stress mark
_FINNISH = {
    **_CONSONANTS,
    "z": "s",
    "aa": "a:",
    "ae": "@",
    "ah": "a",
    "ao": "o:",
    "aw": "a u",
    "ax": "e",
    "axr": "e r",
    "ay": "a i",
    "eh": "e",
    "er": "e r",
    "ey": "e i",
    "ih": "i",
    "iy": "i:",
    "ow": "o u",
    "oy": "o i",
    "uh": "u",
    "uw": "u:",
    "ch": "t S",
    "dh": "d",
    "hh": "h",
    "jh": "d j",
    "ng": "N",
    "sh": "S",
    "th": "T",
    "w": "v",
    "y": "j",
    "zh": "S",
}
# Czech: "c~" is the "ch" of "church", "ch" the "ch" of "loch"; no "w" (said "u")
_CZECH = {
    **_CONSONANTS,
    "aa": "a:",
    "ae": "e",
    "ah": "a",
    "ao": "o:",
    "aw": "a u",
    "ax": "e",
    "axr": "e r",
    "ay": "a j",
    "eh": "e",
    "er": "e r",
    "ey": "e j",
    "ih": "i",
    "iy": "i:",
    "ow": "o u",
    "oy": "o j",
    "uh": "u",
    "uw": "u:",
    "ch": "c~",
    "dh": "d",
    "hh": "h",
    "jh": "dz~",
    "ng": "n",
    "sh": "s~",
    "th": "t",
    "w": "u",
    "y": "j",
    "zh": "z~",
}
# Catalan: a schwa of its own ("ax"); "1" marks a stressed vowel; no "h", "v" said "b"
_CATALAN = {
    **_CONSONANTS,
    "v": "b",
    "aa": "a",
    "ae": "E",
    "ah": "a",
    "ao": "O",
    "aw": "a w",
    "ax": "ax",
    "axr": "ax r",
    "ay": "a j",
    "eh": "E",
    "er": "ax r",
    "ey": "e j",
    "ih": "i",
    "iy": "i",
    "ow": "o w",
    "oy": "O j",
    "uh": "u",
    "uw": "u",
    "ch": "t S",
    "dh": "d",
    "hh": "",
    "jh": "d Z",
    "ng": "n",
    "sh": "S",
    "th": "t",
    "w": "w",
    "y": "j",
    "zh": "Z",
}
_CATALAN_STRESSED = {
    "aa": "a1",
    "ae": "E1",
    "ah": "a1",
    "ao": "O1",
    "aw": "a1 w",
    "ax": "a1",
    "axr": "a1 r",
    "ay": "a1 j",
    "eh": "E1",
    "er": "E1 r",
    "ey": "e1 j",
    "ih": "i1",
    "iy": "i1",
    "ow": "o1 w",
    "oy": "O1 j",
    "uh": "u1",
    "uw": "u1",
}
# festival voice -> how it says English
ACCENTS = {
    "lp_diphone": Accent("festvox-italp16k", _ITALIAN, _ITALIAN_STRESSED),
    "pc_diphone": Accent("festvox-itapc16k", _ITALIAN, _ITALIAN_STRESSED),
    "suo_fi_lj_diphone": Accent("festvox-suopuhe-lj", _FINNISH, {}),
    "hy_fi_mv_diphone": Accent("festvox-suopuhe-mv", _FINNISH, {}),
    "czech_dita": Accent("festvox-czech-dita", _CZECH, {}),
    "czech_ph": Accent("festvox-czech-ph", _CZECH, {}),
    "upc_ca_ona_hts": Accent("festvox-ca-ona-hts", _CATALAN, _CATALAN_STRESSED),
}

_ENTRY = re.compile(r'^\("((?:[^"\\]|\\.)*)" nil (\(.*\))\)$')


def english_pronunciations(words: Iterable[str]) -> dict[str, list[tuple[list[str], int]]]:
    """Each word's syllables in festival's English lexicon (CMU), as ``(phones, stress)``
    pairs, looked up by one ``festival --pipe`` process."""
    words = sorted(set(words))
    exe = shutil.which("festival")
    if exe is None:
        raise RuntimeError(
            "festival: command not found (apt-get install festival festvox-kallpc16k)"
        )
    script = "(voice_kal_diphone)" + "".join(f'(print (lex.lookup "{w}" nil))' for w in words)
    proc = subprocess.run([exe, "--pipe"], input=script.encode(), capture_output=True, check=False)
    out = {}
    for line in proc.stdout.decode(errors="replace").splitlines():
        match = _ENTRY.match(line.strip())
        if match:
            syllables = re.findall(r"\(\(([^()]*)\) (\d)\)", match.group(2))
            out[match.group(1)] = [(phones.split(), int(stress)) for phones, stress in syllables]
    missing = [w for w in words if w not in out]
    if proc.returncode != 0 or missing:
        raise RuntimeError(
            f"festival could not look up {', '.join(missing[:5]) or 'words'} "
            f"in its English lexicon (exit code {proc.returncode}): "
            f"{proc.stderr.decode(errors='replace').strip()[-300:]}"
        )
    return out


def lexicon_entry(word: str, syllables: list[tuple[list[str], int]], accent: Accent) -> str:
    """The Scheme ``(lex.add.entry ...)`` that makes ``accent``'s voice say ``word`` with
    the stand-ins of its English ``syllables``."""
    said = []
    for phones, stress in syllables:
        mapped = [(accent.stressed if stress else {}).get(p, accent.phones[p]) for p in phones]
        out = " ".join(m for m in mapped if m)
        if out:
            said.append(f"(({out}) {stress})")
    return f'(lex.add.entry \'("{word}" nil ({" ".join(said)})))'
