#!/usr/bin/env bash
# The main job on its embedded default: set up, then generate an env and run it end to end,
# offline (a scripted stub model, no GPU, no API key, no network). Arguments go to the demo.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled
exec .venv/bin/hermes-envgen demo "$@"
