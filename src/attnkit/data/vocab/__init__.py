"""Vocabularies: characters and words (:mod:`~attnkit.data.vocab.vocabularies`), and
SentencePiece subwords (:mod:`~attnkit.data.vocab.subword`). Imports no other part of
attnkit's data."""
