#!/usr/bin/env bash
# Cut release VERSION of hermes-envgen: the package version and the template tag vVERSION.
#
#   bash scripts/release.sh 0.2.0 [--old-at COMMIT]
#
# Every earlier release stays reachable: projects record the template tag they were made from
# and update from it, and the wheel's template bundle holds every v* tag of this repository.
# Between releases pyproject.toml holds a dev version (0.2.0.dev0), and projects made from such
# a checkout record a label naming its commit (v0.2.0.dev0+g<commit>), never a release. When the
# version being replaced is a release that was never tagged, the projects made from it recorded
# that tag: --old-at names the commit they were made from, and it is tagged there (never at
# HEAD, whose template may have moved on). The whole release is first made in a scratch clone,
# where the bundle a wheel of it would ship must hold every release; only then is it made here.
# Never delete or move a v* tag. Push with `git push --follow-tags`; then build the wheel.
set -euo pipefail
cd "$(dirname "$0")/.."

die() {
    echo "error: $*" >&2
    exit 2
}

usage="usage: scripts/release.sh VERSION [--old-at COMMIT], e.g. 0.2.0"
new=${1:-}
old_at=""
case "$#:${2:-}" in
    1:) ;;
    3:--old-at) old_at=$3 ;;
    *) die "$usage" ;;
esac
[[ $new =~ ^[0-9]+\.[0-9]+\.[0-9]+((a|b|rc)[0-9]+)?$ ]] || die "$usage (got '${new}')"
git rev-parse --is-inside-work-tree >/dev/null 2>&1 || die "not a git repository"
[[ $(git rev-parse --is-shallow-repository) == false ]] ||
    die "a shallow clone lacks earlier releases: git fetch --unshallow --tags first"
[[ -z $(git status --porcelain) ]] || die "uncommitted changes: commit or stash them first"
git rev-parse -q --verify "refs/tags/v$new" >/dev/null && die "v$new is already tagged"

old=$(sed -n 's/^version = "\(.*\)"$/\1/p' pyproject.toml)
[[ -n $old ]] || die "no version = \"...\" line in pyproject.toml"
python=${PYTHON:-python3}  # one with `packaging` (the project's venv has it)
# By its absolute path: the bundle check below runs it from the scratch clone.
[[ -z ${PYTHON:-} && -x .venv/bin/python ]] && python=$PWD/.venv/bin/python
"$python" -c 'import sys; from packaging.version import Version as V; sys.exit(V(sys.argv[2]) <= V(sys.argv[1]))' \
    "$old" "$new" || die "$new is not newer than the current version $old"

# The version being replaced: a dev version names no release; a release must be tagged where
# its projects were made.
tag_old=""
if [[ $old =~ \.dev[0-9]*$ ]] || git rev-parse -q --verify "refs/tags/v$old" >/dev/null; then
    [[ -z $old_at ]] || die "--old-at: the current version $old needs no tag"
elif [[ -z $old_at ]]; then
    die "the current version $old was never tagged: projects made from it recorded v$old;" \
        "pass --old-at COMMIT, the commit they were made from (its pyproject.toml says $old)"
else
    old_commit=$(git rev-parse -q --verify "$old_at^{commit}") || die "--old-at: no commit $old_at"
    git show "$old_commit:pyproject.toml" | grep -qx "version = \"$old\"" ||
        die "--old-at: $old_at is not version $old (see its pyproject.toml)"
    tag_old=$old_commit
fi

# release [DIR]: the release's tags and commit, in DIR.
release() {
    if [[ -n $tag_old ]]; then git -C "$1" tag -a "v$old" -m "hermes-envgen $old" "$tag_old"; fi
    sed -i "s/^version = \"$old\"$/version = \"$new\"/" "$1/pyproject.toml"
    git -C "$1" commit --quiet -m "Release $new" -- pyproject.toml
    git -C "$1" tag -a "v$new" -m "hermes-envgen $new"
}

scratch=$(mktemp -d)
trap 'rm -rf "$scratch"' EXIT
git clone --quiet --no-local . "$scratch/repo"
git -C "$scratch/repo" config user.name "release check"
git -C "$scratch/repo" config user.email "release-check@localhost"
release "$scratch/repo"

# The bundle a wheel of the release ships must hold v$new itself (not a checkout label) and
# every tag whose commit has the template, as git lists them.
tags=$(cd "$scratch/repo" && PYTHONPATH=src "$python" - "$new" <<'EOF'
import subprocess
import sys
import tempfile
from pathlib import Path

from hermes_envgen.generate.bundle import build_bundle, bundle_tags, is_release_tag


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], capture_output=True, text=True)


expected = {f"v{sys.argv[1]}"}
for tag in git("tag", "--list", "v*").stdout.split():
    has_template = all(
        git("cat-file", "-e", f"{tag}^{{commit}}:{path}").returncode == 0
        for path in ("copier.yml", "template")
    )
    if has_template and is_release_tag(tag):
        expected.add(tag)
with tempfile.TemporaryDirectory() as tmp:
    built = bundle_tags(build_bundle(Path("."), sys.argv[1], Path(tmp) / "template.bundle"))
if set(built) != expected:
    missing, extra = sorted(expected - set(built)), sorted(set(built) - expected)
    sys.exit(f"error: the template bundle would lack {missing} and have {extra}; nothing done")
print(" ".join(built))
EOF
) || exit 1

release .
if [[ -n $tag_old ]]; then echo "tagged v$old at $tag_old (projects made from it can update)"; fi
echo "released v$new; the template bundle holds: $tags"
echo "next: git push --follow-tags; python -m build; reinstall (pip install -e .) to render v$new"
