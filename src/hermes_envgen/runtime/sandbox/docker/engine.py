"""The Docker engine as the docker backend and the run reaper use it: its CLI, the labels and
notes that let a later run find the containers a run left, and what its failures mean.

No sandbox here: ``docker`` (the backend) and ``runs`` (the reaper) both build on this module.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import shutil
import signal
import socket
import subprocess
from pathlib import Path

from hermes_envgen.runtime.errors import SandboxUnavailable
from hermes_envgen.runtime.sandbox import procfs
from hermes_envgen.runtime.sandbox.base import DEFAULT_DOCKER_IMAGE, TIMEOUT_EXIT_CODE

logger = logging.getLogger(__name__)

ENGINE_FILE = ".docker-engine"  # in a run's directory: the Docker engine of its containers
LABEL = "hermes-envgen.sandbox"
RUN_LABEL = "hermes-envgen.run"  # host/run directory: what a next run reaps if this one dies
ENGINE_GONE = "Cannot connect to the Docker daemon"  # what the CLI says when none answers
FILE_TIMEOUT = 300.0  # seconds a file script may take (a GiB through docker exec: a few)
HOSTS_KEY = "hosts"  # in ENGINE_FILE: the engines of the run's pool (sandbox_docker_hosts)
REAP_TIMEOUT = 60  # seconds the reaper gives one engine per CLI call (a dark one: no more)


async def docker_cli(argv: list[str], timeout: float) -> tuple[int, str]:
    """Run a docker CLI command; its exit code and combined output."""
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except FileNotFoundError:
        raise SandboxUnavailable(
            "the docker backend needs the docker CLI on PATH (Debian: apt-get install docker.io)"
        ) from None
    try:
        out, _ = await asyncio.wait_for(process.communicate(), timeout)
    except asyncio.TimeoutError:
        process.kill()
        await process.wait()
        return TIMEOUT_EXIT_CODE, f"{argv[1]} timed out after {timeout:g} s"
    return await process.wait(), out.decode(errors="replace")  # exited: at once


async def docker_exec(
    argv: list[str], data: bytes | None, timeout: float = FILE_TIMEOUT
) -> tuple[int, bytes, str]:
    """Run a ``docker exec`` argv with ``data`` on its stdin: its exit code, stdout, stderr.

    After ``timeout`` seconds the client is killed (what it ran inside goes with the
    sandbox's processes): a file operation that blocks (a FIFO swapped in for a file) fails
    rather than hold its rollout forever.
    """
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if data is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(data), timeout)
    except asyncio.TimeoutError:
        process.kill()
        await process.wait()
        return TIMEOUT_EXIT_CODE, b"", f"the file operation timed out after {timeout:g} s"
    return await process.wait(), out, err.decode(errors="replace")  # exited: at once


def kill_container_processes(init_pid: int, container_id: str) -> None:
    """SIGKILL, from the host, every process of a container but its init and that one's first child.

    Only when the engine runs on this machine and we may signal the container's processes
    (root); otherwise nothing happens and the in-container script does the work.
    """
    # The pid is the engine's: from a remote engine (tcp://, ssh://) it names whatever
    # process has that number here. Only a process in the container's cgroup, in a pid
    # namespace other than ours, is the container's init: never kill our own namespace.
    try:
        cgroups = Path(f"/proc/{init_pid}/cgroup").read_text()
    except OSError:
        return
    namespace = procfs.pid_namespace(init_pid)
    ours = procfs.pid_namespace(os.getpid())
    if namespace is None or namespace == ours or container_id not in cgroups:
        return
    children = [pid for pid in procfs.pids() if procfs.parent_pid(pid) == init_pid]
    # The anchor is init's oldest child: what the agent orphaned came to init later.
    oldest = min(children, key=lambda pid: int(procfs.start_time(pid) or 2**63), default=None)
    keep = {init_pid, oldest}
    for _ in range(20):
        found = False
        for pid in procfs.in_pid_namespace(namespace):
            if pid in keep:
                continue
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                found = True
        if not found:
            return


def run_label(run_directory: Path) -> str:
    """The run label's value: the host and the run, unique on an engine that hosts share."""
    return f"{socket.gethostname()}/{run_directory.name}"


def record_engine(run_directory: Path, hosts: list[str] | None = None) -> None:
    """Note in the run's directory which engines its containers run on (for ``reap``).

    The client's ``DOCKER_*`` environment, and the engines of the pool (``hosts``) if it has
    one: the reaper asks each of them.
    """
    engine: dict = {name: value for name, value in os.environ.items() if name.startswith("DOCKER_")}
    if hosts:
        engine[HOSTS_KEY] = list(hosts)  # no clash: every other key is a DOCKER_ variable
    path = run_directory / ENGINE_FILE
    if not path.exists():
        with contextlib.suppress(OSError):
            path.write_text(json.dumps(engine))


def remove_run_containers(run_directory: Path) -> int:
    """Remove the containers a run left on its engines, if it used any; how many."""
    try:
        engine = json.loads((run_directory / ENGINE_FILE).read_text())
    except (OSError, ValueError):
        return 0  # the run started no container
    hosts: list[str | None] = list(engine.pop(HOSTS_KEY, None) or [None])
    environment = {**os.environ, **engine}
    docker = shutil.which("docker") or "docker"
    label = f"label={RUN_LABEL}={run_label(run_directory)}"
    removed = 0
    for host in hosts:  # None: the engine of the noted environment's DOCKER_HOST
        where = [] if host is None else ["--host", host]

        def cli(*args: str, where: list[str] = where) -> str:
            return subprocess.run(
                [docker, *where, *args], env=environment, capture_output=True, text=True,
                timeout=REAP_TIMEOUT, stdin=subprocess.DEVNULL,
            ).stdout  # fmt: skip

        try:
            containers = cli("ps", "--all", "--quiet", "--filter", label).split()
            if containers:
                cli("rm", "--force", "--volumes", *containers)
        except (OSError, subprocess.TimeoutExpired) as exc:
            logger.warning(
                "cannot remove the containers of run %s%s: %s",
                run_directory.name, f" on {host}" if host else "", exc,
            )  # fmt: skip
            continue
        removed += len(containers)
    return removed


def engine_address(host: str | None = None) -> str:
    """The Docker engine the CLI talks to (``host``, else DOCKER_HOST's), as a message names it."""
    host = host or os.environ.get("DOCKER_HOST")
    return host or "the docker CLI's default (DOCKER_HOST is unset: /var/run/docker.sock)"


def start_failure(output: str, image: str, host: str | None = None) -> str:
    """One line saying why ``docker run`` could not start a sandbox on ``host``, and what to do."""
    engine = engine_address(host)
    if "tls:" in output or "x509:" in output or "remote error: tls" in output:
        # The engine answers but the certificates do not match: not "no engine" (the CLI
        # never falls back to plain TCP with DOCKER_TLS_VERIFY set).
        reason = next(line for line in output.splitlines() if "tls" in line or "x509" in line)
        where = os.environ.get("DOCKER_CERT_PATH") or "~/.docker"
        return (
            f"docker backend: the TLS handshake with the engine at {engine} fails "
            f"({reason.strip()[-200:]}); the certificates in {where} (ca.pem, cert.pem, "
            "key.pem) must be the engine's CA and a client certificate it trusts"
        )
    if engine.startswith("ssh://") and "dial-stdio" in output:
        # The CLI ran `ssh ... docker system dial-stdio` and ssh failed: ssh's own words
        # (after "stderr=") say why: a refused key, an unknown host key, no docker there.
        said = output.partition("stderr=")[2].strip().splitlines() or ["ssh failed"]
        return (
            f"docker backend: ssh to the engine at {engine} fails ({said[0].strip()[:200]}); "
            "this host must log in there without a prompt (a key in ssh-agent or the ssh "
            "config, the host in known_hosts) and that host needs the docker CLI"
        )
    if ENGINE_GONE in output or "error during connect" in output:
        return (
            f"docker backend: no Docker engine answers at {engine}; start one (dockerd, or"
            " systemctl start docker) or set DOCKER_HOST to one that runs"
        )
    if "Unable to find image" in output or "No such image" in output:
        return (
            f"docker backend: image {image!r} is not on the engine at {engine} and could not"
            " be pulled; pull or build it there, or set sandbox_image to an image it has"
        )
    if "executable file not found" in output and "bash" in output:
        return (
            f"docker backend: image {image!r} has no bash, which every command runs with;"
            f" use an image with bash and coreutils (e.g. {DEFAULT_DOCKER_IMAGE}, debian:bookworm)"
        )
    # The CLI's own last line is a hint ("Run 'docker run --help' for more information"):
    # the engine's answer is the last line before it.
    lines = [line for line in output.strip().splitlines() if line.strip()]
    lines = [line for line in lines if "--help" not in line] or lines or ["no output"]
    last_line = lines[-1][:500]
    return f"docker backend: could not start a container of {image!r} on {engine}: {last_line}"
