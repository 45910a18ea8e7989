#!/usr/bin/env bash
# The main job on its embedded default: set up, then run the example env offline end to end.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python examples/run_example.py "$@"
