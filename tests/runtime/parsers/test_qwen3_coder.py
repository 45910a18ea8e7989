"""Qwen3-Coder ``<function=...><parameter=...>`` parsing."""

from __future__ import annotations

import json

import pytest

from hermes_envgen.runtime.parsers import get_parser
from hermes_envgen.runtime.parsers.schema import PYTHON_LITERAL_BUDGET

P = get_parser("qwen3_coder")


def summary(calls: list[dict] | None) -> list[tuple[str, dict]]:
    """(name, decoded arguments) per call."""
    assert calls is not None
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


def call(name: str, **params: str) -> str:
    """Render one call the way the Qwen3-Coder chat template does."""
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def tools(name: str, **types: str | list[str]) -> list[dict]:
    """One OpenAI tool definition whose parameters have the given JSON types."""
    properties = {key: {"type": kind} for key, kind in types.items()}
    return [
        {
            "type": "function",
            "function": {"name": name, "parameters": {"type": "object", "properties": properties}},
        }
    ]


def test_one_call_typed_values() -> None:
    text = call("f", city="Paris", days="3", ratio="0.5", ok="true", none="null", xs="[1, 2]")
    schema = tools(
        "f",
        city="string",
        days="integer",
        ratio="number",
        ok="boolean",
        none=["integer", "null"],
        xs="array",
    )
    content, calls = P.parse(text, schema)
    assert content is None
    assert summary(calls) == [
        ("f", {"city": "Paris", "days": 3, "ratio": 0.5, "ok": True, "none": None, "xs": [1, 2]})
    ]


def test_without_a_schema_every_value_stays_text() -> None:
    text = call("f", days="3", ok="true", none="null")
    assert summary(P.parse(text)[1]) == [("f", {"days": "3", "ok": "true", "none": "null"})]


def test_object_value_and_strings_that_look_almost_like_json() -> None:
    text = call("f", obj='{"a": {"b": [1]}}', quoted='"hi"', zip="02134", nan="NaN", big="1e999")
    schema = tools("f", obj="object", quoted="string", zip="string", nan="number", big="number")
    assert summary(P.parse(text, schema)[1]) == [
        (
            "f",
            {
                "obj": {"a": {"b": [1]}},
                "quoted": '"hi"',
                "zip": "02134",
                "nan": "NaN",
                "big": "1e999",
            },
        )
    ]


def test_multiline_value_keeps_inner_newlines_and_strips_one_outer() -> None:
    code = "\n\ndef f():\n    return {'}': 1}  # </function\n\n"
    text = (
        f"<tool_call><function=write><parameter=code>\n{code}\n</parameter></function></tool_call>"
    )
    assert summary(P.parse(text)[1]) == [("write", {"code": code})]


def test_several_calls_between_prose_with_unicode() -> None:
    text = "Plan: ✓\n" + call("a", q="naïve 日本") + "\nthen\n" + call("b") + "\nbye"
    content, calls = P.parse(text)
    assert content == "Plan: ✓\n\nthen\n\nbye"
    assert summary(calls) == [("a", {"q": "naïve 日本"}), ("b", {})]
    assert "日本" in calls[0]["function"]["arguments"]


def test_unclosed_tool_call_tag_counts_when_function_is_closed() -> None:
    text = (
        call("a", x="1")
        + "\n<tool_call>\n<function=b>\n<parameter=y>\n2\n</parameter>\n</function>"
    )
    assert summary(P.parse(text)[1]) == [("a", {"x": "1"}), ("b", {"y": "2"})]


def test_missing_parameter_close_is_an_unreadable_call() -> None:
    # Upstream ends "a" at the next <parameter=; but "a" may as well hold that markup.
    text = (
        "<tool_call><function=f><parameter=a>1<parameter=b>x\n</parameter></function></tool_call>"
    )
    outcome = P.read(text)
    assert (outcome.content, outcome.tool_calls) == (text, None)
    assert outcome.error == "the value of a in the call to f has no matching </parameter>"


def test_compact_form_without_newlines() -> None:
    text = (
        '<tool_call><function=f><parameter=s>a "quoted" {brace}</parameter></function></tool_call>'
    )
    assert summary(P.parse(text)[1]) == [("f", {"s": 'a "quoted" {brace}'})]


@pytest.mark.parametrize(
    "text",
    [
        "<tool_call>\n<function=f>\n<parameter=a>\n1\n",  # cut off: no </function>
        "<tool_call><function=>\n</function></tool_call>",  # no name
        "<tool_call><function=two words></function></tool_call>",
        "<tool_call><function=f>stray text<parameter=a>1</parameter></function></tool_call>",
        "<tool_call><function=f><parameter=>1</parameter></function></tool_call>",
        '<tool_call>{"name": "f", "arguments": {}}</tool_call>',  # Hermes, not Qwen3-Coder
        "<function=f>\n<parameter=a>1</parameter>",  # bare block, cut off: no </function>
        "nothing to see",
    ],
)
def test_malformed_or_absent_returns_text_unchanged(text: str) -> None:
    assert P.parse(text) == (text, None)


def test_a_call_after_an_unreadable_one_is_not_run() -> None:
    # What follows an unreadable opening may be inside its value: nothing after it is a call.
    text = "<tool_call><function=bad name></function></tool_call>" + call("good", v="1")
    outcome = P.read(text)
    assert (outcome.content, outcome.tool_calls) == (text, None)
    assert outcome.error == "a function name is missing or is not a name"


def test_a_call_written_inside_a_value_is_not_run() -> None:
    text = (
        "<tool_call><function=a><parameter=p><tool_call><function=b></function></tool_call>"
        "</parameter></function></tool_call>"
    )
    assert summary(P.parse(text)[1]) == [
        ("a", {"p": "<tool_call><function=b></function></tool_call>"})
    ]


def test_a_nested_literal_in_a_second_call_neither_repeats_nor_loses_calls() -> None:
    quoted = call("foo", x="1")
    text = call("foo", x="1") + "\n" + call("write_file", path="a.md", content=quoted)
    assert summary(P.parse(text)[1]) == [
        ("foo", {"x": "1"}),
        ("write_file", {"path": "a.md", "content": quoted}),
    ]


def test_python_literals_are_read_up_to_a_budget_per_text() -> None:
    # ast.literal_eval is thirty times slower than JSON: a turn of huge literals stays fast.
    near_half = PYTHON_LITERAL_BUDGET // 2 - 10
    first = "[" + "(1,), " * (near_half // 6) + "1]"
    second = "[" + "(2,), " * (near_half // 6) + "2]"
    json_array = json.dumps([[1]] * PYTHON_LITERAL_BUDGET)
    text = call("f", a=first, b=second, c=first, d=json_array)
    schema = tools("f", a="array", b="array", c="array", d="array")
    ((_, arguments),) = summary(P.parse(text, schema)[1])
    assert arguments["a"] == [[1]] * (near_half // 6) + [1]
    assert arguments["b"] == [[2]] * (near_half // 6) + [2]
    assert arguments["c"] == first  # past the budget: not read as a literal, the text is kept
    assert arguments["d"] == [[1]] * PYTHON_LITERAL_BUDGET  # JSON is read whatever its size
