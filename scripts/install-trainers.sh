#!/usr/bin/env bash
# The trainers' libraries that the doors' tests drive (tests/test_door_*.py), into .venv-trl/
# (not .venv): TRL, accelerate and openenv-core, pinned in scripts/trainers.txt with what they
# need beyond the project's dependencies, installed without resolving (the rest is the
# project's own, at uv.lock's versions, plus torch from .venv-torch/: see
# scripts/install-torch-cpu.sh). The tests add the directory to the end of their sys.path, so
# the env processes the suite starts import none of it. Users install them with the extras:
# pip install 'hermes-envgen[trl]', 'hermes-envgen[openenv]'.
# Without them: a notice, and those tests skip (CI sets HERMES_ENVGEN_REQUIRE_TORCH=1 to fail).
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGES="$(grep -v '^#' scripts/trainers.txt | tr '\n' ' ')"
TARGET=.venv-trl
if [ "$(cat "$TARGET/.complete" 2>/dev/null)" = "$PACKAGES" ]; then
    exit 0
fi
# Installed beside the target and moved into place whole: an interrupted install leaves only
# the partial directory, which the next run starts again from scratch.
partial="$TARGET.partial"
rm -rf "$partial"
log=$(mktemp)
trap 'rm -f "$log"; rm -rf "$partial"' EXIT
uv=.venv/bin/uv
command -v "$uv" >/dev/null 2>&1 || uv=uv
# shellcheck disable=SC2086  # PACKAGES is a list of requirements
if { command -v "$uv" >/dev/null 2>&1 &&
    "$uv" pip install --quiet --python .venv/bin/python --target "$partial" --no-deps \
        $PACKAGES >"$log" 2>&1; } ||
    { rm -rf "$partial" && python3 -m pip --python .venv/bin/python install --quiet \
        --only-binary=:all: --no-deps --target "$partial" $PACKAGES >"$log" 2>&1; }; then
    echo "$PACKAGES" >"$partial/.complete"
    rm -rf "$TARGET"
    mv "$partial" "$TARGET"
    echo "trainers: installed $PACKAGES into $TARGET/"
else
    echo "notice: could not install $PACKAGES; the doors' trainer tests will skip" >&2
    tail -n 3 "$log" >&2
fi
