"""Where the template comes from: its public URL, the bundle git really reads, its releases.

Projects are rendered from the canonical public template URL pinned to the tag ``v{version}``
of the installed package (or, for a build of an untagged commit, the checkout label that names
it: ``v{version}+g{commit}``, see ``bundle``), with git redirected (``url.<bundle>.insteadOf``)
to a bundle of the template's releases shipped in the wheel. Copier thus records the public URL
and a real tag in ``.copier-answers.yml``: ``update`` is a true three-way merge with no network,
and a plain ``copier update`` works online too.
"""

from __future__ import annotations

import os
import re
import tempfile
from pathlib import Path
from typing import Any

from hermes_envgen.errors import GitError, TemplateSourceError, UsageError
from hermes_envgen.generate import bundle, hooks
from hermes_envgen.generate.git import run_git

DEFAULT_TEMPLATE_URL = "https://github.com/hermes-envgen/hermes-envgen.git"
TEMPLATE_URL_ENV = "HERMES_ENVGEN_TEMPLATE_URL"
# Where git really fetches the template from: a bundle file or a git repository (tests, forks).
TEMPLATE_SOURCE_ENV = "HERMES_ENVGEN_TEMPLATE_SOURCE"
CACHE_DIR_ENV = "HERMES_ENVGEN_CACHE_DIR"
PACKAGE_DIR = Path(__file__).resolve().parent.parent
SHIPPED_BUNDLE = PACKAGE_DIR / "_template" / "template.bundle"


def package_version() -> str:
    """The hermes-envgen version, which is also the template release it renders.

    A source checkout's is its ``pyproject.toml``'s: the installed metadata is as old as the
    last ``pip install -e``.
    """
    root = source_checkout()
    if root is not None and (root / "pyproject.toml").is_file():
        text = (root / "pyproject.toml").read_text(encoding="utf-8")
        if found := re.search(r'^version = "([^"]+)"$', text, re.MULTILINE):
            return found[1]
    from hermes_envgen import __version__

    return __version__


def release_tag(version: str | None = None) -> str:
    """The template tag of a package version: ``v0.1.0`` for 0.1.0."""
    return f"v{version or package_version()}"


def template_url() -> str:
    """The public template URL recorded in projects (``HERMES_ENVGEN_TEMPLATE_URL`` overrides)."""
    return os.environ.get(TEMPLATE_URL_ENV) or DEFAULT_TEMPLATE_URL


def cache_dir() -> Path:
    """Where a source checkout keeps the bundles it builds from its working tree."""
    if override := os.environ.get(CACHE_DIR_ENV):
        return Path(override)
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "hermes-envgen"


def source_checkout() -> Path | None:
    """The repository root when running from a source checkout (editable install), else None."""
    root = PACKAGE_DIR.parents[1]
    if (root / "copier.yml").is_file() and (root / "template").is_dir():
        return root
    return None


def template_source(base: str | None = None) -> Path:
    """The bundle (or repository) git fetches the template from instead of the public URL.

    ``base`` is the version a project to update was made from: a source checkout adds it to
    its bundle when it is a checkout label of one of its commits.
    """
    if override := os.environ.get(TEMPLATE_SOURCE_ENV):
        source = Path(override).expanduser().resolve()
        if not source.exists():
            raise UsageError(f"{TEMPLATE_SOURCE_ENV}={override} does not exist")
        return source
    if SHIPPED_BUNDLE.is_file():
        return SHIPPED_BUNDLE
    root = source_checkout()
    if root is None:
        raise TemplateSourceError(
            f"this hermes-envgen installation has no template bundle ({SHIPPED_BUNDLE}); "
            "reinstall it from a wheel"
        )
    # A source checkout: bundle the working tree, once per distinct content.
    bases = (base,) if base and bundle.labelled_commit(base) else ()
    return bundle.build_cached_bundle(root, package_version(), cache_dir(), bases)


def git_redirect(url: str, source: Path) -> dict[str, str]:
    """Environment variables that make git fetch ``url`` from ``source`` (appended to any set)."""
    from plumbum import local  # copier runs git through plumbum, which snapshots os.environ

    index = int(local.env.get("GIT_CONFIG_COUNT", "0") or 0)
    return {
        "GIT_CONFIG_COUNT": str(index + 1),
        f"GIT_CONFIG_KEY_{index}": f"url.{source}.insteadOf",
        f"GIT_CONFIG_VALUE_{index}": url,
    }


def template_refs(source: Path) -> tuple[list[str], str | None]:
    """The version tags the template source holds, oldest first, and the one at its HEAD."""
    listing = run_git("ls-remote", str(source))
    tags: dict[str, str] = {}
    head = None
    for line in listing.splitlines():
        sha, _, ref = line.partition("\t")
        if ref == "HEAD":
            head = sha
        elif ref.startswith("refs/tags/"):
            tag = ref.removeprefix("refs/tags/")
            commit = tag.endswith("^{}")  # an annotated tag, peeled to its commit
            tag = tag.removesuffix("^{}")
            if bundle.is_template_tag(tag) and (commit or tag not in tags):
                tags[tag] = sha
    at_head = [tag for tag, sha in tags.items() if sha == head]
    ordered = sorted(tags, key=bundle.version_key)
    return ordered, (max(at_head, key=bundle.version_key) if at_head else None)


def template_versions(source: Path) -> list[str]:
    """The version tags ``vX.Y.Z`` (and checkout labels) the template source holds, oldest first."""
    return template_refs(source)[0]


def default_ref(source: Path) -> str:
    """The template version to render when none is asked for.

    ``v{version}`` of this hermes-envgen when the source holds it; else the checkout label of
    the same version at the source's HEAD (a build of an untagged commit); else ``v{version}``,
    which ``check_versions`` then refuses with the reason.
    """
    wanted = release_tag()
    tags, head = template_refs(source)
    if wanted in tags or head is None:
        return wanted
    if bundle.version_key(head).public == package_version():
        return head
    return wanted


def _override_named() -> str:
    """``HERMES_ENVGEN_TEMPLATE_SOURCE=...`` when set, for messages; else ""."""
    value = os.environ.get(TEMPLATE_SOURCE_ENV)
    return f"{TEMPLATE_SOURCE_ENV}={value}" if value else ""


def check_versions(source: Path, *, project: str | None = None, target: str) -> None:
    """Refuse template versions the source does not hold, naming the real reason and fix.

    ``project`` is the version a project was made from, ``target`` the one to render.
    """
    available = template_versions(source)
    known = ", ".join(available) or "none"
    override = _override_named()
    holder = f"{source} ({override})" if override else str(source)
    if project and bundle.is_template_tag(project) and project not in available:
        raise UsageError(_unknown_base(project, holder, known, available, override))
    if bundle.is_template_tag(target) and target not in available:
        newer = available and bundle.version_key(target) > bundle.version_key(available[-1])
        if newer and not override:
            raise UsageError(
                f"template version {target} is newer than the releases {source} holds "
                f"({known}): upgrade hermes-envgen, or pass --vcs-ref with one of those"
            )
        fix = f" or point {TEMPLATE_SOURCE_ENV} at a source that has it" if override else ""
        raise UsageError(
            f"template version {target} is not among the releases {holder} holds ({known}): "
            f"pass --vcs-ref with one of those{fix}"
        )


def _unknown_base(
    project: str, holder: str, known: str, available: list[str], override: str
) -> str:
    """Why a project's template version is missing from the source, and what to do about it."""
    made = f"this project was made from template {project}, which {holder} does not hold ({known})"
    unset = f", with {TEMPLATE_SOURCE_ENV} unset" if override else ""
    if commit := bundle.labelled_commit(project):
        return (
            f"{made}: it is commit {commit} of a hermes-envgen checkout, not a release. Run "
            f"update with hermes-envgen installed from a checkout that has that commit "
            f"(pip install -e CHECKOUT){unset}"
        )
    if not bundle.is_release_tag(project):
        return (
            f"{made}: it is an uncommitted state of a hermes-envgen checkout, which no release "
            "or commit holds, so there is no base to merge from: make a new project with "
            "`hermes-envgen new` and move your changes over"
        )
    if available and bundle.version_key(project) > bundle.version_key(available[-1]):
        if override:
            return (
                f"{made}: it is newer than all of them. Point {TEMPLATE_SOURCE_ENV} at a "
                f"template source with {project}, or unset it"
            )
        return f"{made}: it is newer than all of them. Upgrade hermes-envgen"
    return (
        f"{made}: that release was never tagged. Set {TEMPLATE_SOURCE_ENV} to a template "
        f"repository or bundle with the tag {project} (scripts/release.sh tags each release "
        "and keeps the earlier ones)"
    )


def template_questions(source: Path, ref: str) -> dict[str, dict[str, Any]]:
    """The questions of ``copier.yml`` at ``ref`` of the template source, by name."""
    with tempfile.TemporaryDirectory(prefix="hermes-envgen.") as tmp:
        run_git("init", "--quiet", "--bare", tmp)
        try:
            run_git("--git-dir", tmp, "fetch", "--quiet", "--no-tags", str(source), ref)
        except GitError as exc:
            raise UsageError(f"template version {ref} not found in {source}") from exc
        text = run_git("--git-dir", tmp, "show", "FETCH_HEAD:copier.yml")
    return hooks.load("pre_gen_project").parse_questions(text)
