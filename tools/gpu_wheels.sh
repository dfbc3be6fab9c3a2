#!/bin/sh
# What a lent GPU machine needs for `python -m benchmarks.gpu_check` and lacks, made here into
# .gpu/ (ignored by git), which the device call carries (docs/benchmarks.md, "GPU"):
#
# * .gpu/wheels: wheels of attnkit's requirements that the machine's image does not hold (the
#   device README's KINDS.md lists what it holds: torch, numpy, matplotlib, safetensors, tqdm,
#   sacrebleu, sentencepiece, pillow, scipy, tensorboard, onnx, onnxruntime, pytest,
#   hypothesis, pytest-xdist, click, typing-extensions, anyio, h11, httpx), for its Python 3.12
#   on x86-64 Linux; each wheel's own requirements are listed too, since pip there installs with
#   --no-deps. The serve stack is among them: tests/serve/test_serve_export.py serves on CUDA;
# * .gpu/data/speech: the WAV files and manifest of the speech steps (the image has no
#   espeak-ng to synthesise them).
#
#     tools/gpu_wheels.sh          # from anywhere; needs pip's index and espeak-ng here
#
# PYTHON (default .venv/bin/python) runs pip and attnkit here.
set -eu
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-.venv/bin/python}
WHEELS=.gpu/wheels

# The versions this checkout's .venv tests with (num2words and babel: pinned by pyproject.toml).
# jiwer needs rapidfuzz (and click); soundfile needs cffi, which needs pycparser; num2words
# needs docopt; fastapi needs starlette, pydantic (with pydantic-core, annotated-types and
# typing-inspection), annotated-doc and opentelemetry-api; uvicorn needs click and h11.
BINARY="jiwer==4.0.0 rapidfuzz==3.14.6 soundfile==0.14.0 cffi==2.1.1 pycparser==3.12
soxr==1.1.0 num2words==0.5.14 babel==2.18.0 praat-parselmouth==0.4.7
fastapi==0.165.0 starlette==1.10.0 pydantic==2.14.4 pydantic-core==2.50.5 annotated-types==0.8.0
typing-inspection==0.4.5 annotated-doc==0.0.7 opentelemetry-api==1.45.2 uvicorn==0.54.0
python-multipart==0.0.34"
SOURCE_ONLY="docopt==0.6.2"  # published as a source archive only: built into a wheel here

rm -rf "$WHEELS"
mkdir -p "$WHEELS"
# shellcheck disable=SC2086
"$PYTHON" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 \
    --implementation cp --platform manylinux_2_28_x86_64 --platform manylinux_2_27_x86_64 \
    --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
    --platform manylinux1_x86_64 -d "$WHEELS" $BINARY
"$PYTHON" -m pip wheel --quiet --no-deps -w "$WHEELS" $SOURCE_ONLY

rm -rf .gpu/data/speech
"$PYTHON" -m benchmarks.gpu_check --prepare .gpu/data
ls "$WHEELS"
du -sh "$WHEELS" .gpu/data
