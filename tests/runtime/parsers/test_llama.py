"""Llama 3.x / 4 JSON tool-call parsing (the whole message is the call)."""

from __future__ import annotations

import json

import pytest

from hermes_envgen.runtime.parsers import get_parser


def summary(calls: list[dict] | None) -> list[tuple[str, dict]]:
    """(name, decoded arguments) per call."""
    assert calls is not None
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.fixture(params=["llama3_json", "llama4_json"])
def parser(request: pytest.FixtureRequest):
    """Both Llama parser names read the same markup."""
    return get_parser(request.param)


def test_one_call_with_parameters(parser) -> None:
    text = '{"name": "get_weather", "parameters": {"city": "Lima"}}'
    content, calls = parser.parse(text)
    assert content is None
    assert summary(calls) == [("get_weather", {"city": "Lima"})]


def test_python_tag_and_surrounding_whitespace(parser) -> None:
    text = '\n <|python_tag|>{"name": "f", "arguments": {"a": 1}}\n'
    content, calls = parser.parse(text)
    assert content is None
    assert summary(calls) == [("f", {"a": 1})]


def test_several_calls_separated_by_semicolons(parser) -> None:
    text = '{"name": "a", "parameters": {}}; {"name": "b", "parameters": {"x": [1]}};'
    assert summary(parser.parse(text)[1]) == [("a", {}), ("b", {"x": [1]})]


def test_multiline_and_tricky_values(parser) -> None:
    args = {"code": 'print("}{")\nx = {"k": 1}', "emoji": "🦙 ñ", "q": "a \\ b"}
    text = json.dumps({"name": "run", "parameters": args}, indent=2, ensure_ascii=False)
    calls = parser.parse(text)[1]
    assert summary(calls) == [("run", args)]
    assert "🦙" in calls[0]["function"]["arguments"]


def test_arguments_as_json_string(parser) -> None:
    text = json.dumps({"name": "a", "parameters": json.dumps({"n": 1.5})})
    assert summary(parser.parse(text)[1]) == [("a", {"n": 1.5})]


def test_an_object_without_parameters_is_an_answer(parser) -> None:
    # {"name": "now"} may as well be the answer "a thing named now": no call is guessed.
    text = '{"name": "now"}'
    outcome = parser.read(text)
    assert (outcome.content, outcome.tool_calls, outcome.error) == (text, None, None)


def test_empty_parameters_are_a_call(parser) -> None:
    calls = parser.parse('{"name": "now", "parameters": {}}')[1]
    assert calls is not None and calls[0]["function"]["arguments"] == "{}"


def test_a_cut_off_second_call_makes_the_message_unreadable(parser) -> None:
    text = '{"name": "a", "parameters": {}}; {"name": "b", "para'
    outcome = parser.read(text)
    assert (outcome.content, outcome.tool_calls) == (text, None)
    assert outcome.error == "the JSON call is cut off or is not valid JSON"


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ('{"name": "a", "parameters": {}}; see below', "text follows it"),
        ('{"name": "a", "parameters": {}}; [1]', "text follows it"),
        ('{"name": "a", "parameters": 5}', "is not a call"),
        ('{"name": "a", "parameters": {}}; {"id": 1}', "is not a call"),
        ("<|python_tag|>", "<|python_tag|> is not followed by a JSON call"),
        ("<|python_tag|>print('hi')", "<|python_tag|> is not followed by a JSON call"),
        ('<|python_tag|>{"answer": 42}', "is not a call"),
    ],
)
def test_a_message_opened_by_a_call_is_unreadable_when_the_rest_is_not_calls(
    parser, text: str, error: str
) -> None:
    # What follows may quote calls of other formats, which ``auto`` must then not run.
    outcome = parser.read(text)
    assert (outcome.content, outcome.tool_calls) == (text, None)
    assert outcome.error is not None and error in outcome.error


@pytest.mark.parametrize(
    "text",
    [
        'Here is the JSON: {"name": "a", "parameters": {}}',  # prose before
        '{"name": "a", "parameters": {}} is what I would call',  # prose after
        '{"name": "a", "parameters": {}}; and more',
        '{"answer": 42}',  # JSON, but not a call
        '{"name": "a", "parameters": {"x": 1}',  # truncated
        '{"name": "a", "parameters": [1]}',
        "[1, 2]",
        "",
        "no json here",
    ],
)
def test_not_a_call(parser, text: str) -> None:
    assert parser.parse(text) == (text, None)
