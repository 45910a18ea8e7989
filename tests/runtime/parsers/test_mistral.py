"""Mistral ``[TOOL_CALLS]`` parsing: JSON-array (pre-v11) and ``name{args}`` (v11+) forms."""

from __future__ import annotations

import json
import re

import pytest

from hermes_envgen.runtime.parsers import get_parser

P = get_parser("mistral")


def summary(calls: list[dict] | None) -> list[tuple[str, dict]]:
    """(name, decoded arguments) per call."""
    assert calls is not None
    for call in calls:
        # Mistral's templates raise on any id but 9 alphanumeric characters.
        assert call["type"] == "function" and re.fullmatch(r"[A-Za-z0-9]{9}", call["id"])
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


def test_array_one_call() -> None:
    content, calls = P.parse(
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Rome"}}]'
    )
    assert content is None
    assert summary(calls) == [("get_weather", {"city": "Rome"})]


def test_array_several_calls_after_prose() -> None:
    text = (
        "I'll check both.\n[TOOL_CALLS][\n"
        '  {"name": "a", "arguments": {"x": 1}},\n'
        '  {"name": "b", "arguments": {"y": "two\\nlines"}}\n]'
    )
    content, calls = P.parse(text)
    assert content == "I'll check both."
    assert summary(calls) == [("a", {"x": 1}), ("b", {"y": "two\nlines"})]


def test_truncated_array_is_unreadable() -> None:
    # Anything after broken JSON may be inside one of its strings.
    text = '[TOOL_CALLS][{"name": "a", "arguments": {}}, {"name": "b", "argu'
    outcome = P.read(text)
    assert (outcome.content, outcome.tool_calls) == (text, None)
    assert outcome.error == "the [TOOL_CALLS] array is not valid JSON"


def test_array_without_its_closing_bracket_keeps_complete_elements() -> None:
    text = '[TOOL_CALLS][{"name": "a", "arguments": {}}'
    assert summary(P.parse(text)[1]) == [("a", {})]


@pytest.mark.parametrize(
    "text",
    [
        '[TOOL_CALLS][{"arguments": {}}, 5, {"name": "b", "arguments": "{\\"k\\": 1}"}]',
        '[TOOL_CALLS][{"name": "a", "arguments": {}}, {"foo": 1}]',
        '[TOOL_CALLS][{"name": "a", "arguments": 5}]',
    ],
)
def test_an_array_element_that_is_not_a_call_makes_the_array_unreadable(text: str) -> None:
    # Skipping it would run the calls around one the model meant and cannot have.
    outcome = P.read(text)
    assert (outcome.content, outcome.tool_calls) == (text, None)
    assert outcome.error is not None and "is not a call" in outcome.error


@pytest.mark.parametrize("text", ["[TOOL_CALLS][]", "[TOOL_CALLS] [ ", "Done.[TOOL_CALLS][]"])
def test_an_array_without_a_call_is_unreadable(text: str) -> None:
    outcome = P.read(text)
    assert (outcome.content, outcome.tool_calls) == (text, None)
    assert outcome.error == "the [TOOL_CALLS] array holds no call"


def test_bare_object_after_marker() -> None:
    assert summary(P.parse('[TOOL_CALLS] {"name": "a", "arguments": {"z": null}}')[1]) == [
        ("a", {"z": None})
    ]


def test_v11_one_call() -> None:
    content, calls = P.parse('Sure.[TOOL_CALLS]get_weather{"city": "Oslo", "unit": "C"}')
    assert content == "Sure."
    assert summary(calls) == [("get_weather", {"city": "Oslo", "unit": "C"})]


def test_v11_several_calls() -> None:
    text = '[TOOL_CALLS]a{"x": 1}[TOOL_CALLS]b{"code": "if x: {\\n  y\\n}"}[TOOL_CALLS]c{}'
    assert summary(P.parse(text)[1]) == [
        ("a", {"x": 1}),
        ("b", {"code": "if x: {\n  y\n}"}),
        ("c", {}),
    ]


def test_v13_args_and_call_id_markers() -> None:
    text = '[TOOL_CALLS]a[ARGS]{"x": 1}[TOOL_CALLS]b[CALL_ID]abc123XYZ[ARGS]{"y": 2}'
    assert summary(P.parse(text)[1]) == [("a", {"x": 1}), ("b", {"y": 2})]


def test_v11_multiline_unicode_quotes_braces() -> None:
    args = {"msg": 'héllo "wörld" {not a brace} 日本', "n": [1, {"d": {}}]}
    text = "[TOOL_CALLS]send" + json.dumps(args, indent=2, ensure_ascii=False)
    calls = P.parse(text)[1]
    assert summary(calls) == [("send", args)]
    assert "日本" in calls[0]["function"]["arguments"]


def test_arguments_as_json_string_in_array() -> None:
    text = "[TOOL_CALLS]" + json.dumps([{"name": "a", "arguments": json.dumps({"q": "ü"})}])
    assert summary(P.parse(text)[1]) == [("a", {"q": "ü"})]


def test_missing_arguments_in_array() -> None:
    calls = P.parse('[TOOL_CALLS][{"name": "ping"}]')[1]
    assert calls is not None and calls[0]["function"]["arguments"] == "{}"


@pytest.mark.parametrize(
    "text",
    [
        "[TOOL_CALLS]",
        "[TOOL_CALLS]   ",
        '[TOOL_CALLS]get_weather{"city": ',
        "[TOOL_CALLS]get weather{}",  # a name cannot contain spaces
        '[TOOL_CALLS]{"city": "x"}',  # no name
        "[TOOL_CALLS][{]",
        '[TOOL_CALLS][{"name": "a", "arguments": [1]}]',
        "[TOOL_CALLS]a[1, 2]",
        "Just an answer with no calls.",
        '{"name": "a", "arguments": {}}',
    ],
)
def test_malformed_or_absent_returns_text_unchanged(text: str) -> None:
    assert P.parse(text) == (text, None)


def test_a_call_after_a_malformed_one_is_not_run() -> None:
    # "ok" may be quoted inside the cut-off arguments of "broken".
    text = 'pre [TOOL_CALLS]broken{"x": [TOOL_CALLS]ok{"y": 1}'
    outcome = P.read(text)
    assert (outcome.content, outcome.tool_calls) == (text, None)
    assert outcome.error == "the call after [TOOL_CALLS] at character 4 could not be read"


def test_marker_quoted_inside_arguments() -> None:
    args = {"doc": 'say [TOOL_CALLS]x{"y": 1} to call'}
    v11 = "[TOOL_CALLS]a" + json.dumps(args) + '[TOOL_CALLS]b{"z": 2}'
    assert summary(P.parse(v11)[1]) == [("a", args), ("b", {"z": 2})]
    array = "[TOOL_CALLS]" + json.dumps([{"name": "a", "arguments": args}, {"name": "b"}])
    assert summary(P.parse(array)[1]) == [("a", args), ("b", {})]
