"""The docker backend on an engine reached by ``DOCKER_HOST=ssh://user@host:port``.

The docker CLI reaches such an engine by running ``ssh [-l user] [-p port] -- host docker
system dial-stdio`` and speaking the engine's API through that pipe. Here the "remote host" is
a private sshd on 127.0.0.1 this test starts (its own host key, config and authorized key, in
tmp_path; key-only login), whose sessions get the shared engine's socket as ``DOCKER_HOST``
(sshd_config ``SetEnv``), so the ``docker`` CLI on that side talks to the engine CI runs: every
command, file and container of the backend goes through ssh, as to a remote engine.

The client side must not read or change the user's ``~/.ssh`` (ssh takes it from the password
database, not ``$HOME``), and the docker CLI passes ssh no options of ours: an ``ssh`` wrapper
first on ``PATH`` (as ``GIT_SSH`` would be for git) adds ``-F <the test's ssh config>``, which
names the test's key, its known_hosts and ``BatchMode`` (never a prompt). The port travels in
the URL, which the CLI passes as ``-p``.
"""

from __future__ import annotations

import asyncio
import contextlib
import getpass
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from helpers.docker_env import left_of
from helpers.sandbox import docker_skip_reason, docker_test_image, make_manager, run_once

from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings, SandboxUnavailable
from hermes_envgen.runtime.sandbox.procfs import parent_pid, pids
from hermes_envgen.testing.envs import read_eval_results

SSHD = Path("/usr/sbin/sshd")
PRIVSEP_DIR = Path("/run/sshd")  # compiled into Debian's sshd; its service makes it at start
START_WAIT = 30.0  # seconds for sshd to listen


def ssh_unavailable() -> str | None:
    """Why no docker-over-ssh test can run here, or None."""
    if docker_skip_reason() is not None:
        return docker_skip_reason()
    if not SSHD.exists() or shutil.which("ssh") is None or shutil.which("ssh-keygen") is None:
        # As root set-up installs it (scripts/install-system-deps.sh): missing then is a
        # failure when docker is required, not a skip.
        return "no sshd or ssh client (scripts/install-system-deps.sh installs openssh-server)"
    host = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    if not host.startswith("unix://"):
        return f"the engine is at {host}, not a unix socket an ssh session can be pointed at"
    return None


pytestmark = [
    # sshd runs as root (privilege separation): elsewhere the test skips, even in a run that
    # requires docker; as root a missing sshd fails it there (HERMES_ENVGEN_REQUIRE_DOCKER).
    pytest.mark.skipif(os.geteuid() != 0, reason="a private sshd needs root here"),
    pytest.mark.docker(unavailable=ssh_unavailable()),
    pytest.mark.timeout(600),
]


@dataclass
class SshEngine:
    """A private sshd on 127.0.0.1 whose sessions reach the shared Docker engine."""

    url: str  # DOCKER_HOST for the client side
    engine: str  # the shared engine the sessions reach (its own socket, no ssh)
    bin: Path  # the directory of the ssh wrapper, to put first on PATH
    log: Path  # sshd's own log (-e)

    def logins(self) -> int:
        """How many sessions sshd let in so far."""
        return self.log.read_text(errors="replace").count("Accepted publickey")


def _keygen(path: Path) -> None:
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "test", "-f", str(path)],
        check=True, capture_output=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _stop(sshd: subprocess.Popen) -> None:
    """Stop sshd and the sessions it forked (each in a session of its own: setsid)."""
    sessions = [pid for pid in pids() if parent_pid(pid) == sshd.pid]
    for group in [sshd.pid, *sessions]:
        with contextlib.suppress(OSError):
            os.killpg(group, signal.SIGTERM)
    try:
        sshd.wait(timeout=15)
    except subprocess.TimeoutExpired:
        for group in [sshd.pid, *sessions]:
            with contextlib.suppress(OSError):
                os.killpg(group, signal.SIGKILL)
        sshd.wait(timeout=15)


@contextlib.contextmanager
def private_sshd(directory: Path, authorized: Path) -> Iterator[tuple[int, Path, Path]]:
    """sshd on a free loopback port, letting in only ``authorized``'s key: port, host key, log."""
    directory.mkdir(parents=True, exist_ok=True)
    host_key = directory / "host_key"
    _keygen(host_key)
    (directory / "authorized_keys").write_text(authorized.read_text())
    # Debian's sshd refuses to start without it (root-owned, 0755; on /run, a tmpfs).
    PRIVSEP_DIR.mkdir(mode=0o755, exist_ok=True)
    engine = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    log = directory / "sshd.log"
    for _attempt in range(3):  # a port taken between the probe and sshd's bind: another
        port = _free_port()
        config = directory / "sshd_config"
        config.write_text(
            f"ListenAddress 127.0.0.1:{port}\n"
            f"HostKey {host_key}\n"
            f"AuthorizedKeysFile {directory / 'authorized_keys'}\n"
            f"AllowUsers {getpass.getuser()}\n"
            "AuthenticationMethods publickey\n"
            "PasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "PermitRootLogin prohibit-password\n"
            "UsePAM no\n"
            "StrictModes no\n"  # tmp_path's parents include /tmp (1777)
            "PidFile none\nUseDNS no\nPrintMotd no\nPrintLastLog no\n"
            "LoginGraceTime 30\nMaxStartups 100\n"
            # what the docker CLI at the other end reaches: the engine the suite shares
            f"SetEnv DOCKER_HOST={engine}\n"
        )
        checked = subprocess.run(
            [str(SSHD), "-t", "-f", str(config)], capture_output=True, text=True, timeout=30
        )
        assert checked.returncode == 0, checked.stderr
        with log.open("wb") as output:
            sshd = subprocess.Popen(
                [str(SSHD), "-D", "-e", "-f", str(config)],
                stdin=subprocess.DEVNULL, stdout=output, stderr=subprocess.STDOUT,
                start_new_session=True,
            )  # fmt: skip
        try:
            deadline = time.monotonic() + START_WAIT
            while "Server listening" not in log.read_text(errors="replace"):
                if sshd.poll() is not None or time.monotonic() > deadline:
                    break
                time.sleep(0.05)
            said = log.read_text(errors="replace")
            if "Server listening" in said:
                yield port, host_key, log
                return
            assert "Address already in use" in said, f"sshd did not start: {said}"
        finally:
            _stop(sshd)
    pytest.fail("sshd found no free port in 3 tries")


def ssh_client(directory: Path, port: int, host_key: Path, key: Path) -> Path:
    """An ``ssh`` wrapper that logs in with ``key`` and trusts only ``host_key``: its directory."""
    directory.mkdir(parents=True, exist_ok=True)
    known_hosts = directory / "known_hosts"
    known_hosts.write_text(f"[127.0.0.1]:{port} {host_key.with_suffix('.pub').read_text()}")
    config = directory / "ssh_config"
    config.write_text(
        "Host *\n"
        f"  IdentityFile {key}\n  IdentitiesOnly yes\n  IdentityAgent none\n"
        f"  UserKnownHostsFile {known_hosts}\n  GlobalKnownHostsFile /dev/null\n"
        "  StrictHostKeyChecking yes\n  BatchMode yes\n  ConnectTimeout 20\n  LogLevel ERROR\n"
    )
    wrapper = directory / "bin" / "ssh"
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\nexec {shutil.which("ssh")} -F {config} "$@"\n')
    wrapper.chmod(0o755)
    return wrapper.parent


def over_ssh(monkeypatch, port: int, bin_directory: Path) -> str:
    """Point this process's docker CLI at the engine through ssh; the URL."""
    url = f"ssh://{getpass.getuser()}@127.0.0.1:{port}"
    monkeypatch.setenv("DOCKER_HOST", url)
    monkeypatch.setenv("PATH", f"{bin_directory}{os.pathsep}{os.environ['PATH']}")
    for name in ("DOCKER_TLS_VERIFY", "DOCKER_CERT_PATH", "DOCKER_CONTEXT", "SSH_AUTH_SOCK"):
        monkeypatch.delenv(name, raising=False)
    return url


@pytest.fixture
def ssh_engine(tmp_path, monkeypatch) -> Iterator[SshEngine]:
    key = tmp_path / "client" / "id_ed25519"
    key.parent.mkdir()
    _keygen(key)
    engine = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    with private_sshd(tmp_path / "sshd", key.with_suffix(".pub")) as (port, host_key, log):
        bin_directory = ssh_client(tmp_path / "client", port, host_key, key)
        url = over_ssh(monkeypatch, port, bin_directory)
        yield SshEngine(url, engine, bin_directory, log)


def test_sandboxes_run_and_move_files_on_an_engine_over_ssh(ssh_engine, tmp_path):
    manager = make_manager(tmp_path, "docker", command_timeout=60)
    blob = bytes(range(256)) * 64

    async def main():
        ctx = ToolContext("ssh", manager)
        try:
            ran = await ctx.terminal("echo over ssh > made.txt && cat made.txt && hostname")
            await ctx.write_file("in/blob.bin", blob)
            sha = await ctx.terminal("sha256sum in/blob.bin | cut -c1-64")
            back = await ctx.read_file("made.txt")
            listed = await ctx.sandbox.list_files(".")
            downloaded = await ctx.download_dir("in", tmp_path / "down")
            tool = await ctx.call_tool("terminal", {"command": "wc -c < in/blob.bin"})
            timed_out = await ctx.terminal("sleep 30", timeout=1)
        finally:
            await ctx.cleanup()
        return ran, sha, back, listed, downloaded, tool, timed_out

    ran, sha, back, listed, downloaded, tool, timed_out = asyncio.run(asyncio.wait_for(main(), 300))
    import hashlib

    assert ran["exit_code"] == 0 and ran["output"] == "over ssh\nsandbox\n", ran
    assert sha["output"].strip() == hashlib.sha256(blob).hexdigest()
    assert back == "over ssh\n" and sorted(listed) == ["in/blob.bin", "made.txt"]
    assert [p.read_bytes() for p in downloaded] == [blob]
    assert f"{len(blob)}" in tool
    assert timed_out["exit_code"] != 0  # a timeout still kills the command through ssh
    # through sshd: the container's start and removal and its kept channel, one session that
    # carried all eight operations above (a docker exec each before, each a login)
    assert 3 <= ssh_engine.logins() < 8
    # the workspace never existed on this side: everything went through the engine's API
    assert not any(p.is_file() for p in (tmp_path / "docker").rglob("made.txt"))


def test_an_engine_host_gone_mid_run_is_no_command_result(tmp_path, monkeypatch):
    """sshd stops under a running sandbox: its next command fails as the sandbox (the rollout
    fails, counted), not as a command that printed the CLI's connection error."""
    key = tmp_path / "client" / "id"
    key.parent.mkdir()
    _keygen(key)
    engine = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    manager = make_manager(tmp_path, "docker", command_timeout=60)

    async def main():
        sandbox = manager.get("gone")
        with private_sshd(tmp_path / "sshd", key.with_suffix(".pub")) as (port, host_key, _):
            over_ssh(monkeypatch, port, ssh_client(tmp_path / "client", port, host_key, key))
            first = await sandbox.run("echo up")
        try:
            with pytest.raises(SandboxUnavailable) as caught:
                await sandbox.run("echo again")
        finally:
            monkeypatch.setenv("DOCKER_HOST", engine)  # to remove the container
            await manager.close_all()
        return first, str(caught.value)

    first, message = asyncio.run(asyncio.wait_for(main(), 300))
    assert first.output == "up\n"
    assert "\n" not in message and "Connection refused" in message, message


def test_a_refused_key_is_a_one_line_error_at_once(tmp_path, monkeypatch):
    """sshd lets in another key than the client's: the sandbox's start fails in seconds,
    with ssh's reason in one line, never a prompt or a wait."""
    theirs, ours = tmp_path / "theirs" / "id", tmp_path / "ours" / "id"
    for key in (theirs, ours):
        key.parent.mkdir()
        _keygen(key)
    with private_sshd(tmp_path / "sshd", theirs.with_suffix(".pub")) as (port, host_key, log):
        url = over_ssh(monkeypatch, port, ssh_client(tmp_path / "client", port, host_key, ours))
        manager = make_manager(tmp_path, "docker", command_timeout=60)
        started = time.monotonic()
        with pytest.raises(SandboxUnavailable) as caught:
            run_once(manager, "refused", timeout=120)
        took = time.monotonic() - started
        # and the reachability check says the same, in one row
        done = subprocess.run(
            [sys.executable, "-m", "hermes_envgen", "check", "--reach-only", "--docker-host", url],
            capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        refusals = log.read_text(errors="replace")
    assert done.returncode == 2, done.stdout + done.stderr
    assert done.stdout.startswith(f"FAIL  docker {url}"), done.stdout
    assert "Permission denied (publickey)" in done.stdout, done.stdout
    message = str(caught.value)
    assert "\n" not in message, message
    assert message.startswith(f"docker backend: ssh to the engine at {url} fails"), message
    assert "Permission denied (publickey)" in message, message
    assert took < 90, took  # the CLI's ConnectTimeout is 30 s: nothing waited for a prompt
    assert "Accepted publickey" not in refusals


@pytest.mark.timeout(900)
def test_a_generated_env_evaluates_on_an_engine_over_ssh(ssh_engine, run_on_docker, tmp_path):
    eval_dir = tmp_path / "eval"
    # Every docker command logs in anew: 23 s on the local socket, 80-160 s over ssh on a
    # busy 2-core machine; the ceiling is generous.
    created = run_on_docker("evaluate", {"env.data_dir_to_save_evals": eval_dir}, timeout=720)
    metrics, samples_saved = read_eval_results(eval_dir)
    assert samples_saved and metrics["eval/failures"] == 0, "a rollout failed: see failures.jsonl"
    assert any(sample["tools_used"] for sample in samples_saved)
    assert 0.0 < metrics["eval/mean_reward"] <= 1.0
    assert len(created) >= len(samples_saved)  # seen by `docker events`, itself over ssh
    assert left_of(created) == []
    # the env's sessions: far more than this test's own few (events, ps)
    assert ssh_engine.logins() > len(created)
    assert re.search(r"Accepted publickey for \S+ from 127\.0\.0\.1", ssh_engine.log.read_text())


def test_a_pool_of_the_local_socket_and_an_ssh_engine_uses_both(ssh_engine, tmp_path):
    """``sandbox_docker_hosts`` with an ``ssh://`` member: the CLI's ``--host ssh://...``."""
    hosts = [ssh_engine.engine, ssh_engine.url]
    manager = SandboxManager(
        SandboxSettings(
            backend="docker", root=str(tmp_path / "pool"), docker_image=docker_test_image(),
            docker_hosts=hosts, command_timeout=60,
        )
    )  # fmt: skip
    logins = ssh_engine.logins()

    async def main():
        boxes = [manager.get(f"pool-{i}") for i in range(2)]
        ran = [await box.run(f"echo {i} > f; cat f") for i, box in enumerate(boxes)]
        placed = sorted(box.host for box in boxes)
        await manager.close_all()
        return ran, placed

    ran, placed = asyncio.run(asyncio.wait_for(main(), 300))
    assert [r.output for r in ran] == ["0\n", "1\n"]
    assert placed == sorted(hosts)
    assert ssh_engine.logins() > logins  # the ssh member's commands went through sshd
