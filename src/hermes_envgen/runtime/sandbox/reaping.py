"""Killing what a command left behind: its process group, and whatever carries its run tag.

A command's processes may leave its process group (``setsid``, daemons); each carries the
command's run tag in its environment (``RUN_TAG_VARIABLE``), found by a scan of /proc
(``procfs``). Sandboxes that close together share one scan (``kill_tagged_shared``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
import weakref
from collections.abc import Collection

from hermes_envgen.runtime.sandbox import procfs
from hermes_envgen.runtime.sandbox.base import RUN_TAG_VARIABLE


def kill_processes(pgid: int | None, tag: str | Collection[str]) -> None:
    """SIGKILL a process group and every process whose run tag is ``tag`` (or starts with it).

    The tag finds what left the group (``setsid``, ``nohup ... &`` of a subshell); more rounds
    catch children forked while the previous round was killing their parents (a fork bomb).
    Several tags cost one scan of /proc per round, as one does.
    """
    if pgid is not None:
        kill_group(pgid)
    for _ in range(20):
        found = tagged_processes(tag)
        if not found:
            return
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def tagged_processes(tag: str | Collection[str]) -> list[int]:
    """The live processes (not zombies) whose environment has a run tag matching ``tag``.

    A tag ending in ``.`` is a sandbox's prefix and matches all its commands' tags; any other
    is one command's tag and matches exactly.
    """
    tags = {tag} if isinstance(tag, str) else set(tag)
    prefixes = {t for t in tags if t.endswith(".")}
    return procfs.with_variable(
        RUN_TAG_VARIABLE,
        lambda value: value in tags or any(value.startswith(prefix) for prefix in prefixes),
    )


# A scan of /proc waits this many times its own CPU time after the last one ended
# before it starts: sweeps then take at most a fifth of a core however many processes the host
# has, and the sandboxes that close in between share the next one.
SWEEP_SPACING = 4


class _SharedSweep:
    """Kills what closing sandboxes left behind, one scan of /proc for all that wait.

    Reading every process's environment takes from a millisecond to tens of them (a host
    with thousands of processes) and a run closes a sandbox per rollout: the sandboxes that
    close while a scan runs or waits its turn share the next one.
    """

    def __init__(self) -> None:
        self._waiting: list[tuple[str, asyncio.Future]] = []
        self._worker: asyncio.Task | None = None
        self._next_scan = 0.0  # event-loop time before which no scan starts

    async def kill(self, prefix: str) -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        self._waiting.append((prefix, done))
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._work())
        await asyncio.shield(done)  # a cancelled close still has its processes killed

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while self._waiting:
            if (pause := self._next_scan - loop.time()) > 0:
                await asyncio.sleep(pause)
            batch, self._waiting = self._waiting, []
            try:
                took = await asyncio.to_thread(_timed_kill, {prefix for prefix, _ in batch})
                self._next_scan = loop.time() + SWEEP_SPACING * took
            finally:
                for _, done in batch:
                    if not done.done():
                        done.set_result(None)


def _timed_kill(prefixes: set[str]) -> float:
    """Kill what carries any of ``prefixes``; the CPU seconds the scans took.

    CPU time, not wall time: waits for the interpreter lock are the event loop's work.
    """
    started = time.thread_time()
    kill_processes(None, prefixes)
    return time.thread_time() - started


_sweeps: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _SharedSweep] = (
    weakref.WeakKeyDictionary()
)


async def kill_tagged_shared(prefix: str) -> None:
    """Kill every process tagged with a sandbox's ``prefix``, sharing the scan with others."""
    loop = asyncio.get_running_loop()
    sweep = _sweeps.get(loop)
    if sweep is None:
        sweep = _sweeps[loop] = _SharedSweep()
    await sweep.kill(prefix)


def kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True
