"""The docker backend's kept channel against a ``docker exec`` per command, side by side.

Two sandboxes of the same image on the same engine, one with the kept channel (the default:
every command, file script and socket connection through one long-lived ``docker exec -i``
per container) and one without (``kept_channel = False``: a ``docker exec`` per command and
file operation, and a command per ``python`` call: the code before the channel). The rounds
alternate them; each prints the median wall time per operation, old / new, the host's CPU
per operation (this process and the docker clients it started) and, when the engine is the
one ``scripts/docker-engine.sh`` started here, the engine's (dockerd and containerd; not the
containers' shims nor what runs in them):

- ``true``: a trivial command (``Sandbox.run``);
- ``python``: a ``python`` tool call (``x += 1``) on a warm interpreter;
- ``file``: a small file written then read back (``write_bytes`` + ``read_bytes``);
- ``start``: a sandbox started (``docker run``, the check that it has bash, and with the
  channel its start) and closed (``docker rm``), ``--starts`` times a round.

    DOCKER_HOST=... .venv/bin/python benchmarks/bench_docker_channel.py \
        [--image IMAGE] [--rounds 5] [--calls 20] [--starts 3]

Needs an engine (``scripts/docker-engine.sh up``) and an image with bash and python3 (the
test image of ``scripts/docker-test-image.sh``, or python:3.11-slim).
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import os
import resource
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings
from hermes_envgen.runtime.sandbox.docker.backend import DockerSandbox
from hermes_envgen.runtime.tools.interpreter import PythonSettings, _interpreters, run_python

VARIANTS = ("old", "new")  # docker exec per command; the kept channel


def cpu_seconds() -> float:
    """This process's CPU and that of its reaped children (the docker clients)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def engine_pids() -> list[int]:
    """dockerd (of scripts/docker-engine.sh's state) and its children (containerd); none if
    the engine is not one started here."""
    state = os.environ.get("HERMES_ENVGEN_DOCKER_STATE")
    try:
        dockerd = int(Path(state or "/nonexistent", "dockerd.pid").read_text())
    except (OSError, ValueError):
        return []
    found = [dockerd]
    for name in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == dockerd:
            found.append(int(name))
    return found


def engine_seconds(pids: list[int]) -> float:
    """The CPU the engine's processes have used."""
    total = 0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        total += int(fields[11]) + int(fields[12])  # utime, stime
    return total / os.sysconf("SC_CLK_TCK")


async def timed(
    calls: int, operation: Callable[[], Awaitable[object]], engine: list[int]
) -> tuple[float, float, float]:
    """Median wall seconds per call, and host and engine CPU seconds per call."""
    walls = []
    cpu, engine_cpu = cpu_seconds(), engine_seconds(engine)
    for _ in range(calls):
        start = time.perf_counter()
        await operation()
        walls.append(time.perf_counter() - start)
    host = (cpu_seconds() - cpu) / calls
    return statistics.median(walls), host, (engine_seconds(engine) - engine_cpu) / calls


async def start_and_close(manager: SandboxManager, variant: str) -> None:
    """One sandbox started and closed (its first command is ``true``, as a rollout's)."""
    sandbox = manager.get(f"start-{variant}")
    assert isinstance(sandbox, DockerSandbox)
    sandbox.kept_channel = variant == "new"
    try:
        await sandbox.start()
    finally:
        await manager.release(sandbox.task_id)


async def main(image: str, rounds: int, calls: int, starts: int) -> None:
    with tempfile.TemporaryDirectory() as root:
        manager = SandboxManager(
            SandboxSettings(backend="docker", root=str(Path(root)), docker_image=image)
        )
        sandboxes: dict[str, DockerSandbox] = {}
        for variant in VARIANTS:
            sandbox = manager.get(variant)
            assert isinstance(sandbox, DockerSandbox)
            sandbox.kept_channel = variant == "new"
            await sandbox.start()
            sandboxes[variant] = sandbox
        python = PythonSettings(timeout=30)

        def operations(sandbox: DockerSandbox) -> dict[str, Callable[[], Awaitable[object]]]:
            async def true() -> None:
                result = await sandbox.run("true")
                assert result.exit_code == 0, result

            async def python_call() -> None:
                reply = await run_python(sandbox, "x += 1", python)
                assert "error" not in reply, reply

            async def file() -> None:
                await sandbox.write_bytes("bench.txt", b"x" * 1000)
                assert len(await sandbox.read_bytes("bench.txt")) == 1000

            return {"true": true, "python": python_call, "file": file}

        try:
            for sandbox in sandboxes.values():
                await run_python(sandbox, "x = 0", python)  # the interpreter, started
            engine = engine_pids()
            figures: dict[tuple[str, str], list[tuple[float, float, float]]] = {}
            for _ in range(rounds):
                for variant in VARIANTS:
                    for name, operation in operations(sandboxes[variant]).items():
                        figure = await timed(calls, operation, engine)
                        figures.setdefault((name, variant), []).append(figure)
                    if starts:
                        start = functools.partial(start_and_close, manager, variant)
                        figure = await timed(starts, start, engine)
                        figures.setdefault(("start", variant), []).append(figure)
            channels = sandboxes["new"].channels_started
        finally:
            for sandbox in sandboxes.values():
                if sandbox in _interpreters:
                    _interpreters[sandbox].drop()
            await manager.close_all()

    print(f"image {image}, engine {os.environ.get('DOCKER_HOST', 'default')}, "
          f"{rounds} rounds of {calls} calls; channels started: {channels}")  # fmt: skip
    print("per operation, medians over the rounds (old: docker exec; new: the kept channel)")
    print(f"{'':<8} {'wall ms':^26} {'host CPU ms':^26} {'engine CPU ms':^26}")
    print(f"{'':<8}" + f" {'old':>8} {'new':>8} {'old/new':>8}" * 3)
    for name in ("true", "python", "file", "start")[: 4 if starts else 3]:
        row = f"{name:<8}"
        for column in range(3):
            old = statistics.median(f[column] for f in figures[(name, "old")]) * 1000
            new = statistics.median(f[column] for f in figures[(name, "new")]) * 1000
            ratio = f"{old / new:8.1f}" if new > 0 else f"{'-':>8}"
            row += f" {old:8.1f} {new:8.1f} {ratio}"
        print(row)
    if not engine:
        print("(engine CPU: not measured, the engine is not one scripts/docker-engine.sh started)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--image", default=os.environ.get("HERMES_ENVGEN_TEST_DOCKER_IMAGE"))
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    parser.add_argument("--starts", type=int, default=3, help="sandbox starts a round (0: none)")
    arguments = parser.parse_args()
    if not arguments.image:
        parser.error("--image (or HERMES_ENVGEN_TEST_DOCKER_IMAGE) names the image to run in")
    asyncio.run(main(arguments.image, arguments.rounds, arguments.calls, arguments.starts))
