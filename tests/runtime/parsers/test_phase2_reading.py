"""Token-mode rollouts read by the parsers, over real HTTP: harmony text, quoted markup.

The stub server returns the scripted harmony completions as token ids of a byte-level
tokenizer that knows harmony's special tokens; token mode's backend decodes them and the
``gpt_oss`` parser reads them: the call runs, the analysis channel is the turn's reasoning,
the final channel its answer, and no harmony markup reaches the answer.
"""

from __future__ import annotations

import asyncio
import json

import pytest
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from atroposlib.envs.server_handling.vllm_server import VLLMServer
from transformers import AutoTokenizer

from hermes_envgen.runtime.chat.token_mode import ExactTokensBackend
from hermes_envgen.runtime.loop.agent_loop import HermesAgentLoop
from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.parsers import get_parser
from hermes_envgen.runtime.tools import REGISTRY
from hermes_envgen.testing.tokenizer import build_offline_tokenizer

HARMONY_TOKENS = (
    "<|start|>",
    "<|channel|>",
    "<|message|>",
    "<|end|>",
    "<|call|>",
    "<|return|>",
    "<|constrain|>",
)
TOOLS = REGISTRY.resolve(["terminal"])
THINK_CALL = "The user wants a greeting file; run echo."
THINK_ANSWER = "The command ran."
CALL_TURN = (
    f"<|channel|>analysis<|message|>{THINK_CALL}<|end|><|start|>assistant<|channel|>commentary "
    'to=functions.terminal <|constrain|>json<|message|>{"command": "echo hi"}<|call|>'
)
ANSWER_TURN = (
    f"<|channel|>analysis<|message|>{THINK_ANSWER}<|end|>"
    "<|start|>assistant<|channel|>final<|message|>Wrote it."
)


@pytest.fixture(scope="module")
def harmony_tokenizer(tmp_path_factory):
    """A byte-level tokenizer with harmony's special tokens (its template stays ChatML, whose
    turns end with the eos token, as the exact-token trace requires of a template)."""
    path = build_offline_tokenizer(
        tmp_path_factory.mktemp("harmony-tokenizer"), special_tokens=HARMONY_TOKENS
    )
    return path


def test_a_harmony_completion_reads_into_content_reasoning_and_calls() -> None:
    outcome = get_parser("gpt_oss").read(CALL_TURN)
    assert outcome.reasoning == THINK_CALL and outcome.content is None
    [call] = outcome.tool_calls
    assert call["function"] == {"name": "terminal", "arguments": '{"command": "echo hi"}'}
    outcome = get_parser("harmony").read(ANSWER_TURN)
    assert (outcome.content, outcome.tool_calls, outcome.reasoning) == (
        "Wrote it.",
        None,
        THINK_ANSWER,
    )


def run_rollout(stub_server, tokenizer_dir, sandboxes, turns: list[str], parser: str):
    """One token-mode rollout against the stub, which generates ``turns``; returns the result."""
    stub = stub_server(
        {"conversations": [{"turns": [{"content": t} for t in turns]}]}, tokenizer=tokenizer_dir
    )
    config = APIServerConfig(
        base_url=stub.base_url,
        model_name="stub-model",
        api_key="EMPTY",
        tokenizer_name=str(tokenizer_dir),
        health_check=False,
        server_type="vllm",
    )
    server = VLLMServer(config)
    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)

    async def main():
        backend = ExactTokensBackend(server, tokenizer, parser, default_max_tokens=512)
        ctx = ToolContext("task-reading", sandboxes)
        loop = HermesAgentLoop(
            server,
            [t.schema for t in TOOLS],
            {t.name for t in TOOLS},
            task_id="task-reading",
            tool_context=ctx,
            backend=backend,
            max_turns=4,
        )
        try:
            return await asyncio.wait_for(
                loop.run([{"role": "user", "content": "write a greeting"}]), 60
            )
        finally:
            await ctx.cleanup()

    return asyncio.run(main())


def test_a_token_mode_rollout_with_harmony_completions(stub_server, harmony_tokenizer, sandboxes):
    result = run_rollout(
        stub_server, harmony_tokenizer, sandboxes, [CALL_TURN, ANSWER_TURN], "gpt_oss"
    )
    assert result.finished_naturally and not result.tool_errors
    assert result.tool_calls == [{"name": "terminal", "arguments": '{"command": "echo hi"}'}]
    assert result.final_response == "Wrote it."
    assert result.reasoning_per_turn == [THINK_CALL, THINK_ANSWER]
    assistant = [m for m in result.messages if m["role"] == "assistant"]
    assert [m.get("reasoning_content") for m in assistant] == [THINK_CALL, THINK_ANSWER]
    assert all("<|" not in (m.get("content") or "") for m in assistant)
    [tool_message] = [m for m in result.messages if m["role"] == "tool"]
    assert "hi" in json.dumps(tool_message["content"])


@pytest.mark.parametrize(
    ("parser", "answer"),
    [
        ("hermes", "Wrap calls in <tool_call> and </tool_call> tags."),
        ("glm47", "Wrap calls in <tool_call> and </tool_call> tags."),
        ("auto", "Wrap calls in <tool_call> and </tool_call> tags."),
        (
            "hermes",
            'Like this:\n```\n<tool_call>\n{"name": "terminal", "arguments": {}}\n'
            "</tool_call>\n```",
        ),
        ("llama3_json", '{"name": "Alice", "age": 30, "city": "Paris"}'),
        ("auto", '{"name": "Alice", "age": 30, "city": "Paris"}'),
    ],
)
def test_an_answer_naming_or_quoting_the_markup_is_the_answer(
    stub_server, offline_tokenizer, sandboxes, parser: str, answer: str
):
    # No call, and no "your tool call could not be parsed" either: the rollout ends there.
    result = run_rollout(stub_server, offline_tokenizer, sandboxes, [answer, "Sorry."], parser)
    assert result.finished_naturally and result.turns_used == 1
    assert not result.tool_errors and result.tool_calls == []
    assert result.final_response == answer
