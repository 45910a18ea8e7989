#!/usr/bin/env bash
# torch, a CPU build, into .venv-torch/ (not .venv): for the tests and the benchmark that run
# atroposlib's example GRPO trainer (tests/testing/test_grpo.py, benchmarks/bench_learnability.py),
# which add it to the end of their sys.path. Nothing else needs it, and kept out of .venv every
# env process the suite starts is the cheaper for it: transformers imports torch whenever it is
# installed (1.5 CPU-s of the 4.4 that importing atroposlib's BaseEnv takes). Out of .venv it
# also survives setup's `uv sync`, which removes what the lock does not list.
# pip takes it from where its configuration points (a wheel directory or a CPU index, as on CI
# machines); PyPI itself has only CUDA builds of several GB, which this never fetches.
# Without one: a notice, and those tests skip (CI sets HERMES_ENVGEN_REQUIRE_TORCH=1 to fail).
# Elsewhere: .venv/bin/python -m pip install --target .venv-torch torch \
#     --index-url https://download.pytorch.org/whl/cpu && echo "$TORCH" > .venv-torch/.complete
set -euo pipefail
cd "$(dirname "$0")/.."
TORCH="torch==2.13.0+cpu"
TARGET=.venv-torch
if [ "$(cat "$TARGET/.complete" 2>/dev/null)" = "$TORCH" ]; then
    exit 0
fi
# Installed beside the target and moved into place whole: an interrupted install leaves only
# the partial directory, which the next run starts again from scratch.
partial="$TARGET.partial"
rm -rf "$partial"
log=$(mktemp)
trap 'rm -f "$log"; rm -rf "$partial"' EXIT
# uv, from the wheel directory pip is configured with (seconds), else the interpreter's own pip
# (a minute; a venv made by uv has no pip of its own).
links=$(python3 -m pip config get global.find-links 2>/dev/null || true)
uv=.venv/bin/uv
command -v "$uv" >/dev/null 2>&1 || uv=uv
if { [ -n "$links" ] && command -v "$uv" >/dev/null 2>&1 &&
    "$uv" pip install --quiet --python .venv/bin/python --target "$partial" \
        --find-links "$links" "$TORCH" >"$log" 2>&1; } ||
    { rm -rf "$partial" && python3 -m pip --python .venv/bin/python install --quiet \
        --only-binary=:all: --target "$partial" "$TORCH" >"$log" 2>&1; }; then
    echo "$TORCH" >"$partial/.complete"
    rm -rf "$TARGET"
    mv "$partial" "$TARGET"
    echo "torch: installed $TORCH into $TARGET/"
else
    echo "notice: no CPU build of torch ($TORCH) to be had here; the GRPO trainer tests will skip" >&2
    tail -n 3 "$log" >&2
fi
