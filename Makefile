# `make demo` and `make test` work on a fresh machine: they create .venv, install the CPU build of
# torch 2.13.0 first (a plain `torch` requirement would pull a multi-GB CUDA build), then attnkit.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test bench clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	@# the built-in speech data runs the espeak-ng CLI; installing it needs apt-get and root
	command -v espeak-ng >/dev/null || { command -v apt-get >/dev/null && \
		(apt-get update -qq && apt-get install -y -qq espeak-ng) ; } || \
		echo "warning: espeak-ng not installed (apt-get install espeak-ng); speech tests skip"
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/attnkit demo --out demo-out

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(VENV)/bin/attnkit bench

clean:
	rm -rf $(VENV) demo-out .pytest_cache .hypothesis
