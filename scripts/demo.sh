#!/usr/bin/env bash
# The main job on its embedded default: set up, then generate an env and run it end to end,
# offline (a scripted stub model, no GPU, no API key, no network). Arguments go to the demo; a
# relative directory is taken from where this script is run, as any command's would be.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
bash "$root/scripts/setup.sh"
export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1 HF_DATASETS_OFFLINE=1 WANDB_MODE=disabled
exec "$root/.venv/bin/hermes-envgen" demo "$@"
