"""The built-in models: each loads by name and reaches its figure on a fresh sample of the test
split (fonts, voices and pairs never used in training or validation); each ships a model card
that names every source of its data with its licence and the weights its figures are of; the
recipes that made them; ``attnkit export --format checkpoint``; bad names."""

import dataclasses
import hashlib
import re
from pathlib import Path

import pytest
import torch

from attnkit.cli import recipes
from attnkit.cli.main import build_parser, main
from attnkit.data import (
    generate_lines,
    generate_pairs,
    load_vocab,
    synthesize,
    write_wav,
)
from attnkit.data.audio.features import log_mel, normalize_features
from attnkit.data.worlds.festival_accents import ACCENTS
from attnkit.data.worlds.speech import plan_utterances, utterance_audio
from attnkit.data.worlds.synthesis import FESTIVAL_VOICES, GNUSPEECH_PACKAGE, PICO_PACKAGE
from attnkit.data.worlds.text_tasks import DATA_VERSIONS
from attnkit.tasks import asr, ocr, translate
from attnkit.tasks.loading import load_task_model
from attnkit.train import builtin_checkpoints, load_checkpoint
from tests.needs import default_fonts, needs_fonts, needs_voice

SHIPPED = {
    "translate-dates": "translate",
    "ocr-lines": "ocr",
    "asr-digits": "asr",
    "multi30k-en-de": "translate",
}
MiB = 2**20
CARD = "MODEL_CARD.md"
MAKEFILE = Path(__file__).resolve().parents[2] / "Makefile"


def test_every_model_is_shipped_within_its_size_limits():
    shipped = builtin_checkpoints()
    assert set(shipped) == set(SHIPPED)
    sizes = {
        name: sum(f.stat().st_size for f in folder.iterdir()) for name, folder in shipped.items()
    }
    assert all(size <= 15 * MiB for size in sizes.values()), sizes
    assert sum(sizes.values()) <= 40 * MiB, sizes
    for name, folder in shipped.items():
        assert sorted(f.name for f in folder.iterdir()) == [
            CARD,
            "config.json",
            "model.safetensors",
            "vocab.json",
        ], name
        assert load_checkpoint(f"builtin:{name}").config["task"] == SHIPPED[name]


def _section(card: str, title: str) -> str:
    """The text under a card's ``## title``, up to its next section."""
    found = re.search(rf"^## {title}\n(.*?)(?=^## |\Z)", card, flags=re.M | re.S)
    assert found, f"no section {title!r}"
    return found.group(1)


def test_each_card_names_the_weights_its_figures_are_of():
    """A shipped model's weights change only with its card's figures: the card's Figures
    section names the sha256 of the weights it measured, so weights committed without their
    figures measured again (and the card changed) fail here."""
    for name, folder in builtin_checkpoints().items():
        card = (folder / CARD).read_text(encoding="utf-8")
        assert card.startswith(f"# {name} (model card)\n"), name
        sections = re.findall(r"^## (.+)$", card, flags=re.M)
        assert sections == ["Data", "Recipe", "Figures", "Limits"], (name, sections)
        assert len(card.splitlines()) <= 160, name
        digest = hashlib.sha256((folder / "model.safetensors").read_bytes()).hexdigest()
        assert f"`{digest}`" in _section(card, "Figures"), (name, digest)


def _licensed_rows(data: str) -> str:
    """The rows of the tables of a card's Data section that have a ``licence`` column, each
    checked to fill it."""
    rows = []
    for table in re.findall(r"(?:^\|.*\|\n)+", data, flags=re.M):
        header, _, *body = [
            [c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()
        ]
        if "licence" in header:
            at = header.index("licence")
            assert all(row[at] for row in body), header
            rows += [" | ".join(row) for row in body]
    return "\n".join(rows)


def _sources(name: str) -> list[str]:
    """What a model's data was made from, as the code that made it names it: libraries and
    their versions, font packages, speech engines and the packages of their voices."""
    config = load_checkpoint(f"builtin:{name}").config
    if "train" in config["data"]:  # a corpus: each file training and validation read
        files = f"{config['data']['train']} {config['data']['valid']}".split()
        return [Path(f).name for f in files]
    if config["task"] == "translate":
        return [part for item in DATA_VERSIONS.items() for part in item]
    if config["task"] == "ocr":
        makefile = MAKEFILE.read_text()
        fonts = re.search(r"^FONT_PACKAGES = (.*?)\n\n", makefile, flags=re.M | re.S).group(1)
        system = re.findall(r'missing="\$\$missing (fonts-[\w-]+)"', makefile)
        return ["SCOWL", "pydoc_data", "DejaVu", *fonts.replace("\\", " ").split(), *system]
    engines = [f"`{engine}`" for engine in config["data"]["engines"]]
    packages = [*FESTIVAL_VOICES.values(), *(accent.package for accent in ACCENTS.values())]
    return ["num2words", *engines, *packages, *GNUSPEECH_PACKAGE.rsplit("@", 1), PICO_PACKAGE]


@pytest.mark.parametrize("name", list(SHIPPED))
def test_each_card_names_every_source_of_its_data_with_its_licence(name):
    card = (builtin_checkpoints()[name] / CARD).read_text(encoding="utf-8")
    rows = _licensed_rows(_section(card, "Data")).lower()
    sources = _sources(name)
    assert len(sources) >= 4
    missing = [
        s for s in sources if not re.search(rf"(?<![\w-]){re.escape(s.lower())}(?![\w-])", rows)
    ]
    assert missing == []


def test_translate_dates_on_fresh_test_pairs(one_thread):
    model, ck = load_task_model("builtin:translate-dates", "translate")
    pairs = generate_pairs(100, split="test", seed=1)
    outs, _ = translate.translate_texts(
        model,
        load_vocab(ck.vocab["src"]),
        load_vocab(ck.vocab["tgt"]),
        [s for s, _ in pairs],
        max_len_extra=ck.config["max_len_extra"],
    )
    scores = translate.metrics(outs, [t for _, t in pairs])
    assert scores["accuracy"] >= 0.95, scores


# Image descriptions of the kind Multi30k holds, written for this test (not from the corpus),
# and the German words a right translation holds whatever else it chooses
DESCRIPTIONS = {
    "A dog runs through the grass.": ("Hund", "Gras"),
    "Two men are playing soccer on a field.": ("Zwei Männer", "Fußball"),
    "A woman in a red dress is walking down the street.": ("Frau", "roten Kleid", "Straße"),
    "A little girl is eating an apple.": ("Mädchen", "Apfel"),
    "The man is riding a bicycle.": ("Mann", "Fahrrad"),
}


def test_multi30k_en_de_translates_image_descriptions(one_thread):
    model, ck = load_task_model("builtin:multi30k-en-de", "translate")
    outs, _ = translate.translate_texts(
        model,
        load_vocab(ck.vocab["src"]),
        load_vocab(ck.vocab["tgt"]),
        list(DESCRIPTIONS),
        max_len_extra=ck.config["max_len_extra"],
    )
    for out, words in zip(outs, DESCRIPTIONS.values(), strict=True):
        assert all(w in out for w in words), (out, words)
        assert len(out.split()) <= 12, out


@needs_fonts
def test_ocr_lines_on_fresh_lines_in_test_fonts(one_thread):
    """The held-out test faces of the fonts make test installs (1.2% CER here, 1.4% with
    matplotlib's DejaVu alone; a few characters read otherwise by another CPU's float32 stay
    far inside the bound)."""
    model, ck = load_task_model("builtin:ocr-lines", "ocr")
    lines = generate_lines(
        20, split="test", seed=1, min_chars=5, max_chars=80, fonts=default_fonts("test", "faces")
    )
    texts, _, _ = ocr.recognise(model, load_vocab(ck.vocab), [image for image, _ in lines])
    scores = ocr.line_metrics(texts, [text for _, text in lines])
    assert scores["cer"] <= 0.04, scores


@needs_voice("espeak-ng")
def test_asr_digits_on_fresh_utterances_in_test_voices(tmp_path, one_thread):
    """The model card's test voices (m6, m7 and f5 at 160-170 words per minute, espeak-ng's
    default word gap and amplitude): the world the shipped model was tested in."""
    model, ck = load_task_model("builtin:asr-digits", "asr")
    plan = [
        dataclasses.replace(u, gap=0, amplitude=100)
        for u in plan_utterances(120, split="test", seed=1, kinds=("digits", "numbers"))
        if u.voice.partition("+")[2] in ("m6", "m7", "f5")
    ][:20]
    features = [normalize_features(log_mel(utterance_audio(u))) for u in plan]
    texts, _ = asr.transcribe(model, load_vocab(ck.vocab), features)
    scores = asr.metrics(texts, [u.transcript for u in plan])
    assert len(plan) == 20 and scores["cer"] <= 0.04, scores


@needs_voice("espeak-ng")
def test_transcribe_with_its_default_beam_reads_a_long_number_whole(tmp_path, capsys, one_thread):
    text = "one hundred and eighty four thousand and eighty nine"  # a beam ranking by plain
    wav = write_wav(tmp_path / "n.wav", *synthesize(text, voice="en-us+m6", speed=165))
    assert main(["transcribe", "--checkpoint", "builtin:asr-digits", str(wav)]) == 0
    assert capsys.readouterr().out == text + "\n"  # log P stopped after "one"


def test_transcribe_stops_an_output_that_loops_on_noise_and_says_so(
    tmp_path, capsys, caplog, one_thread
):
    """On these 10 s of noise the built-in recogniser loops ("two hundred and thirty two
    thousand eight hundred and eighty three thousand two hundred and eighty three thousand
    ..."): its beam search stops at the loop, well before the cap, and warns."""
    noise = 0.01 * torch.randn(160_000, generator=torch.Generator().manual_seed(2))
    wav = write_wav(tmp_path / "noise.wav", noise, 16000)
    cap = int(1001 * asr.CHARS_PER_FRAME) + 1 + asr.EXTRA_CHARS  # 1,001 frames
    assert main(["transcribe", "--checkpoint", "builtin:asr-digits", str(wav)]) == 0
    text = capsys.readouterr().out.strip()
    assert 0 < len(text) < 2 * cap // 3  # 174 characters, of 311 at most
    assert set(text) <= set("abcdefghijklmnopqrstuvwxyz ")
    assert "1 of 1 outputs stopped after" in caplog.text and "(a loop)" in caplog.text


@needs_fonts
def test_the_cli_reads_with_a_builtin_model(tmp_path, capsys, one_thread):
    """A line in a test font of those make test installs (another machine's held-out
    families, from make fonts, would draw it in another)."""
    ((image, text),) = generate_lines(
        1, split="test", seed=2, min_chars=8, max_chars=8, fonts=default_fonts("test")
    )
    path = tmp_path / "line.png"
    from PIL import Image

    Image.fromarray(image.numpy(), "L").save(path)
    assert main(["read", "--checkpoint", "builtin:ocr-lines", str(path)]) == 0
    assert capsys.readouterr().out.strip() == text


def test_an_unknown_builtin_name_is_a_one_line_error_listing_the_shipped_ones(capsys):
    assert main(["translate", "--checkpoint", "builtin:klingon", "one"]) == 2
    err = capsys.readouterr().err
    assert err == (
        "attnkit: checkpoint: no built-in model 'klingon'; expected one of "
        "builtin:asr-digits, builtin:multi30k-en-de, builtin:ocr-lines, builtin:translate-dates\n"
    )


def test_a_builtin_model_of_another_task_is_refused(tmp_path, capsys):
    write_wav(tmp_path / "x.wav", torch.zeros(8000), 16000)  # read before the checkpoint
    assert (
        main(["transcribe", "--checkpoint", "builtin:translate-dates", str(tmp_path / "x.wav")])
        == 2
    )
    assert "not a checkpoint of task asr (task 'translate')" in capsys.readouterr().err


@pytest.mark.parametrize("name", list(recipes.RECIPES))
def test_a_recipe_is_its_options_and_the_command_line_wins(name):
    task = recipes.RECIPES[name].task
    parser = build_parser()
    argv = ["train", task, "--out", "run", "--recipe", name, "--seed", "7"]
    args = parser.parse_args(recipes.expand(argv, name))
    spelled = parser.parse_args(
        ["train", task, *recipes.RECIPES[name].options, "--out", "run", "--seed", "7"]
    )
    assert vars(args) == {**vars(spelled), "recipe": name}
    won = parser.parse_args(recipes.expand(argv + ["--steps", "3"], name))
    assert won.steps == 3 and spelled.steps != 3


def test_a_recipe_of_another_task_is_refused(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["train", "ocr", "--out", "run", "--recipe", "translate-dates"])
    assert exit_.value.code == 2
    assert "--recipe: invalid choice: 'translate-dates'" in (capsys.readouterr().err)


def test_export_checkpoint_keeps_what_inference_needs_and_decodes_the_same(
    tmp_path, capsys, one_thread
):
    tsv = tmp_path / "pairs.tsv"
    tsv.write_text("".join(f"<en> {n}\tw{n}\n" for n in range(8)), encoding="utf-8")
    run = tmp_path / "run"
    assert (
        main(
            [
                "train",
                "translate",
                "--train",
                str(tsv),
                "--out",
                str(run),
                "--steps",
                "3",
                "--eval-every",
                "3",
                "--batch-size",
                "8",
                "--hidden",
                "16",
                "--emb",
                "8",
                "--no-progress",
                "--plot",
                "0",
            ]
        )
        == 0
    )
    slim = tmp_path / "slim"
    capsys.readouterr()
    assert (
        main(
            [
                "export",
                "--format",
                "checkpoint",
                "--checkpoint",
                str(run / "checkpoint"),
                "--out",
                str(slim),
            ]
        )
        == 0
    )
    assert capsys.readouterr().out.startswith(
        f"wrote {slim} (an inference checkpoint of task translate, "
    )
    assert sorted(f.name for f in slim.iterdir()) == [
        "MODEL_CARD.md",  # a draft (tests/cli/test_export_out.py)
        "config.json",
        "model.safetensors",
        "vocab.json",
    ]
    full, small = load_checkpoint(run / "checkpoint"), load_checkpoint(slim)
    assert small.config == full.config and small.vocab == full.vocab
    assert all(torch.equal(full.model_state[k], v) for k, v in small.model_state.items())
    outputs = []
    for folder in (run / "checkpoint", slim):
        assert main(["translate", "--checkpoint", str(folder), "<en> 3", "<en> 5"]) == 0
        outputs.append(capsys.readouterr().out)
    assert outputs[0] == outputs[1]
