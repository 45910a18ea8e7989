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
