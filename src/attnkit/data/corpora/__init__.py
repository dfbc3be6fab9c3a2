"""Corpus readers: the user's own data in every format attnkit reads, and the containers they
fill.

* text, TSV and paths: :mod:`~attnkit.data.corpora.text_files`, :mod:`~attnkit.data.corpora.tsv`,
  and :mod:`~attnkit.data.corpora.unusable` (the examples a reader drops, counted);
* attnkit's own layouts: :mod:`~attnkit.data.corpora.image_folders` (captions, questions),
  :mod:`~attnkit.data.corpora.utterances` (a manifest), :mod:`~attnkit.data.corpora.text_pairs`
  (translation pairs kept on disk);
* every format (``--format``): :mod:`~attnkit.data.corpora.format_registry` (what a format is),
  one ``*_formats.py`` module per family, and :mod:`~attnkit.data.corpora.reading`, which
  registers them all, chooses one and reads a path with it (``read_corpus``).

This package's ``__init__`` imports nothing, so none of its modules imports it back. Imports
:mod:`attnkit.data.audio`.
"""
