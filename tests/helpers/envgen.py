"""Helpers of the generator tests (a module of its own: conftest.py is not importable)."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pexpect
import yaml
from packaging.version import Version

from hermes_envgen.generate.source import package_version

REPO = Path(__file__).resolve().parents[2]
PUBLIC_URL = "https://github.com/hermes-envgen/hermes-envgen.git"
# This checkout's version as a release tag, and the release after it: test template repositories
# tag them, so that `new` renders VERSION_TAG by default and `update` has a newer one.
VERSION_TAG = f"v{package_version()}"
_MAJOR, _MINOR = Version(package_version()).release[:2]
NEW_TAG = f"v{_MAJOR}.{_MINOR + 1}.0"

RunCli = Callable[..., subprocess.CompletedProcess]

# What a copy of the source tree leaves out: git, venvs, builds and caches.
NOT_SOURCE = shutil.ignore_patterns(
    ".git", ".venv", "dist", "build", "*.egg-info", "__pycache__", "*.pyc",
    ".pytest_cache", ".ruff_cache", ".hypothesis", ".mypy_cache", "_template",
)  # fmt: skip

ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
PROMPT_STARTS = r"\x1b\[\?2004h"  # prompt_toolkit turns on bracketed paste as each prompt opens
QUESTION = re.compile(r"🎤(?:\x1b\[[0-9;]*m)*\s*(.*?)\x1b\[0m")


def answers_of(project: Path) -> dict:
    """The answers file of a generated project."""
    return yaml.safe_load((project / ".copier-answers.yml").read_text())


def git(project: Path, *args: str, env: dict[str, str] | None = None) -> str:
    """Run git in ``project`` and return its stdout (fail the test on an error)."""
    result = subprocess.run(
        ["git", *args], cwd=project, env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


def assert_one_line_error(result: subprocess.CompletedProcess, code: int, fragment: str) -> None:
    """The CLI failed with ``code`` and one line on stderr that contains ``fragment``."""
    assert result.returncode == code, (result.stdout, result.stderr)
    assert "Traceback" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("error: ") and fragment in lines[0], lines[0]


def spawn_new(tmp_path: Path, cli_env: dict[str, str], *args: str) -> pexpect.spawn:
    """``hermes-envgen new`` on a pseudo-terminal, as a person would run it."""
    return pexpect.spawn(
        sys.executable,
        ["-m", "hermes_envgen", "new", *args],
        cwd=str(tmp_path),
        # No cursor-position requests: a pexpect terminal never answers them (1 s wait each).
        env={**cli_env, "TERM": "xterm", "PROMPT_TOOLKIT_NO_CPR": "1"},
        encoding="utf-8",
        timeout=60,
        dimensions=(50, 250),
    )


@dataclass(frozen=True)
class TemplateRelease:
    """The tagged template repository of this module, its bundle and the file it changes."""

    repo: Path
    bundle: Path
    doc: str  # the rendered file whose template gets a line appended in NEW_TAG
    comment: str  # how that file writes a line the user or template adds


TEMPLATE_LINE = f"Template change in {NEW_TAG}."


NEW_FILE = "CHANGES.md"


def commit_and_tag(repo: Path, tag: str) -> None:
    git(repo, "add", "--all")
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "--quiet", "-m", tag)
    git(repo, "tag", tag)
