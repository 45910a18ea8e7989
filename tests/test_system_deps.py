"""scripts/apt-get-waiting.sh: set-up waits, bounded, for a package manager's lock another
process holds, instead of going without the system packages.

Run as root with apt-get (as set-up does); ``apt-get check`` takes dpkg's lock and needs no
network. The lock is held the way dpkg and apt hold it: an fcntl lock on lock-frontend.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "scripts" / "apt-get-waiting.sh"
LOCK = Path("/var/lib/dpkg/lock-frontend")

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("apt-get") or not LOCK.exists(),
    reason="needs root and apt-get (as set-up does)",
)


def hold_lock(seconds: float) -> threading.Event:
    """Hold dpkg's frontend lock from this process for ``seconds``; the event says it is held."""
    held = threading.Event()

    def hold() -> None:
        with LOCK.open("w") as lock:
            fcntl.lockf(lock, fcntl.LOCK_EX)
            held.set()
            time.sleep(seconds)

    threading.Thread(target=hold, daemon=True).start()
    assert held.wait(10)
    return held


def apt_get_waiting(*args: str, wait: int) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["sh", str(SCRIPT), *args],
        env={**os.environ, "HERMES_ENVGEN_APT_LOCK_WAIT": str(wait)},
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.slow
def test_a_held_lock_is_waited_for_and_said_once():
    hold_lock(4)
    result = apt_get_waiting("check", wait=60)
    assert result.returncode == 0, result.stderr
    waiting = [line for line in result.stderr.splitlines() if "waiting for" in line]
    assert len(waiting) == 1, result.stderr
    assert f"held by process {os.getpid()}" in waiting[0] and "up to 60 s" in waiting[0]
    assert "Could not get lock" not in result.stderr  # the retries' errors are not shown


def test_a_lock_held_past_the_bound_is_apt_gets_error_and_one_line():
    hold_lock(8)
    started = time.monotonic()
    result = apt_get_waiting("check", wait=1)
    assert time.monotonic() - started < 30
    assert result.returncode == 100, result.stderr  # apt-get's own exit code
    assert "Could not get lock" in result.stderr
    assert result.stderr.rstrip().endswith("the package manager's lock is still held after 1 s")


def test_other_failures_are_not_retried():
    started = time.monotonic()
    result = apt_get_waiting("no-such-command", wait=60)
    assert result.returncode == 100 and "waiting" not in result.stderr
    assert time.monotonic() - started < 30
