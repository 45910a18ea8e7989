"""A conversation with tool calls, its tools, and the tokenizers of the model families the
chat-template tests render it with."""

from __future__ import annotations

from pathlib import Path

from transformers import AutoTokenizer

from helpers import CHAT_TEMPLATES, FIXTURES
from hermes_envgen.runtime.chat.template_data import BUILTIN_TEMPLATES
from hermes_envgen.testing.tokenizer import build_offline_tokenizer

TEMPLATES = CHAT_TEMPLATES


PARSER_TEMPLATES = FIXTURES / "parser_templates"


LLAMA_TOKENS = ("<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>")


MISTRAL_TOKENS = ("<s>", "</s>", "[INST]", "[/INST]", "[TOOL_CALLS]", "[TOOL_RESULTS]")


# name -> (template text, special tokens, end-of-turn token)
FAMILIES = {
    "hermes (built-in)": (BUILTIN_TEMPLATES["hermes"], (), "<|im_end|>"),
    "chatml-tools (built-in)": (BUILTIN_TEMPLATES["chatml-tools"], (), "<|im_end|>"),
    "qwen2.5": ((TEMPLATES / "qwen2_5.jinja").read_text(), (), "<|im_end|>"),
    "llama3.1": ((TEMPLATES / "llama3_1.jinja").read_text(), LLAMA_TOKENS, "<|eot_id|>"),
    "mistral v0.3": ((TEMPLATES / "mistral_v3.jinja").read_text(), MISTRAL_TOKENS, "</s>"),
    "smollm2 (plain ChatML)": ((TEMPLATES / "smollm2.jinja").read_text(), (), "<|im_end|>"),
    # Arguments as one element per key, not as JSON.
    "qwen3-coder": ((PARSER_TEMPLATES / "qwen3_coder.jinja").read_text(), (), "<|im_end|>"),
    "glm-4.5": ((PARSER_TEMPLATES / "glm45.jinja").read_text(), (), "<|im_end|>"),
    # The call's name only in its id, functions.NAME:IDX.
    "kimi k2": ((PARSER_TEMPLATES / "kimi_k2.jinja").read_text(), (), "<|im_end|>"),
    "reasoning on the last turn": (
        (TEMPLATES / "reasoning_last.jinja").read_text(),
        (),
        "<|im_end|>",
    ),
}


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": name,
            "description": f"The {name} tool.",
            "parameters": {"type": "object", "properties": {"path": {"type": "string"}}},
        },
    }
    for name in ("read_file", "write_file")
]


def call(call_id: str, name: str, arguments: str) -> dict:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


# Arguments spaced as a llama.cpp server returns them, not as json.dumps writes them.
CONVERSATION = [
    {"role": "user", "content": "Copy notes.txt to copy.txt."},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [call("call00001", "read_file", '{ "path": "notes.txt" }')],
    },
    {"role": "tool", "tool_call_id": "call00001", "content": "hello “world”"},
    {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            call("call00002", "write_file", '{ "path": "copy.txt", "content": "hello “world”" }')
        ],
    },
    {"role": "tool", "tool_call_id": "call00002", "content": "ok"},
    {"role": "assistant", "content": "Copied."},
]


def family_tokenizer(tmp_path: Path, family: str):
    template, specials, eos = FAMILIES[family]
    directory = build_offline_tokenizer(tmp_path / "tok", template, specials, eos)
    return AutoTokenizer.from_pretrained(str(directory))
