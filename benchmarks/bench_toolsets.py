"""Tool-call latency of ``search_files`` and the ``python`` and ``mcp`` toolsets, in one run.

- search: ``search_files`` over a small workspace (20 files of 40 lines) with the matchers
  kept across searches (now) against the same search with a fresh matcher per search (the
  way before: a pool's ``max_idle = 0`` ends each one at its search's end).
- python: ``x += 1`` through the ``python`` tool (the rollout's persistent interpreter in its
  sandbox, over the host's kept connection to it) against the raw baseline of a fresh
  ``python3 -c 'x = 1'`` per call, which keeps no state; against the way before (and still
  docker's): each call a sandbox command (the sandbox's ``host_root`` hidden); and against a
  sandbox command of ``true`` (``ToolContext.terminal``).
- mcp: ``notes_list_notes`` through the ``mcp`` toolset (the SDK's ClientSession, the relay,
  the kit's notes server in the sandbox) against the raw baseline of one JSON-RPC
  ``tools/call`` line written to the same server run as a plain subprocess on the host, its
  answer read back: the floor of any stdio MCP call. And against the way before: the same
  call with each message sent by a sandbox command (the sandbox's ``host_root`` hidden, as
  on docker, where that is still the way).

Each round alternates tool and baseline and yields time(tool) / time(baseline); the median
over rounds is reported, with ms per call. Backends: local, and bwrap when installed. The
sandboxes and the baselines should run the same ``python3``: put the system's first on PATH (a
pyenv shim there costs the local backend and the baselines some 100 ms per start; bwrap sees
/usr's only).

    PATH=/usr/bin:/bin .venv/bin/python benchmarks/bench_toolsets.py [--rounds 5] [--calls 20]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import statistics
import tempfile
import time

from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings
from hermes_envgen.runtime.tools import REGISTRY, search_worker, workers
from hermes_envgen.runtime.tools.mcp_tools import McpServerSettings, mcp_registry
from hermes_envgen.testing.mcp_notes import notes_server

PYTHON = shutil.which("python3") or "python3"


async def raw_python() -> None:
    process = await asyncio.create_subprocess_exec(
        PYTHON, "-c", "x = 1", stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT,
    )  # fmt: skip
    await process.communicate()


class RawMcp:
    """The notes server as a plain subprocess, spoken to directly over its pipes."""

    async def start(self, workdir: str) -> None:
        entry = notes_server()
        self.process = await asyncio.create_subprocess_exec(
            entry["command"], *entry["args"], cwd=workdir,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        )  # fmt: skip
        self.number = 0

    async def call(self) -> None:
        self.number += 1
        request = {"jsonrpc": "2.0", "id": self.number, "method": "tools/call",
                   "params": {"name": "list_notes", "arguments": {}}}  # fmt: skip
        self.process.stdin.write((json.dumps(request) + "\n").encode())
        await self.process.stdin.drain()
        json.loads(await self.process.stdout.readline())

    async def stop(self) -> None:
        self.process.kill()
        await self.process.wait()


async def per_call(run, calls: int) -> float:
    start = time.perf_counter()
    for _ in range(calls):
        await run()
    return (time.perf_counter() - start) / calls


async def measure(backend: str, rounds: int, calls: int, root: str) -> dict[str, list[float]]:
    settings = SandboxSettings(backend=backend, root=root)
    registry = mcp_registry(REGISTRY, [McpServerSettings(**notes_server())], settings)
    manager = SandboxManager(settings)
    ctx = ToolContext(f"bench-{backend}", manager, registry)
    raw_mcp = RawMcp()
    await raw_mcp.start(root)
    times: dict[str, list[float]] = {name: [] for name in ("search", "python", "mcp", *BASELINES)}
    try:
        for number in range(20):
            text = "".join(f"line {line} of file {number}: value = {line * number}\n"
                           for line in range(40))  # fmt: skip
            await ctx.call_tool("write_file", {"path": f"src/f{number}.py", "content": text})
        await ctx.call_tool("python", {"code": "x = 0"})  # started: calls measure the steady state
        await ctx.call_tool("notes_list_notes")

        async def python_call() -> None:
            await ctx.call_tool("python", {"code": "x += 1"})

        async def mcp_call() -> None:
            await ctx.call_tool("notes_list_notes")

        async def search_call() -> None:
            await ctx.call_tool("search_files", {"pattern": r"value = 1\d"})

        async def fresh_search_call() -> None:
            matchers = await workers.pool(search_worker)
            kept = matchers.max_idle
            matchers.max_idle = 0  # each matcher ends with its search: one start per search
            try:
                await search_call()
            finally:
                matchers.max_idle = kept

        sandbox = ctx.sandbox

        async def mcp_by_command() -> None:
            sandbox.host_root = lambda: None  # the relay unreachable: a command per message
            try:
                await mcp_call()
            finally:
                del sandbox.host_root

        async def python_by_command() -> None:
            sandbox.host_root = lambda: None  # the interpreter unreachable: a command per call
            try:
                await python_call()
            finally:
                del sandbox.host_root

        async def terminal_true() -> None:
            await ctx.terminal("true")

        await search_call()
        for _ in range(rounds):
            times["search"].append(await per_call(search_call, calls))
            times["fresh matcher"].append(await per_call(fresh_search_call, calls))
            times["mcp"].append(await per_call(mcp_call, calls))
            times["command per message"].append(await per_call(mcp_by_command, calls))
            times["python"].append(await per_call(python_call, calls))
            times["raw python"].append(await per_call(raw_python, calls))
            times["python by command"].append(await per_call(python_by_command, calls))
            times["terminal true"].append(await per_call(terminal_true, calls))
            times["raw mcp"].append(await per_call(raw_mcp.call, calls))
    finally:
        await raw_mcp.stop()
        await ctx.cleanup()
        await manager.close_all()
    return times


# Each baseline and the tool it is compared with.
BASELINES = {
    "fresh matcher": "search",
    "raw python": "python",
    "python by command": "python",
    "terminal true": "python",
    "command per message": "mcp",
    "raw mcp": "mcp",
}


def report(backend: str, times: dict[str, list[float]]) -> None:
    for baseline, tool in BASELINES.items():
        ratios = [t / b for t, b in zip(times[tool], times[baseline])]
        print(
            f"{backend:6} {tool:6}: {statistics.median(times[tool]) * 1000:7.1f} ms/call; "
            f"{baseline:19} {statistics.median(times[baseline]) * 1000:7.1f} ms/call; "
            f"ratio {statistics.median(ratios):.3f} (median of {len(ratios)} rounds)"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--calls", type=int, default=20)
    args = parser.parse_args()
    backends = ["local"] + (["bwrap"] if shutil.which("bwrap") else [])
    print(f"python3: {PYTHON}")
    with tempfile.TemporaryDirectory() as root:
        for backend in backends:
            report(backend, asyncio.run(measure(backend, args.rounds, args.calls, root)))


if __name__ == "__main__":
    main()
