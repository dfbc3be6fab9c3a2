"""Data: vocabularies, the built-in task generators (text pairs, text-line images) and readers
for the user's own files."""

from attnkit.data.lines import (
    ALPHABET,
    available_fonts,
    generate_lines,
    load_line_image,
    pad_images,
    read_line_folder,
    render_line,
    write_line_folder,
)
from attnkit.data.subword import SubwordVocab
from attnkit.data.text_tasks import DATE_LOCALES, NUMBER_LANGUAGES, generate_pairs
from attnkit.data.tsv import DataError, read_tsv
from attnkit.data.vocab import CharVocab, build_vocab, load_vocab, pad_batch

__all__ = [
    "ALPHABET",
    "DATE_LOCALES",
    "NUMBER_LANGUAGES",
    "CharVocab",
    "DataError",
    "SubwordVocab",
    "available_fonts",
    "build_vocab",
    "generate_lines",
    "generate_pairs",
    "load_line_image",
    "load_vocab",
    "pad_batch",
    "pad_images",
    "read_line_folder",
    "read_tsv",
    "render_line",
    "write_line_folder",
]
