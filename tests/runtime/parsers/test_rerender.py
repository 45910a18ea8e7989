"""A parsed turn, rendered back by its model family's chat template, is the text the model wrote.

The templates in ``templates/`` are written from the families' published chat-template
formats (Mistral v11+, Kimi K2, DeepSeek V3 / V3.1, Qwen3-Coder, GLM-4.5); the Hermes/Qwen3
one is the offline tokenizer's own. Each is put into the offline byte-level tokenizer, so
the test needs no download, and the conversation goes through ``tokenize_conversation``:
its trained spans are what a trainer would train on.

The tool-call sections follow the published rules where they decide the tokens: Kimi K2,
Mistral and DeepSeek print the arguments string and the id as given; GLM-4.5 prints a
string value as is and any other value as JSON (``true``, ``null``); Qwen3-Coder prints a
string as is, a mapping or list as JSON and any other value through Jinja's ``string``, so a
value the parser typed as a boolean or null re-renders as ``True`` / ``None`` whatever the
model wrote: exact when the model wrote it that way (as the template taught it), not for
``true`` / ``null`` (the last test pins that difference). What the test templates leave
out: system prompts and the tool declarations, reasoning blocks, the families' trimming and
line layout of content around the calls, GLM-4.7's layout without newlines, and any
role but user, assistant and tool.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from helpers import FIXTURES
from helpers.markup import (
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

from hermes_envgen.runtime.chat.template_render import renders_raw_arguments
from hermes_envgen.runtime.chat.trajectory import tokenize_conversation
from hermes_envgen.runtime.parsers import get_parser
from hermes_envgen.runtime.tools import REGISTRY

TEMPLATES = FIXTURES / "parser_templates"
TOOLS = [
    *(t.schema for t in REGISTRY.resolve(["terminal", "file"])),
    {
        "type": "function",
        "function": {
            "name": "wait",
            "parameters": {
                "type": "object",
                "properties": {"seconds": {"type": ["number", "null"]}},
            },
        },
    },
]
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
        "<parameter=content>\n{'k': 1}\nnull\n\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=patch>\n<parameter=path>\na.py\n</parameter>\n"
        "<parameter=old_text>\nTrue\n</parameter>\n<parameter=replace_all>\nTrue\n"
        "</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=wait>\n<parameter=seconds>\nNone\n</parameter>\n"
        "</function>\n</tool_call>",
    ),
    "glm45": (
        "glm45.jinja",
        "Running.\n<tool_call>terminal\n<arg_key>command</arg_key>\n<arg_value>ls</arg_value>\n"
        "<arg_key>timeout</arg_key>\n<arg_value>30</arg_value>\n</tool_call>\n"
        "<tool_call>write_file\n<arg_key>path</arg_key>\n<arg_value>007</arg_value>\n"
        '<arg_key>content</arg_key>\n<arg_value>{"a": 1}</arg_value>\n</tool_call>\n'
        "<tool_call>patch\n<arg_key>path</arg_key>\n<arg_value>a.py</arg_value>\n"
        "<arg_key>old_text</arg_key>\n<arg_value>true</arg_value>\n"
        "<arg_key>replace_all</arg_key>\n<arg_value>true</arg_value>\n</tool_call>\n"
        "<tool_call>wait\n<arg_key>seconds</arg_key>\n<arg_value>null</arg_value>\n</tool_call>",
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
        '{"path": "a.py", "old_text": "True", "replace_all": true}',
        '{"seconds": null}',
    ]


def test_qwen3_coder_re_renders_booleans_and_null_the_way_its_template_prints_them(
    offline_tokenizer,
) -> None:
    # The one place a re-rendered Qwen3-Coder turn is not the model's text: the template
    # prints a parsed true/null through `string`. A string parameter keeps "true" as written.
    template, _ = CASES["qwen3_coder"]
    tokenizer = family_tokenizer(offline_tokenizer, template)
    generated = (
        "<tool_call>\n<function=patch>\n<parameter=old_text>\ntrue\n</parameter>\n"
        "<parameter=replace_all>\ntrue\n</parameter>\n</function>\n</tool_call>\n"
        "<tool_call>\n<function=wait>\n<parameter=seconds>\nnull\n</parameter>\n"
        "</function>\n</tool_call>"
    )
    content, calls = get_parser("qwen3_coder").parse(generated, TOOLS)
    assert calls is not None
    messages = [
        {"role": "user", "content": "Go."},
        {"role": "assistant", "content": content or "", "tool_calls": calls},
    ]
    rendered = tokenize_conversation(tokenizer, messages, TOOLS).trained_spans
    as_printed = generated.replace("replace_all>\ntrue", "replace_all>\nTrue")
    assert rendered == [as_printed.replace("\nnull\n", "\nNone\n") + END]
