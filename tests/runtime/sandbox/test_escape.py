"""Escape attempts against the sandboxes: each must fail or be cut off, the host unharmed.

Run on ``local`` where the attack applies to it (tool path confinement, secrets, timeouts,
output floods: local isolates nothing else) and on ``bwrap`` and ``docker`` (all of them).
"""

from __future__ import annotations

import asyncio
import hashlib
import os
import resource
import socket
import subprocess
import threading
import time
import uuid
from pathlib import Path

import pytest
from helpers.sandbox import (
    BWRAP,
    DOCKER,
    LOCAL,
    alive,
    descendants,
    eventually,
    make_manager,
    namespace_members,
    processes_running,
    sleep_mark,
    sleep_needle,
)

from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.tools import ToolExecutionError

ALL = [LOCAL, BWRAP, DOCKER]
ISOLATED = [BWRAP, DOCKER]  # the backends that promise isolation
TOOL_CALLS = [
    ("read_file", {}),
    ("write_file", {"content": "pwned"}),
    ("patch", {"old_text": "root", "new_text": "pwned"}),
    ("search_files", {"pattern": "."}),
]
REPO = Path(__file__).resolve().parents[3]


def digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def workspace_on_host(sandbox, tmp_path: Path) -> Path:
    """Where a sandbox's workspace lies on the host (a stand-in for docker's, kept in its
    container: the agent must not reach it either way)."""
    return getattr(sandbox, "workspace", tmp_path / "elsewhere")


def pid_namespace(sandbox) -> str:
    """The PID namespace of a started bwrap or docker sandbox, as /proc/<pid>/ns/pid reads."""
    if sandbox.settings.backend == "docker":
        pid = subprocess.run(
            ["docker", "inspect", "--format", "{{.State.Pid}}", sandbox.container],
            capture_output=True,
            text=True,
            timeout=30,
            check=True,
        ).stdout.strip()
    else:
        pid = sandbox._anchor.target
    return os.readlink(f"/proc/{pid}/ns/pid")


# -- files, through the tools ------------------------------------------------------------------


@pytest.mark.parametrize("backend", ALL)
def test_file_tools_refuse_every_way_out_of_the_workspace(backend, tmp_path):
    secret = tmp_path / "secret.txt"
    secret.write_text("host secret\n")
    planted = Path("/tmp") / f"hermes-escape-{uuid.uuid4().hex}"  # must never be created
    manager = make_manager(tmp_path, backend)

    async def main() -> list[tuple[str, str, str]]:
        ctx = ToolContext("attacker", manager)
        other = ToolContext("victim", manager)
        await other.write_file("victim.txt", "victim data\n")
        victim_file = workspace_on_host(other.sandbox, tmp_path) / "victim.txt"
        # links the agent makes itself, from inside its sandbox
        made = await ctx.terminal(
            "ln -s /etc/passwd passwd_link; ln -s / root_link; ln -s ../../.. up_link;"
            f" ln -s {secret} host_link; ln -s {victim_file.parent} victim_link;"
            f" ln -s {planted} planted_link; ln -s /workspace/../etc/passwd sneaky_link;"
            " mkdir -p d && ln -s /etc d/etc_link"
        )
        assert made["exit_code"] == 0, made
        attempts = [
            "../secret.txt",
            "sub/../../secret.txt",
            "/etc/passwd",
            str(secret),
            str(victim_file),
            "/workspace/../etc/passwd",
            "passwd_link",
            "root_link/etc/passwd",
            "up_link/etc/passwd",
            "host_link",
            "victim_link/victim.txt",
            "planted_link",
            "sneaky_link",
            "d/etc_link/passwd",
        ]
        refused = []
        for path in attempts:
            for name, arguments in TOOL_CALLS:
                with pytest.raises(ToolExecutionError, match="outside the workspace") as caught:
                    await ctx.call_tool(name, {"path": path, **arguments})
                refused.append((name, path, str(caught.value)))
        victim_after = await other.read_file("victim.txt")
        await manager.close_all()
        return refused, victim_after

    passwd, shadowless = digest("/etc/passwd"), digest(secret)
    refused, victim_after = asyncio.run(main())
    assert len(refused) == 14 * len(TOOL_CALLS)
    assert digest("/etc/passwd") == passwd and digest(secret) == shadowless
    assert victim_after == "victim data\n"
    assert not planted.exists()


# -- the host's files, through the shell --------------------------------------------------------


@pytest.mark.parametrize("backend", ISOLATED)
def test_shell_commands_see_nothing_of_the_host(backend, tmp_path):
    manager = make_manager(tmp_path, backend)
    project = (REPO / "pyproject.toml").read_text()

    async def main() -> dict[str, dict]:
        attacker = ToolContext("attacker", manager)
        victim = ToolContext("victim", manager)
        await victim.write_file("victim.txt", "victim data\n")
        other = workspace_on_host(victim.sandbox, tmp_path)
        commands = {
            "repo": f"cat {REPO / 'pyproject.toml'}",
            "home": "cat ~/.bashrc; cat /root/.bashrc; ls /root /home /work",
            "write_usr": "touch /usr/hermes-escape && echo WROTE",
            "write_etc": "touch /etc/hermes-escape && echo WROTE",
            "write_root": "touch /hermes-escape && echo WROTE",
            "victim_read": f"cat {other}/victim.txt; ls {other.parent}",
            "victim_write": f"echo pwned > {other}/pwned && echo WROTE",
            "venv": "python3 -c 'import hermes_envgen' 2>&1; ls /work/main/.venv",
            "mount": "mount -t tmpfs none /workspace/m 2>&1 || echo refused",
            "shadow": "cat /etc/shadow",
        }
        results = {name: await attacker.terminal(command) for name, command in commands.items()}
        await manager.close_all()
        return results, other

    results, other = asyncio.run(main())
    assert "[project]" not in results["repo"]["output"] and results["repo"]["exit_code"] != 0
    assert project.splitlines()[0] not in results["repo"]["output"]
    assert results["home"]["exit_code"] != 0
    for name in ("write_usr", "write_etc", "write_root", "victim_write"):
        assert "WROTE" not in results[name]["output"], results[name]
    assert not Path("/usr/hermes-escape").exists() and not Path("/etc/hermes-escape").exists()
    assert "victim data" not in results["victim_read"]["output"]
    assert "ModuleNotFoundError" in results["venv"]["output"]
    assert "refused" in results["mount"]["output"]
    assert "root:" not in results["shadow"]["output"]
    assert not (other / "pwned").exists()


# -- secrets ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ALL)
def test_host_api_keys_are_not_visible(backend, tmp_path, monkeypatch):
    secrets = {
        "OPENAI_API_KEY": "sk-host-secret-openai",
        "ANTHROPIC_API_KEY": "sk-host-secret-anthropic",
        "HF_TOKEN": "hf-host-secret",
        "WANDB_API_KEY": "wandb-host-secret",
    }
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    manager = make_manager(tmp_path, backend)
    commands = ["env", "cat /proc/self/environ", "set"]
    if backend != "local":  # every process it can see; local isolates no /proc
        commands.append("cat /proc/[0-9]*/environ 2>/dev/null; ps eww -e 2>/dev/null")

    async def main() -> list[str]:
        sandbox = manager.get("s")
        outputs = [(await sandbox.run(command)).output for command in commands]
        await manager.close_all()
        return outputs

    outputs = asyncio.run(main())
    assert "PATH=" in outputs[0]
    for output in outputs:
        for name, value in secrets.items():
            assert value not in output and f"{name}=" not in output


# -- network ---------------------------------------------------------------------------------------


class Listener:
    """A TCP listener on the host's 127.0.0.1 that counts the connections it accepts."""

    def __init__(self) -> None:
        self.socket = socket.create_server(("127.0.0.1", 0))
        self.socket.settimeout(0.1)
        self.port = self.socket.getsockname()[1]
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                connection, _ = self.socket.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            connection.sendall(b"hello from the host\n")
            connection.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.socket.close()


@pytest.mark.parametrize("backend", ISOLATED)
def test_a_listener_on_the_host_loopback_is_unreachable(backend, tmp_path):
    listener = Listener()
    connect = (
        "python3 -c \"import socket; s = socket.create_connection(('127.0.0.1', {port}),"
        ' timeout=3); print(s.recv(100))"'
    )
    bash_tcp = "exec 3<>/dev/tcp/127.0.0.1/{port} && cat <&3"
    outbound = "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)\""
    closed = make_manager(tmp_path, backend)
    shared = make_manager(tmp_path / "net", backend, network=True)

    async def main():
        sandbox = closed.get("offline")
        results = [
            await sandbox.run(connect.format(port=listener.port)),
            await sandbox.run(bash_tcp.format(port=listener.port)),
            await sandbox.run(outbound),
        ]
        # the control: with settings.network the same listener answers bwrap (which then
        # shares the host's network); a docker container's 127.0.0.1 is its own either way
        control = None
        if backend == "bwrap":
            control = await shared.get("online").run(connect.format(port=listener.port))
        await closed.close_all()
        await shared.close_all()
        return results, control

    try:
        results, control = asyncio.run(main())
        accepted_when_closed = listener.accepted - (control is not None)
    finally:
        listener.close()
    for result in results:
        assert result.exit_code != 0, result
        assert "hello from the host" not in result.output
    assert "refused" in results[0].output.lower() or "unreachable" in results[0].output.lower()
    if control is not None:
        assert control.exit_code == 0 and "hello from the host" in control.output
    assert accepted_when_closed == 0


# -- fork bombs ------------------------------------------------------------------------------------


async def host_starts_processes(count: int) -> bool:
    """Whether the host can still start ``count`` processes at once and see each one end.

    A bomb that got past its sandbox's limit takes the host's process slots: the host's
    shell then cannot fork (it says so on stderr, or exits non-zero) or stalls past the wait.
    """
    shell = await asyncio.create_subprocess_exec(
        "sh",
        "-c",
        f"for i in $(seq {count}); do true & done; wait; echo done",
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(shell.communicate(), timeout=30)
    except asyncio.TimeoutError:
        shell.kill()
        await shell.wait()
        return False
    return shell.returncode == 0 and out == b"done\n" and err == b""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ISOLATED)
def test_a_fork_bomb_is_contained_and_cleaned_up(backend, tmp_path):
    manager = make_manager(tmp_path, backend)  # no max_processes: the backend's default holds
    before = len(descendants())

    async def main():
        sandbox = manager.get("bomb")
        neighbour = manager.get("neighbour")
        await sandbox.run("true")
        namespace = pid_namespace(sandbox)
        peak = 0

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, len(namespace_members(namespace)))
                await asyncio.sleep(0.05)

        watcher = asyncio.ensure_future(watch())
        start = time.monotonic()
        bomb = await sandbox.run("bomb() { bomb | bomb & }; bomb; sleep 60", timeout=3)
        elapsed = time.monotonic() - start
        # a second bomb, daemonised: it outlives its command (as background jobs do) but
        # stays inside the sandbox's limit until the sandbox is closed
        detached = await sandbox.run("(bomb() { bomb | bomb & }; bomb) >/dev/null 2>&1 &")
        await asyncio.sleep(2)
        watcher.cancel()
        # the host and the other sandboxes are unharmed meanwhile
        host_ok = await host_starts_processes(50)
        neighbour_result = await neighbour.run(
            "for i in $(seq 100); do sleep 30 >/dev/null 2>&1 & done; ps -e --no-headers | wc -l"
        )
        after_bomb = await sandbox.run("echo alive", timeout=20)
        await manager.close_all()
        return bomb, elapsed, detached, peak, host_ok, neighbour_result, after_bomb, namespace

    bomb, elapsed, detached, peak, host_ok, neighbour, after, namespace = asyncio.run(main())
    # Cut off by its 3 s timeout, not after its 60 s sleep: the ceiling leaves room for a
    # busy machine (10 s were seen on docker) and still tells the two apart.
    assert bomb.timed_out and elapsed < 40, elapsed
    assert detached.exit_code == 0
    assert 50 < peak <= 256 + 2, peak  # the limit bit: 256 processes, plus init and anchor
    assert host_ok
    assert int(neighbour.output.split()[-1]) >= 100  # its own count, not the bomb's
    # it ran, timed out waiting for a process slot, or (docker) could not start, saying so
    assert after.exit_code in (0, 124, 126), after
    if after.exit_code == 126:
        assert after.output.startswith("the command could not start: the sandbox is out of")
    assert eventually(lambda: not namespace_members(namespace))
    assert eventually(lambda: len(descendants()) <= before)


# -- output floods --------------------------------------------------------------------------------


@pytest.mark.slow
@pytest.mark.parametrize("backend", ALL)
@pytest.mark.parametrize("command", ["yes", "head -c 3G /dev/zero"])
def test_a_gigabyte_flood_of_output_is_capped_and_cut_off(backend, command, tmp_path):
    manager = make_manager(tmp_path, backend, max_output_bytes=10_000)
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB

    async def main():
        result = await manager.get("flood").run(command, timeout=3)
        await manager.close_all()
        return result

    start = time.monotonic()
    result = asyncio.run(main())
    elapsed = time.monotonic() - start
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    assert len(result.output) < 10_000 + 200
    assert result.truncated_bytes > 1_000_000
    assert "[output truncated:" in result.output
    assert result.timed_out or command.startswith("head")
    assert elapsed < 60, elapsed  # cut off (yes never ends), with room for a busy machine
    assert grown_mib < 100, f"the test process grew by {grown_mib:.0f} MiB"


# -- timeouts --------------------------------------------------------------------------------------


@pytest.mark.parametrize("backend", ALL)
def test_a_timeout_kills_every_descendant_daemons_included(backend, tmp_path):
    manager = make_manager(tmp_path, backend)
    # Marks of this run alone: it looks for its sleeps among every process of the host, where
    # the other backends' runs (pytest-xdist) and other work may run sleeps of their own.
    marks = [sleep_mark(n) for n in range(7101, 7107)]
    command = f"""
        sleep {marks[0]} &
        setsid sleep {marks[1]} &
        (setsid nohup sleep {marks[2]} > /dev/null 2>&1 &)
        nohup sleep {marks[3]} > /dev/null 2>&1 &
        bash -c 'sleep {marks[4]} & wait' &
        (trap '' TERM HUP INT; exec sleep {marks[5]}) &
        sleep 30
    """
    needles = [sleep_needle(mark) for mark in marks]

    async def main():
        sandbox = manager.get("timeout")
        start = time.monotonic()
        result = await sandbox.run(command, timeout=1.5)
        elapsed = time.monotonic() - start
        after = await sandbox.run("echo the sandbox still works")
        survivors = processes_running(*needles)
        await manager.close_all()
        return result, elapsed, after, survivors

    result, elapsed, after, survivors = asyncio.run(main())
    assert result.timed_out and result.exit_code == 124
    assert elapsed < 25, elapsed  # cut off at 1.5 s, not after the 30 s sleep
    assert after.output == "the sandbox still works\n"
    assert not {pid for pid in survivors if alive(pid)}, "a descendant survived the timeout"
    assert eventually(lambda: not processes_running(*needles))
