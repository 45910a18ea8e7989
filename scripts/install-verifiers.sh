#!/usr/bin/env bash
# verifiers, for the verifiers door's tests (tests/runtime/doors/test_verifiers.py), into .venv-vf/: a
# venv of its own, since verifiers 0.4 pins mcp==2.0.0 and openai<3 while the project needs
# mcp>=2.3 and openai 3. The env stays in the project's .venv, served by
# hermes_envgen.runtime.doors.verifiers; the taskset (src/hermes_envgen_verifiers, put on
# PYTHONPATH by the tests) runs in .venv-vf and reaches it over HTTP. Pinned in
# scripts/verifiers.txt (no torch); the wheels of verifiers' chat harness
# (scripts/verifiers-harness.txt) go to .venv-vf/wheels/ so that the tests prepare it offline.
# Compiled to bytecode at install: verifiers imports some 1,500 modules at every start.
# Without them: a notice, and those tests skip (CI sets HERMES_ENVGEN_REQUIRE_TORCH=1 to fail).
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=.venv-vf
stamp="$(cat scripts/verifiers.txt scripts/verifiers-harness.txt | sha256sum | cut -c1-16)"
if [ "$(cat "$TARGET/.complete" 2>/dev/null)" = "$stamp" ]; then
    exit 0
fi
# Made beside the target and moved into place whole (a relocatable venv): an interrupted
# install leaves only the partial directory, which the next run starts again from scratch.
partial="$TARGET.partial"
rm -rf "$partial"
log=$(mktemp)
trap 'rm -f "$log"; rm -rf "$partial"' EXIT
uv=.venv/bin/uv
command -v "$uv" >/dev/null 2>&1 || uv=uv
if "$uv" venv --quiet --relocatable --python .venv/bin/python "$partial" >"$log" 2>&1 &&
    "$uv" pip sync --quiet --compile-bytecode --python "$partial/bin/python" scripts/verifiers.txt >>"$log" 2>&1 &&
    python3 -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.11 \
        --platform manylinux2014_x86_64 --platform manylinux_2_28_x86_64 \
        --platform manylinux_2_34_x86_64 -d "$partial/wheels" \
        -r scripts/verifiers-harness.txt >>"$log" 2>&1; then
    echo "$stamp" >"$partial/.complete"
    rm -rf "$TARGET"
    mv "$partial" "$TARGET"
    echo "verifiers: installed verifiers 0.4.0 into $TARGET/"
else
    echo "notice: could not install verifiers (scripts/verifiers.txt); the verifiers door's tests will skip" >&2
    grep -v '^WARNING: Location' "$log" | tail -n 3 >&2
fi
