"""Hermes-style ``<tool_call>{json}</tool_call>`` parsing (hermes, qwen, longcat)."""

from __future__ import annotations

import json
import re

import pytest

from hermes_envgen.runtime.parsers import get_parser

TAGS = {
    "hermes": ("<tool_call>", "</tool_call>"),
    "qwen": ("<tool_call>", "</tool_call>"),
    "longcat": ("<longcat_tool_call>", "</longcat_tool_call>"),
}
ID = re.compile(r"call_[0-9a-f]{24}")


def summary(calls: list[dict] | None) -> list[tuple[str, dict]]:
    """(name, decoded arguments) per call, after checking the OpenAI shape."""
    assert calls is not None
    out = []
    for call in calls:
        assert set(call) == {"id", "type", "function"}
        assert ID.fullmatch(call["id"])
        assert call["type"] == "function"
        assert set(call["function"]) == {"name", "arguments"}
        assert isinstance(call["function"]["arguments"], str)
        out.append((call["function"]["name"], json.loads(call["function"]["arguments"])))
    return out


@pytest.fixture(params=sorted(TAGS))
def fmt(request: pytest.FixtureRequest):
    """(parser, wrap) where wrap(body) puts a body between the parser's tags."""
    name = request.param
    open_tag, close_tag = TAGS[name]
    return get_parser(name), lambda body, close=True: open_tag + body + (close_tag if close else "")


def test_one_call(fmt) -> None:
    parser, wrap = fmt
    text = wrap('{"name": "get_weather", "arguments": {"city": "Paris"}}')
    content, calls = parser.parse(text)
    assert content is None
    assert summary(calls) == [("get_weather", {"city": "Paris"})]


def test_several_calls_between_prose(fmt) -> None:
    parser, wrap = fmt
    text = (
        "Let me look both up.\n"
        + wrap('{"name": "a", "arguments": {"x": 1}}')
        + "\nand then\n"
        + wrap('{"name": "b", "arguments": {"y": [1, 2]}}')
        + wrap('{"name": "c", "arguments": {}}')
        + "\nDone."
    )
    content, calls = parser.parse(text)
    assert summary(calls) == [("a", {"x": 1}), ("b", {"y": [1, 2]}), ("c", {})]
    assert content == "Let me look both up.\n\nand then\n\nDone."


def test_multiline_pretty_printed_json(fmt) -> None:
    parser, wrap = fmt
    body = '\n{\n  "name": "write",\n  "arguments": {\n    "path": "a.txt",\n    "n": 2\n  }\n}\n'
    assert summary(parser.parse(wrap(body))[1]) == [("write", {"path": "a.txt", "n": 2})]


def test_unclosed_last_tag_counts(fmt) -> None:
    parser, wrap = fmt
    text = "thinking " + wrap('{"name": "a", "arguments": {"x": 1}}') + " "
    text += wrap('{"name": "b", "arguments": {"q": "}"}}', close=False)
    content, calls = parser.parse(text)
    assert summary(calls) == [("a", {"x": 1}), ("b", {"q": "}"})]
    assert content == "thinking"


def test_unclosed_tag_followed_by_another_call(fmt) -> None:
    parser, wrap = fmt
    text = wrap('{"name": "a", "arguments": {}}', close=False) + wrap('{"name": "b"}')
    assert summary(parser.parse(text)[1]) == [("a", {}), ("b", {})]


def test_unclosed_truncated_json_is_no_call(fmt) -> None:
    parser, wrap = fmt
    text = "x " + wrap('{"name": "a", "arguments": {"x": ', close=False)
    assert parser.parse(text) == (text, None)


def test_tricky_argument_values(fmt) -> None:
    parser, wrap = fmt
    args = {
        "code": 'def f():\n    return {"a": [1, {"b": "}"}]}\n',
        "quote": 'He said "hi" and \\ left',
        "unicode": "héllo – 世界 🌍",
        "braces": "{{}}}{",
    }
    text = wrap(json.dumps({"name": "run", "arguments": args}))
    content, calls = parser.parse(text)
    assert content is None
    assert summary(calls) == [("run", args)]
    # The arguments are the model's own text (here ASCII-escaped), not a re-serialisation.
    assert calls[0]["function"]["arguments"] == json.dumps(args)


def test_raw_unicode_and_raw_newline_inside_string(fmt) -> None:
    parser, wrap = fmt
    text = wrap('{"name": "echo", "arguments": {"s": "line1\nline2\tend ü"}}')
    assert summary(parser.parse(text)[1]) == [("echo", {"s": "line1\nline2\tend ü"})]


def test_arguments_given_as_json_string(fmt) -> None:
    parser, wrap = fmt
    inner = json.dumps({"city": "Zürich", "days": 3})
    _, calls = parser.parse(wrap(json.dumps({"name": "w", "arguments": inner})))
    assert summary(calls) == [("w", {"city": "Zürich", "days": 3})]
    assert calls[0]["function"]["arguments"] == '{"city": "Zürich", "days": 3}'


def test_missing_or_empty_arguments_become_empty_object(fmt) -> None:
    parser, wrap = fmt
    text = wrap('{"name": "a"}') + wrap('{"name": "b", "arguments": ""}')
    calls = parser.parse(text)[1]
    assert [c["function"]["arguments"] for c in calls] == ["{}", "{}"]


def test_parameters_key_is_accepted(fmt) -> None:
    parser, wrap = fmt
    assert summary(parser.parse(wrap('{"name": "a", "parameters": {"k": 1}}'))[1]) == [
        ("a", {"k": 1})
    ]


@pytest.mark.parametrize(
    "body",
    [
        '{"name": "a", "arguments": {"x": 1}',  # missing brace
        "{'name': 'a'}",  # Python dict, not JSON
        '{"arguments": {"x": 1}}',  # no name
        '{"name": 3, "arguments": {}}',  # name not a string
        '{"name": "   ", "arguments": {}}',  # blank name
        '{"name": "a", "arguments": [1, 2]}',  # arguments not an object
        '{"name": "a", "arguments": "not json"}',
        '{"name": "a", "arguments": "[1]"}',
        '{"name": "a", "arguments": {"x": NaN}}',  # not standard JSON
        '{"name": "a", "arguments": {}}}',  # junk before the closing tag
        '["name", "a"]',
        "",
    ],
)
def test_a_malformed_call_makes_the_text_unreadable(fmt, body: str) -> None:
    parser, wrap = fmt
    bad = "before " + wrap(body) + " after"
    assert parser.parse(bad) == (bad, None)
    # A call after the broken one may be quoted inside its arguments: it is not run.
    good = wrap('{"name": "ok", "arguments": {}}')
    outcome = parser.read(bad + good)
    assert (outcome.content, outcome.tool_calls) == (bad + good, None)
    assert outcome.error is not None and parser.call_open.strip("<>") in outcome.error


def test_no_call_returns_text_unchanged(fmt) -> None:
    parser, _ = fmt
    for text in ["", "   ", "plain answer\n", '{"name": "a", "arguments": {}}', "</tool_call>"]:
        result = parser.parse(text)
        assert result == (text, None)
        assert result[0] is text


def test_tags_quoted_inside_arguments_do_not_cut_the_call(fmt) -> None:
    parser, wrap = fmt
    open_tag, close_tag = TAGS[parser.name]
    args = {"doc": f"write {open_tag}{{...}}{close_tag} to call a tool", "end": close_tag}
    text = "x " + wrap(json.dumps({"name": "a", "arguments": args})) + wrap('{"name": "b"}') + " y"
    content, calls = parser.parse(text)
    assert summary(calls) == [("a", args), ("b", {})]
    assert content == "x  y"


def test_qwen_and_hermes_read_the_same_markup() -> None:
    text = 'x<tool_call>{"name": "a", "arguments": {"b": 1}}</tool_call>'
    assert summary(get_parser("qwen").parse(text)[1]) == summary(
        get_parser("hermes").parse(text)[1]
    )


def test_hermes_ignores_longcat_tags_and_vice_versa() -> None:
    longcat = '<longcat_tool_call>{"name": "a"}</longcat_tool_call>'
    hermes = '<tool_call>{"name": "a"}</tool_call>'
    assert get_parser("hermes").parse(longcat) == (longcat, None)
    assert get_parser("longcat").parse(hermes) == (hermes, None)


def test_ids_are_unique() -> None:
    text = '<tool_call>{"name": "a"}</tool_call>' * 50
    calls = get_parser("hermes").parse(text)[1]
    assert calls is not None
    assert len({c["id"] for c in calls}) == 50
