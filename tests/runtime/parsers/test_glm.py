"""GLM-4.5 / 4.7 ``<arg_key>``/``<arg_value>`` tool-call parsing."""

from __future__ import annotations

import json

import pytest

from hermes_envgen.runtime.parsers import get_parser


def summary(calls: list[dict] | None) -> list[tuple[str, dict]]:
    """(name, decoded arguments) per call."""
    assert calls is not None
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


def call45(name: str, **args: str) -> str:
    """GLM-4.5 layout: one part per line."""
    pairs = "".join(
        f"<arg_key>{k}</arg_key>\n<arg_value>{v}</arg_value>\n" for k, v in args.items()
    )
    return f"<tool_call>{name}\n{pairs}</tool_call>"


def call47(name: str, **args: str) -> str:
    """GLM-4.7 layout: no newlines between parts."""
    pairs = "".join(f"<arg_key>{k}</arg_key><arg_value>{v}</arg_value>" for k, v in args.items())
    return f"<tool_call>{name}{pairs}</tool_call>"


@pytest.fixture(params=["glm45", "glm47"])
def parser(request: pytest.FixtureRequest):
    """Both GLM parsers accept both layouts."""
    return get_parser(request.param)


@pytest.mark.parametrize("render", [call45, call47])
def test_one_call_typed_values(parser, render) -> None:
    text = render("get_weather", city="Berlin", days="2", hourly="false", extra='{"a": [1]}')
    content, calls = parser.parse(text)
    assert content is None
    assert summary(calls) == [
        ("get_weather", {"city": "Berlin", "days": 2, "hourly": False, "extra": {"a": [1]}})
    ]


def test_several_calls_between_prose(parser) -> None:
    text = "First.\n" + call45("a", x="1") + "\nSecond.\n" + call47("b", y="ÿ ✓") + "\nEnd."
    content, calls = parser.parse(text)
    assert content == "First.\n\nSecond.\n\nEnd."
    assert summary(calls) == [("a", {"x": 1}), ("b", {"y": "ÿ ✓"})]


def test_multiline_value_with_braces_and_quotes(parser) -> None:
    code = 'def f():\n    return {"}": "{"}\n'
    text = call45("write", path="a.py", content="\n" + code + "\n")
    # GLM's template adds no layout inside <arg_value>: the value is exactly what was written.
    assert summary(parser.parse(text)[1]) == [
        ("write", {"path": "a.py", "content": "\n" + code + "\n"})
    ]


def test_no_arguments(parser) -> None:
    assert summary(parser.parse("<tool_call>list_files</tool_call>")[1]) == [("list_files", {})]


def test_a_call_without_its_closing_tag_is_cut_off(parser) -> None:
    # The template always writes </tool_call>: without it more arguments may have followed.
    text = (
        "<tool_call>list_files</tool_call>\n"
        "<tool_call>read\n<arg_key>p</arg_key>\n<arg_value>x</arg_value>"
    )
    outcome = parser.read(text)
    assert (outcome.content, outcome.tool_calls) == (text, None)
    assert outcome.error == "the call to read is cut off before </tool_call>"


def test_string_that_is_quoted_json_stays_verbatim(parser) -> None:
    assert summary(parser.parse(call47("f", s='"x"', z="007"))[1]) == [
        ("f", {"s": '"x"', "z": "007"})
    ]


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>f\n<arg_key>a</arg_key>\n<arg_value>1",  # value cut off
        "<tool_call>f\n<arg_key>a</arg_key>\n</tool_call>",  # key without value
        "<tool_call>f\n<arg_key></arg_key><arg_value>1</arg_value></tool_call>",  # empty key
        "<tool_call>two words\n</tool_call>",
        "<tool_call>f\n<arg_key>a</arg_key><arg_value>1</arg_value> junk </tool_call>",
        '<tool_call>{"name": "f", "arguments": {}}</tool_call>',  # Hermes JSON
        "<tool_call></tool_call>",
        "plain text",
    ],
)
def test_malformed_returns_text_unchanged(parser, text: str) -> None:
    assert parser.parse(text) == (text, None)


def test_a_call_after_an_unreadable_one_is_not_run(parser) -> None:
    bad = "<tool_call>f\n<arg_key>a</arg_key>\n</tool_call>"
    outcome = parser.read(bad + call45("g", k="v"))
    assert (outcome.content, outcome.tool_calls) == (bad + call45("g", k="v"), None)
    assert outcome.error == "the argument a of f has no <arg_value>"


def test_a_call_written_inside_a_value_is_not_run(parser) -> None:
    text = (
        "<tool_call>w<arg_key>c</arg_key><arg_value><tool_call>b</tool_call></arg_value>"
        "</tool_call>"
    )
    assert summary(parser.parse(text)[1]) == [("w", {"c": "<tool_call>b</tool_call>"})]
    quoted = "<tool_call>rm\n<arg_key>p</arg_key>\n<arg_value>/</arg_value>\n</tool_call>"
    assert summary(parser.parse(call45("write", content=quoted))[1]) == [
        ("write", {"content": quoted})
    ]
