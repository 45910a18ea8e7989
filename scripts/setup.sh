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
if [ -x scripts/install-system-deps.sh ] || [ -f scripts/install-system-deps.sh ]; then
  bash scripts/install-system-deps.sh
fi
