"""The docker channel's agent as it boots, run locally (no engine needed): ``docker exec``
starts the same command line in the container, as the agent's user."""

from __future__ import annotations

import os
import subprocess

import pytest
from helpers.sandbox import eventually

from hermes_envgen.runtime.sandbox.docker.channel import boot_command, server_source

PYTHON3 = "/usr/bin/python3"
NOBODY = 65534  # the docker backend's AGENT_USER


@pytest.mark.skipif(
    not os.path.exists(PYTHON3) or os.geteuid() != 0, reason="needs root and /usr/bin/python3"
)
def test_the_channel_agent_is_non_dumpable_before_it_reads_its_program(tmp_path):
    """While it waits for its program on stdin, the agent's /proc entries are root's (it is
    non-dumpable), not its user's: a process of that user can neither open its stdin nor
    ptrace it. Given the program, it greets as ever."""
    agent = subprocess.Popen(
        [PYTHON3, *boot_command()[1:]],
        stdin=subprocess.PIPE, stdout=subprocess.PIPE, cwd=tmp_path,
        user=NOBODY, group=NOBODY, extra_groups=[],
    )  # fmt: skip
    try:
        assert eventually(lambda: os.stat(f"/proc/{agent.pid}/fd").st_uid == 0), (
            "the agent stayed dumpable while it waited for its program"
        )
        agent.stdin.write(server_source())
        agent.stdin.flush()
        header = agent.stdout.read(9)
        assert header[8:9] == b"R", header  # its greeting: ready, with its pid
    finally:
        agent.kill()
        agent.wait(10)
