"""scripts/release.sh on copies of this repository: releases keep every earlier template version
reachable, and projects made before them update across them with the copy's own CLI.

A checkout between releases holds a dev version and labels what it renders with its commit;
a release that was never tagged is tagged where its projects were made (``--old-at``), never
silently at HEAD, whose template has moved on since.
"""

from __future__ import annotations

import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers.envgen import NOT_SOURCE, REPO, RunCli, answers_of, git

from hermes_envgen.errors import TemplateSourceError
from hermes_envgen.generate.bundle import build_bundle, bundle_tags, check_full_history
from hermes_envgen.generate.source import package_version, template_refs
from hermes_envgen.testing import run_env_mode, validate_groups

pytestmark = pytest.mark.timeout(600)

TEMPLATE_LINE = "A template change after the project was made."
# The commit whose template made tests/fixtures/legacy-env-v0.1.0 (which records v0.1.0): the
# one to tag v0.1.0 in this repository.
V0_1_0_COMMIT = "5bb9bc29093c32cf061b32f872aada683a9e6198"
LEGACY_PROJECT = REPO / "tests" / "fixtures" / "legacy-env-v0.1.0"


def release(repo: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    """``bash scripts/release.sh ARGS`` in ``repo``, as the README says: no PYTHON, the venv's."""
    env = {name: value for name, value in env.items() if name != "PYTHON"}
    return subprocess.run(
        ["bash", "scripts/release.sh", *args],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
    )


@pytest.fixture
def repo(tmp_path: Path, cli_env: dict[str, str]) -> Path:
    """A copy of this repository's working tree, committed once, with no tags (a dev version).

    The quick start was done in it: ``.venv/bin/python`` runs this test's interpreter, and the
    release script, run with no PYTHON as the README says, picks it.
    """
    repo = tmp_path / "hermes-envgen"
    shutil.copytree(REPO, repo, ignore=NOT_SOURCE, symlinks=True)
    venv_python = repo / ".venv" / "bin" / "python"
    venv_python.parent.mkdir(parents=True)
    venv_python.write_text(f'#!/bin/sh\nexec {shlex.quote(sys.executable)} "$@"\n')
    venv_python.chmod(0o755)
    git(repo, "init", "--quiet", env=cli_env)
    git(repo, "add", "--all", env=cli_env)
    git(repo, "commit", "--quiet", "-m", "hermes-envgen, between releases", env=cli_env)
    return repo


@pytest.fixture
def run_copy(run_cli: RunCli, repo: Path) -> RunCli:
    """The CLI of the copy ``repo``, as if installed from it (``pip install -e``)."""

    def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
        return run_cli(*args, env={"PYTHONPATH": str(repo / "src"), **(env or {})})

    return run


def change_template(repo: Path, env: dict[str, str]) -> None:
    """Commit a line added to the generated README's template."""
    readme = repo / "template" / "README.md.jinja"
    readme.write_text(f"{readme.read_text()}\n{TEMPLATE_LINE}\n")
    git(repo, "commit", "--quiet", "-am", "A template change", env=env)


@pytest.mark.slow
def test_two_releases_and_a_project_from_a_dev_checkout_updates_to_the_newest_by_default(
    repo: Path, tmp_path: Path, run_copy: RunCli, cli_env: dict[str, str]
):
    # Made from the untagged checkout: the project records the commit, not a release.
    made = run_copy("new", "demo-env", "--defaults")
    assert made.returncode == 0, made.stderr
    project = tmp_path / "demo-env"
    head = git(repo, "rev-parse", "HEAD", env=cli_env).strip()
    made_from = f"v{package_version()}+g{head[:12]}"
    assert answers_of(project)["_commit"] == made_from

    result = release(repo, cli_env, "0.8.0")
    assert result.returncode == 0, result.stderr
    assert "bundle holds: v0.8.0" in result.stdout
    change_template(repo, cli_env)
    result = release(repo, cli_env, "0.9.0")
    assert result.returncode == 0, result.stderr
    assert "bundle holds: v0.8.0 v0.9.0" in result.stdout
    assert 'version = "0.9.0"' in (repo / "pyproject.toml").read_text()

    # A bundle of the releases alone lacks the project's base: update says what it is.
    bundle = build_bundle(repo, "0.9.0", tmp_path / "release.bundle")
    assert bundle_tags(bundle) == ["v0.8.0", "v0.9.0"]
    refused = run_copy("update", str(project), env={"HERMES_ENVGEN_TEMPLATE_SOURCE": str(bundle)})
    assert refused.returncode == 2, refused.stderr
    assert f"commit {head[:12]} of a hermes-envgen checkout" in refused.stderr
    assert "HERMES_ENVGEN_TEMPLATE_SOURCE unset" in refused.stderr

    # The checkout has that commit: update, with no --vcs-ref, goes to its newest release.
    updated = run_copy("update", str(project))
    assert updated.returncode == 0, updated.stderr
    assert f"{made_from} to v0.9.0" in updated.stdout
    assert answers_of(project)["_commit"] == "v0.9.0"
    assert TEMPLATE_LINE in (project / "README.md").read_text()


@pytest.mark.slow
def test_a_release_never_tagged_is_tagged_where_its_projects_were_made(
    repo: Path, tmp_path: Path, run_copy: RunCli, cli_env: dict[str, str]
):
    pyproject = repo / "pyproject.toml"
    pyproject.write_text(pyproject.read_text().replace(package_version(), "0.7.0", 1))
    git(repo, "commit", "--quiet", "-am", "Version 0.7.0, never tagged", env=cli_env)
    made_at = git(repo, "rev-parse", "HEAD", env=cli_env).strip()
    # A project made by a build that still called itself v0.7.0.
    git(repo, "tag", "v0.7.0", env=cli_env)
    legacy = build_bundle(repo, "0.7.0", tmp_path / "legacy.bundle")
    git(repo, "tag", "--delete", "v0.7.0", env=cli_env)
    made = run_copy("new", "demo-env", "--defaults",
                    env={"HERMES_ENVGEN_TEMPLATE_SOURCE": str(legacy)})  # fmt: skip
    assert made.returncode == 0, made.stderr
    project = tmp_path / "demo-env"
    assert answers_of(project)["_commit"] == "v0.7.0"
    change_template(repo, cli_env)

    refused = release(repo, cli_env, "0.8.0")
    assert refused.returncode == 2, refused.stderr
    assert "0.7.0 was never tagged" in refused.stderr and "--old-at COMMIT" in refused.stderr
    wrong = release(repo, cli_env, "0.8.0", "--old-at", f"{made_at}~1")
    assert wrong.returncode == 2 and "is not version 0.7.0" in wrong.stderr, wrong.stderr
    assert git(repo, "tag", "--list", env=cli_env) == ""

    result = release(repo, cli_env, "0.8.0", "--old-at", made_at)
    assert result.returncode == 0, result.stderr
    assert git(repo, "rev-parse", "v0.7.0^{commit}", env=cli_env).strip() == made_at
    assert "bundle holds: v0.7.0 v0.8.0" in result.stdout
    # Its true base is known, so the template change made since reaches the project.
    updated = run_copy("update", str(project))
    assert updated.returncode == 0, updated.stderr
    assert answers_of(project)["_commit"] == "v0.8.0"
    assert TEMPLATE_LINE in (project / "README.md").read_text()


@pytest.mark.parametrize(
    ("args", "dirty", "message"),
    [
        (["0.1.0"], False, f"not newer than the current version {package_version()}"),
        (["0.2"], False, "usage: scripts/release.sh VERSION"),
        (["0.8.0", "--old-at"], False, "usage: scripts/release.sh VERSION"),
        (["0.8.0", "--old-at", "HEAD"], False, "needs no tag"),
        (["0.8.0"], True, "uncommitted changes"),
    ],
)
def test_release_refuses_a_bad_version_or_a_dirty_tree(
    repo: Path, cli_env: dict[str, str], args: list[str], dirty: bool, message: str
):
    if dirty:
        (repo / "copier.yml").write_text("# edited\n", encoding="utf-8")
    result = release(repo, cli_env, *args)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert git(repo, "tag", "--list", env=cli_env) == ""


def test_a_shallow_clone_neither_releases_nor_builds_a_wheel(
    repo: Path, tmp_path: Path, cli_env: dict[str, str]
):
    git(repo, "commit", "--quiet", "--allow-empty", "-m", "Later", env=cli_env)
    shallow = tmp_path / "shallow"
    git(tmp_path, "clone", "--quiet", "--depth", "1", f"file://{repo}", str(shallow), env=cli_env)
    result = release(shallow, cli_env, "0.8.0")
    assert result.returncode == 2 and "shallow clone" in result.stderr, result.stderr
    assert git(shallow, "tag", "--list", env=cli_env) == ""
    with pytest.raises(TemplateSourceError, match="shallow clone"):
        check_full_history(shallow)
    check_full_history(repo)


def test_a_checkout_renders_as_a_label_naming_its_commit_unless_it_is_the_tagged_release(
    repo: Path, tmp_path: Path, cli_env: dict[str, str]
):
    def head_tag(name: str) -> str:
        return template_refs(build_bundle(repo, "0.7.0", tmp_path / name))[1] or ""

    head = git(repo, "rev-parse", "HEAD", env=cli_env).strip()[:12]
    assert head_tag("clean.bundle") == f"v0.7.0+g{head}"
    git(repo, "tag", "v0.7.0", env=cli_env)
    assert head_tag("tagged.bundle") == "v0.7.0"
    (repo / "template" / "NOTES.md").write_text("Not committed.\n")
    dirty = head_tag("dirty.bundle")
    assert dirty.startswith(f"v0.7.0+g{head}.dirty."), dirty
    shutil.rmtree(repo / ".git")
    assert head_tag("no-git.bundle").startswith("v0.7.0+tree."), dirty


# Files a user of v0.1.0 added to the project: its names of settings and of the runtime.
USERS_OWN_FILES = {
    "configs/long-commands.yaml": (
        "# Longer commands: `python -m legacy_env process --config configs/long-commands.yaml`.\n"
        "env:\n  terminal_backend: bwrap\n  terminal_timeout: 120\n  terminal_lifetime: 900\n"
    ),
    "src/legacy_env/own_helpers.py": (
        '"""Helpers of the user\'s, on the names hermes_envgen.runtime exported in 0.1.0."""\n\n'
        "from hermes_envgen.runtime import ToolError, answer_matches\n"
        "from hermes_envgen.runtime.rewards import keyword_overlap\n\n\n"
        "def failed_tools(errors: list[ToolError]) -> list[str]:\n"
        "    return [error.tool_name for error in errors]\n\n\n"
        "def lenient(answer: str, reference: str) -> float:\n"
        "    return max(float(answer_matches(answer, reference)), "
        "keyword_overlap(answer, reference))\n"
    ),
}
USERS_OWN_FILES_UPDATED = {
    "configs/long-commands.yaml": USERS_OWN_FILES["configs/long-commands.yaml"]
    .replace("terminal_timeout", "sandbox_command_timeout")
    .replace("terminal_lifetime", "sandbox_idle_lifetime"),
    "src/legacy_env/own_helpers.py": USERS_OWN_FILES["src/legacy_env/own_helpers.py"].replace(
        "from hermes_envgen.runtime import ToolError, answer_matches\n"
        "from hermes_envgen.runtime.rewards import keyword_overlap\n",
        "from hermes_envgen.runtime.loop.agent_loop import ToolError\n"
        "from hermes_envgen.runtime.rewards import answer_matches, keyword_overlap\n",
    ),
}
# The stub model answers at once, without a tool: the rollouts score 0, and run.
GIVE_UP = {"conversations": [{"turns": [{"content": "I cannot tell."}]}]}


def _tree(root: Path) -> dict[str, bytes]:
    """The files under ``root`` (outside .git) and their bytes."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes()
        for path in sorted(root.rglob("*"))
        if path.is_file() and ".git" not in path.relative_to(root).parts
    }


@pytest.mark.slow
def test_the_v0_1_0_project_updates_from_the_commit_that_made_it_and_runs(
    tmp_path: Path, run_cli: RunCli, cli_env: dict[str, str], stub_server, offline_tokenizer
):
    # With v0.1.0 tagged there, updating the kept v0.1.0 project gives exactly a fresh project of
    # the same answers: no line of it differs from what that commit rendered.
    known = subprocess.run(["git", "cat-file", "-e", f"{V0_1_0_COMMIT}^{{commit}}"], cwd=REPO)
    if known.returncode != 0:
        pytest.skip(f"this clone lacks commit {V0_1_0_COMMIT} (a shallow clone?)")
    clone = tmp_path / "hermes-envgen"
    git(tmp_path, "clone", "--quiet", str(REPO), str(clone), env=cli_env)
    git(clone, "tag", "--force", "v0.1.0", V0_1_0_COMMIT, env=cli_env)  # main carries it too
    from_clone = {"PYTHONPATH": str(clone / "src")}

    project = tmp_path / "legacy-env"
    shutil.copytree(LEGACY_PROJECT, project, ignore=NOT_SOURCE)
    # The user's own files, written against v0.1.0's names: the update rewrites them.
    for relpath, text in USERS_OWN_FILES.items():
        (project / relpath).write_text(text)
    git(project, "init", "--quiet", env=cli_env)
    git(project, "add", "--all", env=cli_env)
    git(project, "commit", "--quiet", "-m", "Made by v0.1.0", env=cli_env)
    updated = run_cli("update", str(project), "--defaults", env=from_clone)
    assert updated.returncode == 0, updated.stderr
    rewritten = "configs/long-commands.yaml, src/legacy_env/own_helpers.py"
    assert f"Rewrote earlier releases' names in {rewritten}." in updated.stdout
    # keyword_overlap has no successor to rewrite it to: the update names the line.
    assert "change by hand: src/legacy_env/own_helpers.py:12: keyword_overlap was removed" in (
        updated.stderr
    )
    for relpath, text in USERS_OWN_FILES_UPDATED.items():
        assert (project / relpath).read_text() == text

    answers = answers_of(project)
    data = [
        f"{key}={','.join(value) if isinstance(value, list) else value}"
        for key, value in answers.items()
        if not key.startswith("_") and key != "project_name"
    ]
    pairs = [arg for pair in data for arg in ("--data", pair)]
    fresh = run_cli("new", "legacy-env", "-o", "fresh", "--defaults", *pairs, env=from_clone)
    assert fresh.returncode == 0, fresh.stderr
    made, merged = _tree(tmp_path / "fresh" / "legacy-env"), _tree(project)
    for relpath in USERS_OWN_FILES:
        del merged[relpath]
    assert merged.keys() == made.keys() - {".github/workflows/tests.yml"}  # removed in the fixture
    assert [name for name in merged if merged[name] != made[name]] == []

    # The updated env runs, with the user's config file of v0.1.0's setting names.
    groups = tmp_path / "groups.jsonl"
    run_env_mode(
        "legacy_env",
        "process",
        "--config",
        "configs/long-commands.yaml",
        flags={
            "openai.base_url": stub_server(GIVE_UP).base_url,
            "env.tokenizer_name": offline_tokenizer,
            "env.total_steps": 1,
            "env.group_size": 2,
            "env.data_path_to_save_groups": groups,
            "env.sandbox_root": tmp_path / "sandboxes",
        },
        cwd=project,
        timeout=180,
        extra_env={"PYTHONPATH": str(project / "src")},
    )
    validate_groups(groups, group_size=2)
