"""The ``search_files`` matcher processes: started once, reused across searches, never shared.

Starting a matcher (``search_worker``) costs some 40 ms of interpreter start-up and ``re2``
import, several times what a search of a small workspace takes, so the env keeps the idle
ones of each event loop. A search has its matcher to itself from ``acquire`` to ``release``:
no two searches (of one rollout or of two) ever share one at a time, and a matcher holds
nothing of a search once it has answered its end. A search that overruns its limit, or
whose matcher failed, has it killed instead of returned; the next search starts a fresh one.
"""

from __future__ import annotations

import asyncio
import sys
import time
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from hermes_envgen.runtime.tools import search_worker

MAX_IDLE = 4  # matchers kept per event loop; more searches at once start more, then end them
# An idle matcher exits by itself after search_worker.IDLE_EXIT s; one idle for nearly that
# long is ended here rather than handed a search it might exit under.
REUSE_WITHIN = search_worker.IDLE_EXIT - 10

_WORKER = str(Path(search_worker.__file__))


@dataclass
class Matcher:
    """One matcher process and when its last search ended."""

    process: asyncio.subprocess.Process
    idle_since: float = field(default_factory=time.monotonic)

    @property
    def alive(self) -> bool:
        return self.process.returncode is None

    async def kill(self) -> None:
        if self.process.returncode is None:
            self.process.kill()
        await self.process.wait()


class MatcherPool:
    """The idle matchers of one event loop."""

    def __init__(self) -> None:
        self.idle: list[Matcher] = []
        self.started = 0  # processes started, for tests and benchmarks
        self.finalizer: AsyncIterator[None] | None = None

    async def acquire(self) -> Matcher:
        """An idle matcher, or a fresh one; the caller's alone until ``release``."""
        while self.idle:
            matcher = self.idle.pop()
            if matcher.alive and time.monotonic() - matcher.idle_since < REUSE_WITHIN:
                return matcher
            await matcher.kill()
        self.started += 1
        process = await asyncio.create_subprocess_exec(
            sys.executable, "-I", _WORKER, stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.DEVNULL,
        )  # fmt: skip
        return Matcher(process)

    async def release(self, matcher: Matcher, reusable: bool) -> None:
        """Keep ``matcher`` for the next search if it finished cleanly, else end it."""
        if reusable and matcher.alive and len(self.idle) < MAX_IDLE:
            matcher.idle_since = time.monotonic()
            self.idle.append(matcher)
        else:
            await matcher.kill()

    async def close(self) -> None:
        """End every idle matcher."""
        idle, self.idle = self.idle, []
        for matcher in idle:
            if matcher.process.stdin is not None:
                matcher.process.stdin.close()
            await matcher.kill()


_pools: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, MatcherPool] = (
    weakref.WeakKeyDictionary()
)


async def pool() -> MatcherPool:
    """The running event loop's matchers, ended when the loop shuts down."""
    loop = asyncio.get_running_loop()
    found = _pools.get(loop)
    if found is None:
        found = _pools[loop] = MatcherPool()
        # A started async generator is closed by the loop's shutdown_asyncgens (which
        # asyncio.run calls while the loop still runs): its finally ends the idle matchers
        # and reaps them, instead of leaving them to the garbage collector.
        found.finalizer = _end_with_the_loop(found)
        await anext(found.finalizer)
    return found


async def _end_with_the_loop(matchers: MatcherPool) -> AsyncIterator[None]:
    try:
        yield
    finally:
        await matchers.close()
