"""Loop semantics, each against the stub server over real HTTP and a real local sandbox."""

from __future__ import annotations

import asyncio
import json
import time
from types import SimpleNamespace

from hermes_envgen.runtime.loop.agent_loop import HermesAgentLoop, normalize_tool_call
from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.tools import REGISTRY
from hermes_envgen.testing.client import DirectChatServer
from hermes_envgen.testing.stub_server import Faults

TOOLS = REGISTRY.resolve(["terminal", "file"])
SCHEMAS = [t.schema for t in TOOLS]
NAMES = {t.name for t in TOOLS}


def call(name: str, arguments) -> dict:
    return {"name": name, "arguments": arguments}


def run_loop(server, sandboxes, prompt="go", **kwargs):
    """Run one rollout; return (result, workspace files seen before cleanup, loop)."""

    async def main():
        client = DirectChatServer(server.base_url)
        ctx = ToolContext("task-1", sandboxes)
        loop = HermesAgentLoop(client, SCHEMAS, NAMES, task_id="task-1", tool_context=ctx, **kwargs)
        try:
            result = await loop.run([{"role": "user", "content": prompt}])
            files = await ctx.sandbox.list_files() if "task-1" in sandboxes else []
            return result, files
        finally:
            await ctx.cleanup()
            await client.close()

    return asyncio.run(main())


def test_tool_calls_are_accepted_as_dicts_or_objects():
    as_dict = {"id": "a", "function": {"name": "terminal", "arguments": {"command": "ls"}}}
    as_object = SimpleNamespace(
        id="a", function=SimpleNamespace(name="terminal", arguments='{"command": "ls"}')
    )
    expected = {
        "id": "a",
        "type": "function",
        "function": {"name": "terminal", "arguments": '{"command": "ls"}'},
    }
    assert normalize_tool_call(as_dict) == expected
    assert normalize_tool_call(as_object) == expected
    # A call the server gave no id gets 9 alphanumeric characters, which every chat template
    # takes (Mistral's refuses any other length).
    made = normalize_tool_call({"function": {"name": "x"}})["id"]
    assert len(made) == 9 and made.isalnum() and made.isascii()


def test_a_full_rollout_runs_tools_and_finishes_naturally(stub_server, sandboxes):
    server = stub_server(
        {
            "conversations": [
                {
                    "turns": [
                        {"tool_calls": [call("terminal", {"command": "echo 42 > out.txt"})]},
                        {"tool_calls": [call("read_file", {"path": "out.txt"})]},
                        {"content": "The answer is 42."},
                    ]
                }
            ]
        }
    )
    result, files = run_loop(server, sandboxes)
    assert result.finished_naturally and result.turns_used == 3
    assert result.final_response == "The answer is 42."
    assert result.tools_used == ["terminal", "read_file"]
    assert files == ["out.txt"]
    tool_messages = [m for m in result.messages if m["role"] == "tool"]
    assert json.loads(tool_messages[0]["content"]) == {"exit_code": 0, "output": ""}
    assert tool_messages[1]["content"] == "42\n"
    assert result.tool_errors == []
    assert result.error is None


def test_unknown_tool_is_reported_to_the_model_and_the_loop_goes_on(stub_server, sandboxes):
    server = stub_server(
        {"conversations": [{"turns": [{"tool_calls": [call("browser", {})]}, {"content": "ok"}]}]}
    )
    result, _ = run_loop(server, sandboxes)
    (error,) = result.tool_errors
    assert error.tool_name == "browser" and error.turn == 1
    assert "Valid tools: patch, read_file, search_files, terminal, write_file" in error.tool_result
    assert result.messages[2]["content"] == error.tool_result
    assert result.finished_naturally and result.final_response == "ok"


def test_invalid_json_arguments_are_not_executed(stub_server, sandboxes):
    server = stub_server(
        {
            "conversations": [
                {
                    "turns": [
                        {"tool_calls": [call("write_file", '{"path": "x.txt", "content": ')]},
                        {"tool_calls": [call("terminal", "[1, 2]")]},
                        {"content": "ok"},
                    ]
                }
            ]
        }
    )
    result, files = run_loop(server, sandboxes)
    assert files == []  # nothing was written
    assert [e.tool_name for e in result.tool_errors] == ["write_file", "terminal"]
    assert "not valid JSON" in result.tool_errors[0].error
    assert "must be a JSON object" in result.tool_errors[1].error
    assert result.tool_errors[0].arguments == '{"path": "x.txt", "content": '


# Each call marks that it started and waits (up to 20 s) until all four have: run one after
# another, the first would wait alone and say so. Bound by the condition, not by a clock.
MEET_COMMAND = (
    "touch started.{i}; for n in $(seq 200); do [ $(ls started.* | wc -l) -ge 4 ] && break; "
    "sleep 0.1; done; [ $(ls started.* | wc -l) -ge 4 ] && echo {i} || echo alone"
)


def test_several_calls_run_concurrently_and_answer_in_call_order(stub_server, sandboxes):
    calls = [call("terminal", {"command": MEET_COMMAND.format(i=i)}) for i in range(4)]
    server = stub_server({"conversations": [{"turns": [{"tool_calls": calls}, {"content": "ok"}]}]})
    result, _ = run_loop(server, sandboxes)
    assistant = result.messages[1]
    tool_messages = result.messages[2:6]
    assert [m["tool_call_id"] for m in tool_messages] == [c["id"] for c in assistant["tool_calls"]]
    assert [json.loads(m["content"])["output"] for m in tool_messages] == [
        f"{i}\n" for i in range(4)
    ]


def test_tool_execution_never_blocks_the_event_loop(stub_server, sandboxes):
    server = stub_server(
        {
            "conversations": [
                {
                    "turns": [
                        {"tool_calls": [call("terminal", {"command": "sleep 1"})]},
                        {"content": "ok"},
                    ]
                }
            ]
        }
    )

    async def main():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.05)
                ticks += 1

        task = asyncio.create_task(ticker())
        client = DirectChatServer(server.base_url)
        ctx = ToolContext("t", sandboxes)
        try:
            await HermesAgentLoop(client, SCHEMAS, NAMES, tool_context=ctx).run(
                [{"role": "user", "content": "x"}]
            )
        finally:
            task.cancel()
            await ctx.cleanup()
            await client.close()
        return ticks

    assert asyncio.run(main()) >= 12  # ~20 possible in one second; a blocked loop gives ~0


def test_long_output_is_cut_with_a_visible_notice(stub_server, sandboxes):
    server = stub_server(
        {
            "conversations": [
                {
                    "turns": [
                        {
                            "tool_calls": [
                                call("terminal", {"command": "head -c 5000 /dev/zero | tr '\\0' a"})
                            ]
                        },
                        {"content": "ok"},
                    ]
                }
            ]
        }
    )
    result, _ = run_loop(server, sandboxes, max_tool_output_chars=1000)
    content = result.messages[2]["content"]
    assert content.endswith("characters]") and "[output truncated: showing 1000 of" in content
    assert len(content) < 1100


def test_server_errors_are_retried_then_end_the_rollout(stub_server, sandboxes):
    server = stub_server(
        {"conversations": [{"turns": [{"content": "ok"}]}]}, faults=Faults(error_rate=1.0)
    )
    start = time.monotonic()
    result, _ = run_loop(server, sandboxes, request_retries=2, retry_backoff=0.2)
    assert len(server.requests) == 3  # the first try and two retries
    assert time.monotonic() - start >= 0.6  # backoff 0.2 + 0.4
    assert result.error and "500" in result.error
    assert result.turns_used == 0 and not result.finished_naturally


def test_a_flaky_server_is_survived_by_retrying(stub_server, sandboxes):
    server = stub_server(
        {"conversations": [{"turns": [{"content": "ok"}]}]}, faults=Faults(error_rate=0.5, seed=3)
    )
    result, _ = run_loop(server, sandboxes, request_retries=6, retry_backoff=0.01)
    assert result.error is None and result.final_response == "ok"


def test_a_hanging_server_times_out(stub_server, sandboxes):
    server = stub_server(
        {"conversations": [{"turns": [{"content": "ok"}]}]}, faults=Faults(hang_rate=1.0)
    )
    start = time.monotonic()
    result, _ = run_loop(
        server, sandboxes, request_timeout=0.3, request_retries=1, retry_backoff=0.05
    )
    assert time.monotonic() - start < 20  # gave up; the server would hang forever
    assert result.error and "TimeoutError" in result.error


def test_reasoning_is_kept_per_turn(stub_server, sandboxes):
    server = stub_server(
        {
            "conversations": [
                {
                    "turns": [
                        {
                            "tool_calls": [call("terminal", {"command": "true"})],
                            "reasoning": "plan",
                        },
                        {"content": "done"},
                    ]
                }
            ]
        }
    )
    result, _ = run_loop(server, sandboxes)
    assert result.reasoning_per_turn == ["plan", None]
    assert result.messages[1]["reasoning_content"] == "plan"
    # reasoning is not sent back to the server
    assert all("reasoning_content" not in m for m in server.requests[-1]["messages"])


def test_max_turns_is_enforced_and_not_a_natural_finish(stub_server, sandboxes):
    server = stub_server(
        {"conversations": [{"turns": [{"tool_calls": [call("terminal", {"command": "true"})]}]}]}
    )
    result, _ = run_loop(server, sandboxes, max_turns=3)
    assert result.turns_used == 3 and len(server.requests) == 3
    assert not result.finished_naturally
    assert result.messages[-1]["role"] == "tool"


def test_request_carries_tools_temperature_and_extra_body(stub_server, sandboxes):
    server = stub_server({"conversations": [{"turns": [{"content": "ok"}]}]})
    run_loop(server, sandboxes, temperature=0.0, max_tokens=64, extra_body={"top_k": 5})
    sent = server.requests[-1]
    assert sent["temperature"] == 0.0 and sent["max_tokens"] == 64 and sent["top_k"] == 5
    assert {t["function"]["name"] for t in sent["tools"]} == NAMES


def test_a_reply_cut_at_the_token_limit_did_not_finish_naturally(stub_server, sandboxes):
    # As vLLM answers when max_tokens runs out: text, finish_reason "length", no call.
    server = stub_server(
        {"conversations": [{"turns": [{"content": "The answer is", "finish_reason": "length"}]}]}
    )
    result, _ = run_loop(server, sandboxes)
    assert result.turns_used == 1 and result.final_response == "The answer is"
    assert not result.finished_naturally
