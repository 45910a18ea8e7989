"""Worker processes for work no agent's input may stall the env with: started once, reused,
never shared, killed at a limit.

``search_files`` matches its patterns in ``search_worker``, ``web_fetch`` reads its pages as
text in ``page_text``: each a ``python -I`` of that module's file (some 40 ms of interpreter
start-up and imports, several times what a small job takes), so the env keeps the idle ones
of each event loop, per program. A job has its worker to itself from ``acquire`` to
``release``: no two jobs (of one rollout or of two) ever share one at a time, and a worker
holds nothing of a job once it has answered. A job that overruns its limit, or whose worker
failed, has it killed instead of returned; the next job starts a fresh one. A worker program
exits by itself once it has waited its ``IDLE_EXIT`` seconds for a job.
"""

from __future__ import annotations

import asyncio
import sys
import time
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from types import ModuleType

MAX_IDLE = 4  # workers kept per program and event loop; more jobs at once start more, then end


@dataclass
class Worker:
    """One worker process and when its last job ended."""

    process: asyncio.subprocess.Process
    idle_since: float = field(default_factory=time.monotonic)

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    async def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()


class WorkerPool:
    """The idle workers of one program in one event loop."""

    def __init__(self, program: str, idle_exit: float) -> None:
        self.program = program  # the worker's file, run as ``python -I program``
        # An idle worker exits by itself after idle_exit s; one idle for nearly that long is
        # ended here rather than handed a job it might exit under.
        self.reuse_within = idle_exit - 10
        self.max_idle = MAX_IDLE
        self.idle: list[Worker] = []
        self.started = 0  # processes started, for tests and benchmarks
        self.finalizer: AsyncIterator[None] | None = None

    async def acquire(self) -> Worker:
        """An idle worker, or a fresh one; the caller's alone until ``release``."""
        while self.idle:
            worker = self.idle.pop()
            if worker.alive and time.monotonic() - worker.idle_since < self.reuse_within:
                return worker
            await worker.kill()
        self.started += 1
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-I", self.program, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        return Worker(process)

    async def release(self, worker: Worker, reusable: bool) -> None:
        """Keep ``worker`` for the next job if it finished cleanly, else end it."""
        if reusable and worker.alive and len(self.idle) < self.max_idle:
            worker.idle_since = time.monotonic()
            self.idle.append(worker)
        else:
            await worker.kill()

    async def close(self) -> None:
        """End every idle worker."""
        idle, self.idle = self.idle, []
        for worker in idle:
            if worker.process.stdin is not None:
                worker.process.stdin.close()
            await worker.kill()


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, WorkerPool]] = (
    weakref.WeakKeyDictionary()
)


async def pool(program: ModuleType) -> WorkerPool:
    """The running event loop's workers of ``program`` (a module with ``IDLE_EXIT`` that runs
    as a script), ended when the loop shuts down."""
    loop = asyncio.get_running_loop()
    path = str(program.__file__)
    pools = _pools.setdefault(loop, {})
    found = pools.get(path)
    if found is None:
        found = pools[path] = WorkerPool(path, program.IDLE_EXIT)
        # A started async generator is closed by the loop's shutdown_asyncgens (which
        # asyncio.run calls while the loop still runs): its finally ends the idle workers
        # and reaps them, instead of leaving them to the garbage collector.
        found.finalizer = _end_with_the_loop(found)
        await anext(found.finalizer)
    return found


async def _end_with_the_loop(workers: WorkerPool) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await workers.close()
