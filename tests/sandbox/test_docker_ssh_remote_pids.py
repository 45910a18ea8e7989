"""A remote engine's container pid is not a process here: the host-side kill leaves it alone.

``docker inspect`` gives the container's init pid as the engine's host numbers it. With the
engine on another machine (``tcp://``, ``ssh://``) that number names whatever process has it
here, and killing "every process in its pid namespace but init" would then kill every
process of this host's namespace. Run in a pid namespace of its own (``unshare``), so that a
regression kills only the test's own ``sleep``s.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a pid namespace of its own needs root and unshare",
)

SCRIPT = textwrap.dedent(
    """
    import subprocess
    from hermes_envgen.runtime.sandbox.docker_engine import kill_container_processes

    init = subprocess.Popen(["sleep", "120"])  # the pid a remote engine reported
    other = subprocess.Popen(["sleep", "120"])  # a process of this host, not of a container
    kill_container_processes(init.pid, "{container}")
    print("alive" if other.poll() is None and init.poll() is None else "killed")
    for process in (init, other):
        process.kill()
    """
)


def run_in_own_pid_namespace(container: str) -> str:
    done = subprocess.run(
        ["unshare", "--pid", "--fork", "--mount-proc", "timeout", "-s", "KILL", "60",
         sys.executable, "-c", SCRIPT.format(container=container)],
        capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_a_pid_of_another_hosts_container_kills_nothing_here():
    assert run_in_own_pid_namespace("f" * 64) == "alive"
