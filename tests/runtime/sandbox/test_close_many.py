"""Many open sandboxes close concurrently, a bounded number at a time, on SIGTERM too.

A run SIGTERMed with many sandboxes open closes them all within its bounded flush and leaves
nothing: no process, cgroup or workspace of its run. The sandboxes are bwrap's, each close
first waiting 0.2 s on a real ``sleep`` (what a Docker engine's ``docker rm`` costs, and
what made closing a thousand of them one after another take half an hour).
"""

from __future__ import annotations

import asyncio
import signal
import subprocess
import sys
import time

import pytest
from helpers.sandbox import alive, descendants, eventually, has_bwrap

from hermes_envgen.runtime.sandbox.closing import CLOSE_CONCURRENCY, close_concurrently
from hermes_envgen.runtime.sandbox.host_limits import cgroup_parents
from hermes_envgen.runtime.sandbox.runs import runs_directory

SANDBOXES = 60  # one after another: 60 x 0.2 s = 12 s, past the flush
FLUSH = 6.0  # seconds the run gives its close on SIGTERM

RUN = f"""
import asyncio, sys
from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings
from hermes_envgen.runtime.sandbox.bwrap.backend import BwrapSandbox
from hermes_envgen.runtime.sandbox.manager import register_backend
from hermes_envgen.runtime.sandbox.runs import exit_on_termination


class EngineLikeClose(BwrapSandbox):
    async def close(self):
        sleep = await asyncio.create_subprocess_exec("sleep", "0.2")
        await sleep.wait()
        await super().close()


register_backend("engine-like", EngineLikeClose)


async def main():
    settings = SandboxSettings(backend="engine-like", root=sys.argv[1], memory_mb=128)
    manager = SandboxManager(settings)
    gate = asyncio.Semaphore(8)

    async def start(number):
        async with gate:
            await manager.get(f"many-{{number}}").run("true")

    await asyncio.gather(*(start(n) for n in range({SANDBOXES})))
    print(manager.root.name, flush=True)
    try:
        await asyncio.sleep(3600)
    finally:
        begin = asyncio.get_running_loop().time()
        try:
            await asyncio.wait_for(manager.close_all(), {FLUSH})
            print("closed", len(manager), round(asyncio.get_running_loop().time() - begin, 2))
        except TimeoutError:
            print("flush ran out with", len(manager), "open", flush=True)
            raise


exit_on_termination()
asyncio.run(main())
"""


@pytest.mark.slow
@pytest.mark.skipif(not has_bwrap(), reason="bwrap is not installed")
def test_a_sigtermed_run_closes_many_sandboxes_within_its_flush_and_leaves_nothing(tmp_path):
    run = subprocess.Popen(
        [sys.executable, "-c", RUN, str(tmp_path)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        name = run.stdout.readline().strip()
        assert name, run.stderr.read()
        run_directory = runs_directory(tmp_path) / name
        started = descendants(run.pid)  # its sandboxes' processes: bwrap's, the anchors'
        assert len(started) >= SANDBOXES
        run.send_signal(signal.SIGTERM)
        began = time.monotonic()
        out, err = run.communicate(timeout=FLUSH + 30)
        took = time.monotonic() - began
    finally:
        run.kill()
        run.wait()
    assert out.startswith("closed 0"), (out, err[-2000:])
    assert run.returncode == 128 + signal.SIGTERM, err[-2000:]
    assert took < FLUSH + 5, took
    # nothing of its own left: processes, workspaces, cgroups (its run's unique name)
    assert eventually(lambda: not [pid for pid in started if alive(pid)])
    assert not run_directory.exists()
    assert not [parent / name for parent in cgroup_parents() if (parent / name).exists()]


def test_closes_run_at_most_the_bound_at_once_and_every_one_is_tried():
    running = peak = 0
    closed: list[int] = []

    async def close(number: int) -> None:
        nonlocal running, peak
        running += 1
        peak = max(peak, running)
        await asyncio.sleep(0.01)
        running -= 1
        closed.append(number)
        if number == 3:
            raise OSError("this one failed")

    closes = [lambda n=n: close(n) for n in range(CLOSE_CONCURRENCY * 3)]
    with pytest.raises(OSError, match="this one failed"):
        asyncio.run(close_concurrently(closes))
    assert sorted(closed) == list(range(CLOSE_CONCURRENCY * 3))  # the failure stopped none
    assert peak == CLOSE_CONCURRENCY
