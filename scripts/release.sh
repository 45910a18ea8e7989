#!/usr/bin/env bash
# Cut release VERSION of hermes-envgen: the package version and the template tag vVERSION.
#
#   bash scripts/release.sh 0.2.0
#
# Every earlier release stays reachable: projects record the template tag they were made from
# and update from it, and the wheel's template bundle holds every v* tag of this repository.
# So the version being replaced is tagged first if it never was (projects made from it since
# the last release recorded it), then pyproject.toml gets VERSION, is committed and tagged.
# Never delete or move a v* tag. Push with `git push --follow-tags`; then build the wheel
# (`python -m build`), whose bundle this script checks holds every release.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
    echo "error: $*" >&2
    exit 2
}

new=${1:-}
[[ $new =~ ^[0-9]+\.[0-9]+\.[0-9]+((a|b|rc)[0-9]+)?$ ]] ||
    die "usage: scripts/release.sh VERSION, e.g. 0.2.0 (got '${new}')"
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || die "not a git repository"
[[ -z $(git status --porcelain) ]] || die "uncommitted changes: commit or stash them first"
git rev-parse -q --verify "refs/tags/v$new" >/dev/null && die "v$new is already tagged"

old=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)
[[ -n $old ]] || die "no version = \"...\" line in pyproject.toml"
python=${PYTHON:-python3}  # one with `packaging` (the project's venv has it)
[[ -z ${PYTHON:-} && -x .venv/bin/python ]] && python=.venv/bin/python
"$python" -c 'import sys; from packaging.version import Version as V; sys.exit(V(sys.argv[2]) <= V(sys.argv[1]))' \
    "$old" "$new" || die "$new is not newer than the current version $old"

if ! git rev-parse -q --verify "refs/tags/v$old" >/dev/null; then
    git tag -a "v$old" -m "hermes-envgen $old" HEAD
    echo "tagged v$old (never tagged before: projects made from it can update)"
fi
sed -i "s/^version = \"$old\"$/version = \"$new\"/" pyproject.toml
git commit --quiet -m "Release $new" -- pyproject.toml
git tag -a "v$new" -m "hermes-envgen $new"

# The bundle a wheel of this commit ships: it must hold every release tag.
tags=$(PYTHONPATH=src "$python" - "$new" <<'EOF'
import sys
import tempfile
from pathlib import Path

from hermes_envgen.generate.bundle import build_bundle, bundle_tags, release_tags

with tempfile.TemporaryDirectory() as tmp:
    built = bundle_tags(build_bundle(Path("."), sys.argv[1], Path(tmp) / "template.bundle"))
missing = sorted(set(release_tags(Path("."))) - set(built))
if missing:
    sys.exit(f"error: the template bundle lacks {', '.join(missing)}")
print(" ".join(built))
EOF
)
echo "released v$new; the template bundle holds: $tags"
echo "next: git push --follow-tags; python -m build; reinstall (pip install -e .) to render v$new"
