"""Helpers of the generator tests (a module of its own: conftest.py is not importable)."""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
PUBLIC_URL = "https://github.com/hermes-envgen/hermes-envgen.git"
VERSION_TAG = "v0.1.0"

RunCli = Callable[..., subprocess.CompletedProcess]


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
