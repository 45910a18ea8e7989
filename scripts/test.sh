#!/usr/bin/env bash
# Set up, then run the whole test suite offline (no GPU, no API key, no network).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled
.venv/bin/ruff check src hooks tests examples benchmarks
.venv/bin/ruff format --check src hooks tests examples benchmarks
exec .venv/bin/python -m pytest "$@"
