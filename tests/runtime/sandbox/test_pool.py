"""Sandboxes started ahead of demand (``sandbox_pool``): a task takes a fresh one, which no
other task has used and which is closed after its rollout; the pool is bounded and goes with
the run (a killed run's pool: tests/runtime/sandbox/test_crash_cleanup.py; many rollouts:
tests/runtime/sandbox/test_leaks.py)."""

from __future__ import annotations

import asyncio
import os

import pytest
from helpers.sandbox import BWRAP, eventually, make_manager, processes_running, sleep_mark

from hermes_envgen.runtime.env.config import HermesAgentEnvConfig
from hermes_envgen.runtime.sandbox.host_limits import cgroup_parents

# What a task sees of its sandbox, but for what differs between any two sandboxes (the run
# tag, pids): the same for a pooled sandbox as for one started for the task.
FINGERPRINT = (
    "id; pwd; hostname; nice; ionice; ulimit -a; grep Cpus_allowed_list /proc/self/status;"
    " env | grep -v ^HERMES_SANDBOX_RUN= | sort;"
    " ls -lA /workspace /tmp /dev/shm /dev/mqueue | sed 's/ [A-Z][a-z][a-z] .* / /';"
    " ipcs | grep -c '^0x'; df -h /tmp /dev/shm | tail -n +2;"
    " ps -e -o user=,comm= > /tmp/ps; sort /tmp/ps"  # a piped sort might still be a bash
)
# An agent leaving all it can behind: files, a daemon, scratch files, IPC, a lower priority.
LEAVE_BEHIND = (
    "echo mine > left.txt; touch /tmp/left /dev/shm/left; ipcmk -M 4096 >/dev/null;"
    " python3 -c \"import ctypes,os; ctypes.CDLL(None).mq_open(b'/left',"
    ' os.O_CREAT | os.O_RDWR, 0o600, None)";'
    " (setsid nohup sleep {mark} >/dev/null 2>&1 &); renice -n 5 -p $$ >/dev/null"
)


@pytest.mark.slow
@pytest.mark.parametrize("backend", [BWRAP])
def test_a_pooled_sandbox_is_as_fresh_as_one_started_for_the_task(backend, tmp_path):
    pooled = make_manager(tmp_path / "pooled", backend, pool=2)
    fresh = make_manager(tmp_path / "fresh", backend)
    mark = sleep_mark(731)

    async def main():
        assert pooled.pool is not None
        await pooled.pool.fill()
        waiting = list(pooled.pool._ready)
        first = pooled.get("first")
        assert first is waiting[0] and first.task_id == "first"
        anchor = first._anchor
        assert anchor is not None and anchor.alive()  # started ahead: a take, not a start
        left = await first.run(LEAVE_BEHIND.format(mark=mark))
        assert left.exit_code == 0, left.output
        assert processes_running(f"sleep\0{mark}\0".encode())
        await pooled.release("first")  # the rollout ends: the sandbox is closed, not pooled
        assert first.closed and not anchor.alive()
        assert first not in pooled.pool._ready
        second = pooled.get("second")
        assert second is waiting[1] and second is not first
        seen_pooled = await second.run(FINGERPRINT)
        seen_fresh = await fresh.get("second").run(FINGERPRINT)
        gone = not processes_running(f"sleep\0{mark}\0".encode())
        await pooled.close_all()
        await fresh.close_all()
        return seen_pooled, seen_fresh, gone

    seen_pooled, seen_fresh, gone = asyncio.run(main())
    assert gone, "the first rollout's daemon outlived its sandbox"
    assert seen_pooled.exit_code == 0, seen_pooled.output
    assert "left" not in seen_pooled.output, seen_pooled.output
    assert seen_pooled.output == seen_fresh.output


@pytest.mark.slow
@pytest.mark.parametrize("backend", [BWRAP])
def test_the_pool_is_bounded_refills_and_goes_with_the_run(backend, tmp_path):
    manager = make_manager(tmp_path, backend, pool=3)
    run = manager.root.name

    async def main():
        assert manager.pool is not None
        assert manager.get("t0") is not None  # the first demand starts the filling
        await manager.pool.fill()
        assert len(manager.pool) == 3
        anchors = {s._anchor.target for s in manager.pool._ready}
        taken = [manager.get(f"t{n}") for n in (1, 2)]  # two takes, then the refill
        assert all(s._anchor is not None for s in taken)
        await manager.pool.fill()
        assert len(manager.pool) == 3 and manager.pool.served == 2
        anchors |= {s._anchor.target for s in manager.pool._ready}
        assert len(anchors) == 5
        await manager.close_all()
        return anchors

    anchors = asyncio.run(main())
    assert eventually(lambda: not any(os.path.exists(f"/proc/{pid}") for pid in anchors))
    assert not manager.root.exists()
    assert not [p for p in cgroup_parents() if (p / run).exists()], "the run's cgroups are left"


def test_the_pool_setting_is_off_by_default_and_bounded():
    assert HermesAgentEnvConfig().sandbox_settings().pool == 0
    assert HermesAgentEnvConfig(sandbox_pool=16).sandbox_settings().pool == 16
    with pytest.raises(ValueError, match="sandbox_pool"):
        HermesAgentEnvConfig(sandbox_pool=4096)


@pytest.mark.slow
@pytest.mark.parametrize("backend", [BWRAP])
def test_the_pool_serves_a_manager_used_from_one_event_loop_after_another(backend, tmp_path):
    # As tests and a session's thread do: filled under one loop, taken and refilled under the
    # next.
    manager = make_manager(tmp_path, backend, pool=1)
    assert manager.pool is not None
    asyncio.run(manager.pool.fill())

    async def second():
        sandbox = manager.get("task")
        assert manager.pool.served == 1
        result = await sandbox.run("echo hi")
        await manager.pool.fill()
        refilled = len(manager.pool)
        await manager.close_all()
        return result, refilled

    result, refilled = asyncio.run(second())
    assert (result.exit_code, result.output, refilled) == (0, "hi\n", 1)
    assert not manager.root.exists()
