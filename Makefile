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
