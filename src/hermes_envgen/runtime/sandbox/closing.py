"""Many sandboxes closed at once, a bounded number at a time (a run's end, SIGTERM's flush).

One after another, a thousand open sandboxes took some 25 minutes to close (each close waits
on its sandbox's processes being reaped and its workspace being removed, in a thread); a
shutdown with a bounded flush got through a few dozen and left the rest to the exit's reaping.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable

CLOSE_CONCURRENCY = 32  # closes under way at once: each holds a thread for a moment, no more


async def close_concurrently(
    closes: Iterable[Callable[[], Awaitable[None]]], limit: int = CLOSE_CONCURRENCY
) -> None:
    """Run every close, at most ``limit`` at a time; each is tried whatever the others did,
    and the first failure is raised once all have ended. Cancelled, the closes under way are
    cancelled too (what they leave is reaped at exit, as a close cut short)."""
    gate = asyncio.Semaphore(limit)

    async def one(close: Callable[[], Awaitable[None]]) -> None:
        async with gate:
            await close()

    results = await asyncio.gather(*(one(close) for close in closes), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
