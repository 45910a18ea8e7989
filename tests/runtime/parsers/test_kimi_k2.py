"""Kimi K2 tool-call section parsing."""

from __future__ import annotations

import json

import pytest

from hermes_envgen.runtime.parsers import get_parser
from hermes_envgen.runtime.parsers.kimi_k2 import name_from_call_id

BEGIN, END = "<|tool_calls_section_begin|>", "<|tool_calls_section_end|>"
P = get_parser("kimi_k2")


def summary(calls: list[dict] | None) -> list[tuple[str, dict]]:
    """(name, decoded arguments) per call."""
    assert calls is not None
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


def call(call_id: str, args: str, close: bool = True) -> str:
    """One Kimi call."""
    text = f"<|tool_call_begin|>{call_id}<|tool_call_argument_begin|>{args}"
    return text + ("<|tool_call_end|>" if close else "")


def test_one_call() -> None:
    text = BEGIN + call("functions.get_weather:0", '{"city": "Tokyo"}') + END
    content, calls = P.parse(text)
    assert content is None
    assert summary(calls) == [("get_weather", {"city": "Tokyo"})]
    # Kimi's template prints the id back as the call's header: it is what the model wrote.
    assert calls is not None and calls[0]["id"] == "functions.get_weather:0"


def test_several_calls_prose_and_tricky_args() -> None:
    args = {"text": '多行\n"quoted" {braces} \\ end', "n": -1.25e3}
    text = (
        "I will call two tools.\n"
        + BEGIN
        + call("functions.a:0", json.dumps(args, ensure_ascii=False, indent=1))
        + "\n"
        + call("functions.b:1", "{}")
        + END
        + "\nthanks"
    )
    content, calls = P.parse(text)
    assert content == "I will call two tools.\n\nthanks"
    assert summary(calls) == [("a", args), ("b", {})]


def test_unclosed_last_call_and_missing_section_end() -> None:
    text = (
        BEGIN + call("functions.a:0", '{"x": 1}') + call("functions.b:1", '{"y": 2}', close=False)
    )
    assert summary(P.parse(text)[1]) == [("a", {"x": 1}), ("b", {"y": 2})]


def test_singular_section_markers_are_removed_from_content() -> None:
    text = (
        "hi <|tool_call_section_begin|>" + call("functions.a:3", "{}") + "<|tool_call_section_end|>"
    )
    assert P.parse(text)[0] == "hi"


@pytest.mark.parametrize(
    ("call_id", "name"),
    [
        ("functions.get_weather:0", "get_weather"),
        ("get_weather:12", "get_weather"),
        (" functions.ns.tool:2 ", "ns.tool"),
    ],
)
def test_name_from_call_id(call_id: str, name: str) -> None:
    assert name_from_call_id(call_id) == name


@pytest.mark.parametrize(
    "call_id",
    ["functions.get_weather", "functions.get_weather.0", "get_weather.0", "0", "functions.a:b"],
)
def test_an_id_that_is_not_name_and_index_is_an_unreadable_call(call_id: str) -> None:
    # Read as a name, "get_weather.0" or "0" would call a tool the model never named.
    text = BEGIN + call(call_id, '{"city": "Paris"}') + END
    outcome = P.read(text)
    assert (outcome.content, outcome.tool_calls) == (text, None)
    assert outcome.error == f"the call id {call_id!r} is not functions.NAME:INDEX"


@pytest.mark.parametrize(
    "text",
    [
        BEGIN + call("functions.a:0", '{"x": ') + END,
        BEGIN + call("functions.a:0", "[1, 2]") + END,
        BEGIN + call("functions.:0", "{}") + END,
        BEGIN + call("functions.bad name:0", "{}") + END,
        BEGIN + "<|tool_call_begin|>functions.a:0{}<|tool_call_end|>" + END,  # no argument marker
        BEGIN + END,
        "no calls",
    ],
)
def test_malformed_returns_text_unchanged(text: str) -> None:
    assert P.parse(text) == (text, None)


def test_a_call_after_a_malformed_one_is_not_run() -> None:
    text = BEGIN + call("functions.a:0", "{bad}") + call("functions.b:1", '{"ok": true}') + END
    outcome = P.read(text)
    assert (outcome.content, outcome.tool_calls) == (text, None)
    assert outcome.error == (
        f"the call opened by <|tool_call_begin|> at character {len(BEGIN)} could not be read"
    )


def test_markers_quoted_inside_arguments() -> None:
    args = {"doc": f"<|tool_call_end|>{END}<|tool_call_begin|>functions.x:9"}
    text = BEGIN + call("functions.a:0", json.dumps(args)) + call("functions.b:1", "{}") + END
    content, calls = P.parse(text)
    assert content is None
    assert summary(calls) == [("a", args), ("b", {})]
