"""Build the git bundle of the template's releases that the wheel ships.

The bundle is a tiny repository whose tags ``vX.Y.Z`` each hold one release of ``copier.yml`` +
``template/``. ``hermes-envgen new``/``update`` render from the public template URL with git
redirected to this bundle, so copier records a real tag and can three-way merge offline later.

Used by the hatch build hook (which runs with only hatchling and git at hand) and by a source
checkout that has no built bundle: standard library and the ``git`` command only, no copier.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

# packaging comes with hatchling (the build hook) and with copier (run time).
from packaging.version import InvalidVersion, Version

from hermes_envgen.errors import GitError, TemplateSourceError
from hermes_envgen.generate.git import run_git

TEMPLATE_FILES = ("copier.yml", "template")

# Caches and byte code that may sit in a working tree but never belong to a release.
JUNK_DIRS = frozenset({"__pycache__", ".pytest_cache", ".ruff_cache", ".mypy_cache", ".git"})
JUNK_SUFFIXES = (".pyc", ".pyo")
JUNK_NAMES = frozenset({".DS_Store"})

# Fixed commit metadata: the same template content always gives the same commit ids.
_IDENTITY = {
    "GIT_AUTHOR_NAME": "hermes-envgen",
    "GIT_AUTHOR_EMAIL": "hermes-envgen@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "hermes-envgen",
    "GIT_COMMITTER_EMAIL": "hermes-envgen@localhost",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}


@dataclass(frozen=True)
class _Snapshot:
    """One release to commit: its tag and either a tree in the source repo or the working tree."""

    tag: str
    source_tree_entries: str | None  # ``git ls-tree`` lines of a release tag, or None = work tree


def is_release_tag(tag: str) -> bool:
    """Whether ``tag`` is ``v`` + a PEP 440 version (``v0.1.0``, ``v0.2.0rc1``), as copier wants."""
    if not tag.startswith("v"):
        return False
    try:
        Version(tag[1:])
    except InvalidVersion:
        return False
    return True


def version_key(tag: str) -> Version:
    """Sort key of a release tag: its PEP 440 version."""
    return Version(tag.removeprefix("v"))


def template_paths(source_root: Path) -> list[str]:
    """The files of ``copier.yml`` + ``template/`` in a working tree, relative, sorted, no junk."""
    root = Path(source_root)
    if not (root / "copier.yml").is_file() or not (root / "template").is_dir():
        raise TemplateSourceError(f"no copier.yml and template/ in {root}")
    paths = ["copier.yml"]
    for directory, dirnames, filenames in os.walk(root / "template"):
        dirnames[:] = sorted(name for name in dirnames if name not in JUNK_DIRS)
        for name in filenames:
            if name in JUNK_NAMES or name.endswith(JUNK_SUFFIXES):
                continue
            paths.append(Path(directory, name).relative_to(root).as_posix())
    return sorted(paths)


def source_git_dir(source_root: Path) -> Path | None:
    """The git directory (shared objects) of the repository ``source_root`` is the top of."""
    try:
        top, common = run_git(
            "rev-parse", "--show-toplevel", "--git-common-dir", cwd=source_root
        ).splitlines()
    except GitError:
        return None
    if Path(top).resolve() != Path(source_root).resolve():
        return None  # a folder inside some other repository: its tags are not ours
    return (Path(source_root) / common).resolve()


def release_tags(source_root: Path) -> dict[str, str]:
    """The release tags ``vX.Y.Z`` of the source repository and the commits they point at."""
    if source_git_dir(source_root) is None:
        return {}
    listing = run_git(
        "tag",
        "--list",
        "v*",
        "--format=%(refname:strip=2) %(objectname)",
        cwd=source_root,
    )
    tags = {}
    for line in listing.splitlines():
        name, _, sha = line.partition(" ")
        if is_release_tag(name):
            tags[name] = sha
    return dict(sorted(tags.items(), key=lambda item: version_key(item[0])))


def fingerprint(source_root: Path, version: str) -> str:
    """A hash of everything a bundle is built from: version, release tags and the working tree."""
    root = Path(source_root)
    digest = hashlib.sha256(f"version {version}\n".encode())
    for tag, sha in release_tags(root).items():
        digest.update(f"tag {tag} {sha}\n".encode())
    for relpath in template_paths(root):
        path = root / relpath
        if path.is_symlink():
            digest.update(f"link {relpath} {os.readlink(path)}\n".encode())
            continue
        executable = os.access(path, os.X_OK)
        digest.update(f"file {relpath} {int(executable)} {path.stat().st_size}\n".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _snapshots(source_root: Path, version: str) -> list[_Snapshot]:
    """The releases to commit, oldest first: release tags, plus the working tree as v{version}."""
    current = f"v{version}"
    snapshots = []
    for tag in release_tags(source_root):
        entries = run_git("ls-tree", f"{tag}^{{commit}}", "--", *TEMPLATE_FILES, cwd=source_root)
        names = {line.split("\t", 1)[1] for line in entries.splitlines()}
        if names == set(TEMPLATE_FILES):  # tags from before the template existed are skipped
            snapshots.append(_Snapshot(tag, entries))
    if current not in {snapshot.tag for snapshot in snapshots}:
        snapshots.append(_Snapshot(current, None))
    return sorted(snapshots, key=lambda snapshot: version_key(snapshot.tag))


def build_bundle(source_root: Path, version: str, destination: Path) -> Path:
    """Write the bundle of the template releases of ``source_root`` to ``destination``.

    One commit per release tag ``vX.Y.Z`` of the source repository (its tree holds only that
    tag's ``copier.yml`` + ``template/``), plus the working tree tagged ``v{version}`` unless that
    tag exists. Works without a git repository or tags: then the bundle holds ``v{version}`` only.
    """
    root = Path(source_root).resolve()
    if not is_release_tag(f"v{version}"):
        raise TemplateSourceError(f"version {version!r} cannot be a template release tag (PEP 440)")
    destination = Path(destination)
    destination.parent.mkdir(parents=True, exist_ok=True)
    source_git = source_git_dir(root)
    with tempfile.TemporaryDirectory(prefix="hermes-envgen-bundle.") as tmp:
        repo = Path(tmp) / "repo.git"
        run_git("init", "--quiet", "--bare", str(repo), isolated=True)
        if source_git is not None:
            # Borrow the source objects instead of copying them; the bundle packs what it needs.
            alternates = repo / "objects" / "info" / "alternates"
            alternates.write_text(f"{source_git / 'objects'}\n")
        git_env = {"GIT_DIR": str(repo), **_IDENTITY}
        parent: str | None = None
        for snapshot in _snapshots(root, version):
            if snapshot.source_tree_entries is not None:
                tree = run_git(
                    "mktree", env=git_env, stdin=snapshot.source_tree_entries, isolated=True
                ).strip()
            else:
                tree = _working_tree(root, Path(tmp) / "index", git_env)
            parents = ["-p", parent] if parent else []
            message = f"hermes-envgen template {snapshot.tag}"
            parent = run_git(
                "commit-tree", tree, *parents, "-m", message, env=git_env, isolated=True
            ).strip()
            run_git("update-ref", f"refs/tags/{snapshot.tag}", parent, env=git_env, isolated=True)
        assert parent is not None  # v{version} is always among the snapshots
        run_git("update-ref", "refs/heads/main", parent, env=git_env, isolated=True)
        run_git("symbolic-ref", "HEAD", "refs/heads/main", env=git_env, isolated=True)
        partial = destination.with_name(f".{destination.name}.{os.getpid()}.partial")
        refs = ("HEAD", "--branches", "--tags")  # HEAD: a clone of the bundle checks out main
        run_git("bundle", "create", "--quiet", str(partial), *refs, env=git_env, isolated=True)
        os.replace(partial, destination)  # never leave a half-written bundle in place
    return destination


def _working_tree(root: Path, index: Path, git_env: Mapping[str, str]) -> str:
    """Hash ``copier.yml`` + ``template/`` of the working tree into a tree object; its id."""
    env = {**git_env, "GIT_INDEX_FILE": str(index), "GIT_WORK_TREE": str(root)}
    # An explicit list, not ``git add``: the template's own .gitignore must not drop its files.
    paths = "".join(f"{path}\0" for path in template_paths(root))
    run_git("update-index", "--add", "-z", "--stdin", cwd=root, env=env, stdin=paths, isolated=True)
    tree = run_git("write-tree", env=env, isolated=True).strip()
    index.unlink()
    return tree


def bundle_tags(bundle: Path) -> list[str]:
    """The tag names a bundle holds (for checks and tests)."""
    with tempfile.TemporaryDirectory(prefix="hermes-envgen-bundle.") as tmp:
        # ``list-heads`` wants a repository around it in older git versions.
        run_git("init", "--quiet", "--bare", tmp, isolated=True)
        heads = run_git(
            "bundle", "list-heads", str(Path(bundle).resolve()), env={"GIT_DIR": tmp}, isolated=True
        )
    return [
        ref.removeprefix("refs/tags/")
        for _, _, ref in (line.partition(" ") for line in heads.splitlines())
        if ref.startswith("refs/tags/")
    ]


def build_cached_bundle(source_root: Path, version: str, cache_dir: Path) -> Path:
    """The bundle of a source checkout, built once per distinct content into ``cache_dir``."""
    key = fingerprint(source_root, version)[:20]
    bundle = Path(cache_dir) / f"template-{key}.bundle"
    if not bundle.is_file():
        build_bundle(source_root, version, bundle)
        for stale in Path(cache_dir).glob("template-*.bundle"):
            if stale != bundle:  # earlier states of the working tree
                stale.unlink(missing_ok=True)
    return bundle
