"""Shared set-up of the generator tests: an isolated git/copier environment and a CLI runner."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.envgen import (
    NEW_FILE,
    NEW_TAG,
    REPO,
    TEMPLATE_LINE,
    VERSION_TAG,
    RunCli,
    TemplateRelease,
    commit_and_tag,
    git,
)

from hermes_envgen.generate import bundle, source
from hermes_envgen.generate import bundle as template_bundle


@pytest.fixture(scope="session")
def bundle_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One cache of working-tree bundles for the whole session (built once per content)."""
    return tmp_path_factory.mktemp("hermes-envgen-cache")


@pytest.fixture(scope="session")
def checkout_tag(bundle_cache: Path) -> str:
    """The template version a project made from this checkout records: its checkout label."""
    built = bundle.build_cached_bundle(REPO, source.package_version(), bundle_cache)
    return source.default_ref(built)


@pytest.fixture
def cli_env(tmp_path_factory: pytest.TempPathFactory, bundle_cache: Path) -> dict[str, str]:
    """An environment with private git config, copier mirror cache and no network access."""
    home = tmp_path_factory.mktemp("env")  # not tmp_path: tests watch what appears there
    gitconfig = home / "gitconfig"
    gitconfig.write_text("[user]\n\tname = Test User\n\temail = test@example.com\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.pop("HERMES_ENVGEN_TEMPLATE_SOURCE", None)
    env.pop("HERMES_ENVGEN_TEMPLATE_URL", None)
    env.update(
        GIT_CONFIG_GLOBAL=str(gitconfig),
        GIT_CONFIG_NOSYSTEM="1",
        # Only local paths for git, and an unroutable proxy for anything else: offline for sure.
        GIT_ALLOW_PROTOCOL="file",
        HTTPS_PROXY="http://127.0.0.1:9",
        HTTP_PROXY="http://127.0.0.1:9",
        COPIER_CACHE_DIR=str(home / "copier-cache"),
        HERMES_ENVGEN_CACHE_DIR=str(bundle_cache),
        NO_COLOR="1",
    )
    return env


@pytest.fixture
def run_cli(cli_env: dict[str, str], tmp_path: Path) -> RunCli:
    """Run ``hermes-envgen ARGS`` as a subprocess with no terminal, in ``tmp_path`` by default."""

    def run(
        *args: str,
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
        timeout: float = 120,
    ) -> subprocess.CompletedProcess:
        return subprocess.run(
            [sys.executable, "-m", "hermes_envgen", *args],
            cwd=cwd or tmp_path,
            env={**cli_env, **(env or {})},
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
        )

    return run


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> TemplateRelease:
    """Template repo with VERSION_TAG (the working tree) and NEW_TAG (plus a change), bundled."""
    repo = tmp_path_factory.mktemp("template-repo")
    git(repo, "init", "--quiet")
    for relpath in template_bundle.template_paths(REPO):
        (repo / relpath).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / relpath, repo / relpath, follow_symlinks=False)
    commit_and_tag(repo, VERSION_TAG)
    # The generated README is the natural file to change; pyproject.toml stands in until the
    # template has one.
    if (repo / "template" / "README.md.jinja").is_file():
        doc, comment = "README.md", ""
    else:
        doc, comment = "pyproject.toml", "# "
    source = repo / "template" / f"{doc}.jinja"
    text = source.read_text()
    source.write_text(f"{text.rstrip(chr(10))}\n{comment}{TEMPLATE_LINE}\n")
    (repo / "template" / NEW_FILE).write_text(f"New in the template's {NEW_TAG}.\n")
    commit_and_tag(repo, NEW_TAG)
    bundle = template_bundle.build_bundle(repo, NEW_TAG[1:], repo.parent / "template.bundle")
    assert template_bundle.bundle_tags(bundle) == [VERSION_TAG, NEW_TAG]
    return TemplateRelease(repo, bundle, doc, comment)
