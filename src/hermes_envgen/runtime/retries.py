"""The one retry loop: ask again after a failure that may pass, with exponential backoff.

The model client retries every request by the kind of its failure; the agent loop retries a
turn through a server that does not (atroposlib's ServerManager, a backend of its own). Both
go through ``with_retries``.
"""

from __future__ import annotations

import asyncio
import logging
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

logger = logging.getLogger(__name__)

T = TypeVar("T")


def backoff_delay(backoff: float, number: int, jitter: bool = False) -> float:
    """Seconds to wait before retry ``number + 1``: ``backoff * 2**number``, jittered ±50 %.

    Jitter spreads the retries of many rollouts that failed together (a server restart).
    """
    delay = backoff * 2**number
    return delay * (0.5 + random.random()) if jitter else delay


async def with_retries(
    attempt: Callable[[int], Awaitable[T]],
    *,
    retries: int,
    backoff: float,
    may_pass: Callable[[Exception], bool],
    jitter: bool = False,
    what: str = "request failed",
) -> T:
    """``await attempt(number)`` until it succeeds, at most ``retries + 1`` times.

    A failure for which ``may_pass`` is false, or the last one, is raised as it is;
    cancellation is never retried.
    """
    for number in range(retries + 1):
        try:
            return await attempt(number)
        except Exception as exc:
            if number == retries or not may_pass(exc):
                raise
            delay = backoff_delay(backoff, number, jitter)
            logger.info("%s (%s), retrying in %.1f s", what, exc, delay)
            await asyncio.sleep(delay)
    raise AssertionError("unreachable: the last attempt returns or raises")
