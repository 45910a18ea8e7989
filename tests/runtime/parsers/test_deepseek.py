"""DeepSeek V3 and V3.1 tool-call parsing (full-width ｜ and ▁ markers)."""

from __future__ import annotations

import json

import pytest

from hermes_envgen.runtime.parsers import get_parser

BEGIN, END = "<｜tool▁calls▁begin｜>", "<｜tool▁calls▁end｜>"
CALL, CALL_END, SEP = "<｜tool▁call▁begin｜>", "<｜tool▁call▁end｜>", "<｜tool▁sep｜>"
V3 = get_parser("deepseek_v3")
V31 = get_parser("deepseek_v3_1")


def summary(calls: list[dict] | None) -> list[tuple[str, dict]]:
    """(name, decoded arguments) per call."""
    assert calls is not None
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


def v3_call(name: str, args: str, close: bool = True) -> str:
    """One V3 call: type, separator, name, fenced JSON."""
    return f"{CALL}function{SEP}{name}\n```json\n{args}\n```" + (CALL_END if close else "")


def v31_call(name: str, args: str, close: bool = True) -> str:
    """One V3.1 call: name, separator, bare JSON."""
    return f"{CALL}{name}{SEP}{args}" + (CALL_END if close else "")


def test_v3_one_call() -> None:
    text = BEGIN + v3_call("get_weather", '{"city": "Seoul"}') + END
    content, calls = V3.parse(text)
    assert content is None
    assert summary(calls) == [("get_weather", {"city": "Seoul"})]


def test_v3_several_calls_with_prose_and_tricky_args() -> None:
    args = {"s": 'x "y" }{ \n ```not a fence end``` ✓'}
    text = (
        "Checking.\n"
        + BEGIN
        + v3_call("a", json.dumps(args, indent=2, ensure_ascii=False))
        + "\n"
        + v3_call("b", "{}")
        + END
        + "\nafter"
    )
    content, calls = V3.parse(text)
    assert content == "Checking.\n\nafter"
    assert summary(calls) == [("a", args), ("b", {})]


def test_v3_unclosed_last_call_and_section() -> None:
    text = BEGIN + v3_call("a", '{"x": 1}') + v3_call("b", '{"y": 2}', close=False)
    assert summary(V3.parse(text)[1]) == [("a", {"x": 1}), ("b", {"y": 2})]


def test_v3_without_fence_and_string_arguments() -> None:
    text = f'{BEGIN}{CALL}function{SEP}a\n"{{\\"k\\": 1}}"{CALL_END}{END}'
    assert V3.parse(text)[1] is None  # arguments must be an object, a JSON string is not
    text = f'{BEGIN}{CALL}function{SEP}a\n{{"k": 1}}{CALL_END}{END}'
    assert summary(V3.parse(text)[1]) == [("a", {"k": 1})]


def test_v31_one_and_several_calls() -> None:
    text = "ok " + BEGIN + v31_call("a", '{"x": "é\\n"}') + v31_call("b", "{}") + END
    content, calls = V31.parse(text)
    assert content == "ok"
    assert summary(calls) == [("a", {"x": "é\n"}), ("b", {})]


def test_v31_alias() -> None:
    text = BEGIN + v31_call("a", '{"n": {"m": [1, {"k": "}"}]}}') + END
    assert summary(get_parser("deepseek_v31").parse(text)[1]) == [
        ("a", {"n": {"m": [1, {"k": "}"}]}})
    ]


def test_v31_unclosed_last_call() -> None:
    text = BEGIN + v31_call("a", '{"x": 1}', close=False)
    assert summary(V31.parse(text)[1]) == [("a", {"x": 1})]


def test_versions_do_not_read_each_other() -> None:
    v3 = BEGIN + v3_call("a", "{}") + END
    v31 = BEGIN + v31_call("a", "{}") + END
    assert V31.parse(v3) == (v3, None)
    assert V3.parse(v31) == (v31, None)


@pytest.mark.parametrize(
    "text",
    [
        BEGIN + v31_call("a", '{"x": ') + END,
        BEGIN + v31_call("a b", "{}") + END,
        BEGIN + v31_call("", "{}") + END,
        BEGIN + v31_call("a", "[1]") + END,
        BEGIN + v31_call("a", "{} junk") + END,
        BEGIN + CALL + "a{}" + CALL_END + END,  # no separator
        BEGIN + END,
        "plain",
    ],
)
def test_v31_malformed(text: str) -> None:
    assert V31.parse(text) == (text, None)


@pytest.mark.parametrize(
    "text",
    [
        BEGIN + v3_call("a", '{"x": ') + END,
        BEGIN + v3_call("a", "{}").replace("function", "method") + END,
        BEGIN + v3_call("", "{}") + END,
        BEGIN + CALL + "function" + SEP + "a" + CALL_END + END,  # no arguments at all
    ],
)
def test_v3_malformed(text: str) -> None:
    assert V3.parse(text) == (text, None)


def test_a_call_after_a_malformed_one_is_not_run() -> None:
    # "b" may be quoted inside the arguments of "a", which are cut off.
    text = BEGIN + v31_call("a", '{"x": ') + v31_call("b", '{"y": 1}') + END
    outcome = V31.read(text)
    assert (outcome.content, outcome.tool_calls) == (text, None)
    assert outcome.error is not None and "could not be read" in outcome.error


@pytest.mark.parametrize(("parser", "render"), [(V3, v3_call), (V31, v31_call)])
def test_markers_quoted_inside_arguments(parser, render) -> None:
    args = {"doc": f"{CALL}x{SEP}{{}}{CALL_END}{END}", "n": 1}
    text = BEGIN + render("a", json.dumps(args, ensure_ascii=False)) + render("b", "{}") + END
    content, calls = parser.parse(text)
    assert content is None
    assert summary(calls) == [("a", args), ("b", {})]
