"""Post-generation hook: format the freshly rendered project, then make its first commit.

``hermes-envgen new`` runs it. These steps are deliberately not copier ``_tasks``: tasks make a
template "unsafe", so that every plain ``copier update`` would need ``--trust``. A user who
rendered the template with a plain ``copier copy`` runs the same steps with

    python hooks/post_gen_project.py PROJECT_DIR
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import yaml

from hermes_envgen.errors import GitError, HermesEnvgenError, HookError, report
from hermes_envgen.generate.git import run_git

# Used only when git has no identity configured (a fresh CI machine, a container).
FALLBACK_IDENTITY = ("hermes-envgen", "hermes-envgen@localhost")


def find_ruff() -> str | None:
    """The ruff executable beside this Python (an unactivated venv) or on PATH, if any."""
    beside = Path(sys.executable).parent / ("ruff.exe" if os.name == "nt" else "ruff")
    if beside.is_file():
        return str(beside)
    return shutil.which("ruff")


def _ruff(ruff: str, args: Sequence[str], project: Path) -> None:
    """Run one ruff command in the project; HookError with ruff's own last line if it fails."""
    result = subprocess.run(
        [ruff, *args],
        cwd=project,
        capture_output=True,
        text=True,
        stdin=subprocess.DEVNULL,
        check=False,
    )
    if result.returncode != 0:
        detail = (result.stderr.strip() or result.stdout.strip()).splitlines()
        raise HookError(f"`ruff {args[0]}` failed: {detail[-1] if detail else result.returncode}")


def _would_change(ruff: str, checks: Sequence[Sequence[str]], project: Path) -> list[bool]:
    """Run read-only ruff checks side by side; for each, whether it found something to change.

    A check that fails for another reason (a syntax error, a bad config) counts as a change:
    the real command then runs and reports it.
    """
    processes = [
        subprocess.Popen(
            [ruff, *args],
            cwd=project,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for args in checks
    ]
    return [process.wait() != 0 for process in processes]


def format_project(project: Path) -> bool:
    """Apply ruff's safe fixes, then its formatter, if ruff is installed; whether that changed
    any file.

    A template renders ruff-clean code, so this normally changes nothing; it is a safety net
    for answers that produce long lines. Two read-only checks, run side by side, say whether
    either step has anything to do, so that a clean render costs one ruff run's time.
    ``--no-cache`` keeps ``.ruff_cache`` out of the commit.
    """
    ruff = find_ruff()
    if ruff is None:
        return False
    fixes, reformat = _would_change(
        ruff,
        [
            ["check", "--diff", "--quiet", "--no-cache", "."],  # exit 1: --fix would change files
            ["format", "--check", "--quiet", "--no-cache", "."],
        ],
        project,
    )
    if fixes:
        # Remaining lint findings are the user's to see in their editor, not a generation failure.
        _ruff(ruff, ["check", "--fix", "--exit-zero", "--quiet", "--no-cache", "."], project)
    if fixes or reformat:  # fixes may leave code the formatter would change
        _ruff(ruff, ["format", "--quiet", "--no-cache", "."], project)
    return fixes or reformat


def _configured(pattern: str, project: Path) -> str:
    """The git settings matching ``pattern`` that apply in ``project`` ("name value" lines,
    lowercased; "" for none)."""
    try:
        return run_git("config", "--get-regexp", pattern, cwd=project).lower()
    except GitError:  # git config exits 1 when nothing matches
        return ""


def git_init(project: Path) -> list[str]:
    """Make ``project`` a git repository; the ``-c`` options its first commit needs."""
    init = ["init", "--quiet"]
    if "init.defaultbranch" not in _configured(r"^init\.defaultbranch$", project):
        init.append("--initial-branch=main")  # also silences git's hint about the default
    run_git(*init, cwd=project)
    # Asked in the new repository, which the commit uses: an enclosing repository's identity
    # (project generated inside another checkout) does not apply there.
    identity = _configured(r"^user\.(name|email)$", project)
    if "user.name" in identity and "user.email" in identity:
        return []
    name, email = FALLBACK_IDENTITY
    return ["-c", f"user.name={name}", "-c", f"user.email={email}"]


def git_add_all(project: Path) -> None:
    """Stage every file of ``project``."""
    run_git("add", "--all", cwd=project)


def git_commit(project: Path, message: str, options: Sequence[str] = ()) -> None:
    """Commit what is staged (the generated code, as the project's first commit)."""
    # No hooks or signing: they belong to the user's later commits, not to generated code.
    # No automatic maintenance either: a repository of one commit has nothing to pack.
    run_git(
        *options,
        "-c",
        "maintenance.auto=false",
        "commit",
        "--quiet",
        "--no-verify",
        "--no-gpg-sign",
        "-m",
        message,
        cwd=project,
    )


def commit_rendered(
    project: Path, project_name: str, template_version: str, options: Sequence[str] = ()
) -> None:
    """Format the rendered files and make them the first commit of the repository that
    ``git_init`` made (``options``: what it returned)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        formatting = pool.submit(format_project, project)
        # git reads the files while ruff only checks them; in the rare case that ruff then
        # rewrites some, they are staged again.
        git_add_all(project)
        if formatting.result():
            git_add_all(project)
    git_commit(project, f"Generate {project_name} from hermes-envgen {template_version}", options)


def run(project: Path, project_name: str, template_version: str) -> None:
    """Everything that follows rendering: format, ``git init``, the first commit."""
    commit_rendered(project, project_name, template_version, git_init(project))


def rendered_from(project: Path) -> tuple[str, str]:
    """The project's name and the template version copier recorded in .copier-answers.yml."""
    try:
        answers = yaml.safe_load((project / ".copier-answers.yml").read_text())
    except (OSError, yaml.YAMLError):
        answers = None
    answers = answers if isinstance(answers, dict) else {}
    name = answers.get("project_name") or project.name
    return str(name), str(answers.get("_commit") or "(version unknown)")


def main(argv: list[str]) -> int:
    """``post_gen_project.py PROJECT_DIR``: format and commit a project ``copier copy`` made."""
    if len(argv) != 1 or not Path(argv[0]).is_dir():
        print("usage: post_gen_project.py PROJECT_DIR", file=sys.stderr)
        return 2
    project = Path(argv[0]).resolve()
    name, version = rendered_from(project)
    try:
        run(project, name, version)
    except (HermesEnvgenError, OSError) as exc:
        return report(exc)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
