"""Sandboxes started ahead of demand (``sandbox_pool``), so that a rollout's start is a take.

A bwrap sandbox's start (its namespaces, its anchor's python3) costs several times bwrap's
own floor; started while the run waits (a group's slowest rollout, the model's answers), it is
off the rollouts' path. Each pooled sandbox is a fresh one that no task has used: an empty
workspace, nothing running but its anchor. A take hands it to one task, which keeps it until
the task is released, and then it is closed like any other: a pooled sandbox never serves a
second rollout. The pool refills in the background, one start at a time, up to its size.

Bounded: ``size`` sandboxes at most, ready or starting (each holds a few MB while it waits: its
anchor's interpreter, its workspace and ``/tmp`` being empty). Cleaned up as every sandbox of the
run is: ``close`` on the run's end; at interpreter exit (SIGTERM, SIGINT) and after a crash by
the run's directory and cgroups (see ``runs``), which pooled sandboxes live in like the others;
and on SIGKILL bwrap's ``--die-with-parent`` ends them with the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable

from hermes_envgen.runtime.sandbox.base import Sandbox
from hermes_envgen.runtime.sandbox.closing import close_concurrently

logger = logging.getLogger(__name__)

FAILURE_PAUSE = 30.0  # seconds without refilling after a start failed (no retry storm)


class SandboxPool:
    """Up to ``size`` sandboxes from ``make``, started (``Sandbox.start_ahead``) before use."""

    def __init__(self, size: int, make: Callable[[], Sandbox]) -> None:
        self.size = size
        self._make = make
        self._ready: deque[Sandbox] = deque()
        self._starting: list[Sandbox] = []
        self._cut_short: list[Sandbox] = []  # starts cancelled midway: closed by ``close``
        self._filling: asyncio.Task | None = None
        self._paused_until = 0.0
        self._closed = False
        self.served = 0  # sandboxes taken from the pool so far

    def __len__(self) -> int:
        """The sandboxes ready to be taken."""
        return len(self._ready)

    def take(self) -> Sandbox | None:
        """A started sandbox no task has used (None if none is ready); the pool refills."""
        sandbox = self._ready.popleft() if self._ready else None
        self.served += sandbox is not None
        self._refill()
        return sandbox

    async def fill(self) -> None:
        """Start sandboxes until the pool is full (or a start fails); at the run's start, say."""
        self._refill()
        loop = asyncio.get_running_loop()
        while (task := self._filling) is not None and not task.done() and task.get_loop() is loop:
            await asyncio.shield(task)

    def _refill(self) -> None:
        """Start the background refill on the running loop, unless one is under way there."""
        if self._closed or len(self._ready) + len(self._starting) >= self.size:
            return
        if time.monotonic() < self._paused_until:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop (a synchronous caller): the next take on a loop refills
        task = self._filling
        if task is not None and not task.done() and task.get_loop() is loop:
            return
        self._filling = loop.create_task(self._fill())

    async def _fill(self) -> None:
        while not self._closed and len(self._ready) + len(self._starting) < self.size:
            sandbox = self._make()
            self._starting.append(sandbox)
            try:
                await sandbox.start_ahead()
            except asyncio.CancelledError:  # the loop ends (asyncio.run), or ``close``
                self._cut_short.append(sandbox)
                raise
            except Exception as exc:  # logged: the rollouts start their own meanwhile
                logger.warning(
                    "could not start a sandbox ahead of demand (%s); the pool pauses %g s",
                    exc,
                    FAILURE_PAUSE,
                )
                self._paused_until = time.monotonic() + FAILURE_PAUSE
                await sandbox.close()
                return
            finally:
                self._starting.remove(sandbox)
            if self._closed:
                await sandbox.close()
                return
            self._ready.append(sandbox)

    async def close(self) -> None:
        """Stop refilling and close every sandbox the pool holds (at the run's end)."""
        self._closed = True
        task, self._filling = self._filling, None
        if task is not None and not task.done():
            task.cancel()
            if task.get_loop() is asyncio.get_running_loop():
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        waiting = [*self._ready, *self._cut_short, *self._starting]
        self._ready.clear()
        self._cut_short.clear()
        try:
            await close_concurrently(sandbox.close for sandbox in waiting)
        finally:
            self._closed = False  # a manager used again after close_all refills at its takes
