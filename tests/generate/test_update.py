"""``hermes-envgen update`` (and plain ``copier update``): a real three-way merge, offline.

The tagged template repository is built here from the working tree (v0.1.0 = copier.yml +
template/ as they are, v0.2.0 = the same plus a template change), never from this repository's
own tags, which a fresh clone does not carry.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from hermes_envgen.generate import bundle as template_bundle

from .envgen_helpers import PUBLIC_URL, REPO, VERSION_TAG, RunCli, assert_one_line_error, git

NEW_TAG = "v0.2.0"
TEMPLATE_LINE = "Template change in v0.2.0."
NEW_FILE = "CHANGES.md"


@dataclass(frozen=True)
class TemplateRelease:
    """The tagged template repository of this module, its bundle and the file it changes."""

    repo: Path
    bundle: Path
    doc: str  # the rendered file whose template gets a line appended in v0.2.0
    comment: str  # how that file writes a line the user or template adds


def _commit_and_tag(repo: Path, tag: str) -> None:
    git(repo, "add", "--all")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", tag)
    git(repo, "tag", tag)


@pytest.fixture(scope="module")
def release(tmp_path_factory: pytest.TempPathFactory) -> TemplateRelease:
    """Template repo with v0.1.0 (the working tree) and v0.2.0 (plus a change), as a bundle."""
    repo = tmp_path_factory.mktemp("template-repo")
    git(repo, "init", "--quiet")
    for relpath in template_bundle.template_paths(REPO):
        (repo / relpath).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / relpath, repo / relpath, follow_symlinks=False)
    _commit_and_tag(repo, VERSION_TAG)
    # The generated README is the natural file to change; pyproject.toml stands in until the
    # template has one.
    if (repo / "template" / "README.md.jinja").is_file():
        doc, comment = "README.md", ""
    else:
        doc, comment = "pyproject.toml", "# "
    source = repo / "template" / f"{doc}.jinja"
    text = source.read_text()
    source.write_text(f"{text.rstrip(chr(10))}\n{comment}{TEMPLATE_LINE}\n")
    (repo / "template" / NEW_FILE).write_text("New in the template's v0.2.0.\n")
    _commit_and_tag(repo, NEW_TAG)
    bundle = template_bundle.build_bundle(repo, "0.2.0", repo.parent / "template.bundle")
    assert template_bundle.bundle_tags(bundle) == [VERSION_TAG, NEW_TAG]
    return TemplateRelease(repo, bundle, doc, comment)


@pytest.fixture
def project(run_cli: RunCli, tmp_path: Path, release: TemplateRelease) -> Path:
    """A project generated from the v0.1.0 of ``release``, committed."""
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
    assert (project / NEW_FILE).read_text() == "New in the template's v0.2.0.\n"
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


def _edit_the_changed_spot(project: Path, release: TemplateRelease) -> None:
    """Append to the doc exactly where v0.2.0 of the template appends its own line."""
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


@pytest.mark.parametrize(
    ("ref", "fragment"),
    [
        ("v9.9.9", "newer than the releases"),  # a later hermes-envgen has it
        ("v0.1.5", "is not among the releases"),  # no hermes-envgen has it
    ],
)
def test_an_unknown_template_version_is_refused(
    run_cli: RunCli, project: Path, ref: str, fragment: str
):
    result = run_cli("update", str(project), "--vcs-ref", ref)
    assert_one_line_error(result, 2, fragment)
    assert ("upgrade hermes-envgen" in result.stderr) == (ref == "v9.9.9")


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


def test_update_can_change_answers_and_checks_them(run_cli: RunCli, project: Path):
    refused = run_cli("update", str(project), "--data", "colour=blue")
    assert_one_line_error(refused, 2, "unknown question colour")
    result = run_cli("update", str(project), "--vcs-ref", NEW_TAG, "--data", "group_size=4")
    assert result.returncode == 0, result.stderr
    answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    assert (answers["group_size"], answers["_commit"]) == (4, NEW_TAG)
