#!/usr/bin/env bash
# torch, a CPU build, into .venv: for the tests and the benchmark that run atroposlib's example
# GRPO trainer (tests/test_grpo_trainer.py, benchmarks/bench_learnability.py). Nothing else
# needs it. pip takes it from where its configuration points (a wheel directory or a CPU index,
# as on CI machines); PyPI itself has only CUDA builds of several GB, which this never fetches.
# Without one: a notice, and those tests skip (CI sets HERMES_ENVGEN_REQUIRE_TORCH=1 to fail).
# Elsewhere: .venv/bin/python -m pip install torch --index-url https://download.pytorch.org/whl/cpu
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH="torch==2.13.0+cpu"
if .venv/bin/python -c 'import torch' 2>/dev/null; then
    exit 0
fi
# uv, from the wheel directory pip is configured with (seconds), else the interpreter's own pip
# installing into the venv (a minute; a venv made by uv has no pip of its own).
log=$(mktemp)
trap 'rm -f "$log"' EXIT
links=$(python3 -m pip config get global.find-links 2>/dev/null || true)
if { [ -n "$links" ] && command -v uv >/dev/null 2>&1 &&
    uv pip install --quiet --python .venv/bin/python --find-links "$links" "$TORCH" >"$log" 2>&1; } ||
    python3 -m pip --python .venv/bin/python install --quiet --only-binary=:all: "$TORCH" \
        >"$log" 2>&1; then
    echo "torch: installed $TORCH"
else
    echo "notice: no CPU build of torch ($TORCH) to be had here; the GRPO trainer tests will skip" >&2
    tail -n 3 "$log" >&2
fi
