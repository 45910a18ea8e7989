"""Format auto-detection: ``auto`` finds the right parser from the markers."""

from __future__ import annotations

import json

import pytest

from hermes_envgen.runtime.parsers import ToolCallParser, detect_formats, get_parser
from hermes_envgen.runtime.parsers import auto as auto_module

AUTO = get_parser("auto")


def summary(calls: list[dict] | None) -> list[tuple[str, dict]]:
    """(name, decoded arguments) per call."""
    assert calls is not None
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


SAMPLES = {
    "hermes": 'Hi <tool_call>\n{"name": "f", "arguments": {"a": 1}}\n</tool_call>',
    "longcat": 'Hi <longcat_tool_call>{"name": "f", "arguments": {"a": 1}}</longcat_tool_call>',
    "mistral": 'Hi [TOOL_CALLS][{"name": "f", "arguments": {"a": 1}}]',
    "mistral_v11": 'Hi [TOOL_CALLS]f{"a": 1}',
    "llama3_json": '<|python_tag|>{"name": "f", "parameters": {"a": 1}}',
    "qwen3_coder": (
        "Hi <tool_call>\n<function=f>\n<parameter=a>\n1\n</parameter>\n</function>\n</tool_call>"
    ),
    "deepseek_v3": (
        "Hi <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>f\n```json\n"
        '{"a": 1}\n```<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    ),
    "deepseek_v3_1": (
        "Hi <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>f<｜tool▁sep｜>"
        '{"a": 1}<｜tool▁call▁end｜><｜tool▁calls▁end｜>'
    ),
    "kimi_k2": (
        "Hi <|tool_calls_section_begin|><|tool_call_begin|>functions.f:0"
        '<|tool_call_argument_begin|>{"a": 1}<|tool_call_end|><|tool_calls_section_end|>'
    ),
    "glm45": "Hi <tool_call>f\n<arg_key>a</arg_key>\n<arg_value>1</arg_value>\n</tool_call>",
    "glm47": "Hi <tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>",
}


# The schema the samples' tool is offered with: raw-text formats type "a" by it.
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "f",
            "parameters": {"type": "object", "properties": {"a": {"type": "integer"}}},
        },
    }
]


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_auto_reads_every_format(fmt: str) -> None:
    content, calls = AUTO.parse(SAMPLES[fmt], TOOLS)
    assert summary(calls) == [("f", {"a": 1})]
    assert content == (None if fmt == "llama3_json" else "Hi")


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_auto_matches_the_specific_parser(fmt: str) -> None:
    specific = get_parser(fmt.removesuffix("_v11"))
    assert summary(AUTO.parse(SAMPLES[fmt])[1]) == summary(specific.parse(SAMPLES[fmt])[1])
    assert summary(AUTO.parse(SAMPLES[fmt], TOOLS)[1]) == summary(
        specific.parse(SAMPLES[fmt], TOOLS)[1]
    )


def test_detection_order_is_most_specific_first() -> None:
    assert detect_formats(SAMPLES["qwen3_coder"])[0] == "qwen3_coder"
    assert detect_formats(SAMPLES["glm47"])[0] == "glm47"
    assert detect_formats(SAMPLES["hermes"])[0] == "hermes"
    assert detect_formats(SAMPLES["deepseek_v3"])[0] == "deepseek_v3"
    assert detect_formats(SAMPLES["deepseek_v3_1"])[0] == "deepseek_v3_1"
    assert detect_formats("plain") == []


def test_hermes_call_mentioning_other_markers_in_arguments() -> None:
    args = {"doc": "use <function=x> or <arg_key> or [TOOL_CALLS] here"}
    text = "<tool_call>" + json.dumps({"name": "write", "arguments": args}) + "</tool_call>"
    assert summary(AUTO.parse(text)[1]) == [("write", args)]


def test_glm_call_without_arguments_falls_back_from_hermes() -> None:
    assert summary(AUTO.parse("<tool_call>list_files</tool_call>")[1]) == [("list_files", {})]


def test_prose_with_json_is_not_a_llama_call() -> None:
    text = 'The object is {"name": "f", "parameters": {}}.'
    assert AUTO.parse(text) == (text, None)


@pytest.mark.parametrize(
    "text",
    [
        "",
        "just prose",
        "<tool_call>{broken</tool_call>",
        "[TOOL_CALLS]",
        '{"a": 1}',
        "<｜tool▁sep｜>",
    ],
)
def test_no_valid_call_returns_text_unchanged(text: str) -> None:
    result = AUTO.parse(text)
    assert result == (text, None)
    assert result[0] is text


@pytest.mark.parametrize(
    ("fmt", "quoted"),
    [
        ("kimi_k2", '<tool_call>{"name": "x", "arguments": {}}</tool_call>'),
        ("hermes", "<tool_call><function=x><parameter=p>1</parameter></function></tool_call>"),
        ("hermes", "[TOOL_CALLS]x{}"),
        ("llama3_json", '<tool_call>{"name": "x"}</tool_call> and <tool_call>x</tool_call>'),
        ("deepseek_v3_1", "<|tool_call_begin|>functions.x:0<|tool_call_argument_begin|>{}"),
        ("mistral", '<longcat_tool_call>{"name": "x"}</longcat_tool_call>'),
    ],
)
def test_markup_quoted_in_arguments_does_not_fool_detection(fmt: str, quoted: str) -> None:
    args = {"doc": quoted}
    sample = SAMPLES[fmt].replace('{"a": 1}', json.dumps(args))
    assert summary(AUTO.parse(sample)[1]) == [("f", args)]
    assert detect_formats(sample)[0] == fmt


def test_mixed_formats_give_no_phantom_call() -> None:
    # Read as GLM, "x" would be a call and the Qwen3-Coder call "f" left as text.
    text = "<tool_call>x</tool_call><tool_call><function=f></function></tool_call>"
    assert AUTO.parse(text) == (text, None)
    outcome = AUTO.read(text)
    assert (outcome.content, outcome.tool_calls) == (text, None)
    assert outcome.error == "<tool_call> is not followed by a function name (read as glm47)"


VICTIM = "<tool_call>victim</tool_call>"


@pytest.mark.parametrize(
    "text",
    [
        "[TOOL_CALLS][] " + VICTIM,
        '[TOOL_CALLS][{"foo": 1}] ' + VICTIM,
        '[TOOL_CALLS][{"name": "a", "arguments": 5}] ' + VICTIM,
        '[TOOL_CALLS][{"name": "a", "arguments": {}}, 7] ' + VICTIM,
        '{"name": "write_file", "parameters": {"path": "a"}}; see ' + VICTIM,
        '{"name": "write_file", "parameters": {"path": "a"}}; ' + VICTIM,
        '{"name": "write_file", "parameters": "x"} ' + VICTIM,
        "<|python_tag|>print(1) " + VICTIM,
        '<|python_tag|>{"a": 1} ' + VICTIM,
    ],
)
def test_a_format_that_reads_no_call_does_not_hand_over_to_a_later_one(text: str) -> None:
    # The first format's markup opens a call it cannot read: "victim" may be inside it.
    outcome = AUTO.read(text)
    assert (outcome.content, outcome.tool_calls) == (text, None)
    assert outcome.error is not None


class _SilentParser(ToolCallParser):
    """A format that sees its marker and reports neither a call nor an error."""

    name = "silent"
    markers = ("[TOOL_CALLS]",)

    def _parse(self, text: str, schemas: dict) -> tuple[str, None]:
        return text, None


def test_a_silent_candidate_is_an_unreadable_call(monkeypatch: pytest.MonkeyPatch) -> None:
    # The backstop for any parser that finds its own markup but returns nothing.
    monkeypatch.setattr(auto_module, "_MISTRAL", _SilentParser())
    text = "[TOOL_CALLS]anything <tool_call>victim</tool_call>"
    outcome = AUTO.read(text)
    assert (outcome.content, outcome.tool_calls) == (text, None)
    assert outcome.error == (
        "the text holds [TOOL_CALLS] but no call could be read from it (read as silent)"
    )


def test_llama_reading_nothing_still_hands_over() -> None:
    # "{" is no marker of a call: JSON prose before a real call is not a Llama call.
    text = '{"a": 1} then <tool_call>\n{"name": "f", "arguments": {}}\n</tool_call>'
    assert summary(AUTO.parse(text)[1]) == [("f", {})]
