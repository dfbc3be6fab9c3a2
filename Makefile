# `make demo` and `make test` work on a fresh machine: they create .venv, install the CPU build of
# torch 2.13.0 first (a plain `torch` requirement would pull a multi-GB CUDA build), then attnkit
# with its test tools and the export extra (onnx, onnxruntime: neither asks for torch).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install demo test bench models clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev,export]'
	@# system packages for the built-in data: espeak-ng (speech), more fonts (text lines);
	@# headless Chromium and its driver for the explorer page's browser tests
	@missing=""; command -v espeak-ng >/dev/null || missing="espeak-ng"; \
	[ -d /usr/share/fonts/truetype/liberation ] || missing="$$missing fonts-liberation"; \
	[ -d /usr/share/fonts/truetype/freefont ] || missing="$$missing fonts-freefont-ttf"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null || missing="$$missing chromium-driver"; \
	if [ -n "$$missing" ]; then \
	  if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && apt-get install -y -qq $$missing) || \
	      echo "warning: apt-get install $$missing failed"; \
	  else echo "warning: not installed: $$missing (apt-get install $$missing)"; fi; \
	fi
	touch $(STAMP)

install: $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/attnkit demo --out demo-out

test: $(STAMP)
	$(PY) -m pytest

bench: $(STAMP)
	$(VENV)/bin/attnkit bench

# The built-in models (docs/models.md), each trained from its recipe in build/models/NAME and
# exported for inference into the package. Hours on a 2-core CPU; not part of demo or test.
MODELS := translate:translate-dates ocr:ocr-lines asr:asr-digits
models: $(STAMP)
	@set -e; for pair in $(MODELS); do task=$${pair%%:*}; name=$${pair#*:}; \
	  $(VENV)/bin/attnkit train $$task --recipe $$name --out build/models/$$name --no-progress; \
	  $(VENV)/bin/attnkit export --format checkpoint --checkpoint build/models/$$name/checkpoint \
	    --out src/attnkit/pretrained/$$name; \
	done

clean:
	rm -rf $(VENV) demo-out build .pytest_cache .hypothesis
