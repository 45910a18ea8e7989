"""Shared helpers of the benchmark scripts: a stub server in its own process, and medians."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path


@contextmanager
def stub_server_process(script: dict) -> Iterator[str]:
    """Run ``hermes-envgen stub-server`` in its own process (no GIL shared with the client)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "script.json"
        path.write_text(json.dumps(script))
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "hermes_envgen",
                "stub-server",
                "--script",
                str(path),
                "--port",
                "0",
            ],
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            line = process.stdout.readline()
            if "listening on" not in line:
                raise RuntimeError(f"stub server did not start: {line!r}")
            yield line.rsplit(" ", 1)[-1].strip()
        finally:
            process.terminate()
            process.wait(10)


def median_ratio(pairs: list[tuple[float, float]]) -> float:
    """The median of a/b over measured pairs."""
    return statistics.median(a / b for a, b in pairs)


@contextmanager
def baseline_checkout(revision: str) -> Iterator[Path]:
    """The ``src`` directory of ``revision`` of this repository, extracted into a temporary
    directory: put it first on PYTHONPATH to run that revision's code beside this one's. Its
    ``examples`` are extracted beside it (``../examples``), as they import that code."""
    repository = Path(__file__).resolve().parents[1]
    with tempfile.TemporaryDirectory(prefix="bench-baseline.") as tmp:
        archive = subprocess.run(
            ["git", "-C", str(repository), "archive", revision, "src", "examples"],
            capture_output=True,
            check=True,
        )
        subprocess.run(["tar", "-x", "-C", tmp], input=archive.stdout, check=True)
        yield Path(tmp) / "src"


CPUACCT = Path("/sys/fs/cgroup/cpuacct")


@contextmanager
def cpuacct_cgroup(name: str) -> Iterator[Path | None]:
    """A fresh cpuacct cgroup (v1) below the root, removed after; None where there is none to
    make (not root, cgroup v2). A process moves itself in with ``join_cgroup``; everything it
    starts is then counted in ``cpuacct.usage``, sandboxes included (their own cgroups are in
    other hierarchies), but not the kernel's deferred work (a network namespace's teardown)."""
    directory = CPUACCT / name
    try:
        directory.mkdir()
    except OSError:
        yield None
        return
    try:
        yield directory
    finally:
        for _ in range(100):
            try:
                directory.rmdir()
                break
            except OSError:
                import time

                time.sleep(0.05)


def join_cgroup(directory: str | Path) -> None:
    """Move this process into a cgroup."""
    (Path(directory) / "cgroup.procs").write_text(str(__import__("os").getpid()))


def cpu_usage_seconds(directory: str | Path | None) -> float:
    """The CPU time of a cpuacct cgroup's processes so far (0.0 without one)."""
    if directory is None:
        return 0.0
    return int((Path(directory) / "cpuacct.usage").read_text()) / 1e9
