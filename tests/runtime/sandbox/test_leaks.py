"""200 rollouts through SandboxManager + ToolContext leave no process, no directory and no
container behind."""

from __future__ import annotations

import asyncio
import os
import time

import pytest
from helpers.sandbox import (
    BWRAP,
    DOCKER,
    LOCAL,
    descendants,
    docker_containers,
    eventually,
    make_manager,
    processes_pointing_into,
    processes_running,
    sleep_mark,
    sleep_needle,
)

from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.sandbox.docker.engine import LABEL, RUN_LABEL, run_label
from hermes_envgen.runtime.tools import ToolExecutionError

ROLLOUTS = 200
CONCURRENCY = 16


# Seconds the 200 rollouts may take: a bound for a hang, generous for a busy machine (quiet:
# about 10 s on local and bwrap; docker creates and removes a container per rollout, 60-280 s).
TIME_LIMIT = {"local": 150, "bwrap": 150, "docker": 600}


def run_containers(root) -> set[str]:
    """Every container of this manager's run, running or not (docker ps -a).

    Filtered by the run's label, not the sandboxes' label alone: other tests, on the other
    worker, make and remove containers of their own meanwhile."""
    return set(docker_containers(f"label={LABEL}", f"label={RUN_LABEL}={run_label(root)}"))


class Crash(RuntimeError):
    """A rollout function failing midway, as a buggy environment would."""


async def rollout(manager, number: int, linger: str) -> str:
    """One rollout of a mix: success, failures, timeouts, crashes; cleanup in ``finally``.

    Every background process it starts runs ``sleep <linger>``."""
    ctx = ToolContext(f"rollout-{number}", manager)
    kind = number % 5
    try:
        await ctx.write_file("task.txt", f"task {number}\n")
        if kind == 0:  # success
            result = await ctx.terminal("cat task.txt | tr a-z A-Z > out.txt && cat out.txt")
            assert result["output"] == f"TASK {number}\n", result
            assert await ctx.read_file("out.txt") == f"TASK {number}\n"
        elif kind == 1:  # failing command and failing tool
            result = await ctx.terminal("grep nothing task.txt; exit 3")
            assert result["exit_code"] == 3
            with pytest.raises(ToolExecutionError, match="no such file"):
                await ctx.call_tool("read_file", {"path": "missing.txt"})
        elif kind == 2:  # timeout, with a daemonised child and a plain background child
            result = await ctx.terminal(
                f"setsid sleep {linger} >/dev/null 2>&1 & sleep {linger} >/dev/null 2>&1 &"
                " sleep 30",
                timeout=0.3,
            )
            assert result["exit_code"] == 124
        elif kind == 3:  # crash midway, background process running
            await ctx.terminal(f"nohup sleep {linger} >/dev/null 2>&1 &")
            raise Crash(f"rollout {number} crashed")
        else:  # ends normally with background processes still running, one holding the pipe
            await ctx.terminal(
                f"sleep {linger} >/dev/null 2>&1 & (setsid sleep {linger} >/dev/null 2>&1 &)"
            )
            if number % 20 == 4:
                await ctx.terminal(f"sleep {linger} &", timeout=5)
        return "ok"
    finally:
        await ctx.cleanup()


@pytest.mark.slow
@pytest.mark.timeout(900)  # past TIME_LIMIT, which says how long it took
@pytest.mark.parametrize("backend", [LOCAL, BWRAP, DOCKER])
def test_two_hundred_rollouts_leave_nothing_behind(backend, tmp_path):
    leave_nothing_behind(tmp_path, backend)


@pytest.mark.slow
@pytest.mark.timeout(900)
@pytest.mark.parametrize("backend", [BWRAP])
def test_two_hundred_rollouts_from_a_pool_leave_nothing_behind(backend, tmp_path):
    # Sandboxes started ahead of demand: those taken, and those still waiting at the end.
    manager = leave_nothing_behind(tmp_path, backend, pool=8)
    assert manager.pool is not None and manager.pool.served > 0


def leave_nothing_behind(tmp_path, backend: str, **settings):
    """Run the rollouts, check that nothing of them is left; the manager."""
    manager = make_manager(tmp_path, backend, **settings)
    root = manager.root
    linger = sleep_mark(987)  # the rollouts' background sleeps: this run's alone on the host
    processes_before = descendants()
    pointing_before = processes_pointing_into(root.parent)

    async def main():
        slots = asyncio.Semaphore(CONCURRENCY)

        async def limited(number: int) -> str:
            async with slots:
                return await rollout(manager, number, linger)

        results = await asyncio.gather(
            *(limited(n) for n in range(ROLLOUTS)), return_exceptions=True
        )
        await manager.close_all()
        return results

    start = time.monotonic()
    results = asyncio.run(main())
    elapsed = time.monotonic() - start
    crashes = [r for r in results if isinstance(r, Crash)]
    others = [r for r in results if isinstance(r, BaseException) and not isinstance(r, Crash)]
    assert not others, others[:3]
    assert len(crashes) == ROLLOUTS // 5
    assert results.count("ok") == ROLLOUTS - len(crashes)
    # no process: not below this test process, not in the sandbox root, no lingering sleep
    assert eventually(lambda: descendants() <= processes_before), descendants()
    assert eventually(lambda: processes_pointing_into(root.parent) <= pointing_before)
    assert eventually(lambda: not processes_running(sleep_needle(linger)))
    # no directory: every workspace and the manager's own root are gone
    assert not root.exists(), sorted(os.listdir(root))
    assert len(manager) == 0
    # no container: the engine holds none of this run's
    if backend == "docker":
        assert run_containers(root) == set()
    assert elapsed < TIME_LIMIT[backend], f"{ROLLOUTS} rollouts took {elapsed:.1f} s"
    return manager
