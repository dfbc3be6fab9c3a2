"""The built-in worlds, generated offline from a seed: translation pairs
(:mod:`~attnkit.data.worlds.text_tasks`), rendered text lines (:mod:`~attnkit.data.worlds.lines`),
scenes with captions and questions (:mod:`~attnkit.data.worlds.scenes`) and synthesised speech
(:mod:`~attnkit.data.worlds.speech`), with the speech engines that speak it
(:mod:`~attnkit.data.worlds.synthesis`, :mod:`~attnkit.data.worlds.festival_accents`,
``pico_runner.py``, ``gnuspeech.mjs``) and the word lists they draw from. Imports
:mod:`attnkit.data.audio` and :mod:`attnkit.data.corpora` (what the worlds are kept in)."""
