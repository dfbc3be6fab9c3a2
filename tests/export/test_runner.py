"""attnkit_runner.py (attnkit/export/runner.py) on its own: it imports numpy only, and its
vocabularies encode and decode as attnkit's do. Its decoding is tested through exported
models in test_models.py."""

import ast
from pathlib import Path

import pytest

from attnkit.data import CharVocab, SubwordVocab
from attnkit.export import runner

RUNNER = Path(runner.__file__)
TEXTS = ["<fr> vingt-trois", "<fr> vingt-quatre", "<en> twenty-three", "<en> 12"] * 20


def test_the_runner_imports_nothing_of_attnkit_or_torch():
    imported = set()
    for node in ast.walk(ast.parse(RUNNER.read_text())):
        if isinstance(node, ast.Import):
            imported |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            imported.add(node.module)
    assert imported == {"__future__", "base64", "numpy", "sentencepiece"}


@pytest.mark.parametrize("build", [lambda: CharVocab.build(TEXTS, tags=["<fr>", "<en>"]),
                                   lambda: SubwordVocab.build(TEXTS, size=40,
                                                              tags=["<fr>", "<en>"])])
def test_its_vocabularies_encode_and_decode_as_attnkit_s(build):
    vocab = build()
    mine = runner.Vocab(vocab.to_json())
    for text in ["<fr> vingt-trois", "<en> 12", "<de> zwölf", "vingt"]:
        assert mine.encode(text) == vocab.encode(text)
        ids = [1, *vocab.encode(text), 0, 2, 7]  # bos, the text, pad, eos, after eos
        assert mine.decode(ids) == vocab.decode(ids)
    assert mine.decode([3, 999]) == vocab.decode([3, 999])  # unk, and an id out of range
    with pytest.raises(ValueError, match="vocab: expected type 'char' or 'sentencepiece', "
                                         "got 'word'"):
        runner.Vocab({"type": "word", "symbols": []})
