#!/usr/bin/env bash
# Set up, then run the whole test suite offline (no GPU, no API key, no network).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled
.venv/bin/ruff check src hooks tests examples benchmarks
.venv/bin/ruff format --check src hooks tests examples benchmarks
# The docker backend's tests need an engine and an image: use the engine that answers, or start
# a private one (root, Debian), stopped when this script exits, whatever the tests did. Without
# one they skip, saying why.
if engine="$(bash scripts/docker-engine.sh up)"; then
    trap 'bash scripts/docker-engine.sh down' EXIT
    trap 'exit 130' INT
    trap 'exit 143' TERM
    eval "$engine"
    if image="$(bash scripts/docker-test-image.sh)"; then
        export HERMES_ENVGEN_TEST_DOCKER_IMAGE="$image"
    fi
else
    echo "warning: no Docker engine; the docker backend's tests will be skipped" >&2
fi
.venv/bin/python -m pytest "$@"
