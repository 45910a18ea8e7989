#!/usr/bin/env bash
# The trainers' libraries that the doors' tests drive (tests/test_door_trl.py), into .venv-trl/
# (not .venv): TRL and accelerate, pinned, without their dependencies, which are the project's
# own (transformers, datasets, ... at uv.lock's versions) plus torch from .venv-torch/ (see
# scripts/install-torch-cpu.sh, run first). The tests add both to the end of their sys.path, so
# the env processes the suite starts import neither. Users install them with the extra:
# pip install 'hermes-envgen[trl]'.
# Without them: a notice, and those tests skip (CI sets HERMES_ENVGEN_REQUIRE_TORCH=1 to fail).
set -euo pipefail
cd "$(dirname "$0")/.."
PACKAGES="trl==1.16.0 accelerate==1.16.0 psutil==7.2.2"
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
