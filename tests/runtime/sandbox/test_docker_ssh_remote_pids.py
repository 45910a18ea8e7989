"""What the docker backend must not assume of an engine that is not dockerd on this machine.

A remote engine's container pid is not a process here: the host-side kill leaves it alone.

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

from hermes_envgen.runtime.sandbox.docker.engine import start_failure

needs_pid_namespace = pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None,
    reason="a pid namespace of its own needs root and unshare",
)

SCRIPT = textwrap.dedent(
    """
    import subprocess
    from hermes_envgen.runtime.sandbox.docker.engine import kill_container_processes

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


@needs_pid_namespace
def test_a_pid_of_another_hosts_container_kills_nothing_here():
    assert run_in_own_pid_namespace("f" * 64) == "alive"


def test_an_engines_refusal_is_named_not_the_clis_help_hint():
    # docker CLI 28's output when the engine (here Podman 4.3) refuses a container
    output = (
        'docker: Error response from daemon: container create: unknown mount option "nr_inodes'
        "=65536\": invalid mount option\n\nRun 'docker run --help' for more information\n"
    )
    message = start_failure(output, "img")
    assert message.endswith('unknown mount option "nr_inodes=65536": invalid mount option'), message
