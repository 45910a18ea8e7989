"""A model reply holding half a surrogate pair (JSON ``"\\ud800"``): process and evaluate run to
their end, with the characters replaced by U+FFFD and counted, and parsers write valid text."""

from __future__ import annotations

import asyncio
import json

import pytest
from conftest import EXAMPLES

from hermes_envgen.runtime.loop.agent_loop import HermesAgentLoop
from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.parsers import get_parser
from hermes_envgen.runtime.rollout import AssistantTurn
from hermes_envgen.runtime.tools import REGISTRY
from hermes_envgen.testing import OfflineRun

ENV_FILE = EXAMPLES / "terminal_env.py"
LONE = "\ud800"  # JSON text "\ud800": half of a surrogate pair, no character on its own
# The content and the arguments' text of each turn carry a lone surrogate, as a server's JSON
# escape decodes to; the stub writes it back as that escape.
SCRIPT = {
    "default": {
        "turns": [
            {
                "content": f"Let me look {LONE}",
                "reasoning": f"thinking {LONE}",
                "tool_calls": [
                    {
                        "name": "write_file",
                        "arguments": f'{{"path": "greeting.txt", "content": "hello{LONE}"}}',
                    }
                ],
            },
            {"content": f"Done {LONE}{LONE}."},
        ]
    }
}
REPLACED_PER_ROLLOUT = 5  # content, reasoning, arguments; then two in the answer


def script_file(tmp_path):
    path = tmp_path / "script.json"
    path.write_text(json.dumps(SCRIPT))  # ensure_ascii: the file holds the escape
    return path


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_evaluate_saves_every_rollout_of_a_reply_with_lone_surrogates(
    stub_server, offline_tokenizer, tmp_path
):
    server = stub_server(script_file(tmp_path))
    run = OfflineRun(ENV_FILE, server.base_url, offline_tokenizer, tmp_path, health_check=None)
    metrics, samples = run.evaluate()
    assert len(samples) == 3 and metrics["eval/rollouts"] == 3.0
    for sample in samples:
        assert sample["replaced_characters"] == REPLACED_PER_ROLLOUT
        assert sample["final_response"] == "Done \ufffd\ufffd."
        call = sample["messages"][-3]["tool_calls"][0]
        assert json.loads(call["function"]["arguments"])["content"] == "hello\ufffd"
    saved = (tmp_path / "eval" / "samples.jsonl").read_bytes()
    saved.decode("utf-8")  # strict: no lone surrogate reached the file


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_process_trains_on_a_reply_with_lone_surrogates(stub_server, offline_tokenizer, tmp_path):
    server = stub_server(script_file(tmp_path))
    run = OfflineRun(ENV_FILE, server.base_url, offline_tokenizer, tmp_path, health_check=None)
    groups = run.process(groups=1)
    assert len(groups) == 1
    for messages in groups[0]["messages"]:
        assert messages[-1]["content"] == "Done \ufffd\ufffd."


# Each format's call whose arguments hold a JSON escape of a lone surrogate, where the parser
# decodes the value (an array parameter) and writes the arguments again.
ARRAY_TOOL = [
    {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {"type": "object", "properties": {"items": {"type": "array"}}},
        },
    }
]
ESCAPED_CALLS = {
    "hermes": '<tool_call>{"name": "f", "arguments": {"items": ["x\\ud800", "\t"]}}</tool_call>',
    "qwen3_coder": "<tool_call>\n<function=f>\n<parameter=items>\n"
    '["x\\ud800"]\n</parameter>\n</function>\n</tool_call>',
    "glm45": '<tool_call>f\n<arg_key>items</arg_key>\n<arg_value>["x\\ud800"]</arg_value>\n'
    "</tool_call>",
}


@pytest.mark.parametrize("parser", sorted(ESCAPED_CALLS))
def test_parsers_write_no_lone_surrogate_into_arguments(parser):
    """The arguments text is valid UTF-8 and keeps the escape (the model's value, losslessly);
    the agent loop replaces it before a tool sees it (below)."""
    _, calls = get_parser(parser).parse(ESCAPED_CALLS[parser], ARRAY_TOOL)
    arguments = calls[0]["function"]["arguments"]
    arguments.encode("utf-8")  # strict
    assert "\\ud800" in arguments
    assert json.loads(arguments)["items"][0] == "x\ud800"


class EscapingModel:
    """A backend whose one tool-calling turn writes JSON escapes of lone surrogates, and
    arguments nested deeper than any decoder's recursion."""

    def __init__(self) -> None:
        self.turns = 0

    async def complete(self, messages, **kwargs):
        self.turns += 1
        if self.turns > 1:
            return AssistantTurn("done", [])
        escaped = '{"path": "a.txt", "content": "x\\ud800y"}'
        nested = '{"path": "b.txt", "content": ' + "[" * 5000 + "]" * 5000 + "}"
        return AssistantTurn(
            "",
            [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "write_file", "arguments": escaped},
                },
                {
                    "id": "c2",
                    "type": "function",
                    "function": {"name": "write_file", "arguments": nested},
                },
            ],
        )


def test_escaped_surrogates_in_arguments_reach_the_tool_replaced(sandboxes):
    async def main():
        ctx = ToolContext("escapes", sandboxes)
        tools = REGISTRY.resolve(["file"])
        loop = HermesAgentLoop(
            None,
            [t.schema for t in tools],
            {t.name for t in tools},
            task_id="escapes",
            tool_context=ctx,
            backend=EscapingModel(),
        )
        result = await loop.run([{"role": "user", "content": "write"}])
        written = await ctx.read_file("a.txt")
        await sandboxes.close_all()
        return result, written

    result, written = asyncio.run(main())
    assert written == "x\ufffdy"
    assert result.replaced_characters == 1
    assert len(result.tool_errors) == 1  # the nested one: refused, not a crash
    assert result.tool_errors[0].arguments.startswith('{"path": "b.txt"')
    assert "not valid JSON" in result.tool_errors[0].error
    assert result.finished_naturally
