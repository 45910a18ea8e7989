"""A docker sandbox that cannot start (no engine, a stopped one, a missing image, an image
without bash) fails at its start with one clear line naming the engine or image and what to
do, fails the same way at once after that, and leaves no container behind."""

from __future__ import annotations

import asyncio
import functools
import os
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from helpers.sandbox import (
    docker_containers,
    docker_test_image,
    make_manager,
    needs_docker,
)

from hermes_envgen.runtime.sandbox import DEFAULT_DOCKER_IMAGE, SandboxError, SandboxUnavailable

NO_BASH_IMAGE = "hermes-envgen-test-nobash:1"


def containers_named(name: str) -> list[str]:
    """Containers (running or not) with exactly this name."""
    return docker_containers(f"name=^{name}$")


def fail_to_start(tmp_path: Path, **settings) -> tuple[str, str, float, str]:
    """Start a docker sandbox that cannot start: the error, the repeat's, its time, the name."""
    manager = make_manager(tmp_path, "docker", **settings)

    async def main():
        sandbox = manager.get("doomed")
        with pytest.raises(SandboxUnavailable) as first:
            await sandbox.start()
        begin = time.monotonic()
        with pytest.raises(SandboxUnavailable) as again:
            await sandbox.run("true")
        repeat_seconds = time.monotonic() - begin
        with pytest.raises(SandboxError):
            await sandbox.read_bytes("a.txt")
        await manager.close_all()
        return str(first.value), str(again.value), repeat_seconds, sandbox.container

    return asyncio.run(main())


@pytest.fixture
def stopped_engine() -> Iterator[str]:
    """The address of a socket an engine left when it was killed: nothing listens there."""
    directory = tempfile.mkdtemp(prefix="hedocker-", dir="/tmp")  # short: sockets have a limit
    path = os.path.join(directory, "docker.sock")
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(path)
    listener.close()  # the file stays; a connection is refused, as after dockerd is killed
    yield f"unix://{path}"
    os.unlink(path)
    os.rmdir(directory)


def test_no_engine_is_one_clear_error(tmp_path, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    error, again, repeat_seconds, _ = fail_to_start(tmp_path, docker_image="debian:bookworm")
    assert error.startswith("docker backend: no Docker engine answers at")
    assert "unix:///nonexistent/docker.sock" in error and "start one" in error
    assert "\n" not in error and again == error and repeat_seconds < 0.5


def test_a_stopped_engine_is_one_clear_error(tmp_path, stopped_engine, monkeypatch):
    monkeypatch.setenv("DOCKER_HOST", stopped_engine)
    error, again, repeat_seconds, _ = fail_to_start(tmp_path, docker_image="debian:bookworm")
    assert error.startswith("docker backend: no Docker engine answers at")
    assert stopped_engine in error
    assert "\n" not in error and again == error and repeat_seconds < 0.5


@needs_docker
def test_a_missing_image_is_one_clear_error_and_leaves_no_container(tmp_path):
    image = "hermes-envgen-test-missing:nope"
    error, again, _, name = fail_to_start(tmp_path, docker_image=image)
    assert error.startswith(f"docker backend: image '{image}' is not on the engine at")
    assert "pull or build it" in error and "\n" not in error and again == error
    assert containers_named(name) == []


@pytest.fixture(scope="module")
def image_without_bash() -> Iterator[str]:
    """The test image with bash deleted (sh, sleep and the rest still there), as Alpine's."""
    name = f"hermes-envgen-nobash-{os.getpid()}"
    base = docker_test_image()
    run = ["docker", "run", "--name", name, "--user", "0", "--entrypoint", "rm", base]
    docker = functools.partial(subprocess.run, capture_output=True, timeout=120, check=True)
    docker([*run, "-f", "/usr/bin/bash", "/bin/bash"])
    try:
        docker(["docker", "commit", name, NO_BASH_IMAGE])
    finally:
        docker(["docker", "rm", "--force", name])
    yield NO_BASH_IMAGE
    subprocess.run(["docker", "rmi", NO_BASH_IMAGE], capture_output=True, timeout=60, check=False)


@needs_docker
def test_an_image_without_bash_is_one_clear_error_and_leaves_no_container(
    tmp_path, image_without_bash
):
    error, again, _, name = fail_to_start(tmp_path, docker_image=image_without_bash)
    assert error == (
        f"docker backend: image '{image_without_bash}' has no bash, which every command runs"
        " with; use an image with bash and coreutils"
        f" (e.g. {DEFAULT_DOCKER_IMAGE}, debian:bookworm)"
    )
    assert again == error
    assert containers_named(name) == []  # it was created, failed to start, and was removed


@needs_docker
def test_an_engine_gone_under_a_running_sandbox_is_an_error_not_a_command_result(
    tmp_path, stopped_engine, monkeypatch
):
    running = os.environ.get("DOCKER_HOST")
    manager = make_manager(tmp_path, "docker")

    def talk_to(engine: str | None) -> None:
        if engine is None:
            monkeypatch.delenv("DOCKER_HOST", raising=False)
        else:
            monkeypatch.setenv("DOCKER_HOST", engine)

    async def main():
        sandbox = manager.get("orphaned")
        try:
            first = await sandbox.run("echo up")
            talk_to(stopped_engine)  # from here on the sandbox's engine does not answer
            # and the stream of the container's kept channel ends, as the engine's would
            os.kill(sandbox._channel.process.pid, signal.SIGKILL)
            with pytest.raises(SandboxUnavailable) as caught:
                await sandbox.run("echo still there?")
        finally:
            talk_to(running)  # to remove the container, whatever happened
            await manager.close_all()
        return first, str(caught.value), sandbox.container

    first, error, name = asyncio.run(main())
    assert first.output == "up\n"
    assert error.startswith("docker backend: no Docker engine answers at")
    assert stopped_engine in error
    assert containers_named(name) == []
