"""Per model family, with its real chat template: tool-using rollouts train exactly as generated.

Each family's template is the published one (tests/fixtures/chat_templates/README.md names the
checkpoint
and revision). A rollout of two parallel calls, a sequential call and an answer (with reasoning
where the family reasons) goes through the start-up check and both token paths:

- chat mode: the training data rebuilt from the parsed conversation with the template;
- token mode: the agent loop against the stub's ``/generate``, which generates the
  family's own text; the trained spans are the generated tokens, and re-tokenizing the
  conversation with the template (the ``check`` fidelity gate) gives the same ids.

The text each family's model generates is written here from the family's format, apart from
the templates, so that a template that renders a turn otherwise than the model writes it fails.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from atroposlib.envs.server_handling.vllm_server import VLLMServer
from helpers import CHAT_TEMPLATES
from helpers.chat_families import (
    DEEPSEEK,
    FAMILIES,
    HARMONY,
    LLAMA,
    PARALLEL,
    Family,
    Turn,
    arguments,
    plain,
    qwen3_no_thinking,
)
from transformers import AutoTokenizer

from hermes_envgen.runtime.chat.template_check import (
    ChatTemplateDropsToolCalls,
    check_tool_calls_rendered,
)
from hermes_envgen.runtime.chat.template_render import set_template_kwargs
from hermes_envgen.runtime.chat.token_mode import ExactTokensBackend
from hermes_envgen.runtime.chat.trajectory import (
    token_fidelity,
    tokenize_conversation,
    trained_runs,
)
from hermes_envgen.runtime.errors import ChatTemplateError
from hermes_envgen.runtime.loop.agent_loop import HermesAgentLoop
from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.tools import REGISTRY
from hermes_envgen.testing.tokenizer import build_offline_tokenizer

TEMPLATES = CHAT_TEMPLATES
TOOLS = REGISTRY.resolve(["terminal"])
SCHEMAS = [t.schema for t in TOOLS]
NAMES = {t.name for t in TOOLS}
LLAMA += ("<|eom_id|>", "<|python_tag|>")
HARMONY += ("<|return|>", "<|call|>")
DEEPSEEK += ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>")
DEEPSEEK += ("<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>")
DEEPSEEK += ("<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>")


def family_tokenizer(tmp_path: Path, family: Family):
    template = (TEMPLATES / family.template).read_text()
    directory = build_offline_tokenizer(
        tmp_path / "tok", template, family.specials, family.eos, bos_token=family.bos
    )
    tokenizer = AutoTokenizer.from_pretrained(str(directory))
    set_template_kwargs(tokenizer, family.variables)
    return directory, tokenizer


def conversation(turns: list[Turn]) -> list[dict]:
    """The rollout as a chat server returns it parsed: calls, results, reasoning apart."""
    messages: list[dict] = [{"role": "user", "content": "Run a, b and c."}]
    number = 0
    for turn in turns:
        reply: dict = {"role": "assistant", "content": turn.content}
        if turn.reasoning:
            reply["reasoning_content"] = turn.reasoning
        calls = []
        for command in turn.commands:
            number += 1
            calls.append(
                {
                    "id": f"call_{number:024x}",
                    "type": "function",
                    "function": {"name": "terminal", "arguments": arguments(command)},
                }
            )
        if calls:
            reply["tool_calls"] = calls
        messages.append(reply)
        for call in calls:
            output = json.loads(call["function"]["arguments"])["command"].split()[-1]
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": call["id"],
                    "name": "terminal",
                    "content": json.dumps({"output": output + "\n", "exit_code": 0}),
                }
            )
    return messages


@pytest.mark.parametrize("name", list(FAMILIES))
def test_chat_mode_trains_each_turn_as_the_model_generated_it(tmp_path, name):
    family = FAMILIES[name]
    _, tokenizer = family_tokenizer(tmp_path, family)
    messages = conversation(family.turns)
    expected = [family.generated(turn) for turn in family.turns]
    if family.chat_mode != "exact":
        with pytest.raises(ChatTemplateDropsToolCalls, match=family.chat_mode) as refused:
            check_tool_calls_rendered(tokenizer, name, token_mode=False)
        assert len(str(refused.value).splitlines()) == 1
        with pytest.raises(ChatTemplateError, match="cannot be rebuilt"):
            tokenize_conversation(tokenizer, messages, SCHEMAS)
        return
    check_tool_calls_rendered(tokenizer, name, token_mode=False)
    data = tokenize_conversation(tokenizer, messages, SCHEMAS)
    spans = [tokenizer.decode(run) for run in trained_runs(data.tokens, data.masks)]
    assert spans == data.trained_spans == expected
    # The masked rest holds the prompt, every tool result and the generation prompts.
    results = len(messages) - 1 - len(family.turns)
    assert tokenizer.decode(data.tokens).count("exit_code") == results


def token_server(base_url: str, tokenizer_dir: Path) -> VLLMServer:
    config = APIServerConfig(
        model_name="stub-model",
        base_url=base_url.removesuffix("/v1"),
        api_key="x",
        server_type="vllm",
        tokenizer_name=str(tokenizer_dir),
        timeout=30,
        num_max_requests_at_a_time=4,
        num_requests_for_eval=4,
        health_check=False,
    )
    return VLLMServer(config)


@pytest.mark.parametrize("name", list(FAMILIES))
def test_token_mode_trains_what_was_generated_and_the_template_gives_the_same_ids(
    tmp_path, name, stub_server, sandboxes
):
    family = FAMILIES[name]
    if not family.parser:
        pytest.skip("no parser reads this family's calls from raw text")
    directory, tokenizer = family_tokenizer(tmp_path, family)
    check_tool_calls_rendered(tokenizer, name, token_mode=True)
    expected = [family.generated(turn) for turn in family.turns]
    calls = [
        [{"name": "terminal", "arguments": {"command": c}} for c in t.commands]
        for t in family.turns
    ]
    script = {
        "conversations": [
            {
                "turns": [
                    {"text": text, "tool_calls": c} if c else {"text": text, "content": t.content}
                    for text, c, t in zip(expected, calls, family.turns)
                ]
            }
        ]
    }
    stub = stub_server(script, tokenizer=directory)

    async def main():
        server = token_server(stub.base_url, directory)
        backend = ExactTokensBackend(server, tokenizer, family.parser, default_max_tokens=512)
        ctx = ToolContext("task-family", sandboxes)
        loop = HermesAgentLoop(
            server, SCHEMAS, NAMES, task_id="task-family", tool_context=ctx, backend=backend
        )
        try:
            return await loop.run([{"role": "user", "content": "Run a, b and c."}]), backend
        finally:
            await ctx.cleanup()

    result, backend = asyncio.run(asyncio.wait_for(main(), 120))
    assert result.turns_used == len(family.turns) and result.finished_naturally
    trace = backend.trace
    assert [tokenizer.decode(ids) for ids in trace.generated()] == expected
    made = [
        [json.loads(c["function"]["arguments"])["command"] for c in m.get("tool_calls") or []]
        for m in result.messages
        if m["role"] == "assistant"
    ]
    assert made == [list(t.commands) for t in family.turns]
    assert not result.tool_errors
    # The check's fidelity gate: the template re-renders every assistant span to the same ids.
    fidelity = token_fidelity(tokenizer, result.messages, trace.tokens, trace.masks, SCHEMAS)
    if family.chat_mode == "exact":
        assert fidelity == []
    else:
        assert fidelity and "cannot re-render" in fidelity[0]


@pytest.mark.parametrize("name", ["qwq-32b", "deepseek-r1-distill-qwen-32b"])
@pytest.mark.parametrize(
    ("server_type", "fix"),
    [
        ("vllm", "--env.inference_api completions"),
        ("sglang", "--env.inference_api generate"),
        ("openai", "--openai.server_type vllm with --env.inference_api completions"),
    ],
)
def test_a_template_whose_prompt_opens_the_reasoning_is_refused_with_token_mode_as_the_fix(
    tmp_path, name, server_type, fix
):
    # QwQ's and the R1 distills' generation prompts open the think block, and no reply's
    # reasoning is rendered: the chat-mode data cannot hold what the model wrote and no
    # template override of another format fixes that, so the one fix named is token mode.
    _, tokenizer = family_tokenizer(tmp_path, FAMILIES[name])
    with pytest.raises(ChatTemplateDropsToolCalls) as refused:
        check_tool_calls_rendered(tokenizer, name, token_mode=False, server_type=server_type)
    message = str(refused.value)
    assert "<think>" in message and "renders no reply's reasoning" in message
    assert "Fix: token mode" in message and fix in message
    assert "--env.chat_template" not in message
    # A template that renders the reasoning of the last reply (Qwen3's) is not refused so.
    _, qwen = family_tokenizer(tmp_path / "qwen3", FAMILIES["qwen3 (thinking)"])
    check_tool_calls_rendered(qwen, "qwen3", token_mode=False, server_type=server_type)


@pytest.mark.parametrize(
    ("name", "kept"), [("gigachat3-10b-a1.8b", 1), ("gpt-oss (no reasoning)", 1), ("llama-3.1", 0)]
)
def test_a_template_that_renders_one_of_two_parallel_calls_leaves_the_rollout_out(
    tmp_path, name, kept, caplog
):
    # GigaChat3's and gpt-oss's templates render the first call of a turn only (Llama 3's
    # raise): the start-up check says so, and such a rollout is not training data.
    family = FAMILIES[name]
    _, tokenizer = family_tokenizer(tmp_path, family)
    with caplog.at_level("WARNING"):
        check_tool_calls_rendered(tokenizer, name, token_mode=False)
    assert "cannot render replies with two tool calls in one turn" in caplog.text
    messages = conversation([Turn(("echo a", "echo b")), Turn(content="Done.")])
    with pytest.raises(ChatTemplateError) as caught:
        tokenize_conversation(tokenizer, messages, SCHEMAS)
    if kept:  # the second call is named as what the turn would lack
        assert "leaves out of an assistant turn what the model generated" in str(caught.value)
        assert "echo b" in str(caught.value) and "echo a" not in str(caught.value)


def test_the_envs_template_variables_render_the_training_data(tmp_path):
    # extra_body.chat_template_kwargs goes to the server (chat mode) and, through
    # prepare_chat_template, renders the training data and token-mode prompts alike.
    from hermes_envgen.runtime.chat.template_check import prepare_chat_template
    from hermes_envgen.runtime.chat.template_render import template_kwargs

    family = FAMILIES["qwen3 (thinking)"]
    _, tokenizer = family_tokenizer(tmp_path, family)
    messages = conversation(plain(PARALLEL))
    thinking = tokenize_conversation(tokenizer, messages, SCHEMAS)
    prepare_chat_template(
        tokenizer, None, "qwen3", token_mode=False, template_variables={"enable_thinking": False}
    )
    assert template_kwargs(tokenizer) == {"enable_thinking": False}
    off = tokenize_conversation(tokenizer, messages, SCHEMAS)
    # Off: the empty think block is the prompt's (masked). On: a reply without reasoning is
    # one whose think block the model left empty, which it generated (trained).
    empty = "<think>\n\n</think>\n\n"
    assert tokenizer.decode(off.tokens).count(empty) == 3
    assert off.trained_spans == [qwen3_no_thinking(t) for t in plain(PARALLEL)]
    assert thinking.trained_spans == [empty + qwen3_no_thinking(t) for t in plain(PARALLEL)]
