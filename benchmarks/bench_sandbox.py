"""Per-command overhead of each sandbox backend against a raw subprocess, in the same run.

For each backend (local, bwrap when installed, docker when an engine answers) it runs
``true`` through ``Sandbox.run`` and, alternating with it, through a raw
``asyncio.create_subprocess_exec("bash", "-c", "true")`` whose output is read the same way;
each round yields time(backend) / time(raw), and the median over rounds is reported, with
the overhead per command (backend minus raw, in ms). Targets: local and bwrap <= 1.5
(docker: reported only). Docker runs in ``--docker-image`` (default: the tests' image named by
HERMES_ENVGEN_TEST_DOCKER_IMAGE, else the backend's default image), which must be on the engine.

    .venv/bin/python benchmarks/bench_sandbox.py [--rounds 7] [--commands 40] [--docker-image I]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import statistics
import subprocess
import tempfile
import time

from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings
from hermes_envgen.runtime.sandbox.docker.backend import DEFAULT_IMAGE

TARGETS = {"local": 1.5, "bwrap": 1.5}


async def raw_command() -> None:
    """The baseline: one plain asyncio subprocess, output read to the end."""
    process = await asyncio.create_subprocess_exec(
        "bash",
        "-c",
        "true",
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    await process.communicate()


async def seconds_per_command(run, commands: int) -> float:
    """Mean wall time of ``commands`` sequential calls of ``run``."""
    start = time.perf_counter()
    for _ in range(commands):
        await run()
    return (time.perf_counter() - start) / commands


def available_backends(docker_image: str) -> list[str]:
    """local always; bwrap if installed; docker if an engine answers and has the image."""
    backends = ["local"]
    if shutil.which("bwrap"):
        backends.append("bwrap")
    else:
        print("bwrap: not measured (not installed)")
    if not shutil.which("docker"):
        print("docker: not measured (no docker CLI)")
        return backends
    info = subprocess.run(["docker", "info"], capture_output=True, timeout=20, check=False)
    image = subprocess.run(
        ["docker", "image", "inspect", docker_image], capture_output=True, timeout=20, check=False
    )
    if info.returncode != 0:
        print("docker: not measured (no engine answers; see scripts/docker-engine.sh)")
    elif image.returncode != 0:
        print(f"docker: not measured (image {docker_image} is not on the engine)")
    else:
        backends.append("docker")
    return backends


async def main(rounds: int, commands: int, docker_image: str) -> dict[str, float]:
    """Measure every available backend against the raw baseline; print and return ratios."""
    backends = available_backends(docker_image)
    root = tempfile.mkdtemp(prefix="bench-sandbox-")
    managers = {
        b: SandboxManager(SandboxSettings(backend=b, root=f"{root}/{b}", docker_image=docker_image))
        for b in backends
    }
    sandboxes = {b: managers[b].get("bench") for b in backends}
    # Timed through ToolContext.terminal, the call a reward function makes.
    contexts = {b: ToolContext("bench", managers[b]) for b in backends}
    per_command: dict[str, list[float]] = {b: [] for b in ["raw", *backends]}
    ratios: dict[str, list[float]] = {b: [] for b in backends}
    try:
        for backend, sandbox in sandboxes.items():  # warm up: page cache, docker start
            for _ in range(3):
                result = await sandbox.run("true")
                assert result.exit_code == 0, (backend, result)
        for _ in range(rounds):
            for backend, context in contexts.items():
                raw = await seconds_per_command(raw_command, commands)
                timed = await seconds_per_command(lambda c=context: c.terminal("true"), commands)
                per_command["raw"].append(raw)
                per_command[backend].append(timed)
                ratios[backend].append(timed / raw)
    finally:
        for manager in managers.values():
            await manager.close_all()
        shutil.rmtree(root, ignore_errors=True)

    print(f"{rounds} rounds x {commands} commands of `true`, alternating with the raw baseline")
    raw_ms = statistics.median(per_command["raw"]) * 1000
    print(f"{'':8} {'ms/command':>11} {'overhead ms':>12} {'ratio (median)':>15} {'target':>7}")
    print(f"{'raw':8} {raw_ms:11.2f}")
    summary = {}
    for backend in backends:
        ratio = statistics.median(ratios[backend])
        summary[backend] = ratio
        target = TARGETS.get(backend)
        verdict = "" if target is None else ("ok" if ratio <= target else "OVER")
        backend_ms = statistics.median(per_command[backend]) * 1000
        print(
            f"{backend:8} {backend_ms:11.2f} {backend_ms - raw_ms:12.2f} "
            f"{ratio:15.2f} {'' if target is None else f'<= {target:g}':>7} {verdict}"
        )
    return summary


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--commands", type=int, default=40)
    parser.add_argument(
        "--docker-image",
        default=os.environ.get("HERMES_ENVGEN_TEST_DOCKER_IMAGE") or DEFAULT_IMAGE,
        help="the image docker runs in (it must be on the engine; it needs bash)",
    )
    arguments = parser.parse_args()
    asyncio.run(main(arguments.rounds, arguments.commands, arguments.docker_image))
