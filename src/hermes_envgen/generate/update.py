"""``hermes-envgen update``: three-way merge a generated project up to a newer template."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import yaml

from hermes_envgen.errors import GitError, Interrupted, UpdateConflictError, UsageError
from hermes_envgen.generate import origin, source
from hermes_envgen.generate.answers import check_answers, check_recorded_answers
from hermes_envgen.generate.copier_session import copier_session, stdin_is_terminal
from hermes_envgen.generate.git import check_git, one_line, run_git
from hermes_envgen.generate.migrate import Migration, migrate_project

ANSWERS_FILE = ".copier-answers.yml"
INSTALL_SOURCE = "hermes_envgen_source"  # the question whose answer the README installs from

Conflict = Literal["inline", "rej"]


@dataclass(frozen=True)
class UpdateResult:
    """What ``update_project`` did: from which template version to which."""

    path: Path
    from_version: str
    to_version: str
    changed: bool
    migration: Migration = field(default_factory=Migration)  # earlier releases' names rewritten

    def summary(self) -> str:
        """What ``update`` prints on stdout: what changed, and what to do next (the lines to
        change by hand go to stderr: ``migration.to_change``)."""
        lines = []
        if self.migration.rewritten:
            lines.append(
                f"Rewrote earlier releases' names in {', '.join(self.migration.rewritten)}."
            )
        if not self.changed and not self.migration.rewritten:
            return f"Already at template {self.to_version}; nothing to do."
        if self.changed:
            lines.append(f"Updated from template {self.from_version} to {self.to_version}.")
        lines.append("Review the changes with `git diff`, then commit them.")
        return "\n".join(lines)


def read_answers(project: Path) -> dict[str, Any]:
    """The answers file of a generated project, or UsageError saying why it is not one."""
    path = project / ANSWERS_FILE
    if not path.is_file():
        raise UsageError(
            f"{project} is not a generated project (no {ANSWERS_FILE}): run update in the "
            "project's directory or pass its path"
        )
    try:
        answers = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise UsageError(f"{path} is not valid YAML: {one_line(str(exc))}") from exc
    if not answers.get("_src_path") or not answers.get("_commit"):
        raise UsageError(
            f"{path} records no template source and version (_src_path, _commit), "
            "so this project cannot be updated"
        )
    return answers


def _check_clean_repository(project: Path) -> None:
    """Refuse a project outside git or with uncommitted changes: the merge needs a clean base."""
    try:
        status = run_git("status", "--porcelain", cwd=project)
    except GitError:
        raise UsageError(
            f"{project} is not in a git repository: commit the project to git first"
        ) from None
    if status.strip():
        count = len(status.splitlines())
        raise UsageError(
            f"{project} has uncommitted changes ({count} path(s), see `git status`): "
            "commit or stash them, then update again"
        )


def conflicted_files(project: Path, conflict: Conflict) -> list[str]:
    """The files an update left for the user to merge (unmerged paths, or ``.rej`` files)."""
    if conflict == "inline":
        listing = run_git("ls-files", "--unmerged", "-z", cwd=project)
        entries = (entry.split("\t", 1)[-1] for entry in listing.split("\0") if entry)
    else:  # untracked and ignored .rej files alike
        listing = run_git("ls-files", "--others", "-z", "--", "*.rej", cwd=project)
        entries = (entry for entry in listing.split("\0") if entry)
    return sorted(set(entries))


def _fill_install_source(
    answers: Mapping[str, Any], changes: dict[str, Any], template: Path, target: str
) -> None:
    """Answer ``hermes_envgen_source`` as ``new`` does, for projects made before it was asked.

    Without it their README would keep no line that installs hermes-envgen, on no index.
    """
    if INSTALL_SOURCE in answers or INSTALL_SOURCE in changes:
        return
    if INSTALL_SOURCE in source.template_questions(template, target):
        changes[INSTALL_SOURCE] = origin.install_source()


def update_project(
    path: Path | str = ".",
    *,
    vcs_ref: str | None = None,
    data: Mapping[str, Any] | None = None,
    defaults: bool = False,
    conflict: Conflict = "inline",
    interactive: bool | None = None,
) -> UpdateResult:
    """Three-way merge a generated project up to template ``vcs_ref`` (default ``v{version}``).

    Only questions the project has no answer for are asked (or defaulted with ``defaults``).
    Then the names of earlier releases the project still uses are rewritten (``migrate``), at
    the template version too: after a merge with conflicts, once they are resolved.
    Raises UpdateConflictError, after applying the update, when files need a manual merge.
    """
    from copier import run_update

    project = Path(path).absolute()
    answers = read_answers(project)
    check_git()
    _check_clean_repository(project)
    old, src = str(answers["_commit"]), str(answers["_src_path"])
    changes = dict(data or {})
    redirect: dict[str, str] = {}
    if src == source.template_url():  # ours: fetch it from the bundle; anything else as recorded
        template = source.template_source(base=old)
        target = vcs_ref or source.default_ref(template)
        if old == target and not changes:
            return UpdateResult(project, old, target, False, migrate_project(project))
        source.check_versions(template, project=old, target=target)
        # copier renders the project's own version again from these answers first
        questions = source.template_questions(template, old)
        check_recorded_answers(answers, questions, project / ANSWERS_FILE)
        redirect = source.git_redirect(src, template)
        _fill_install_source(answers, changes, template, target)
        if changes:
            changes = check_answers(changes, template, target)
    else:
        target = vcs_ref or source.release_tag()
        if old == target and not changes:
            return UpdateResult(project, old, target, False, migrate_project(project))
    if interactive is None:
        interactive = stdin_is_terminal()
    try:
        with copier_session(changes, prompts=interactive or defaults, git_env=redirect):
            run_update(
                project,
                data=changes,
                vcs_ref=target,
                defaults=defaults,
                skip_answered=True,  # ask only what the new template version added
                overwrite=True,
                conflict=conflict,
                quiet=True,
            )
    except KeyboardInterrupt:
        raise Interrupted("aborted; `git status` shows what the update changed so far") from None
    files = conflicted_files(project, conflict)
    if files:
        how = (
            "resolve the <<<<<<< before updating / >>>>>>> after updating markers"
            if conflict == "inline"
            else "merge each .rej file into its file by hand and delete it"
        )
        raise UpdateConflictError(
            f"updated {project.name} from {old} to {target} with conflicts in "
            f"{', '.join(files)}: {how}, then commit (and run update once more: it "
            "rewrites what the project still uses of earlier releases' names)",
            files,
        )
    return UpdateResult(project, old, target, True, migrate_project(project))
