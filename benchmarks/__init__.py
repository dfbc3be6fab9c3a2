"""attnkit's benchmarks: one module per experiment, sharing :mod:`benchmarks.harness`.

Run a script as a module from the repository root, e.g. ``python -m benchmarks.dense --help``
(``attnkit bench NAME`` does the same from an editable install). ``make bench`` runs the ones
whose figures the documentation cites (:mod:`benchmarks.suite`; ``make bench QUICK=1``: each
at small sizes, minutes); the cited figures are in ``results/``.
"""
