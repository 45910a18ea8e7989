"""Per model family, with its real chat template: tool-using rollouts train exactly as generated.

Each family's template is the published one (tests/fixtures/chat_templates/README.md names the checkpoint
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
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from atroposlib.envs.server_handling.vllm_server import VLLMServer
from helpers import CHAT_TEMPLATES
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
LLAMA = ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")
LLAMA += ("<|eom_id|>", "<|python_tag|>")
HARMONY = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>")
HARMONY += ("<|return|>", "<|call|>")
DEEPSEEK = ("<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>")
DEEPSEEK += ("<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>", "<｜tool▁call▁begin｜>")
DEEPSEEK += ("<｜tool▁call▁end｜>", "<｜tool▁sep｜>", "<｜tool▁outputs▁begin｜>")
DEEPSEEK += ("<｜tool▁outputs▁end｜>", "<｜tool▁output▁begin｜>", "<｜tool▁output▁end｜>")


@dataclass(frozen=True)
class Turn:
    """One reply: its reasoning, text and calls ``(command,)`` of the terminal tool."""

    commands: tuple[str, ...] = ()
    content: str = ""
    reasoning: str | None = None


def arguments(command: str) -> str:
    return json.dumps({"command": command})


def hermes_calls(turn: Turn) -> str:
    blocks = [
        f'<tool_call>\n{{"name": "terminal", "arguments": {arguments(c)}}}\n</tool_call>'
        for c in turn.commands
    ]
    return "\n".join(([turn.content] if turn.content else []) + blocks)


def qwen3(turn: Turn) -> str:  # Qwen3 hybrid thinking: a think block opens every reply
    thinking = f"<think>\n{turn.reasoning}\n</think>\n\n" if turn.reasoning else ""
    return thinking + hermes_calls(turn) + "<|im_end|>"


def qwen3_no_thinking(turn: Turn) -> str:  # the empty think block is in the prompt
    return hermes_calls(turn) + "<|im_end|>"


def qwq(turn: Turn) -> str:  # the prompt opens the think block: the reply closes it
    return f"{turn.reasoning}\n</think>\n\n" + hermes_calls(turn) + "<|im_end|>"


def deepseek_r1(turn: Turn) -> str:  # the prompt opens the think block; calls in fences
    calls = [
        "<｜tool▁call▁begin｜>function<｜tool▁sep｜>terminal\n```json\n"
        + arguments(c)
        + "\n```<｜tool▁call▁end｜>"
        for c in turn.commands
    ]
    body = (
        "<｜tool▁calls▁begin｜>" + "\n".join(calls) + "<｜tool▁calls▁end｜>"
        if calls
        else turn.content
    )
    return f"{turn.reasoning}\n</think>\n\n" + body + "<｜end▁of▁sentence｜>"


def hermes(turn: Turn) -> str:
    return hermes_calls(turn) + "<|im_end|>"


def vllm_hermes(turn: Turn) -> str:  # vLLM's example template: arguments before the name
    blocks = [
        f'<tool_call>\n{{ "arguments": {arguments(c)}, "name": "terminal"}}\n</tool_call> '
        for c in turn.commands
    ]
    return "\n".join(blocks) + "<|im_end|>" if blocks else turn.content + "<|im_end|>"


def llama3(turn: Turn) -> str:  # one JSON call per turn, "parameters"
    if turn.commands:
        (command,) = turn.commands
        return f'{{"name": "terminal", "parameters": {arguments(command)}}}<|eot_id|>'
    return turn.content + "<|eot_id|>"


def harmony(turn: Turn) -> str:  # gpt-oss: the call's recipient in the header, <|call|>
    analysis = ""
    if turn.reasoning:  # the analysis channel, then a new message of the same reply
        analysis = f"<|channel|>analysis<|message|>{turn.reasoning}<|end|><|start|>assistant"
    if turn.commands:
        (command,) = turn.commands
        header = " to=functions.terminal<|channel|>commentary json<|message|>"
        return analysis + header + arguments(command) + "<|call|>"
    return analysis + f"<|channel|>final<|message|>{turn.content}<|return|>"


def gigachat3(turn: Turn) -> str:  # the reply's text, then its call as a message of its own
    text = f"{turn.content}<|message_sep|>\n\n"
    if turn.commands:
        (command,) = turn.commands
        call = f'{{"name": "terminal", "arguments": {arguments(command)}}}'
        text += f"function call<|role_sep|>\n{call}<|message_sep|>\n\n"
    return text.rstrip()


PARALLEL = [
    Turn(("echo a", "echo b"), reasoning="Both files first."),
    Turn(("echo c",), reasoning="Now the third."),
    Turn(content="Done: a, b, c.", reasoning="All three ran."),
]
SEQUENTIAL = [Turn(("echo a",)), Turn(("echo c",)), Turn(content="Done: a, c.")]


@dataclass(frozen=True)
class Family:
    template: str
    generated: object  # Turn -> the text the model generates, its end token included
    parser: str
    turns: list[Turn]
    specials: tuple[str, ...] = ()
    eos: str = "<|im_end|>"
    bos: str | None = None
    variables: dict = field(default_factory=dict)
    chat_mode: str = "exact"  # or the start of the refusal


def plain(turns: list[Turn]) -> list[Turn]:
    return [Turn(t.commands, t.content) for t in turns]


FAMILIES = {
    "qwen3 (thinking)": Family("Qwen-Qwen3-0.6B.jinja", qwen3, "hermes", PARALLEL),
    "qwen3 (enable_thinking off)": Family(
        "Qwen-Qwen3-0.6B.jinja",
        qwen3_no_thinking,
        "hermes",
        plain(PARALLEL),
        variables={"enable_thinking": False},
    ),
    "qwq-32b": Family(
        "Qwen-QwQ-32B.jinja",
        qwq,
        "hermes",
        PARALLEL,
        chat_mode="chat mode cannot rebuild the text the model generated",
    ),
    "deepseek-r1-distill-qwen-32b": Family(
        "deepseek-ai-DeepSeek-R1-Distill-Qwen-32B.jinja",
        deepseek_r1,
        "deepseek_v3",
        PARALLEL,
        DEEPSEEK,
        "<｜end▁of▁sentence｜>",
        "<｜begin▁of▁sentence｜>",
        chat_mode="chat mode cannot rebuild the text the model generated",
    ),
    "hermes-2-pro-llama-3": Family(
        "NousResearch-Hermes-2-Pro-Llama-3-8B-tool_use.jinja",
        hermes,
        "hermes",
        plain(PARALLEL),
        bos="<|begin_of_text|>",
    ),
    "hermes-3-llama-3.1": Family(
        "NousResearch-Hermes-3-Llama-3.1-8B-tool_use.jinja",
        hermes,
        "hermes",
        plain(PARALLEL),
        bos="<|begin_of_text|>",
    ),
    "vllm tool_chat_template_hermes": Family(
        "vllm-tool_chat_template_hermes.jinja", vllm_hermes, "hermes", plain(PARALLEL)
    ),
    "llama-3.1": Family(
        "meta-llama-Llama-3.1-8B-Instruct.jinja",
        llama3,
        "llama3_json",
        SEQUENTIAL,
        LLAMA,
        "<|eot_id|>",
        "<|begin_of_text|>",
    ),
    "llama-3.2": Family(
        "meta-llama-Llama-3.2-3B-Instruct.jinja",
        llama3,
        "llama3_json",
        SEQUENTIAL,
        LLAMA,
        "<|eot_id|>",
        "<|begin_of_text|>",
    ),
    "llama-3.3": Family(
        "meta-llama-Llama-3.3-70B-Instruct.jinja",
        llama3,
        "llama3_json",
        SEQUENTIAL,
        LLAMA,
        "<|eot_id|>",
        "<|begin_of_text|>",
    ),
    "gigachat3-10b-a1.8b": Family(
        "GigaChat3-10B-A1.8B.jinja",
        gigachat3,
        "",  # no parser of its format: chat mode only
        [Turn(("echo a",), "Reading."), Turn(("echo c",)), Turn(content="Done: a, c.")],
        ("<|role_sep|>", "<|message_sep|>"),
        "<|message_sep|>",
    ),
    "gpt-oss (no reasoning)": Family(
        "openai-gpt-oss-120b.jinja", harmony, "harmony", SEQUENTIAL, HARMONY, "<|return|>"
    ),
    "gpt-oss (reasoning)": Family(
        "openai-gpt-oss-120b.jinja",
        harmony,
        "harmony",
        [
            Turn(("echo a",), reasoning="A first."),
            Turn(("echo c",), reasoning="Then c."),
            Turn(content="Done: a, c.", reasoning="Both ran."),
        ],
        HARMONY,
        "<|return|>",
    ),
}


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
