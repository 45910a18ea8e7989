"""Agent-loop throughput against direct chat requests, measured side by side in one run.

256 rollouts of 3 turns (two tool turns, then a final answer) at concurrency 64 against the
stub server with zero latency, divided by the throughput of the very same chat requests
(recorded from one rollout) sent directly with the same HTTP client (atroposlib's
ServerManager, as envs use it) at the same concurrency. Target: >= 0.95.

Two tools are measured: ``noop`` (a Python tool: the loop's own overhead) and ``terminal``
running ``true`` in a local sandbox. The baseline of ``terminal`` also runs a raw
``bash -c true`` (posix_spawn, output read to the end, exit awaited: the cheapest way to run a
command from asyncio) after each request that the rollout answers with a tool call, so that
the ratio measures the sandbox's and the loop's overhead, not the process itself.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import tempfile
import time

from _common import median_ratio, stub_server_process
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from atroposlib.envs.server_handling.server_manager import ServerManager

from hermes_envgen.runtime.agent_loop import HermesAgentLoop
from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings
from hermes_envgen.runtime.sandbox.process import spawn
from hermes_envgen.runtime.tool_context import ToolContext
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


async def raw_true() -> None:
    """``bash -c true`` with nothing around it: spawned, output drained, exit awaited."""
    process = await spawn(["bash", "-c", "true"], {"PATH": os.environ.get("PATH", "/usr/bin")})
    await process.stdout.read()
    await process.wait()


async def run_direct(
    server, requests: list[dict], rollouts: int, concurrency: int, processes: bool = False
) -> float:
    """The same chat requests the loops send, straight to the server, same concurrency;
    with ``processes``, a raw ``bash -c true`` after each request but the last (the tool turns).
    """
    slots = asyncio.Semaphore(concurrency)

    async def one() -> None:
        async with slots:
            for number, request in enumerate(requests, start=1):
                await server.chat_completion(**request)
                if processes and number < len(requests):
                    await raw_true()

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(rollouts)))
    return rollouts * len(requests) / (time.perf_counter() - start)


async def main(rollouts: int, concurrency: int, rounds: int) -> None:
    with stub_server_process(SCRIPT) as url, tempfile.TemporaryDirectory() as root:
        server = make_server(url)
        sandboxes = SandboxManager(SandboxSettings(root=root))
        for tool_name in CALLS:
            requests = await record_rollout(server, tool_name, sandboxes)
            await run_direct(server, requests, 32, concurrency)  # warm up connections
            pairs = []
            processes = tool_name == "terminal"
            for _ in range(rounds):
                direct = await run_direct(server, requests, rollouts, concurrency, processes)
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
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    asyncio.run(main(args.rollouts, args.concurrency, args.rounds))
