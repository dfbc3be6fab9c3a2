# `make demo` and `make test` work on a fresh machine: they install the Debian packages attnkit
# uses (`make system`), create .venv, install the CPU build of torch 2.13.0 first (a plain
# `torch` requirement would pull a multi-GB CUDA build), then attnkit with its extras: dev (test
# tools), export (onnx, onnxruntime: neither asks for torch), docs (MkDocs, for `make docs`
# and the site's test), serve (FastAPI, uvicorn: attnkit serve), hf (datasets: corpora given
# as hf:PATH, and their tests) and speech (py-nanotts: SVOX Pico, --engines pico); then the
# exact versions of num2words and babel that define the built-in translation data
# (attnkit.data.worlds.text_tasks.DATA_VERSIONS; the dependencies only take ranges of them).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: install system node fonts demo test lint docs bench models install-models clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev,export,docs,serve,hf,speech]'
	$(PY) -m pip install --quiet $$($(PY) -c 'from attnkit.data.worlds.text_tasks import \
	  DATA_VERSIONS as v; print(" ".join(f"{k}=={x}" for k, x in v.items()))')
	$(MAKE) --no-print-directory node
	touch $(STAMP)

# GnuSpeech, the third engine of the built-in speech, is an npm package run by Node.js:
# installed into the environment's node_modules, where attnkit looks, at the version
# attnkit.data.worlds.synthesis names.
node:
	@if command -v npm >/dev/null; then \
	  pkg=$$($(PY) -c 'from attnkit.data.worlds.synthesis import GNUSPEECH_PACKAGE as p; print(p)') && \
	  npm install --prefix $(VENV) --save-exact --no-audit --no-fund --silent $$pkg || \
	    echo "warning: npm install of gnuspeech failed"; \
	else echo "warning: npm not found: built-in speech without gnuspeech (apt-get install npm)"; fi

# Debian packages the built-in data and the browser tests use: espeak-ng, festival with
# three English voices and seven of other languages (attnkit.data.worlds.festival_accents) and
# Node.js (speech), more fonts
# (text lines), headless Chromium and its driver (the explorer page, the docs site), and wrk
# (the clients of the serving load test, benchmarks/serve_load.py). Installs
# only what is missing, with apt-get as root; elsewhere it says what to install.
system:
	@missing=""; command -v espeak-ng >/dev/null || missing="espeak-ng"; \
	command -v festival >/dev/null || missing="$$missing festival"; \
	command -v npm >/dev/null || missing="$$missing nodejs npm"; \
	for v in kallpc16k kdlpc16k us-slt-hts italp16k itapc16k suopuhe-lj suopuhe-mv czech-dita \
	  czech-ph ca-ona-hts; do \
	  dpkg -s festvox-$$v >/dev/null 2>&1 || missing="$$missing festvox-$$v"; done; \
	[ -d /usr/share/fonts/truetype/liberation ] || missing="$$missing fonts-liberation"; \
	[ -d /usr/share/fonts/truetype/freefont ] || missing="$$missing fonts-freefont-ttf"; \
	command -v chromium >/dev/null || missing="$$missing chromium"; \
	command -v chromedriver >/dev/null || missing="$$missing chromium-driver"; \
	command -v wrk >/dev/null || missing="$$missing wrk"; \
	if [ -n "$$missing" ]; then \
	  if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && apt-get install -y -qq $$missing) || \
	      echo "warning: apt-get install $$missing failed"; \
	  else echo "warning: not installed: $$missing (apt-get install $$missing)"; fi; \
	fi

# The font families the built-in OCR model trains and is tested on (src/attnkit/data/worlds/lines.py
# holds some families out): serif, sans, mono, condensed, slab, handwriting-like, script.
FONT_PACKAGES = fonts-crosextra-caladea fonts-ebgaramond fonts-linuxlibertine \
	 fonts-sil-charis fonts-adf-baskervald fonts-adf-accanthis fonts-goudybookletter fonts-cardo \
	 fonts-century-catalogue fonts-fanwood fonts-roboto-slab fonts-arapey fonts-cantarell \
	 fonts-lato fonts-open-sans fonts-roboto-unhinted fonts-inter fonts-cabin fonts-karla \
	 fonts-clear-sans fonts-adf-gillius fonts-b612 fonts-go fonts-junction fonts-dosis \
	 fonts-comfortaa fonts-croscore fonts-inconsolata fonts-hack fonts-jetbrains-mono \
	 fonts-anonymous-pro fonts-courier-prime fonts-agave fonts-hermit fonts-league-mono \
	 fonts-comic-neue fonts-humor-sans fonts-dkg-handwriting fonts-breip fonts-dancingscript \
	 fonts-kaushanscript fonts-kristi fonts-femkeklaver fonts-beteckna fonts-league-spartan \
	 fonts-gfs-neohellenic fonts-quicksand fonts-averia-serif-gwf fonts-averia-sans-gwf \
	 fonts-isabella fonts-engadget fonts-jura fonts-gnutypewriter \
	 fonts-vollkorn fonts-junicode fonts-sil-gentiumplus fonts-adf-oldania fonts-adf-romande \
	 fonts-adf-tribun fonts-adf-ikarius fonts-paratype

fonts:
	@missing=""; for p in $(FONT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
	  if command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
	    (apt-get update -qq && apt-get install -y -qq --no-install-recommends $$missing) || \
	      echo "warning: apt-get install$$missing failed"; \
	  else echo "warning: not installed:$$missing"; fi; \
	fi

install: system $(STAMP)

demo: install
	$(VENV)/bin/attnkit demo --out demo-out

# The suite in TEST_WORKERS processes (pytest-xdist; tests/conftest.py gives each its share of
# the cores' torch threads): 4.5 minutes on a 2-core Xeon (2026-11-29), then about 45 s for
# each of two passes of the attention and kernel tests as other x86-64 CPUs run them: attnkit's C++
# kernels built for an x86-64 level (ATTNKIT_NATIVE_ARCH, src/attnkit/ops/native.py) and
# PyTorch's own kernels held to the same instructions (ATEN_CPU_CAPABILITY): x86-64 with
# PyTorch's default kernels (SSE2, no FMA contraction), x86-64-v3 with its AVX2 ones (AVX2,
# FMA); this CPU's own build (-march=native, AVX-512 where it has it) ran first. Each gets an
# Inductor cache of its own: Inductor's cache does not key its code by ATEN_CPU_CAPABILITY, and
# code compiled for AVX-512 read back for AVX2 gives wrong results (seen: scores off by 3.9).
# `ATTNKIT_NATIVE_ARCH=x86-64 ATEN_CPU_CAPABILITY=default make test` runs everything so.
TEST_WORKERS ?= 2
OTHER_CPU_TESTS := tests/attention/test_blocks.py tests/attention/test_step.py \
	tests/attention/test_chunked.py tests/attention/test_reference.py \
	tests/attention/test_self_attention.py tests/attention/test_multihead.py \
	tests/attention/test_properties.py tests/ops
OTHER_CPUS ?= x86-64:default x86-64-v3:avx2

# The checks every commit passes (.pre-commit-config.yaml runs the same): ruff's lint and
# layout, mypy over src/attnkit, and no tracked file over 512 KB but the built-in weights
# (at most 25 MiB each). .ci/run runs them before the tests.
lint: $(STAMP)
	$(VENV)/bin/ruff check src tests benchmarks tools
	$(VENV)/bin/ruff format --check src tests benchmarks tools
	$(VENV)/bin/mypy
	git ls-files -z | grep -zv '^src/attnkit/pretrained/[^/]*/model\.safetensors$$' | \
	  xargs -0 $(VENV)/bin/check-added-large-files --enforce-all --maxkb=512
	git ls-files -z 'src/attnkit/pretrained/*/model.safetensors' | \
	  xargs -0 $(VENV)/bin/check-added-large-files --enforce-all --maxkb=25600

test: install
	$(PY) -m pytest -n $(TEST_WORKERS)
	@set -e; for cpu in $(OTHER_CPUS); do level=$${cpu%%:*}; aten=$${cpu#*:}; \
	  echo "as another CPU: ATTNKIT_NATIVE_ARCH=$$level ATEN_CPU_CAPABILITY=$$aten"; \
	  ATTNKIT_NATIVE_ARCH=$$level ATEN_CPU_CAPABILITY=$$aten \
	    TORCHINDUCTOR_CACHE_DIR=$(CURDIR)/build/inductor-$$aten \
	    $(PY) -m pytest -n $(TEST_WORKERS) $(OTHER_CPU_TESTS); \
	done

# The documentation site (mkdocs.yml), warnings as errors, into build/site.
docs: $(STAMP)
	DISABLE_MKDOCS_2_WARNING=true NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs build --strict --site-dir build/site

# The benchmarks whose figures the docs cite (benchmarks/suite.py), each stopped after its time
# budget; results, logs and a summary go to build/bench/, never to results/ or docs/ (hours).
# QUICK=1, or bench-quick: every script at small sizes, a check that they run (minutes).
.PHONY: bench-quick
bench: $(STAMP)
	$(PY) -m benchmarks.suite --out build/bench $(if $(QUICK),--quick)

bench-quick: $(STAMP)
	$(PY) -m benchmarks.suite --out build/bench --quick

# The built-in models (docs/models.md), each trained from its recipe in build/models/NAME and
# exported for inference into build/pretrained/NAME. Hours on a 2-core CPU; not part of demo or
# test. `make install-models` then copies their files into the package
# (src/attnkit/pretrained/NAME/), beside the model card it keeps: the card's figures must then
# be measured again and the new sha256 written there (tests/cli/test_pretrained.py checks it),
# and the weights are committed with that card only.
MODELS := translate:translate-dates ocr:ocr-lines asr:asr-digits
models: install fonts
	@set -e; for pair in $(MODELS); do task=$${pair%%:*}; name=$${pair#*:}; \
	  $(VENV)/bin/attnkit train $$task --recipe $$name --out build/models/$$name --no-progress; \
	  $(VENV)/bin/attnkit export --format checkpoint --checkpoint build/models/$$name/checkpoint-best \
	    --out build/pretrained/$$name; \
	done

install-models:
	@set -e; for pair in $(MODELS); do name=$${pair#*:}; \
	  [ -f build/pretrained/$$name/config.json ] || { echo "build/pretrained/$$name: not built (make models)"; exit 1; }; \
	  dst=src/attnkit/pretrained/$$name; mkdir -p $$dst; \
	  for f in config.json model.safetensors vocab.json; do cp build/pretrained/$$name/$$f $$dst/; done; \
	  echo "installed $$dst: measure its figures again and update $$dst/MODEL_CARD.md"; \
	done

clean:
	rm -rf $(VENV) demo-out build .pytest_cache .hypothesis
