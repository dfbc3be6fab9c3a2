"""Data: vocabularies, the built-in task generators and readers for the user's own files."""

from attnkit.data.subword import SubwordVocab
from attnkit.data.text_tasks import DATE_LOCALES, NUMBER_LANGUAGES, generate_pairs
from attnkit.data.tsv import DataError, read_tsv
from attnkit.data.vocab import CharVocab, build_vocab, load_vocab, pad_batch

__all__ = [
    "DATE_LOCALES",
    "NUMBER_LANGUAGES",
    "CharVocab",
    "DataError",
    "SubwordVocab",
    "build_vocab",
    "generate_pairs",
    "load_vocab",
    "pad_batch",
    "read_tsv",
]
