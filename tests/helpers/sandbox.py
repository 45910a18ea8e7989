"""Helpers of the sandbox tests: which backends exist here, and what processes are alive."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import secrets
import shutil
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings
from hermes_envgen.runtime.sandbox.procfs import is_alive as alive
from hermes_envgen.runtime.sandbox.procfs import parent_pid

NO_BWRAP = "bwrap is not installed (scripts/install-system-deps.sh installs it)"
NO_DOCKER = "no Docker engine reachable (scripts/test.sh starts one when run as root)"
# The image the docker tests run in: built locally by scripts/docker-test-image.sh, which
# scripts/test.sh runs and names here.
TEST_IMAGE_VARIABLE = "HERMES_ENVGEN_TEST_DOCKER_IMAGE"
NO_TEST_IMAGE = f"no docker test image: {TEST_IMAGE_VARIABLE} is unset (scripts/test.sh sets it)"


def has_bwrap() -> bool:
    """Whether bubblewrap is installed."""
    return shutil.which("bwrap") is not None


@functools.cache
def docker_reachable() -> bool:
    """Whether ``docker info`` answers (a client alone is not enough)."""
    if shutil.which("docker") is None:
        return False
    try:
        result = subprocess.run(["docker", "info"], capture_output=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return result.returncode == 0


needs_bwrap = pytest.mark.skipif(not has_bwrap(), reason=NO_BWRAP)


def docker_test_image() -> str | None:
    """The docker tests' image, if one was built for this run."""
    return os.environ.get(TEST_IMAGE_VARIABLE) or None


def docker_skip_reason() -> str | None:
    """Why the docker tests cannot run here, or None when they can."""
    if not docker_reachable():
        return NO_DOCKER
    if docker_test_image() is None:
        return NO_TEST_IMAGE
    return None


# A test that cannot run here skips, or fails when this run requires docker (conftest.py).
needs_docker = pytest.mark.docker(unavailable=docker_skip_reason())

LOCAL = pytest.param("local", id="local")
BWRAP = pytest.param("bwrap", id="bwrap", marks=needs_bwrap)
DOCKER = pytest.param("docker", id="docker", marks=needs_docker)


def docker_containers(*filters: str) -> list[str]:
    """The ids of every container (running or not) that passes ``docker ps --filter``s."""
    listed = subprocess.run(
        ["docker", "ps", "--all", "--quiet", *(f"--filter={f}" for f in filters)],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return listed.stdout.split()


def make_manager(root: Path, backend: str, **settings) -> SandboxManager:
    """A manager whose workspaces live under ``root/<backend>``."""
    settings.setdefault("command_timeout", 10)
    if backend == "docker":
        settings.setdefault("docker_image", docker_test_image())
    return SandboxManager(SandboxSettings(backend=backend, root=str(root / backend), **settings))


def all_pids() -> list[int]:
    """Every pid in /proc."""
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def descendants(root: int | None = None) -> set[int]:
    """The live descendants of ``root`` (default: this test process)."""
    root = os.getpid() if root is None else root
    children: dict[int, list[int]] = {}
    for pid in all_pids():
        parent = parent_pid(pid)
        if parent is not None:
            children.setdefault(parent, []).append(pid)
    found: set[int] = set()
    pending = [root]
    while pending:
        for child in children.get(pending.pop(), []):
            if child not in found:
                found.add(child)
                pending.append(child)
    return {pid for pid in found if alive(pid)}


def processes_pointing_into(directory: Path) -> set[int]:
    """Live processes whose cwd, root, executable or command line lies in ``directory``."""
    needle = str(directory)
    found = set()
    for pid in all_pids():
        if pid == os.getpid():
            continue
        texts = []
        for link in ("cwd", "root", "exe"):
            with contextlib.suppress(OSError):
                texts.append(os.readlink(f"/proc/{pid}/{link}"))
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                texts.append(file.read().replace(b"\0", b" ").decode(errors="replace"))
        except OSError:
            pass
        if any(needle in text for text in texts) and alive(pid):
            found.add(pid)
    return found


def namespace_members(namespace: str, kind: str = "pid") -> set[int]:
    """Live processes in a namespace, given as ``readlink /proc/<pid>/ns/<kind>`` shows it."""
    found = set()
    for pid in all_pids():
        try:
            if os.readlink(f"/proc/{pid}/ns/{kind}") == namespace and alive(pid):
                found.add(pid)
        except OSError:
            continue
    return found


def sleep_mark(seconds: int) -> str:
    """A ``sleep`` argument of about ``seconds`` that no other process of the host has.

    Tests find their processes among every process of the host by command line; a fixed
    ``sleep 7201`` would also find another test's, or other work's on a shared machine.
    """
    return f"{seconds}.{secrets.randbelow(10**9):09d}"


def sleep_needle(mark: str) -> bytes:
    """What ``processes_running`` finds a ``sleep <mark>`` by: the whole argument."""
    return f"sleep\0{mark}\0".encode()


def processes_running(*needles: bytes) -> set[int]:
    """Live processes whose command line contains one of ``needles`` (NUL-separated argv)."""
    found = set()
    for pid in all_pids():
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as file:
                cmdline = file.read()
        except OSError:
            continue
        if any(needle in cmdline for needle in needles) and alive(pid):
            found.add(pid)
    return found


def eventually(check: Callable[[], bool], seconds: float = 5.0) -> bool:
    """Poll ``check`` until it holds or ``seconds`` pass; whether it held."""
    deadline = time.monotonic() + seconds
    while True:
        if check():
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def run_cleanup_command(root: Path) -> subprocess.CompletedProcess:
    """``hermes-envgen cleanup`` of the sandbox root ``root``; it must succeed."""
    done = subprocess.run(
        [sys.executable, "-m", "hermes_envgen", "cleanup", "--sandbox-root", str(root)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return done


def run_once(manager: SandboxManager, name: str, timeout: float | None = None) -> None:
    """Start sandbox ``name`` of ``manager`` with one command, then close every sandbox; what
    the start raised is raised (within ``timeout`` seconds, when given)."""

    async def main() -> None:
        try:
            await manager.get(name).run("true")
        finally:
            await manager.close_all()

    asyncio.run(asyncio.wait_for(main(), timeout) if timeout else main())
