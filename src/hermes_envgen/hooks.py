"""Post-generation work the CLI does on a freshly rendered project: format it, then commit it.

These are not copier ``_tasks``: tasks would make the template "unsafe", so that every plain
``copier update`` needed ``--trust``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

# Used only when git has no identity configured (a fresh CI machine, a container).
FALLBACK_IDENTITY = ("hermes-envgen", "hermes-envgen@localhost")


class HookError(RuntimeError):
    """A post-generation step failed; the message carries the command's own error."""


def _run(command: Sequence[str], project: Path, *, check: bool = True) -> str:
    """Run a command quietly in the project; return its stdout, raise HookError if it fails."""
    try:
        result = subprocess.run(
            list(command),
            cwd=project,
            capture_output=True,
            text=True,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except OSError as exc:
        raise HookError(f"cannot run {command[0]}: {exc}") from exc
    if check and result.returncode != 0:
        detail = (result.stderr.strip() or result.stdout.strip()).splitlines()
        raise HookError(f"`{' '.join(command[:2])}` failed: {detail[-1] if detail else '?'}")
    return result.stdout


def find_ruff() -> str | None:
    """The ruff executable beside this Python (an unactivated venv) or on PATH, if any."""
    beside = Path(sys.executable).parent / ("ruff.exe" if os.name == "nt" else "ruff")
    if beside.is_file():
        return str(beside)
    return shutil.which("ruff")


def format_project(project: Path) -> bool:
    """Apply ruff's safe fixes, then its formatter, if ruff is installed; whether it ran.

    A template renders ruff-clean code, so this normally changes nothing; it is a safety net
    for answers that produce long lines. ``--no-cache`` keeps ``.ruff_cache`` out of the commit.
    """
    ruff = find_ruff()
    if ruff is None:
        return False
    # Remaining lint findings are the user's to see in their editor, not a generation failure.
    _run([ruff, "check", "--fix", "--exit-zero", "--quiet", "--no-cache", "."], project)
    _run([ruff, "format", "--quiet", "--no-cache", "."], project)
    return True


def git_init(project: Path) -> list[str]:
    """Make ``project`` a git repository; the ``-c`` options its first commit needs."""
    configured = _run(
        ["git", "config", "--get-regexp", r"^(user\.name|user\.email|init\.defaultbranch)$"],
        project,
        check=False,
    ).lower()
    init = ["git", "init", "--quiet"]
    if "init.defaultbranch" not in configured:
        init.append("--initial-branch=main")  # also silences git's hint about the default
    _run(init, project)
    if "user.name" in configured and "user.email" in configured:
        return []
    name, email = FALLBACK_IDENTITY
    return ["-c", f"user.name={name}", "-c", f"user.email={email}"]


def git_commit_all(project: Path, message: str, options: Sequence[str] = ()) -> None:
    """Commit every file of ``project`` (the generated code as its first commit)."""
    _run(["git", "add", "--all"], project)
    # No hooks or signing: they belong to the user's later commits, not to generated code.
    _run(
        ["git", *options, "commit", "--quiet", "--no-verify", "--no-gpg-sign", "-m", message],
        project,
    )


def run_post_generation(project: Path, project_name: str, template_version: str) -> None:
    """Everything ``hermes-envgen new`` does after copier rendered ``project``."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        formatting = pool.submit(format_project, project)
        options = git_init(project)  # writes only .git/: it may overlap ruff's rewrites
        formatting.result()
    git_commit_all(
        project, f"Generate {project_name} from hermes-envgen {template_version}", options
    )
