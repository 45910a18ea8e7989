"""``hermes-envgen update`` (and plain ``copier update``): a real three-way merge, offline.

The tagged template repository is built here from the working tree (VERSION_TAG, this checkout's
version = copier.yml + template/ as they are; NEW_TAG, the release after it = the same plus a
template change), never from this repository's own tags, which a fresh clone does not carry.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers.envgen import (
    NEW_FILE,
    NEW_TAG,
    PUBLIC_URL,
    REPO,
    TEMPLATE_LINE,
    VERSION_TAG,
    RunCli,
    TemplateRelease,
    assert_one_line_error,
    git,
)

from hermes_envgen.errors import UsageError
from hermes_envgen.generate import source


@pytest.fixture
def project(run_cli: RunCli, tmp_path: Path, release: TemplateRelease) -> Path:
    """A project generated from the VERSION_TAG of ``release`` (the default), committed."""
    result = run_cli("new", "demo-env", "--defaults")
    assert result.returncode == 0, result.stderr
    return tmp_path / "demo-env"


@pytest.fixture
def cli_env(cli_env: dict[str, str], release: TemplateRelease) -> dict[str, str]:
    """The CLI fetches the public template URL from this module's bundle."""
    return {**cli_env, "HERMES_ENVGEN_TEMPLATE_SOURCE": str(release.bundle)}


def _python_file(project: Path) -> Path:
    """A Python module of the generated package that the user edits."""
    package = project / "src" / "demo_env"
    env = package / "env.py"
    return env if env.is_file() else sorted(package.glob("*.py"))[0]


def _commit_all(project: Path, message: str) -> None:
    git(project, "add", "--all")
    git(project, "commit", "--quiet", "-m", message)


def _edit_without_conflict(project: Path, release: TemplateRelease) -> tuple[str, str]:
    """Edit the doc near its top and append to a module; commit; the two added lines."""
    doc = project / release.doc
    lines = doc.read_text().splitlines(keepends=True)
    user_doc_line = f"{release.comment}A note the user added."
    lines.insert(1, user_doc_line + "\n")
    doc.write_text("".join(lines))
    user_code = "def user_helper() -> int:\n    return 42\n"
    module = _python_file(project)
    module.write_text(f"{module.read_text()}\n\n{user_code}")
    _commit_all(project, "User edits")
    return user_doc_line, user_code


def _assert_merged(project: Path, release: TemplateRelease, user_doc_line: str, user_code: str):
    doc = (project / release.doc).read_text()
    assert user_doc_line in doc and TEMPLATE_LINE in doc
    assert user_code in _python_file(project).read_text()
    assert (project / NEW_FILE).read_text() == f"New in the template's {NEW_TAG}.\n"
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["_commit"] == NEW_TAG
    assert git(project, "ls-files", "--unmerged") == ""
    assert not list(project.rglob("*.rej"))
    status = git(project, "status", "--porcelain")
    assert release.doc in status and NEW_FILE in status  # left for the user to review and commit


def test_update_keeps_user_edits_and_brings_template_changes(
    run_cli: RunCli, project: Path, release: TemplateRelease
):
    user_doc_line, user_code = _edit_without_conflict(project, release)
    result = run_cli("update", str(project), "--vcs-ref", NEW_TAG)
    assert result.returncode == 0, result.stderr
    assert f"{VERSION_TAG} to {NEW_TAG}" in result.stdout
    _assert_merged(project, release, user_doc_line, user_code)


def test_update_without_a_newer_template_does_nothing(run_cli: RunCli, project: Path):
    result = run_cli("update", cwd=project)
    assert result.returncode == 0, result.stderr
    assert "Already at" in result.stdout
    assert git(project, "status", "--porcelain") == ""


def test_update_with_nothing_to_merge_still_rewrites_earlier_releases_names(
    run_cli: RunCli, project: Path
):
    # After a conflicted update is resolved and committed, the next update has nothing to
    # merge: it still rewrites the old names (generate/migrate.py) and names what is left.
    (project / "legacy.yaml").write_text("env:\n  terminal_timeout: 120\n")
    (project / "legacy.py").write_text(
        "from hermes_envgen.runtime.rewards import keyword_overlap\n"
    )
    _commit_all(project, "Files on 0.1.0's names")
    result = run_cli("update", cwd=project)
    assert result.returncode == 0, result.stderr
    assert "Rewrote earlier releases' names in legacy.yaml." in result.stdout
    assert "Already at" not in result.stdout and "git diff" in result.stdout
    assert "change by hand: legacy.py:1: keyword_overlap was removed" in result.stderr
    assert (project / "legacy.yaml").read_text() == "env:\n  sandbox_command_timeout: 120\n"
    assert git(project, "status", "--porcelain") == " M legacy.yaml\n"


def _edit_the_changed_spot(project: Path, release: TemplateRelease) -> None:
    """Append to the doc exactly where NEW_TAG of the template appends its own line."""
    doc = project / release.doc
    doc.write_text(f"{doc.read_text()}{release.comment}The user's own last line.\n")
    _commit_all(project, "User edit where the template changes")


def test_a_conflicting_edit_gives_inline_markers_and_exit_3(
    run_cli: RunCli, project: Path, release: TemplateRelease
):
    _edit_the_changed_spot(project, release)
    result = run_cli("update", str(project), "--vcs-ref", NEW_TAG)
    assert_one_line_error(result, 3, release.doc)
    text = (project / release.doc).read_text()
    assert "<<<<<<< before updating" in text and ">>>>>>> after updating" in text
    assert "The user's own last line." in text and TEMPLATE_LINE in text
    assert release.doc in git(project, "ls-files", "--unmerged")
    assert (project / NEW_FILE).is_file()  # the rest of the update is applied


def test_a_conflicting_edit_gives_rej_files_on_request(
    run_cli: RunCli, project: Path, release: TemplateRelease
):
    _edit_the_changed_spot(project, release)
    result = run_cli("update", str(project), "--vcs-ref", NEW_TAG, "--conflict", "rej")
    assert_one_line_error(result, 3, f"{release.doc}.rej")
    assert (project / f"{release.doc}.rej").is_file()
    assert "<<<<<<<" not in (project / release.doc).read_text()


def test_a_dirty_project_is_refused(run_cli: RunCli, project: Path, release: TemplateRelease):
    doc = project / release.doc
    doc.write_text(doc.read_text() + "uncommitted\n")
    result = run_cli("update", str(project), "--vcs-ref", NEW_TAG)
    assert_one_line_error(result, 2, "uncommitted changes")
    assert yaml.safe_load((project / ".copier-answers.yml").read_text())["_commit"] == VERSION_TAG
    assert not (project / NEW_FILE).exists()


def test_a_folder_that_was_not_generated_is_refused(run_cli: RunCli, tmp_path: Path):
    result = run_cli("update", str(tmp_path))
    assert_one_line_error(result, 2, "not a generated project")


@pytest.mark.parametrize("ref", ["v9.9.9", "v0.0.5"])  # newer than all, and never released
def test_an_unknown_template_version_is_refused(run_cli: RunCli, project: Path, ref: str):
    result = run_cli("update", str(project), "--vcs-ref", ref)
    assert_one_line_error(result, 2, f"template version {ref} is not among the releases")
    # The override decides what is held: upgrading hermes-envgen would change nothing.
    assert "HERMES_ENVGEN_TEMPLATE_SOURCE=" in result.stderr
    assert "upgrade hermes-envgen" not in result.stderr.lower()


def _made_from(project: Path, version: str) -> None:
    """Make the project's answers say it was made from template ``version``; commit."""
    answers = project / ".copier-answers.yml"
    text = answers.read_text().replace(f"_commit: {VERSION_TAG}", f"_commit: {version}")
    answers.write_text(text)
    _commit_all(project, f"Made from {version}")


def test_a_project_newer_than_every_release_held_names_the_override(run_cli: RunCli, project: Path):
    _made_from(project, "v9.9.9")
    result = run_cli("update", str(project))
    assert_one_line_error(result, 2, "made from template v9.9.9")
    assert "newer than all of them" in result.stderr
    assert "Point HERMES_ENVGEN_TEMPLATE_SOURCE at" in result.stderr
    assert "upgrade hermes-envgen" not in result.stderr.lower()


@pytest.mark.parametrize(
    ("project_version", "target", "fix"),
    [
        ("v9.9.9", NEW_TAG, "newer than all of them. Upgrade hermes-envgen"),
        (VERSION_TAG, "v9.9.9", "newer than the releases"),
        ("v0.0.5", NEW_TAG, "never tagged. Set HERMES_ENVGEN_TEMPLATE_SOURCE to"),
    ],
)
def test_without_the_override_the_fix_is_to_upgrade_or_to_name_a_source(
    release: TemplateRelease, monkeypatch, project_version: str, target: str, fix: str
):
    monkeypatch.delenv("HERMES_ENVGEN_TEMPLATE_SOURCE", raising=False)
    with pytest.raises(UsageError) as refused:
        source.check_versions(release.bundle, project=project_version, target=target)
    message = str(refused.value)
    assert fix in message and "HERMES_ENVGEN_TEMPLATE_SOURCE=" not in message
    newer = "v9.9.9" in (project_version, target)
    assert ("upgrade hermes-envgen" in message.lower()) == newer


def test_plain_copier_update_works_the_same(
    cli_env: dict[str, str], project: Path, release: TemplateRelease
):
    user_doc_line, user_code = _edit_without_conflict(project, release)
    # "The template repository is reachable": git fetches the public URL from the tagged repo.
    env = {
        **cli_env,
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": f"url.{release.repo}.insteadOf",
        "GIT_CONFIG_VALUE_0": PUBLIC_URL,
    }
    result = subprocess.run(
        [sys.executable, "-m", "copier", "update", "--defaults", "--vcs-ref", NEW_TAG],
        cwd=project,
        env=env,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    _assert_merged(project, release, user_doc_line, user_code)


def test_update_fills_the_install_source_of_a_project_made_before_it_was_asked(
    run_cli: RunCli, project: Path
):
    # As made by a template version without the question: no answer, no install line.
    install_line = "# hermes-envgen: on no package index"
    answers = project / ".copier-answers.yml"
    answers.write_text(
        "".join(
            line
            for line in answers.read_text().splitlines(keepends=True)
            if not line.startswith("hermes_envgen_source:")
        )
    )
    readme = project / "README.md"
    lines = readme.read_text().splitlines(keepends=True)
    readme.write_text("".join(line for line in lines if install_line not in line))
    workflow = project / ".github" / "workflows" / "tests.yml"
    step = re.compile(r"^      - name: Install hermes-envgen .*?(?=^      - name: )", re.M | re.S)
    workflow.write_text(step.sub("", workflow.read_text(), count=1))
    _commit_all(project, "Made before hermes_envgen_source was asked")

    result = run_cli("update", str(project), "--vcs-ref", NEW_TAG)
    assert result.returncode == 0, result.stderr
    assert yaml.safe_load(answers.read_text())["hermes_envgen_source"] == str(REPO)
    assert f"-c constraints.txt {REPO}    {install_line}" in readme.read_text()
    assert f"-c constraints.txt git+{PUBLIC_URL}@{NEW_TAG}" in workflow.read_text()


def test_the_ci_of_a_project_from_a_release_installs_hermes_envgen_from_its_repository(
    project: Path,
):
    # Made from a local checkout that CI cannot reach, but from a release: the public repository
    # has that tag.
    workflow = yaml.safe_load((project / ".github" / "workflows" / "tests.yml").read_text())
    runs = [step.get("run", "") for step in workflow["jobs"]["test"]["steps"]]
    assert any(f"constraints.txt git+{PUBLIC_URL}@{VERSION_TAG} ||" in run for run in runs), runs


def test_update_can_change_answers_and_checks_them(run_cli: RunCli, project: Path):
    refused = run_cli("update", str(project), "--data", "colour=blue")
    assert_one_line_error(refused, 2, "unknown question colour")
    result = run_cli("update", str(project), "--vcs-ref", NEW_TAG, "--data", "group_size=4")
    assert result.returncode == 0, result.stderr
    answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    assert (answers["group_size"], answers["_commit"]) == (4, NEW_TAG)


@pytest.mark.parametrize(
    ("key", "bad", "expected"),
    [
        ("group_size", "abc", "expected a whole number"),
        ("max_agent_turns", [10], "expected a whole number"),
        ("ci", "maybe", "expected true or false"),
        ("reward_pattern", "nope", "expected one of ['binary', 'judge', 'multi_signal']"),
        ("toolsets", "terminal", "expected a list such as [a, b]"),
    ],
)
def test_a_bad_answer_in_the_answers_file_is_named_and_nothing_changes(
    run_cli: RunCli, project: Path, key: str, bad: object, expected: str
):
    answers_file = project / ".copier-answers.yml"
    answers = yaml.safe_load(answers_file.read_text())
    answers_file.write_text(yaml.safe_dump({**answers, key: bad}))
    _commit_all(project, "A hand-edited answer")
    head, before = git(project, "rev-parse", "HEAD"), answers_file.read_text()
    result = run_cli("update", str(project), "--vcs-ref", NEW_TAG)
    assert_one_line_error(result, 2, f"invalid {key} {bad!r} in {answers_file}: {expected};")
    assert "correct it there, commit, then update again" in result.stderr
    assert git(project, "status", "--porcelain", "--ignored") == ""
    assert git(project, "rev-parse", "HEAD") == head and answers_file.read_text() == before
