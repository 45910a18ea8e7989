"""Agent-loop throughput against direct chat requests, measured side by side in one run.

256 rollouts of 3 turns (two tool turns, then a final answer) at concurrency 64 against the
stub server with zero latency, divided by the throughput of the very same chat requests
(recorded from one rollout) sent directly with the same HTTP client (atroposlib's
ServerManager, as envs use it) at the same concurrency. Target: >= 0.95.

Two tools are measured: ``noop`` (a Python tool: the loop's own overhead) and ``terminal``
running ``true`` in a local sandbox. The baseline of ``terminal`` does what any runner of an
agent's commands must do and nothing more: each rollout gets a directory of its own (made
before its first request, removed after its last: rollouts must not share their files), and
after each request that the rollout answers with a tool call, a raw ``bash -c`` enters that
directory and runs ``true`` (posix_spawn, output read to the end, exit awaited: the cheapest
way to run a command from asyncio). The ratio measures the sandbox's and the loop's overhead,
not the process or the file system itself. The objects that exist before the first round
are frozen out of the garbage collector's full collections: either side would pay for
scanning them only when a full collection happened to fall into its timing.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import gc
import os
import shlex
import tempfile
import time
from pathlib import Path

from _common import median_ratio, stub_server_process
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from atroposlib.envs.server_handling.server_manager import ServerManager

from hermes_envgen.runtime.loop.agent_loop import HermesAgentLoop
from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings
from hermes_envgen.runtime.sandbox.process import spawn
from hermes_envgen.runtime.tools import REGISTRY, ToolRegistry, tool

TURNS = 3
REGISTRY_WITH_NOOP = ToolRegistry()
for builtin in REGISTRY.resolve(["terminal"]):
    REGISTRY_WITH_NOOP.add(builtin)


@tool(registry=REGISTRY_WITH_NOOP, toolset="bench")
async def noop(text: str) -> str:
    """Return the text unchanged."""
    return text


def script(call: dict) -> dict:
    turns = [{"tool_calls": [call]}, {"tool_calls": [call]}, {"content": "done"}]
    return {"conversations": [{"match": call["name"], "turns": turns}]}


CALLS = {
    "noop": {"name": "noop", "arguments": {"text": "ok"}},
    "terminal": {"name": "terminal", "arguments": {"command": "true"}},
}
SCRIPT = {"conversations": [c for call in CALLS.values() for c in script(call)["conversations"]]}
TOOLS = REGISTRY_WITH_NOOP.resolve()


def make_server(base_url: str) -> ServerManager:
    config = APIServerConfig(
        base_url=base_url, model_name="stub-model", api_key="EMPTY", health_check=False
    )
    return ServerManager([config])


async def run_loops(server, tool_name: str, rollouts: int, concurrency: int, sandboxes) -> float:
    slots = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with slots:
            ctx = ToolContext(f"bench-{i}", sandboxes, REGISTRY_WITH_NOOP)
            loop = HermesAgentLoop(
                server,
                [t.schema for t in TOOLS],
                {t.name for t in TOOLS},
                task_id=f"bench-{i}",
                tool_context=ctx,
                request_retries=0,
            )
            try:
                result = await loop.run([{"role": "user", "content": tool_name}])
                assert result.turns_used == TURNS and not result.tool_errors, result
            finally:
                await ctx.cleanup()

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(rollouts)))
    return rollouts * TURNS / (time.perf_counter() - start)


class Recorder:
    """Passes requests through and keeps their arguments, to replay them directly."""

    def __init__(self, server) -> None:
        self.server = server
        self.requests: list[dict] = []

    async def chat_completion(self, **kwargs):
        self.requests.append(copy.deepcopy(kwargs))
        return await self.server.chat_completion(**kwargs)


async def record_rollout(server, tool_name: str, sandboxes) -> list[dict]:
    """The exact requests one rollout sends (three turns, growing conversation)."""
    recorder = Recorder(server)
    ctx = ToolContext("record", sandboxes, REGISTRY_WITH_NOOP)
    loop = HermesAgentLoop(
        recorder, [t.schema for t in TOOLS], {t.name for t in TOOLS}, tool_context=ctx
    )
    await loop.run([{"role": "user", "content": tool_name}])
    await ctx.cleanup()
    return recorder.requests


async def raw_true(workdir: Path) -> None:
    """``true`` in ``workdir`` with nothing around it: spawned, output drained, exit awaited."""
    argv = ["bash", "-c", f"cd -- {shlex.quote(str(workdir))} || exit 1\ntrue"]
    process = await spawn(argv, {"PATH": os.environ.get("PATH", "/usr/bin")})
    await process.stdout.read()
    await process.wait()


async def run_direct(
    server, requests: list[dict], rollouts: int, concurrency: int, workdirs: Path | None = None
) -> float:
    """The same chat requests the loops send, straight to the server, same concurrency;
    with ``workdirs``, each rollout in a directory of its own below it, made and removed, and
    a raw ``bash -c true`` there after each request but the last (the tool turns).
    """
    slots = asyncio.Semaphore(concurrency)

    async def one(i: int) -> None:
        async with slots:
            workdir = None
            if workdirs is not None:
                workdir = workdirs / f"direct-{i}"
                workdir.mkdir()
            for number, request in enumerate(requests, start=1):
                await server.chat_completion(**request)
                if workdir is not None and number < len(requests):
                    await raw_true(workdir)
            if workdir is not None:
                await asyncio.to_thread(workdir.rmdir)

    start = time.perf_counter()
    await asyncio.gather(*(one(i) for i in range(rollouts)))
    return rollouts * len(requests) / (time.perf_counter() - start)


async def main(rollouts: int, concurrency: int, rounds: int) -> None:
    with stub_server_process(SCRIPT) as url, tempfile.TemporaryDirectory() as root:
        server = make_server(url)
        sandboxes = SandboxManager(SandboxSettings(root=root))
        # What the imports left (some 140,000 objects) is not what either side allocates:
        # frozen, it is not rescanned by the full collection that falls into one side's
        # timing or the other's by chance (some 100 ms of a 2 s round).
        gc.collect()
        gc.freeze()
        for tool_name in CALLS:
            requests = await record_rollout(server, tool_name, sandboxes)
            await run_direct(server, requests, 32, concurrency)  # warm up connections
            pairs = []
            workdirs = Path(root) if tool_name == "terminal" else None
            for number in range(rounds):
                # Each side goes first in every other round: what one round leaves behind
                # (the stub's and the allocator's state, a collection due) falls on both.
                if number % 2:
                    loop = await run_loops(server, tool_name, rollouts, concurrency, sandboxes)
                direct = await run_direct(server, requests, rollouts, concurrency, workdirs)
                if not number % 2:
                    loop = await run_loops(server, tool_name, rollouts, concurrency, sandboxes)
                pairs.append((loop, direct))
            rates = "  ".join(f"{a:.0f}/{b:.0f}" for a, b in pairs)
            print(
                f"tool {tool_name:8s} loop/direct req/s per round: {rates}   "
                f"median ratio {median_ratio(pairs):.2f} (target >= 0.95)"
            )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rollouts", type=int, default=256)
    parser.add_argument("--concurrency", type=int, default=64)
    parser.add_argument("--rounds", type=int, default=4)
    args = parser.parse_args()
    asyncio.run(main(args.rollouts, args.concurrency, args.rounds))
