#!/usr/bin/env bash
# The pinned set of everything set-up installs: uv.lock, resolved from pyproject.toml, and two
# files exported from it: requirements-lock.txt (the same pins with hashes, for the pip
# fallback of scripts/setup.sh) and template/constraints.txt (what a generated project installs
# hermes-envgen's dependencies and its test tools at: the versions this release was tested with).
#
#   bash scripts/lock.sh            re-resolve after editing pyproject.toml's dependencies
#   bash scripts/lock.sh --upgrade  move every pin to the newest release the ranges allow
#   bash scripts/lock.sh --check    exit 1 with one line when any of the three is out of date
#
# UV names the uv to run (scripts/setup.sh passes the one it found or installed).
set -euo pipefail
cd "$(dirname "$0")/.."
# Else uv on PATH, else the one set-up put in the venv (uv is a dev dependency).
UV="${UV:-$(command -v uv || echo .venv/bin/uv)}"
if ! [ -x "$UV" ] && ! command -v "$UV" >/dev/null; then
    echo "error: no uv found (not on PATH, no .venv/bin/uv): run \`bash scripts/setup.sh\` first, or set UV" >&2
    exit 1
fi

# Both exports come from uv.lock alone (--frozen), so that they can be compared offline.
export_requirements() {
    echo "# Exported from uv.lock by scripts/lock.sh: do not edit. The pip fallback of scripts/setup.sh"
    echo "# installs it with --require-hashes."
    "$UV" export --quiet --frozen --no-header --no-emit-project --extra dev --group test-model
}
export_constraints() {
    echo "# The versions hermes-envgen's dependencies and the test tools were tested at (exported from"
    echo "# hermes-envgen's uv.lock). pip/uv install -c constraints.txt keeps a new install at them;"
    echo "# \`hermes-envgen update\` brings the next release's."
    "$UV" export --quiet --frozen --no-header --no-emit-project --no-hashes --no-annotate --extra dev
}

case "${1:-}" in
--check)
    if ! "$UV" lock --check --quiet >/dev/null 2>&1; then
        echo "error: uv.lock is out of date with pyproject.toml: run \`bash scripts/lock.sh\` and commit uv.lock" >&2
        exit 1
    fi
    for pair in "requirements-lock.txt export_requirements" "template/constraints.txt export_constraints"; do
        set -- $pair
        if [ ! -f "$1" ] || [ "$($2)" != "$(cat "$1")" ]; then
            echo "error: $1 is out of date with uv.lock: run \`bash scripts/lock.sh\` and commit it" >&2
            exit 1
        fi
    done
    ;;
"" | --upgrade)
    "$UV" lock ${1:+"$1"}
    export_requirements >requirements-lock.txt
    export_constraints >template/constraints.txt
    ;;
*)
    echo "usage: bash scripts/lock.sh [--check | --upgrade]" >&2
    exit 2
    ;;
esac
