"""The door to OpenEnv, proven with the real library: the env served by openenv-core's own
server on 127.0.0.1 and driven over WebSocket by its own MCP client, several sessions at once,
each in a sandbox of its own, the reward of compute_reward reported by the terminal tool."""

from __future__ import annotations

import asyncio
import importlib.util
import json
import os
import time

import pytest
from helpers.doors import REQUIRE_VARIABLE
from terminal_env import TASKS, TerminalTaskEnv

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]
COUNT_TASK = json.dumps(TASKS[1])  # numbers.txt in the sandbox; the reward checks count.txt


@pytest.fixture(scope="module")
def served(offline_tokenizer, tmp_path_factory):
    """The example env behind OpenEnv's server (uvicorn, a free port on 127.0.0.1)."""
    if importlib.util.find_spec("openenv") is None:
        reason = "openenv-core is not installed (scripts/install-trainers.sh)"
        if os.environ.get(REQUIRE_VARIABLE) == "1":
            pytest.fail(f"{REQUIRE_VARIABLE}=1 but {reason}", pytrace=False)
        pytest.skip(reason)
    from hermes_envgen.runtime.doors import openenv as door
    from hermes_envgen.testing.serving import served

    sandboxes = tmp_path_factory.mktemp("openenv-sandboxes")
    app = door.openenv_app(
        TerminalTaskEnv,
        max_concurrent_envs=4,
        idle_timeout=2.0,
        tokenizer_name=str(offline_tokenizer),
        sandbox_root=str(sandboxes),
    )
    with served(app) as url:
        yield url, sandboxes


async def solve(url: str, content: str) -> tuple[dict, list[str], object]:
    from openenv.core.env_server.mcp_types import CallToolAction
    from openenv.core.mcp_client import MCPToolClient

    async with MCPToolClient(base_url=url) as env:
        opened = await env.reset(task=COUNT_TASK)
        start = opened.observation.result
        tools = sorted(t.name for t in await env.list_tools())
        listing = await env.call_tool("terminal", command="ls")
        await env.call_tool("write_file", path="count.txt", content=content)
        finished = await env.step(CallToolAction(tool_name="finish", arguments={"answer": "6"}))
        return start, tools, (listing, finished)


def test_sessions_over_websocket_run_in_their_own_sandboxes_and_report_compute_reward(served):
    url, _ = served

    async def main():
        return await asyncio.gather(solve(url, "6\n"), solve(url, "5\n"), solve(url, "6\n"))

    results = asyncio.run(main())
    rewards = []
    for start, tools, (listing, finished) in results:
        assert [m["role"] for m in start["messages"]] == ["system", "user"]
        assert json.loads(start["task"]) == TASKS[1]
        assert {"terminal", "write_file", "finish"} <= set(tools)
        assert "numbers.txt" in str(listing)  # prepare_sandbox ran in this session's sandbox
        assert finished.done
        rewards.append(finished.reward)
    # each session wrote into its own sandbox: the one that wrote 5 alone was not paid
    assert rewards == [1.0, 0.0, 1.0]
    print("OpenEnv sessions' rewards:", rewards)


def test_a_dropped_session_has_its_sandbox_reaped(served):
    url, sandboxes = served
    from openenv.core.mcp_client import MCPToolClient

    async def abandon():
        env = MCPToolClient(base_url=url)
        await env.connect()
        await env.reset(task=COUNT_TASK)
        await env.call_tool("write_file", path="left.txt", content="x")
        # the connection drops: no close message, the socket just goes
        env._ws.transport.abort() if hasattr(env._ws, "transport") else None

    asyncio.run(abandon())
    left = lambda: list(sandboxes.rglob("left.txt"))  # noqa: E731
    deadline = time.monotonic() + 20
    while left() and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left(), "the abandoned session's sandbox is still there"


@pytest.fixture(scope="module")
def game_served(offline_tokenizer, tmp_path_factory):
    """The guess game behind OpenEnv's server."""
    if importlib.util.find_spec("openenv") is None:
        pytest.skip("openenv-core is not installed (scripts/install-trainers.sh)")
    from guess_number_env import GuessNumberEnv

    from hermes_envgen.runtime.doors import openenv as door
    from hermes_envgen.testing.serving import served

    sandboxes = tmp_path_factory.mktemp("openenv-game")
    app = door.openenv_app(
        GuessNumberEnv, tokenizer_name=str(offline_tokenizer), sandbox_root=str(sandboxes)
    )
    with served(app) as url:
        yield url


async def play(url: str, guesses: list[str], answer: str) -> tuple[list[str], list[str], object]:
    """One episode of the first game: each guess through ``reply``, then ``finish(answer)``."""
    from guess_number_env import SAMPLES
    from openenv.core.env_server.mcp_types import CallToolAction
    from openenv.core.mcp_client import MCPToolClient

    async with MCPToolClient(base_url=url) as env:
        await env.reset(task=json.dumps(SAMPLES[0]))
        tools = sorted(t.name for t in await env.list_tools())
        heard = [str(await env.call_tool("reply", message=guess)) for guess in guesses]
        finished = await env.step(CallToolAction(tool_name="finish", arguments={"answer": answer}))
        return tools, heard, finished


def test_a_game_is_played_through_the_reply_tool_and_paid_what_its_loop_pays(game_served):
    async def main():
        return await asyncio.gather(
            play(game_served, ["50", "37"], ""),  # the gold play: won at the second guess
            play(game_served, ["50"], "37"),  # the last guess as finish's answer
            play(game_served, [], "I could not solve this task."),  # gave up
            play(game_served, ["37", "12"], ""),  # won at once, then a reply after the end
        )

    (tools, heard, won), (_, _, won_by_answer), (_, _, gave_up), (_, late, at_once) = asyncio.run(
        main()
    )
    assert tools == ["finish", "reply"]  # the game has no tools of its own
    assert "Lower than 50." in heard[0] and "The conversation is over" in heard[1]
    assert "Error: the conversation is over" in late[1]
    # the loop's rewards (test_door_trl: process pays the win at the 2nd guess 1 - 0.5/7)
    assert won.reward == won_by_answer.reward == pytest.approx(1.0 - 0.5 / 7)
    assert (gave_up.reward, at_once.reward) == (0.0, 1.0)
