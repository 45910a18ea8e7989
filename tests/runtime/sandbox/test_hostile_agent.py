"""An agent that tries to stall the event loop or fill the host's memory through its tools.

Each case is measured, not read off the code: the event loop's longest stall while a tool
runs, a command's wall clock, the peak resident memory of a process doing the host's side.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest
from helpers import TESTS
from helpers.sandbox import BWRAP, DOCKER, LOCAL, make_manager

from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.tools import ToolExecutionError

EVERY_BACKEND = [LOCAL, BWRAP, DOCKER]
MOST_THE_LOOP_MAY_STALL = 1.0  # seconds


async def longest_stall(work) -> tuple[object, float]:
    """Run ``work`` while a ticker measures the event loop's longest gap between ticks."""
    gaps = [0.0]
    done = asyncio.Event()

    async def tick() -> None:
        last = time.monotonic()
        while not done.is_set():
            await asyncio.sleep(0.01)
            now = time.monotonic()
            gaps.append(now - last)
            last = now

    ticker = asyncio.ensure_future(tick())
    await asyncio.sleep(0.05)
    try:
        result = await work
    except Exception as exc:  # the caller looks at it
        result = exc
    finally:
        done.set()
        await ticker
    return result, max(gaps)


@pytest.mark.slow
@pytest.mark.timeout(180)
@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_a_catastrophic_pattern_does_not_stall_the_loop(backend, tmp_path):
    manager = make_manager(tmp_path, backend, command_timeout=3)

    async def main():
        ctx = ToolContext("regex", manager)
        await ctx.call_tool("write_file", {"path": "r.txt", "content": "a" * 26 + "!\n"})
        catastrophic = await longest_stall(ctx.call_tool("search_files", {"pattern": "(a+)+$"}))
        # RE2 is linear in the text, but its work also grows with the pattern: this one took
        # a minute on a 2 MB line, which only the matcher's time limit ends.
        await ctx.terminal("head -c 1999999 /dev/zero | tr '\\0' a > long.txt")
        started = time.monotonic()
        slow = await longest_stall(
            ctx.call_tool(
                "search_files", {"pattern": "[a-z]{1,1000}[a-z]{1,1000}!", "file_glob": "long*"}
            )
        )
        slow_took = time.monotonic() - started
        found = await ctx.call_tool("search_files", {"pattern": "(a+)+!$", "file_glob": "r.*"})
        refused = await longest_stall(ctx.call_tool("search_files", {"pattern": r"(a)\1"}))
        await manager.close_all()
        return catastrophic, slow, slow_took, found, refused

    (result, stall), (slow, slow_stall), slow_took, found, (refused, _) = asyncio.run(main())
    assert result == "no matches"
    assert stall < MOST_THE_LOOP_MAY_STALL, f"the event loop stalled {stall:.1f} s"
    assert slow_stall < MOST_THE_LOOP_MAY_STALL, f"the event loop stalled {slow_stall:.1f} s"
    assert "search stopped after 3 s" in slow
    assert slow_took < 3 + 5
    assert found == "r.txt:1: " + "a" * 26 + "!"
    assert isinstance(refused, ToolExecutionError)
    assert "invalid pattern" in str(refused) and "no backreferences" in str(refused)


@pytest.mark.slow
@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_the_agent_cannot_raise_its_command_timeout(backend, tmp_path):
    manager = make_manager(tmp_path, backend, command_timeout=2)

    async def main():
        ctx = ToolContext("timeout", manager)
        took = {}
        outputs = {}
        for label, timeout in [("huge", 1e9), ("lower", 0.5)]:
            started = time.monotonic()
            outputs[label] = await ctx.call_tool(
                "terminal", {"command": "sleep 12; echo finished", "timeout": timeout}
            )
            took[label] = time.monotonic() - started
        errors = {}
        for bad in [float("inf"), "Infinity", float("nan"), -1, 0, "soon", True, [5]]:
            try:
                await ctx.call_tool("terminal", {"command": "echo ran", "timeout": bad})
            except ToolExecutionError as exc:
                errors[repr(bad)] = str(exc)
        text = await ctx.call_tool("terminal", {"command": "echo ran", "timeout": "1.5"})
        await manager.close_all()
        return took, outputs, errors, text

    took, outputs, errors, text = asyncio.run(main())
    assert json.loads(outputs["huge"])["exit_code"] == 124, outputs["huge"]
    assert "finished" not in outputs["huge"]
    assert took["huge"] < 2 + 3, f"the command ran {took['huge']:.1f} s"
    assert took["lower"] < 0.5 + 2
    assert len(errors) == 8, errors
    assert all("timeout must be" in e for e in errors.values())
    assert json.loads(text)["output"] == "ran\n"


# Runs the host's side of patch, read and download on a 1 GiB sparse file (and a patch that
# would make 4 MB into 4 GB), in a process of its own, and prints that process's peak resident
# memory before and after.
MEMORY_PROBE = """
import asyncio, json, sys
sys.path.insert(0, sys.argv[3])
from helpers.sandbox import make_manager
from pathlib import Path
from hermes_envgen.runtime.loop.tool_context import ToolContext

def peak_kib():
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])

async def main():
    manager = make_manager(Path(sys.argv[2]), sys.argv[1])
    ctx = ToolContext("memory", manager)
    made = await ctx.terminal("truncate -s 1G s1 && head -c 4000000 /dev/zero | tr '\\\\0' a > a")
    before = peak_kib()
    patch = {"path": "s1", "old_text": "zzz", "new_text": "y"}
    outcomes = await asyncio.gather(
        *(ctx.call_tool("patch", patch) for _ in range(3)),
        ctx.call_tool("read_file", {"path": "s1"}),
        ctx.call_tool("search_files", {"pattern": "zzz"}),
        ctx.read_file("s1"),
        ctx.download_file("s1", Path(sys.argv[2]) / "download"),
        ctx.call_tool("patch", {"path": "a", "old_text": "a", "new_text": "b" * 1000,
                                "replace_all": True}),
        return_exceptions=True,
    )
    after = peak_kib()
    await manager.close_all()
    print(json.dumps({"made": made, "before": before, "after": after,
                      "outcomes": [f"{type(o).__name__}: {str(o)[-300:]}" for o in outcomes]}))

asyncio.run(main())
"""
MOST_THE_HOST_MAY_GROW = 120 * 1024  # KiB: three 8 MB patch reads, an 8 MB read_file, slack


@pytest.mark.timeout(300)
@pytest.mark.parametrize("backend", EVERY_BACKEND)
def test_a_sparse_gigabyte_costs_the_host_no_gigabytes(backend, tmp_path):
    helpers = TESTS  # the probe imports helpers.sandbox
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_PROBE, backend, str(tmp_path), str(helpers)],
        capture_output=True,
        text=True,
        timeout=280,
        env=os.environ,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    report = json.loads(done.stdout.splitlines()[-1])
    assert report["made"]["exit_code"] == 0, report["made"]
    grew = report["after"] - report["before"]
    assert grew < MOST_THE_HOST_MAY_GROW, f"the host's peak memory grew {grew // 1024} MiB"
    patches, read, search, text, download, growing = (
        report["outcomes"][:3],
        *report["outcomes"][3:],
    )
    assert "ToolExecutionError" in growing and "would grow past 8000000" in growing
    for outcome in patches:
        assert "ToolExecutionError" in outcome and "larger than 8000000 bytes" in outcome
    assert "only its start was read" in read
    assert "2 binary or larger than" in search
    for outcome in (text, download):
        assert "FileTooLarge" in outcome and "larger than 33554432 bytes" in outcome
    assert not (tmp_path / "download").exists()
