"""Run ``hermes-envgen check`` on a project and read its rows; the scripted model of its
tool-call rows."""

from __future__ import annotations

import os
import subprocess
import sys

from conftest import TRAINERS_DIRECTORY


def run_check(
    *args: str, timeout: float = 600, trainers: bool = True
) -> subprocess.CompletedProcess:
    """``check`` in a subprocess; ``trainers``: with the trainers' libraries the doors' tests
    use (openenv-core, in .venv-trl), as a project with the openenv extra has them."""
    environment = dict(os.environ)
    if trainers and TRAINERS_DIRECTORY.is_dir():
        paths = [environment.get("PYTHONPATH", ""), str(TRAINERS_DIRECTORY)]
        environment["PYTHONPATH"] = os.pathsep.join(p for p in paths if p)
    return subprocess.run(
        [sys.executable, "-m", "hermes_envgen", "check", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        env=environment,
    )


def rows(result) -> dict[str, str]:
    table = {}
    for line in result.stdout.splitlines():
        status, _, rest = line.partition("  ")
        if status in ("PASS", "FAIL", "WARN"):
            table[rest.strip().split("  ")[0]] = status
    return table


# The example env's tasks, each solved with calls whose arguments are spaced as llama.cpp's
# server returns them (not as json.dumps would write them).
SCRIPT = {
    "conversations": [
        {
            "match": task,
            "turns": [
                {"tool_calls": [{"name": "terminal", "arguments": command}]},
                {"content": "Done."},
            ],
        }
        for task, command in (
            ("greeting.txt", '{ "command": "echo hello > greeting.txt" }'),
            ("count.txt", '{ "command":"wc -l < numbers.txt > count.txt" }'),
            ("sorted.txt", '{\n  "command": "sort names.txt > sorted.txt"\n}'),
        )
    ]
}
