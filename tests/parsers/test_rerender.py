"""A parsed turn, rendered back by its model family's chat template, is the text the model wrote.

The templates in ``templates/`` are written from the families' published chat-template
formats (Mistral v11+, Kimi K2, DeepSeek V3 / V3.1, Qwen3-Coder, GLM-4.5); the Hermes/Qwen3
one is the offline tokenizer's own. Each is put into the offline byte-level tokenizer, so
the test needs no download, and the conversation goes through ``tokenize_conversation``:
its trained spans are what a trainer would train on.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from markup import (
    DS_CALL,
    DS_CALL_END,
    DS_CALLS,
    DS_CALLS_END,
    DS_SEP,
    KIMI_ARGS,
    KIMI_CALL,
    KIMI_CALL_END,
    KIMI_CALLS,
    KIMI_CALLS_END,
)
from transformers import AutoTokenizer

from hermes_envgen.runtime.chat_template import renders_raw_arguments
from hermes_envgen.runtime.parsers import get_parser
from hermes_envgen.runtime.tools import REGISTRY
from hermes_envgen.runtime.trajectory import tokenize_conversation

TEMPLATES = Path(__file__).parent / "templates"
TOOLS = [t.schema for t in REGISTRY.resolve(["terminal", "file"])]
END = "<|im_end|>"  # the offline tokenizer's eos, which the templates end a turn with


# parser, template (None: the offline ChatML one), what the model generated (no end token).
# Argument spacing differs from any serialiser's on purpose: it must survive as written.
CASES = {
    "hermes": (
        None,
        '<tool_call>\n{"name": "terminal", "arguments": {"command":"ls -la","timeout":30}}\n'
        "</tool_call>",
    ),
    "mistral": (
        "mistral.jinja",
        'Two steps.[TOOL_CALLS]terminal[ARGS]{"command":"ls -la","timeout":30}'
        '[TOOL_CALLS]write_file[ARGS]{"path": "a.py",  "content":"print(1)\\n"}',
    ),
    "kimi_k2": (
        "kimi_k2.jinja",
        f"Let me look.{KIMI_CALLS}{KIMI_CALL}functions.terminal:0{KIMI_ARGS}"
        f'{{"command":"ls"}}{KIMI_CALL_END}{KIMI_CALL}functions.read_file:1{KIMI_ARGS}'
        f'{{"path": "a.py","start_line":2}}{KIMI_CALL_END}{KIMI_CALLS_END}',
    ),
    "deepseek_v3": (
        "deepseek_v3.jinja",
        f"Checking.{DS_CALLS}{DS_CALL}function{DS_SEP}terminal\n```json\n"
        f'{{"command":"ls ü"}}\n```{DS_CALL_END}{DS_CALLS_END}',
    ),
    "deepseek_v3_1": (
        "deepseek_v3_1.jinja",
        f'{DS_CALLS}{DS_CALL}terminal{DS_SEP}{{"command":"ls",  "timeout": 5}}{DS_CALL_END}'
        f'{DS_CALL}read_file{DS_SEP}{{"path":"日本.txt"}}{DS_CALL_END}{DS_CALLS_END}',
    ),
    "qwen3_coder": (
        "qwen3_coder.jinja",
        "I will run it.\n<tool_call>\n<function=terminal>\n<parameter=command>\necho 42\n"
        "</parameter>\n<parameter=timeout>\n42\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=write_file>\n<parameter=path>\n42\n</parameter>\n"
        "<parameter=content>\n{'k': 1}\nnull\n\n</parameter>\n</function>\n</tool_call>",
    ),
    "glm45": (
        "glm45.jinja",
        "Running.\n<tool_call>terminal\n<arg_key>command</arg_key>\n<arg_value>ls</arg_value>\n"
        "<arg_key>timeout</arg_key>\n<arg_value>30</arg_value>\n</tool_call>\n"
        "<tool_call>write_file\n<arg_key>path</arg_key>\n<arg_value>007</arg_value>\n"
        '<arg_key>content</arg_key>\n<arg_value>{"a": 1}</arg_value>\n</tool_call>',
    ),
}
PRINTS_TEXT = {
    "hermes": True,
    "mistral": True,
    "kimi_k2": True,
    "deepseek_v3": True,
    "deepseek_v3_1": True,
    "qwen3_coder": False,
    "glm45": False,
}


def family_tokenizer(offline_tokenizer: Path, template: str | None):
    """The offline tokenizer with a model family's chat template."""
    tokenizer = AutoTokenizer.from_pretrained(offline_tokenizer)
    if template is not None:
        tokenizer.chat_template = (TEMPLATES / template).read_text()
    return tokenizer


@pytest.mark.parametrize("fmt", sorted(CASES))
def test_a_parsed_turn_re_renders_as_generated(fmt: str, offline_tokenizer) -> None:
    template, generated = CASES[fmt]
    tokenizer = family_tokenizer(offline_tokenizer, template)
    content, calls = get_parser(fmt).parse(generated, TOOLS)
    assert calls is not None
    messages = [
        {"role": "user", "content": "Look around."},
        {"role": "assistant", "content": content or "", "tool_calls": calls},
        *({"role": "tool", "tool_call_id": c["id"], "content": "ok"} for c in calls),
        {"role": "assistant", "content": "Done."},
    ]
    conversation = tokenize_conversation(tokenizer, messages, TOOLS)
    assert conversation.trained_spans == [generated + END, "Done." + END]
    assert renders_raw_arguments(tokenizer) is PRINTS_TEXT[fmt]


def test_raw_text_values_are_typed_by_the_schema_the_template_prints_back() -> None:
    _, generated = CASES["qwen3_coder"]
    _, calls = get_parser("qwen3_coder").parse(generated, TOOLS)
    assert calls is not None
    assert [c["function"]["arguments"] for c in calls] == [
        '{"command": "echo 42", "timeout": 42}',
        '{"path": "42", "content": "{\'k\': 1}\\nnull\\n"}',
    ]
