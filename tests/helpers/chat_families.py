"""Model families as their chat templates write a reply (Qwen3, QwQ, Llama, DeepSeek, gpt-oss...):
the turns the chat-template and token-mode tests script, rendered the family's way."""

from __future__ import annotations

import json
from dataclasses import dataclass, field

LLAMA = ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")


HARMONY = ("<|start|>", "<|end|>", "<|message|>", "<|channel|>", "<|constrain|>")


DEEPSEEK = ("<｜begin▁of▁sentence｜>", "<｜User｜>", "<｜Assistant｜>", "<｜end▁of▁sentence｜>")


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
