"""Exact training data: decoding the trained spans gives back exactly the assistant turns."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from hermes_envgen.runtime.chat.trajectory import MASKED, tokenize_conversation
from hermes_envgen.runtime.chat.trajectory import trained_runs as runs_of

TOOLS = [{"type": "function", "function": {"name": "terminal", "parameters": {"type": "object"}}}]

CONVERSATION = [
    {"role": "system", "content": "You are an agent."},
    {"role": "user", "content": "Count the files {and} say “done” — 日本"},
    {
        "role": "assistant",
        "content": "Let me look.",
        "reasoning_content": "I will run ls.",
        "tool_calls": [
            {
                "id": "c1",
                "type": "function",
                "function": {"name": "terminal", "arguments": '{"command": "ls | wc -l"}'},
            },
            {
                "id": "c2",
                "type": "function",
                "function": {"name": "terminal", "arguments": '{"command": "echo \\"}\\""}'},
            },
        ],
    },
    {"role": "tool", "tool_call_id": "c1", "content": '{"exit_code": 0, "output": "3\\n"}'},
    {"role": "tool", "tool_call_id": "c2", "content": "}"},
    {"role": "assistant", "content": "There are 3 files. done"},
]


@pytest.fixture(scope="module")
def tokenizer(offline_tokenizer):
    return AutoTokenizer.from_pretrained(offline_tokenizer)


def trained_runs(tokens, masks):
    assert all(mask in (MASKED, token) for token, mask in zip(tokens, masks))
    return runs_of(tokens, masks)


def test_trained_spans_decode_to_exactly_the_assistant_turns(tokenizer):
    data = tokenize_conversation(tokenizer, CONVERSATION, TOOLS)
    assert len(data.tokens) == len(data.masks)
    runs = [tokenizer.decode(run) for run in trained_runs(data.tokens, data.masks)]
    assert runs == [
        "<think>I will run ls.</think>\nLet me look.\n<tool_call>\n"
        '{"name": "terminal", "arguments": {"command": "ls | wc -l"}}\n</tool_call>\n'
        '<tool_call>\n{"name": "terminal", "arguments": {"command": "echo \\"}\\""}}\n'
        "</tool_call><|im_end|>",
        "There are 3 files. done<|im_end|>",
    ]
    assert runs == data.trained_spans


def test_the_whole_sequence_is_the_chat_template_rendering(tokenizer):
    data = tokenize_conversation(tokenizer, CONVERSATION, TOOLS)
    rendered = tokenizer.apply_chat_template(
        [
            dict(
                m,
                tool_calls=[
                    dict(
                        c,
                        function=dict(
                            c["function"], arguments=json.loads(c["function"]["arguments"])
                        ),
                    )
                    for c in m["tool_calls"]
                ],
            )
            if "tool_calls" in m
            else m
            for m in CONVERSATION
        ],
        tools=TOOLS,
        tokenize=False,
    )
    assert tokenizer.decode(data.tokens) == rendered
    # tool results, the prompt and the system turn are all masked
    masked_text = tokenizer.decode([t for t, m in zip(data.tokens, data.masks) if m == MASKED])
    assert '"output": "3\\n"' in masked_text and "Count the files" in masked_text


def test_the_tokenizer_call_is_version_independent(tokenizer):
    """Rendering as text and encoding piece by piece never meets transformers 5's BatchEncoding."""
    data = tokenize_conversation(tokenizer, CONVERSATION, TOOLS)
    assert all(isinstance(t, int) for t in data.tokens)
    assert data.num_trained > 0


def test_a_template_that_rewrites_history_trains_each_turn_as_generated(
    tokenizer, offline_tokenizer
):
    rewriting = AutoTokenizer.from_pretrained(offline_tokenizer)
    # like Qwen3: earlier assistant turns lose their reasoning once the conversation moves on
    rewriting.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n"
        "{% if m['role'] == 'assistant' and loop.last and m.get('reasoning_content') %}"
        "<think>{{ m['reasoning_content'] }}</think>{% endif %}"
        "{{ m['content'] }}<|im_end|>\n{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a1", "reasoning_content": "r1"},
        {"role": "user", "content": "q2"},
        {"role": "assistant", "content": "a2", "reasoning_content": "r2"},
    ]
    data = tokenize_conversation(rewriting, messages)
    runs = [rewriting.decode(r) for r in trained_runs(data.tokens, data.masks)]
    # Each turn as it was rendered when it was generated (the last one then), reasoning and all.
    assert runs == ["<think>r1</think>a1<|im_end|>", "<think>r2</think>a2<|im_end|>"]
    # The prompts between them as the model saw them: earlier turns without reasoning.
    masked = rewriting.decode([t for t, m in zip(data.tokens, data.masks) if m == MASKED])
    turn = "<|im_start|>user\n{}<|im_end|>\n<|im_start|>assistant\n"
    assert masked == turn.format("q") + "\n" + turn.format("q2") + "\n"
