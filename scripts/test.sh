#!/usr/bin/env bash
# Set up, then run the whole test suite offline (no GPU, no API key, no network).
set -euo pipefail
cd "$(dirname "$0")/.."
# llama.cpp's server for the end-to-end test of a real third-party server: built from source
# on the first run only (cached under ~/.cache/hermes-envgen/llama-cpp/) and started now, beside
# setup and the suite; its test waits for it and runs last. Its own process group, so that
# everything it started (a build, the server) is stopped when the tests end.
llama_state=$(mktemp -d)
setsid bash scripts/llama-server.sh start "$llama_state" >"$llama_state/start.log" 2>&1 &
llama_group=$!
trap 'kill -- -"$llama_group" 2>/dev/null || true; rm -rf "$llama_state"' EXIT
export HERMES_ENVGEN_LLAMA_STATE="$llama_state"
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled
.venv/bin/ruff check src hooks tests examples benchmarks
.venv/bin/ruff format --check src hooks tests examples benchmarks
.venv/bin/python -m pytest "$@"
