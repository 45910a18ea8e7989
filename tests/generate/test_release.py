"""scripts/release.sh: two releases on a copy of this repository keep every earlier template
version reachable, and a project made before them updates across both.

Also the wrong way (only the new version tagged), which strands existing projects: ``update``
then names the real reason and fix.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from hermes_envgen.generate.bundle import build_bundle, bundle_tags

from .envgen_helpers import NOT_SOURCE, REPO, VERSION_TAG, RunCli, answers_of, git

pytestmark = pytest.mark.timeout(600)

TEMPLATE_LINE = "Released in 0.3.0."


def release(repo: Path, version: str, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``bash scripts/release.sh VERSION`` in ``repo``."""
    return subprocess.run(
        ["bash", "scripts/release.sh", version],
        cwd=repo,
        env={**env, "PYTHON": sys.executable},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.fixture
def repo(tmp_path: Path, cli_env: dict[str, str]) -> Path:
    """A copy of this repository's working tree, committed once, with no tags (version 0.1.0)."""
    repo = tmp_path / "hermes-envgen"
    shutil.copytree(REPO, repo, ignore=NOT_SOURCE, symlinks=True)
    git(repo, "init", "--quiet", env=cli_env)
    git(repo, "add", "--all", env=cli_env)
    git(repo, "commit", "--quiet", "-m", "hermes-envgen 0.1.0", env=cli_env)
    return repo


def test_two_releases_keep_earlier_ones_and_a_project_updates_across_them(
    repo: Path, tmp_path: Path, run_cli: RunCli, cli_env: dict[str, str]
):
    # A project made from a build before any release: it recorded v0.1.0.
    first = build_bundle(repo, "0.1.0", tmp_path / "first.bundle")
    made = run_cli(
        "new", "demo-env", "--defaults", env={"HERMES_ENVGEN_TEMPLATE_SOURCE": str(first)}
    )
    assert made.returncode == 0, made.stderr
    project = tmp_path / "demo-env"
    assert answers_of(project)["_commit"] == VERSION_TAG

    # Tagging only the new version strands it; update says why and what to do.
    git(repo, "tag", "v0.2.0", env=cli_env)
    stranded = build_bundle(repo, "0.2.0", tmp_path / "stranded.bundle")
    git(repo, "tag", "--delete", "v0.2.0", env=cli_env)
    refused = run_cli(
        "update", str(project), "--vcs-ref", "v0.2.0",
        env={"HERMES_ENVGEN_TEMPLATE_SOURCE": str(stranded)},
    )  # fmt: skip
    assert refused.returncode == 2, refused.stderr
    assert "made from template v0.1.0" in refused.stderr and "never tagged" in refused.stderr
    assert "HERMES_ENVGEN_TEMPLATE_SOURCE" in refused.stderr
    assert "upgrade hermes-envgen" not in refused.stderr

    # Release 0.2.0 (it tags the never-tagged 0.1.0 first), a template change, release 0.3.0.
    result = release(repo, "0.2.0", cli_env)
    assert result.returncode == 0, result.stderr
    assert "tagged v0.1.0" in result.stdout
    readme = repo / "template" / "README.md.jinja"
    readme.write_text(f"{readme.read_text()}\n{TEMPLATE_LINE}\n")
    git(repo, "commit", "--quiet", "-am", "A template change", env=cli_env)
    result = release(repo, "0.3.0", cli_env)
    assert result.returncode == 0, result.stderr
    assert "bundle holds: v0.1.0 v0.2.0 v0.3.0" in result.stdout
    assert 'version = "0.3.0"' in (repo / "pyproject.toml").read_text()

    # The bundle a wheel of the second release ships; the project updates across both releases.
    bundle = build_bundle(repo, "0.3.0", tmp_path / "release.bundle")
    assert bundle_tags(bundle) == ["v0.1.0", "v0.2.0", "v0.3.0"]
    updated = run_cli(
        "update", str(project), "--vcs-ref", "v0.3.0",
        env={"HERMES_ENVGEN_TEMPLATE_SOURCE": str(bundle)},
    )  # fmt: skip
    assert updated.returncode == 0, updated.stderr
    assert answers_of(project)["_commit"] == "v0.3.0"
    assert TEMPLATE_LINE in (project / "README.md").read_text()


@pytest.mark.parametrize(
    ("version", "dirty", "message"),
    [
        ("0.1.0", False, "not newer than the current version 0.1.0"),
        ("0.2", False, "usage: scripts/release.sh VERSION"),
        ("0.2.0", True, "uncommitted changes"),
    ],
)
def test_release_refuses_a_bad_version_or_a_dirty_tree(
    repo: Path, cli_env: dict[str, str], version: str, dirty: bool, message: str
):
    if dirty:
        (repo / "copier.yml").write_text("# edited\n", encoding="utf-8")
    result = release(repo, version, cli_env)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert git(repo, "tag", "--list", env=cli_env) == ""
