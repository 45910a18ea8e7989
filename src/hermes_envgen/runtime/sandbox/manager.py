"""Keeps one sandbox per task id: made on first use, reaped when idle, closed on cleanup.

Workspaces live in the run's own directory (see ``runs``): removed when the run ends,
however it ends, at the latest by the next run under the same root.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import re
import time
from collections.abc import Callable
from pathlib import Path

from hermes_envgen.runtime.errors import EnvConfigError
from hermes_envgen.runtime.sandbox.base import Sandbox, SandboxSettings
from hermes_envgen.runtime.sandbox.bwrap.pool import SandboxPool
from hermes_envgen.runtime.sandbox.closing import close_concurrently
from hermes_envgen.runtime.sandbox.runs import (
    RunDirectory,
    reap_dead_runs_on_host,
    reap_stale_runs,
    runs_directory,
)

logger = logging.getLogger(__name__)

SandboxFactory = Callable[[str, SandboxSettings, Path], Sandbox]


def _local(task_id: str, settings: SandboxSettings, workspace: Path) -> Sandbox:
    from hermes_envgen.runtime.sandbox.local import LocalSandbox

    return LocalSandbox(task_id, settings, workspace)


def _bwrap(task_id: str, settings: SandboxSettings, workspace: Path) -> Sandbox:
    from hermes_envgen.runtime.sandbox.bwrap.backend import BwrapSandbox

    return BwrapSandbox(task_id, settings, workspace)


def _docker(task_id: str, settings: SandboxSettings, workspace: Path) -> Sandbox:
    from hermes_envgen.runtime.sandbox.docker.backend import DockerSandbox

    return DockerSandbox(task_id, settings, workspace)


BACKENDS: dict[str, SandboxFactory] = {"local": _local, "bwrap": _bwrap, "docker": _docker}


def register_backend(name: str, factory: SandboxFactory) -> None:
    """Make a sandbox backend selectable by ``sandbox_backend``."""
    BACKENDS[name] = factory


def check_backend(name: str) -> None:
    """Fail early, naming the valid choices, for an unknown backend."""
    if name not in BACKENDS:
        raise EnvConfigError(
            f"unknown sandbox_backend {name!r}; valid backends: {', '.join(BACKENDS)}, or "
            "auto (bwrap where it works, else local)"
        )


DEFAULT_IDLE_LIFETIME = 600.0  # seconds a sandbox may sit idle before it is reaped
POOLED_BACKENDS = ("bwrap",)  # whose starts a pool takes off the rollouts' path


class SandboxManager:
    """Hands out the sandbox of a task id, and reaps those idle longer than ``lifetime``."""

    def __init__(
        self, settings: SandboxSettings | None = None, lifetime: float = DEFAULT_IDLE_LIFETIME
    ) -> None:
        self.settings = settings or SandboxSettings()
        check_backend(self.settings.backend)
        self.lifetime = lifetime
        self._sandboxes: dict[str, Sandbox] = {}
        self._reaper: asyncio.Task | None = None
        self._made = 0  # sandboxes made: numbers their workspaces
        self._close_failed = False  # a sandbox not closed for sure: the run stays to be reaped
        parent = runs_directory(self.settings.root)
        reap_stale_runs(parent)  # what runs that died under this root left behind
        reap_dead_runs_on_host()  # and under roots no run uses again
        self._run = RunDirectory(parent)
        self.root = self._run.path
        # Fresh sandboxes started ahead of demand: a task takes one instead of making its own.
        self.pool: SandboxPool | None = None
        if self.settings.pool > 0 and self.settings.backend in POOLED_BACKENDS:
            self.pool = SandboxPool(self.settings.pool, lambda: self._make("pooled"))
            logger.info("up to %d sandboxes are started ahead of demand", self.settings.pool)
        elif self.settings.pool > 0:
            logger.info("sandbox_pool applies to bwrap only: the %s backend ignores it",
                        self.settings.backend)  # fmt: skip

    def __contains__(self, task_id: str) -> bool:
        return task_id in self._sandboxes

    def __len__(self) -> int:
        return len(self._sandboxes)

    def get(self, task_id: str) -> Sandbox:
        """The task's sandbox, made on first use."""
        sandbox = self._sandboxes.get(task_id)
        if sandbox is None:
            sandbox = self.pool.take() if self.pool is not None else None
            if sandbox is None:
                sandbox = self._make(task_id)
            else:  # never used: nothing of another task's in it
                sandbox.task_id = task_id
            self._sandboxes[task_id] = sandbox
            self._start_reaper()
        sandbox.touch()
        return sandbox

    def _make(self, task_id: str) -> Sandbox:
        """A new sandbox of the backend (not started), its workspace in the run's directory."""
        # Numbered: task ids that read alike once made safe ("a b", "a_b") stay apart, and
        # no name is "." or ".." or another sandbox's "<name>.checks".
        self._made += 1
        readable = re.sub(r"[^A-Za-z0-9_.-]", "_", task_id)[:80]
        workspace = self.root / f"{self._made}-{readable}"
        self._run.claim()  # makes the run's directory, once until close_all
        return BACKENDS[self.settings.backend](task_id, self.settings, workspace)

    async def stop_agent_processes(self, task_id: str) -> None:
        """End the task's rollout: kill what it started, if it has a sandbox."""
        sandbox = self._sandboxes.get(task_id)
        if sandbox is not None:
            await sandbox.stop_agent_processes()

    async def release(self, task_id: str) -> None:
        """Close the task's sandbox, if it has one."""
        sandbox = self._sandboxes.pop(task_id, None)
        if sandbox is None:  # a rollout of tools that need none: nothing to close
            return
        try:
            await sandbox.close()
        except BaseException:  # cut short (cancelled on Ctrl-C, say): reaped at exit
            self._close_failed = True
            raise

    async def close_all(self) -> None:
        """Close every sandbox and give up the run's directory (at shutdown).

        Until then the run keeps its (possibly empty) directory and lock between rollouts:
        claiming and releasing them around every sandbox cost a dozen system calls each.
        The sandboxes close concurrently (``close_concurrently``), the pool's with them.
        """

        async def close_pool() -> None:
            if self.pool is not None:
                try:
                    await self.pool.close()
                except BaseException:  # cut short: reaped at exit, as a release cut short
                    self._close_failed = True
                    raise

        releases = [functools.partial(self.release, task_id) for task_id in self._sandboxes]
        await close_concurrently([close_pool, *releases])
        if not self._close_failed:
            self._run.release()
        if self._reaper is not None:
            self._reaper.cancel()
            self._reaper = None

    async def reap_idle(self) -> list[str]:
        """Close the sandboxes idle for longer than ``lifetime``; return their task ids."""
        now = time.monotonic()
        idle = [
            task_id
            for task_id, sandbox in self._sandboxes.items()
            if not sandbox.running and now - sandbox.last_used > self.lifetime
        ]
        for task_id in idle:
            logger.info("reaping sandbox of task %s, idle for over %.0f s", task_id, self.lifetime)
        await close_concurrently(functools.partial(self.release, task_id) for task_id in idle)
        return idle

    def _start_reaper(self) -> None:
        if self._reaper is not None and not self._reaper.done():
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # no loop: sandboxes are released explicitly
        self._reaper = loop.create_task(self._reap_forever())

    async def _reap_forever(self) -> None:
        interval = max(0.05, min(30.0, self.lifetime / 4))
        while self._sandboxes:
            await asyncio.sleep(interval)
            await self.reap_idle()
