"""The docker backend's kept channel under a hostile agent: killed, stopped, flooded, probed.

Whatever the agent does to the channel's in-container agent, the call under way is a tool
error (never a result), the next call gets a new channel, the rollout's other tools (the
python interpreter) keep their state, verification gets a channel the agent never touched,
and nothing is left on the host (no docker client, no descriptor).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import os
import subprocess
from collections.abc import Iterator

import pytest
from helpers.sandbox import docker_test_image, make_manager, needs_docker

from hermes_envgen.runtime.errors import SandboxError
from hermes_envgen.runtime.sandbox.docker.channel import ChannelGone
from hermes_envgen.runtime.tools.interpreter import PythonSettings, _interpreters, run_python

pytestmark = [needs_docker, pytest.mark.slow, pytest.mark.timeout(300)]

# The channel's agent as the sandbox's processes find it: by the name it gives itself.
FIND_AGENT = (
    "for p in /proc/[0-9]*; do grep -qx sandbox-channel $p/comm 2>/dev/null"
    " && echo ${p#/proc/}; done"
)


def clients_of(container: str) -> list[int]:
    """This test process's children that are docker clients of ``container`` (none after)."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                parent = int(file.read().rsplit(b")", 1)[1].split()[1])
            with open(f"/proc/{name}/cmdline", "rb") as file:
                argv = file.read().split(b"\0")
        except OSError:
            continue
        if parent == os.getpid() and container.encode() in argv:
            found.append(int(name))
    return found


def test_an_agent_that_kills_the_channel_gets_a_tool_error_and_a_new_channel(tmp_path):
    manager = make_manager(tmp_path, "docker", command_timeout=30)
    own_fds = len(os.listdir("/proc/self/fd"))
    settings = PythonSettings(timeout=20)

    async def main():
        sandbox = manager.get("killed")
        try:
            await run_python(sandbox, "kept = 41", settings)
            first = sandbox._channel
            # The command that kills the agent loses its own result with it.
            with pytest.raises(ChannelGone) as caught:
                await sandbox.run(f"for pid in $({FIND_AGENT}); do kill -9 $pid; done; sleep 5")
            after = await sandbox.run("echo other commands work")
            state = await run_python(sandbox, "kept + 1", settings)  # the interpreter lives on
            files = await sandbox.list_files()
            replaced = sandbox._channel is not first and sandbox.channels_started == 2
            during = clients_of(sandbox.container)
            return str(caught.value), after, state, files, replaced, during, sandbox.container
        finally:
            await manager.close_all()
            _interpreters[sandbox].drop()  # what a rollout's clean-up does (no context here)

    error, after, state, files, replaced, during, container = asyncio.run(main())
    assert "channel ended under the call" in error and "new channel" in error
    assert after.output == "other commands work\n" and after.exit_code == 0
    assert state.get("result") == "42" and "notice" not in state, state
    assert files == [] and replaced
    assert len(during) == 1  # the new channel's client alone
    assert clients_of(container) == []
    assert len(os.listdir("/proc/self/fd")) == own_fds


def test_an_agent_that_stops_the_channel_gets_a_tool_error_and_verification_a_new_one(tmp_path):
    manager = make_manager(tmp_path, "docker", command_timeout=30)

    async def main():
        sandbox = manager.get("stopped")
        sandbox.channel_answer_timeout = 2.0
        try:
            await sandbox.write_bytes("answer.txt", b"42\n")
            # Stopped, the agent relays nothing: not this command's end, nor its kill.
            with pytest.raises(SandboxError):
                await sandbox.run(f"kill -STOP $({FIND_AGENT})", timeout=2)
            after = await sandbox.run(f"echo works; grep State /proc/$({FIND_AGENT})/status")
            await manager.stop_agent_processes("stopped")
            verified = await sandbox.run("cat answer.txt")
            stopped_left = await sandbox.run("grep -l '^State:.*T' /proc/[0-9]*/status; true")
            return after, verified, stopped_left, sandbox.channels_started, sandbox.container
        finally:
            await manager.close_all()

    after, verified, stopped_left, started, container = asyncio.run(main())
    assert after.output.startswith("works\nState:\tS"), after  # a new agent, running
    assert verified.output == "42\n"
    assert stopped_left.output == ""  # the stopped agent was killed, not left behind
    assert started == 3  # the first, the one after the stop, verification's own
    assert clients_of(container) == []


def test_a_flood_on_the_channel_holds_up_no_other_call(tmp_path):
    manager = make_manager(tmp_path, "docker", command_timeout=30, max_output_bytes=1000)

    async def main():
        sandbox = manager.get("flood")
        try:
            await sandbox.start()
            flood = asyncio.ensure_future(sandbox.run("cat /dev/zero", timeout=20))
            # Wait until the flood runs (its bytes are on the channel), then call others.
            await sandbox.run("until pgrep -x cat >/dev/null; do sleep 0.05; done")
            small = await sandbox.run("echo small")
            state = await run_python(sandbox, "sum(range(10))", PythonSettings(timeout=20))
            await sandbox.write_bytes("f.bin", os.urandom(3 << 20))
            read = await sandbox.read_bytes("f.bin", limit=4 << 20)
            flooding = not flood.done()
            flood.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await flood
            left = await sandbox.run("pgrep -x cat; true")
            return small, state, len(read), flooding, left, sandbox.channels_started
        finally:
            await manager.close_all()

    small, state, read, flooding, left, started = asyncio.run(main())
    assert flooding  # the others were answered while the flood went on
    assert small.output == "small\n"
    assert state.get("result") == "45"
    assert read == 3 << 20
    assert left.output == ""  # the cancelled call's command was killed
    assert started == 1


def test_the_sandboxs_processes_cannot_reach_the_channels_descriptors(tmp_path):
    manager = make_manager(tmp_path, "docker", command_timeout=30)
    probe = (
        f"pid=$({FIND_AGENT}); for what in fd/0 fd/1 environ mem; do"
        " (exec 3>/proc/$pid/$what) 2>/dev/null && echo open $what;"
        " cat /proc/$pid/$what >/dev/null 2>&1 && echo read $what; done;"
        " grep -c . /proc/$pid/comm"
    )

    async def main():
        sandbox = manager.get("probe")
        try:
            return await sandbox.run(probe)
        finally:
            await manager.close_all()

    result = asyncio.run(main())
    assert result.output == "1\n", result  # the agent is there, and nothing of it opens


@pytest.fixture(scope="module")
def image_without_python() -> Iterator[str]:
    """The test image with python3 deleted (bash and the rest still there)."""
    name = f"hermes-envgen-nopython-{os.getpid()}"
    image = f"hermes-envgen-test-nopython:{os.getpid()}"
    docker = functools.partial(subprocess.run, capture_output=True, timeout=120, check=True)
    docker(["docker", "run", "--name", name, "--user", "0", "--entrypoint", "sh",
            docker_test_image(), "-c", "rm -f /usr/bin/python3*"])  # fmt: skip
    try:
        docker(["docker", "commit", name, image])
    finally:
        docker(["docker", "rm", "--force", name])
    yield image
    subprocess.run(["docker", "rmi", image], capture_output=True, timeout=60, check=False)


def test_an_image_without_python_runs_every_command_by_docker_exec(
    tmp_path, image_without_python, caplog
):
    manager = make_manager(tmp_path, "docker", docker_image=image_without_python)

    async def main():
        sandbox = manager.get("no-python")
        try:
            ran = await sandbox.run("echo by exec; command -v python3 || echo no python3")
            await sandbox.write_bytes("f.txt", b"data")
            read = await sandbox.read_bytes("f.txt")
            again = await sandbox.run("echo again")
            return ran, read, again, sandbox.channels_started
        finally:
            await manager.close_all()

    with caplog.at_level(logging.WARNING):
        ran, read, again, started = asyncio.run(main())
    assert ran.output == "by exec\nno python3\n" and read == b"data"
    assert again.output == "again\n" and started == 0
    said = [r.getMessage() for r in caplog.records if "docker exec (slower)" in r.getMessage()]
    assert len(said) == 1 and "python3" in said[0], said  # said once, with the reason
