"""The documentation site's model cards: each shipped model's ``MODEL_CARD.md``, which lives in
the package beside its weights (``src/attnkit/pretrained/NAME/``), written to ``models/NAME.md``
of the site, so that the card has one copy and travels with the weights it describes.

MkDocs runs this file while building the site (the ``gen-files`` plugin in ``mkdocs.yml``);
``python tools/docs_model_cards.py`` lists the pages it would write.
"""

from __future__ import annotations

from pathlib import Path

PRETRAINED = Path(__file__).resolve().parents[1] / "src" / "attnkit" / "pretrained"
CARD = "MODEL_CARD.md"


def cards() -> dict[str, Path]:
    """The site's page of each shipped model's card, ``models/NAME.md``: the card's file."""
    return {f"models/{card.parent.name}.md": card for card in sorted(PRETRAINED.glob(f"*/{CARD}"))}


def _write_pages() -> None:
    import mkdocs_gen_files

    for page, card in cards().items():
        with mkdocs_gen_files.open(page, "w") as f:
            f.write(card.read_text(encoding="utf-8"))


if __name__ == "__main__":
    for page, card in cards().items():
        print(page, card)
else:  # run by mkdocs-gen-files
    _write_pages()
