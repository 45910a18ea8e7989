"""Where the template comes from: its public URL, the bundle git really reads, its releases.

Projects are rendered from the canonical public template URL pinned to the tag ``v{version}``
of the installed package, with git redirected (``url.<bundle>.insteadOf``) to a bundle of the
template's releases shipped in the wheel. Copier thus records the public URL and a real tag in
``.copier-answers.yml``: ``update`` is a true three-way merge with no network, and a plain
``copier update`` works online too.
"""

from __future__ import annotations

import os
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
    """The installed hermes-envgen version, which is also the template release it renders."""
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


def template_source() -> Path:
    """The bundle (or repository) git fetches the template from instead of the public URL."""
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
    return bundle.build_cached_bundle(root, package_version(), cache_dir())


def git_redirect(url: str, source: Path) -> dict[str, str]:
    """Environment variables that make git fetch ``url`` from ``source`` (appended to any set)."""
    from plumbum import local  # copier runs git through plumbum, which snapshots os.environ

    index = int(local.env.get("GIT_CONFIG_COUNT", "0") or 0)
    return {
        "GIT_CONFIG_COUNT": str(index + 1),
        f"GIT_CONFIG_KEY_{index}": f"url.{source}.insteadOf",
        f"GIT_CONFIG_VALUE_{index}": url,
    }


def template_versions(source: Path) -> list[str]:
    """The release tags ``vX.Y.Z`` the template source holds, oldest first."""
    listing = run_git("ls-remote", "--tags", "--refs", str(source))
    tags = [line.rsplit("refs/tags/", 1)[-1] for line in listing.splitlines()]
    return sorted((tag for tag in tags if bundle.is_release_tag(tag)), key=bundle.version_key)


def check_versions(source: Path, *, project: str | None = None, target: str) -> None:
    """Refuse release tags the source does not hold, naming the real reason and fix.

    ``project`` is the version a project was made from, ``target`` the one to render.
    """
    available = template_versions(source)
    known = ", ".join(available) or "none"
    if project and bundle.is_release_tag(project) and project not in available:
        raise UsageError(
            f"this project was made from template {project}, which {source} does not hold "
            f"(it has {known}): that release was never tagged. Set {TEMPLATE_SOURCE_ENV} to a "
            f"template repository or bundle with the tag {project} (scripts/release.sh tags "
            "each release and keeps the earlier ones)"
        )
    if bundle.is_release_tag(target) and target not in available:
        if available and bundle.version_key(target) > bundle.version_key(available[-1]):
            raise UsageError(
                f"template version {target} is newer than the releases {source} holds "
                f"({known}): upgrade hermes-envgen, or pass --vcs-ref with one of those"
            )
        raise UsageError(
            f"template version {target} is not among the releases {source} holds ({known}): "
            "pass --vcs-ref with one of those"
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
