"""English said by festival's voices of other languages (attnkit.data.worlds.festival_accents)."""

import subprocess

import pytest
import torch

from attnkit.data.worlds import festival_accents, synthesis
from attnkit.data.worlds.festival_accents import ACCENTS, english_pronunciations, lexicon_entry
from attnkit.data.worlds.speech import plan_utterances, utterances_audio
from tests.needs import needs_voice

# festival's English (CMU) phones, the ones every accent replaces
CMU = {
    "aa",
    "ae",
    "ah",
    "ao",
    "aw",
    "ax",
    "axr",
    "ay",
    "b",
    "ch",
    "d",
    "dh",
    "eh",
    "er",
    "ey",
    "f",
    "g",
    "hh",
    "ih",
    "iy",
    "jh",
    "k",
    "l",
    "m",
    "n",
    "ng",
    "ow",
    "oy",
    "p",
    "r",
    "s",
    "sh",
    "t",
    "th",
    "uh",
    "uw",
    "v",
    "w",
    "y",
    "z",
    "zh",
}
# the Italian voice, and festival's English voices and lexicon beside it (the mixed plan
# below draws kal_diphone and cmu_us_slt_arctic_hts)
needs_italian = needs_voice("festival", "lp_diphone", "kal_diphone", "cmu_us_slt_arctic_hts")


@pytest.mark.parametrize("voice", sorted(ACCENTS))
def test_every_english_phone_has_a_stand_in(voice):
    accent = ACCENTS[voice]
    assert set(accent.phones) == CMU
    assert set(accent.stressed) <= CMU
    assert all(not stressed.startswith(" ") for stressed in accent.stressed.values())


def test_a_word_enters_the_lexicon_with_its_syllables_stress_and_stand_ins():
    italian = ACCENTS["lp_diphone"]
    assert (
        lexicon_entry("four", [(["f", "ao", "r"], 1)], italian)
        == '(lex.add.entry \'("four" nil (((f O1 r) 1))))'
    )
    # "hh" has no Italian stand-in: dropped, and a syllable of it alone with it
    hundred = [(["hh", "ah", "n"], 1), (["d", "r", "ax", "d"], 0)]
    assert (
        lexicon_entry("hundred", hundred, italian)
        == '(lex.add.entry \'("hundred" nil (((a1 n) 1) ((d r a d) 0))))'
    )
    assert (
        lexicon_entry("ha", [(["hh"], 0), (["aa"], 1)], italian)
        == '(lex.add.entry \'("ha" nil (((a1) 1))))'
    )
    # a language without stressed phones keeps the vowel and the syllable's stress mark
    assert (
        lexicon_entry("nine", [(["n", "ay", "n"], 1)], ACCENTS["czech_dita"])
        == '(lex.add.entry \'("nine" nil (((n a j n) 1))))'
    )


@needs_italian
def test_english_pronunciations_come_from_the_english_lexicon():
    said = english_pronunciations(["seventeen", "four", "four", "blorfy"])
    assert said["four"] == [(["f", "ao", "r"], 1)]
    assert said["seventeen"] == [(["s", "eh"], 1), (["v", "ax", "n"], 0), (["t", "iy", "n"], 1)]
    assert said["blorfy"] and all(p in CMU for s in said["blorfy"] for p in s[0])  # by rule


@needs_italian
def test_an_accented_voice_speaks_reproducibly_at_its_speed(tmp_path):
    slow, rate = synthesis.synthesize("four nine", voice="lp_diphone", speed=100, engine="accented")
    fast, _ = synthesis.synthesize("four nine", voice="lp_diphone", speed=200, engine="accented")
    again, _ = synthesis.synthesize("four nine", voice="lp_diphone", speed=200, engine="accented")
    assert rate == 16000 and torch.equal(fast, again) and 1.6 < slow.numel() / fast.numel() < 2.4
    assert fast.abs().max() > 0.05
    # the words as mapped, not as the voice's own Italian rules read their letters
    script = (
        f"(voice_lp_diphone)(Parameter.set 'Duration_Stretch "
        f"{synthesis.FESTIVAL_SPEED / 200:.4f})(utt.save.wave (utt.synth "
        f'(Utterance Text "four nine")) "{tmp_path / "rules.wav"}" \'riff)'
    )
    subprocess.run(["festival", "--pipe"], input=script.encode(), capture_output=True, check=True)
    by_rule, _ = synthesis.parse_wav((tmp_path / "rules.wav").read_bytes(), source="rules")
    assert by_rule.numel() != fast.numel() or not torch.equal(by_rule, fast)


@needs_italian
def test_accented_utterances_are_spoken_alongside_festivals_and_alone_the_same():
    plan = plan_utterances(60, seed=1, engines=("accented", "festival"))
    plan = [u for u in plan if u.voice == "lp_diphone"][:2] + [
        u for u in plan if u.engine == "festival"
    ][:2]
    assert len(plan) == 4
    together = utterances_audio(plan)
    assert all(torch.equal(a, utterances_audio([u])[0]) for a, u in zip(together, plan))


def test_unknown_accented_voice_is_a_clear_error():
    with pytest.raises(ValueError, match="voice: expected a festival voice"):
        synthesis.festival_many([("one", "hindi_NSK_diphone", 170, 50)])
    assert "hindi_NSK_diphone" not in festival_accents.ACCENTS
