"""Closing many open sandboxes at once (a run's end, SIGTERM's bounded flush): one after
another, as before, against ``SandboxManager.close_all`` (bounded concurrency, ``closing``).

For each count N (``--counts``), N bwrap sandboxes are started in a manager of their own (with
a memory limit, so each has its cgroups to remove as a limited sandbox does) and run `true`
(its anchor up), then all closed:
``serial`` awaits each release in turn, ``concurrent`` is ``close_all``. Both sides run in this
process, alternating, each on sandboxes of its own; printed: seconds, closes per second and
serial / concurrent. Nothing is left: each side's run directory must be gone after its close.

    .venv/bin/python benchmarks/bench_close.py [--counts 200,1000] [--repeat 1]
        [--docker-image IMAGE]  (docker sandboxes: each close is a ``docker rm``)
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time

from hermes_envgen.runtime.sandbox.base import SandboxSettings
from hermes_envgen.runtime.sandbox.manager import SandboxManager

STARTS_AT_ONCE = 16  # the sandboxes are started this many at a time (not measured)


async def open_sandboxes(root: str, count: int, image: str | None) -> SandboxManager:
    docker = {"backend": "docker", "docker_image": image} if image else {"backend": "bwrap"}
    settings = SandboxSettings(root=root, memory_mb=256, **docker)  # type: ignore[arg-type]
    manager = SandboxManager(settings)
    gate = asyncio.Semaphore(STARTS_AT_ONCE)

    async def start(number: int) -> None:
        async with gate:
            await manager.get(f"close-{number}").run("true")  # the anchor up

    await asyncio.gather(*(start(number) for number in range(count)))
    return manager


async def close(manager: SandboxManager, serial: bool) -> float:
    """Seconds to close every sandbox of ``manager``, the old way (``serial``) or close_all."""
    run = manager.root
    begin = time.perf_counter()
    if serial:  # the loop close_all was before
        for task_id in [f"close-{n}" for n in range(len(manager))]:
            await manager.release(task_id)
    await manager.close_all()
    seconds = time.perf_counter() - begin
    if run.exists():
        raise SystemExit(f"{run} is left after the close")
    return seconds


async def measure(count: int, repeat: int, image: str | None) -> None:
    times: dict[str, list[float]] = {"serial": [], "concurrent": []}
    for _ in range(repeat):
        for side in ("serial", "concurrent"):
            with tempfile.TemporaryDirectory(prefix="bench-close.") as root:
                manager = await open_sandboxes(root, count, image)
                times[side].append(await close(manager, serial=side == "serial"))
    serial, concurrent = (statistics.median(times[s]) for s in ("serial", "concurrent"))
    for side, seconds in (("serial", serial), ("concurrent", concurrent)):
        print(f"{count:>5} {side:<10} {seconds:7.1f} s  {count / seconds:7.1f} closes/s")
    print(f"{count:>5} serial / concurrent: {serial / concurrent:.1f}x  (load {load()})")


def load() -> str:
    return " ".join(f"{x:.1f}" for x in os.getloadavg())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--counts", default="200,1000")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument(
        "--docker-image",
        help="docker sandboxes of this image instead of bwrap's (an engine must answer: "
        "scripts/docker-engine.sh up)",
    )
    args = parser.parse_args()
    print(f"load before: {load()}")
    for count in (int(c) for c in args.counts.split(",")):
        asyncio.run(measure(count, args.repeat, args.docker_image))


if __name__ == "__main__":
    main()
