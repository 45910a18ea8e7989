"""git, run one way for everything generation does: reads, isolated writes, the version check.

Standard library only: the wheel's build hook imports this (through ``bundle``) with nothing
but hatchling and git at hand.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from functools import cache
from pathlib import Path

from hermes_envgen.errors import GitError

MIN_GIT = (2, 31)  # GIT_CONFIG_COUNT/KEY/VALUE, which the template redirection relies on


def isolated_environment(extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The environment for git writes of our own: no user/system config, no inherited GIT_*."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("GIT_")}
    env.update(GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL=os.devnull, GIT_TERMINAL_PROMPT="0")
    env.update(extra or {})
    return env


def one_line(text: str) -> str:
    """Whitespace collapsed, so that a message prints on one line."""
    return " ".join(str(text).split())


def run_git(
    *args: str,
    cwd: Path | str | None = None,
    env: Mapping[str, str] | None = None,
    stdin: str | None = None,
    isolated: bool = False,
) -> str:
    """Run git and return its stdout; GitError with git's own message when it fails.

    ``isolated`` (for repositories of our own making) ignores the user's git config and GIT_*
    variables; otherwise they apply (``safe.directory``, identity), with ``env`` added.
    """
    environment = isolated_environment(env) if isolated else {**os.environ, **(env or {})}
    feed = {"input": stdin} if stdin is not None else {"stdin": subprocess.DEVNULL}
    try:
        result = subprocess.run(
            ["git", *args], cwd=cwd, env=environment, capture_output=True, text=True, **feed
        )
    except FileNotFoundError as exc:
        raise GitError("git is needed to generate and update projects, and was not found") from exc
    if result.returncode != 0:
        message = one_line(result.stderr or result.stdout) or f"exit code {result.returncode}"
        raise GitError(f"git {subcommand(args)} failed: {message}")
    return result.stdout


def subcommand(args: tuple[str, ...] | list[str]) -> str:
    """The git command in ``args`` (``commit`` of ``-c k=v commit -m x``), for messages."""
    rest = list(args)
    while rest and rest[0].startswith("-"):
        option = rest.pop(0)
        if option in ("-c", "-C", "--git-dir", "--work-tree") and rest:
            rest.pop(0)  # the option's value
    return rest[0] if rest else " ".join(args)


@cache
def check_git() -> None:
    """Fail clearly when git is missing or too old for the environment-only redirection."""
    output = run_git("version")
    found = re.search(r"(\d+)\.(\d+)", output)
    if found and (int(found[1]), int(found[2])) < MIN_GIT:
        need = ".".join(map(str, MIN_GIT))
        raise GitError(f"git >= {need} is needed, found {output.strip()}")
