"""Build the git bundle of the template's releases that the wheel ships.

The bundle is a tiny repository whose tags ``vX.Y.Z`` each hold one release of ``copier.yml`` +
``template/``. ``hermes-envgen new``/``update`` render from the public template URL with git
redirected to this bundle, so copier records a real tag and can three-way merge offline later.

A working tree that is no tagged release never claims a release version: it is tagged with a
checkout label, ``v{version}+g{commit}`` (plus ``.dirty.{tree}`` when its template files differ
from that commit's), a PEP 440 local version that copier reads as ``{version}``. The bundle's
``main`` branch points at the working tree's commit, whatever its tag.

Used by the hatch build hook (which runs with only hatchling and git at hand) and by a source
checkout that has no built bundle: standard library and the ``git`` command only, no copier.
"""

from __future__ import annotations

import hashlib
import os
import re
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


COMMIT_LABEL = re.compile(r"^g([0-9a-f]{12,40})$")  # the local part of a clean checkout label
SHORT_ID = 12  # hex digits of a commit or tree id in a checkout label


@dataclass(frozen=True)
class _Snapshot:
    """One template version to commit: its tag and the tree that holds it."""

    tag: str
    tree: str


def is_template_tag(tag: str) -> bool:
    """Whether ``tag`` is ``v`` + a PEP 440 version, as copier wants (checkout labels too)."""
    if not tag.startswith("v"):
        return False
    try:
        Version(tag[1:])
    except InvalidVersion:
        return False
    return True


def is_release_tag(tag: str) -> bool:
    """Whether ``tag`` names a release (``v0.1.0``, ``v0.2.0rc1``): no local ``+...`` part."""
    return is_template_tag(tag) and Version(tag[1:]).local is None


def labelled_commit(tag: str) -> str | None:
    """The commit a clean checkout label names (``v0.2.0.dev0+g1a2b...``), else None."""
    if not is_template_tag(tag):
        return None
    found = COMMIT_LABEL.match(Version(tag[1:]).local or "")
    return found[1] if found else None


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


def check_full_history(source_root: Path) -> None:
    """Refuse a shallow clone: its bundle would silently lack the releases it did not fetch."""
    if source_git_dir(source_root) is None:
        return
    if run_git("rev-parse", "--is-shallow-repository", cwd=source_root).strip() == "true":
        raise TemplateSourceError(
            f"{source_root} is a shallow clone: a wheel built from it would lack the earlier "
            "template releases; run `git fetch --unshallow --tags` first"
        )


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


def head_commit(source_root: Path) -> str | None:
    """The commit checked out in the source repository, or None outside git (or before one)."""
    if source_git_dir(source_root) is None:
        return None
    try:
        return run_git("rev-parse", "--verify", "-q", "HEAD^{commit}", cwd=source_root).strip()
    except GitError:
        return None


def fingerprint(source_root: Path, version: str, bases: tuple[str, ...] = ()) -> str:
    """A hash of everything a bundle is built from: version, commit, tags, bases, working tree."""
    root = Path(source_root)
    digest = hashlib.sha256(f"version {version}\nhead {head_commit(root)}\n".encode())
    for tag, sha in release_tags(root).items():
        digest.update(f"tag {tag} {sha}\n".encode())
    for base in sorted(bases):
        digest.update(f"base {base}\n".encode())
    for relpath in template_paths(root):
        path = root / relpath
        if path.is_symlink():
            digest.update(f"link {relpath} {os.readlink(path)}\n".encode())
            continue
        executable = os.access(path, os.X_OK)
        digest.update(f"file {relpath} {int(executable)} {path.stat().st_size}\n".encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def _template_tree(source_root: Path, commit: str, git_env: Mapping[str, str]) -> str | None:
    """The tree of ``copier.yml`` + ``template/`` at ``commit``, or None if it lacks either."""
    try:
        entries = run_git("ls-tree", f"{commit}^{{commit}}", "--", *TEMPLATE_FILES, cwd=source_root)
    except GitError:
        return None  # not a commit of this repository
    names = {line.split("\t", 1)[1] for line in entries.splitlines()}
    if names != set(TEMPLATE_FILES):  # e.g. tags from before the template existed
        return None
    return run_git("mktree", env=git_env, stdin=entries, isolated=True).strip()


def checkout_tag(version: str, work_tree: str, head: str | None, head_tree: str | None) -> str:
    """The tag of a working tree that is no tagged release: it names its commit, never a release.

    ``v{version}+g{commit}`` when the template files are the commit's, with ``.dirty.{tree}``
    when they differ from it, ``v{version}+tree.{tree}`` outside git.
    """
    if head is None:
        return f"v{version}+tree.{work_tree[:SHORT_ID]}"
    if work_tree == head_tree:
        return f"v{version}+g{head[:SHORT_ID]}"
    return f"v{version}+g{head[:SHORT_ID]}.dirty.{work_tree[:SHORT_ID]}"


def _snapshots(
    root: Path, version: str, bases: tuple[str, ...], work_tree: str, git_env: Mapping[str, str]
) -> tuple[list[_Snapshot], str]:
    """The versions to commit, oldest first, and the tag the working tree gets among them.

    Release tags, each base (a checkout label whose commit this repository has), and the working
    tree: as ``v{version}`` if that tag holds the same files, else as its checkout label.
    """
    by_tag: dict[str, str] = {}
    for tag in release_tags(root):
        if (tree := _template_tree(root, tag, git_env)) is not None:
            by_tag[tag] = tree
    for base in bases:
        commit = labelled_commit(base)
        if commit and base not in by_tag and (tree := _template_tree(root, commit, git_env)):
            by_tag[base] = tree
    current = f"v{version}"
    if by_tag.get(current) != work_tree:
        head = head_commit(root)
        head_tree = _template_tree(root, head, git_env) if head else None
        current = checkout_tag(version, work_tree, head, head_tree)
        by_tag[current] = work_tree
    snapshots = [_Snapshot(tag, tree) for tag, tree in by_tag.items()]
    return sorted(snapshots, key=lambda snapshot: version_key(snapshot.tag)), current


def build_bundle(
    source_root: Path, version: str, destination: Path, bases: tuple[str, ...] = ()
) -> Path:
    """Write the bundle of the template versions of ``source_root`` to ``destination``.

    One commit per release tag ``vX.Y.Z`` of the source repository (its tree holds only that
    tag's ``copier.yml`` + ``template/``), one per checkout label in ``bases`` whose commit the
    repository has (the version a project to update was made from), and the working tree, tagged
    ``v{version}`` if that release holds the same files, else with its checkout label; ``main``
    points at it. Works without a git repository: then the bundle holds the working tree only.
    """
    root = Path(source_root).resolve()
    if not is_release_tag(f"v{version}"):
        raise TemplateSourceError(
            f"version {version!r} cannot be a template release tag (PEP 440, no local part)"
        )
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
        work_tree = _working_tree(root, Path(tmp) / "index", git_env)
        snapshots, current = _snapshots(root, version, bases, work_tree, git_env)
        parent: str | None = None
        commits: dict[str, str] = {}
        for snapshot in snapshots:
            parents = ["-p", parent] if parent else []
            message = f"hermes-envgen template {snapshot.tag}"
            parent = run_git(
                "commit-tree", snapshot.tree, *parents, "-m", message, env=git_env, isolated=True
            ).strip()
            commits[snapshot.tag] = parent
            run_git("update-ref", f"refs/tags/{snapshot.tag}", parent, env=git_env, isolated=True)
        run_git("update-ref", "refs/heads/main", commits[current], env=git_env, isolated=True)
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


def build_cached_bundle(
    source_root: Path, version: str, cache_dir: Path, bases: tuple[str, ...] = ()
) -> Path:
    """The bundle of a source checkout, built once per distinct content into ``cache_dir``."""
    key = fingerprint(source_root, version, bases)[:20]
    bundle = Path(cache_dir) / f"template-{key}.bundle"
    if not bundle.is_file():
        build_bundle(source_root, version, bundle, bases)
        for stale in Path(cache_dir).glob("template-*.bundle"):
            if stale != bundle:  # earlier states of the working tree
                stale.unlink(missing_ok=True)
    return bundle
