"""Conformance tables: each format's published markup, case by case, and what we make of it.

Written from the formats' chat templates and model cards (the layout a model is trained to
produce), not from any other project's tests. Every row runs through its parser and through
``auto``. A row expects either calls (``(name, arguments)``, and where the format carries
one the exact argument text and id) with the content around them, or no call; rows of
raw-text formats may expect the one-line reason a call could not be read.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import pytest
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

from hermes_envgen.runtime.parsers import get_parser


def tool(name: str, **types: object) -> dict:
    """An OpenAI tool definition whose parameters have the given JSON types (or schemas)."""
    properties = {
        key: kind if isinstance(kind, dict) else {"type": kind} for key, kind in types.items()
    }
    return {
        "type": "function",
        "function": {"name": name, "parameters": {"type": "object", "properties": properties}},
    }


TOOLS = [
    tool("get_weather", city="string", days="integer"),
    tool("send_email", to="string", subject="string"),
    tool("write_file", path="string", content="string"),
    tool("ping"),
    tool(
        "search",
        query="string",
        limit="integer",
        exact="boolean",
        ratio="number",
        filters="object",
        tags="array",
        page=["integer", "null"],
        note=["string", "null"],
    ),
    tool(
        "choose",
        count={"anyOf": [{"type": "integer"}, {"type": "null"}]},
        key={"oneOf": [{"type": "string"}, {"type": "integer"}]},
        mode={"enum": ["fast", "slow"]},
        level={"enum": [1, 2, 3]},
        scale={"enum": [0.5, 1, 2]},
    ),
]


@dataclass
class Row:
    """One case: the text a model generated and what the parser must make of it."""

    id: str
    text: str
    calls: list[tuple[str, dict]] | None  # None: no call
    content: str | None = None  # expected content when there are calls
    arguments: list[str] | None = None  # exact function.arguments texts, when checked
    ids: list[str] | None = None  # exact ids, when the format carries them
    error: str | None = None  # part of the reason, for an unreadable call
    quiet: bool = False  # no call and no error: prose or a quotation, not a mistake
    answer: str | None = None  # channel formats: the content when there is no call
    reasoning: str | None = None  # channel formats: the reasoning, when checked
    auto: bool = True  # auto reads it the same way
    tools: list[dict] = field(default_factory=lambda: TOOLS)


# --- Hermes / Qwen 2.5 / Qwen3 (and LongCat with its own tags) -------------------------------


def hermes(name: str, arguments: str, tag: str = "tool_call") -> str:
    """One call as the Hermes/Qwen template writes it."""
    return f'<{tag}>\n{{"name": "{name}", "arguments": {arguments}}}\n</{tag}>'


def hermes_rows(tag: str) -> list[Row]:
    """The Hermes table, for ``<tool_call>`` or LongCat's ``<longcat_tool_call>``."""
    weather = hermes("get_weather", '{"city": "Paris"}', tag)
    ping = hermes("ping", "{}", tag)
    return [
        Row("single", weather, [("get_weather", {"city": "Paris"})], None, ['{"city": "Paris"}']),
        Row("parallel", weather + "\n" + ping, [("get_weather", {"city": "Paris"}), ("ping", {})]),
        Row(
            "content before, between, after",
            "Sure.\n" + weather + "\nAlso:\n" + ping + "\nDone.",
            [("get_weather", {"city": "Paris"}), ("ping", {})],
            "Sure.\n\nAlso:\n\nDone.",
        ),
        Row(
            "unicode kept as written",
            hermes("get_weather", '{"city": "Zürich 東京 🌧"}', tag),
            [("get_weather", {"city": "Zürich 東京 🌧"})],
            arguments=['{"city": "Zürich 東京 🌧"}'],
        ),
        Row(
            "compact spacing kept as written",
            hermes("get_weather", '{"city":"Paris","days":2}', tag),
            [("get_weather", {"city": "Paris", "days": 2})],
            arguments=['{"city":"Paris","days":2}'],
        ),
        Row(
            "nested JSON",
            hermes("search", '{"filters": {"and": [{"a": [1, {"b": null}]}, true]}}', tag),
            [("search", {"filters": {"and": [{"a": [1, {"b": None}]}, True]}})],
        ),
        Row(
            "markup inside a value",
            hermes(
                "write_file",
                json.dumps({"content": f'</{tag}><{tag}>{{"name": "rm", "arguments": {{}}}}'}),
                tag,
            ),
            [("write_file", {"content": f'</{tag}><{tag}>{{"name": "rm", "arguments": {{}}}}'})],
        ),
        Row(
            # Consumers' json.loads refuses a raw newline in a string: re-serialised there.
            "raw newline inside a string",
            hermes("write_file", '{"content":"a\nb"}', tag),
            [("write_file", {"content": "a\nb"})],
            arguments=['{"content": "a\\nb"}'],
        ),
        Row("empty arguments", ping, [("ping", {})], arguments=["{}"]),
        Row("missing arguments", f'<{tag}>{{"name": "ping"}}</{tag}>', [("ping", {})]),
        Row(
            "arguments as a JSON string",
            hermes("get_weather", json.dumps('{"city": "Rome"}'), tag),
            [("get_weather", {"city": "Rome"})],
            arguments=['{"city": "Rome"}'],
        ),
        Row(
            "unclosed last tag (generation stopped at the end token)",
            weather.removesuffix(f"</{tag}>"),
            [("get_weather", {"city": "Paris"})],
        ),
        Row("truncated inside the arguments", weather[: weather.index("aris")], None),
        Row(
            # The cut-off call may quote more calls: nothing is run, the model is told.
            "truncated second call",
            weather + f'\n<{tag}>\n{{"name": "ping", "argu',
            None,
            error="could not be read",
        ),
        Row("prose", "No tool needed: the answer is 4.", None),
    ]


# --- Mistral ------------------------------------------------------------------------------

MISTRAL_ID = re.compile(r"[A-Za-z0-9]{9}")
MISTRAL_ROWS = [
    Row(
        "v11 single",
        '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
        [("get_weather", {"city": "Paris"})],
        arguments=['{"city": "Paris"}'],
    ),
    Row(
        "v11 parallel, content before",
        'Checking.[TOOL_CALLS]get_weather[ARGS]{"city":"Oslo"}[TOOL_CALLS]ping[ARGS]{}',
        [("get_weather", {"city": "Oslo"}), ("ping", {})],
        "Checking.",
        ['{"city":"Oslo"}', "{}"],
    ),
    Row(
        "v13 call id kept",
        '[TOOL_CALLS]get_weather[CALL_ID]a1B2c3D4e[ARGS]{"city": "Rome"}',
        [("get_weather", {"city": "Rome"})],
        ids=["a1B2c3D4e"],
    ),
    Row(
        "pre-v11 array with ids",
        '[TOOL_CALLS] [{"name": "get_weather", "arguments": {"city": "Nice"}, "id": "Zz9Yy8Xx7"}, '
        '{"name": "ping", "arguments": {}, "id": "not-nine"}]',
        [("get_weather", {"city": "Nice"}), ("ping", {})],
        arguments=['{"city": "Nice"}', "{}"],
    ),
    Row(
        "unicode and nested JSON",
        '[TOOL_CALLS]search[ARGS]{"query": "café ☕", "filters": {"or": [[1], {"x": null}]}}',
        [("search", {"query": "café ☕", "filters": {"or": [[1], {"x": None}]}})],
    ),
    Row(
        "markup inside a value",
        '[TOOL_CALLS]write_file[ARGS]{"content": "[TOOL_CALLS]rm[ARGS]{}"}',
        [("write_file", {"content": "[TOOL_CALLS]rm[ARGS]{}"})],
    ),
    Row("empty arguments", "[TOOL_CALLS]ping[ARGS]{}", [("ping", {})]),
    Row("truncated", '[TOOL_CALLS]get_weather[ARGS]{"city": "Pa', None),
    Row(
        "truncated array",
        '[TOOL_CALLS] [{"name": "ping", "arguments": {}}, {"name": "get_weather", "argu',
        None,
        error="the [TOOL_CALLS] array is not valid JSON",
    ),
    Row(
        "a call after a cut-off one is not run",
        '[TOOL_CALLS]write_file[ARGS]{"content": "[TOOL_CALLS]ping[ARGS]{}',
        None,
        error="could not be read",
    ),
    Row(
        # Skipping the element would run the calls around one the model meant.
        "an array element that is not a call",
        '[TOOL_CALLS] [{"name": "ping", "arguments": {}}, {"name": "get_weather", "arguments": 1}]'
        " <tool_call>rm</tool_call>",
        None,
        error="is not a call",
    ),
    Row(
        "an empty array",
        "[TOOL_CALLS] [] <tool_call>rm</tool_call>",
        None,
        error="the [TOOL_CALLS] array holds no call",
    ),
    Row("prose", "The answer is [1, 2].", None),
]

# --- Llama 3.x / 4 JSON -------------------------------------------------------------------------

LLAMA_ROWS = [
    Row(
        "single",
        '{"name": "get_weather", "parameters": {"city": "Paris"}}',
        [("get_weather", {"city": "Paris"})],
        arguments=['{"city": "Paris"}'],
    ),
    Row(
        "python tag, arguments key",
        '<|python_tag|>{"name": "get_weather", "arguments": {"city":"Lima"}}',
        [("get_weather", {"city": "Lima"})],
        arguments=['{"city":"Lima"}'],
    ),
    Row(
        "parallel",
        '{"name": "ping", "parameters": {}}; {"name": "get_weather", "parameters": {"days": 3}}',
        [("ping", {}), ("get_weather", {"days": 3})],
    ),
    Row(
        "unicode and nested JSON",
        '{"name": "search", "parameters": {"query": "naïve 日本", "filters": {"a": [{}]}}}',
        [("search", {"query": "naïve 日本", "filters": {"a": [{}]}})],
    ),
    Row(
        # The whole message is the call: JSON inside prose is an answer, not a call.
        "content around JSON is no call",
        'Call it like {"name": "ping", "parameters": {}} please.',
        None,
    ),
    Row("empty arguments", '{"name": "ping", "parameters": {}}', [("ping", {})]),
    Row("truncated", '{"name": "get_weather", "parameters": {"city": "Pa', None),
    Row(
        # The text after the ";" may quote calls of other formats: none of them runs.
        "text after a call and its separator",
        '{"name": "ping", "parameters": {}}; see <tool_call>rm</tool_call>',
        None,
        error="text follows it",
    ),
    Row(
        # The tag announces a call: code or prose after it is no answer to pass on.
        "python tag without a JSON call",
        "<|python_tag|>print(1) <tool_call>rm</tool_call>",
        None,
        error="<|python_tag|> is not followed by a JSON call",
    ),
    Row(
        "a second object that is not a call",
        '{"name": "ping", "parameters": {}}; {"path": "/"}',
        None,
        error="is not a call",
    ),
]

# --- Qwen3-Coder --------------------------------------------------------------------------


def coder(name: str, **params: str) -> str:
    """One call as the Qwen3-Coder template writes it."""
    body = "".join(f"<parameter={k}>\n{v}\n</parameter>\n" for k, v in params.items())
    return f"<tool_call>\n<function={name}>\n{body}</function>\n</tool_call>"


def schema_branch_rows(render) -> list[Row]:
    """Rows typing values by anyOf, oneOf and enum schemas (the ``choose`` tool)."""
    return [
        Row(
            "anyOf integer or null",
            render("choose", count="7") + "\n" + render("choose", count="null"),
            [("choose", {"count": 7}), ("choose", {"count": None})],
        ),
        Row(
            # A value that may be a string keeps the text the model wrote.
            "oneOf string or integer keeps the text",
            render("choose", key="42"),
            [("choose", {"key": "42"})],
        ),
        Row(
            "string enum keeps the text",
            render("choose", mode="null") + "\n" + render("choose", mode="fast"),
            [("choose", {"mode": "null"}), ("choose", {"mode": "fast"})],
        ),
        Row(
            # Without a type, an enum's values say what it holds.
            "enum of numbers without a type",
            render("choose", level="2", scale="0.5") + "\n" + render("choose", level="two"),
            [("choose", {"level": 2, "scale": 0.5}), ("choose", {"level": "two"})],
        ),
    ]


QUOTED_CODER = coder("write_file", path="/etc/passwd", content="x")
QWEN3_CODER_ROWS = [
    Row("single", coder("get_weather", city="Paris"), [("get_weather", {"city": "Paris"})]),
    Row(
        "parallel, content before, between, after",
        "Let me check.\n" + coder("ping") + "\nthen\n" + coder("get_weather", days="2") + "\nok",
        [("ping", {}), ("get_weather", {"days": 2})],
        "Let me check.\n\nthen\n\nok",
    ),
    Row(
        "unicode, multi-line value keeps inner newlines",
        coder("write_file", path="é.txt", content="line 1\n\n  日本 ✓\n"),
        [("write_file", {"path": "é.txt", "content": "line 1\n\n  日本 ✓\n"})],
    ),
    Row(
        "nested JSON object value",
        coder("search", filters='{"and": [{"a": [1, null]}, true]}'),
        [("search", {"filters": {"and": [{"a": [1, None]}, True]}})],
    ),
    Row(
        "a call quoted inside a value stays text",
        coder("write_file", path="notes.md", content=QUOTED_CODER),
        [("write_file", {"path": "notes.md", "content": QUOTED_CODER})],
    ),
    Row(
        "empty arguments", "<tool_call>\n<function=ping>\n</function>\n</tool_call>", [("ping", {})]
    ),
    Row(
        "truncated inside a value, a quoted call after it",
        "<tool_call>\n<function=write_file>\n<parameter=content>\n" + QUOTED_CODER,
        None,
        error="the value of content in the call to write_file has no matching </parameter>",
    ),
    Row(
        "truncated after a complete call",
        coder("ping") + "\n<tool_call>\n<function=get_weather>\n<parameter=city>\nPar",
        None,
        error="no matching </parameter>",
    ),
    Row(
        "schema typing",
        coder(
            "search",
            query="42",
            note="null",
            limit="10",
            exact="False",
            ratio="0.25",
            filters="{'k': 'v', 'n': (1, 2)}",
            tags="[1, 'a']",
            page="null",
        ),
        [
            (
                "search",
                {
                    "query": "42",
                    "note": None,
                    "limit": 10,
                    "exact": False,
                    "ratio": 0.25,
                    "filters": {"k": "v", "n": [1, 2]},
                    "tags": [1, "a"],
                    "page": None,
                },
            )
        ],
    ),
    Row(
        "a value that does not fit its type stays text (the tool says why)",
        coder("search", limit="ten", exact="yes", filters="{'k': {1, 2}}"),
        [("search", {"limit": "ten", "exact": "yes", "filters": "{'k': {1, 2}}"})],
    ),
    Row(
        "parameters without a schema stay text",
        coder("get_weather", city="Paris", units="[1]", extra="7"),
        [("get_weather", {"city": "Paris", "units": "[1]", "extra": "7"})],
    ),
    Row(
        "a string stays exactly the text",
        coder("write_file", content='"quoted"', path="null"),
        [("write_file", {"content": '"quoted"', "path": "null"})],
    ),
    *schema_branch_rows(coder),
    Row("prose", "I'd call <function=x> but won't.", None),
]

# --- GLM-4.5 / 4.6 / 4.7 ------------------------------------------------------------------


def glm(name: str, newlines: bool = True, **args: str) -> str:
    """One call as the GLM-4.5 template writes it (GLM-4.7 drops the newlines)."""
    nl = "\n" if newlines else ""
    pairs = "".join(
        f"<arg_key>{k}</arg_key>{nl}<arg_value>{v}</arg_value>{nl}" for k, v in args.items()
    )
    return f"<tool_call>{name}{nl}{pairs}</tool_call>"


def glm_rows(newlines: bool) -> list[Row]:
    """The GLM table, in the GLM-4.5 or the GLM-4.7 layout."""
    quoted = glm("write_file", newlines, path="/etc/passwd", content="x")
    return [
        Row(
            "single",
            glm("get_weather", newlines, city="Paris"),
            [("get_weather", {"city": "Paris"})],
        ),
        Row(
            "parallel, content before, between, after",
            "First.\n"
            + glm("ping", newlines)
            + "\nthen\n"
            + glm("get_weather", newlines, days="3")
            + "\nend",
            [("ping", {}), ("get_weather", {"days": 3})],
            "First.\n\nthen\n\nend",
        ),
        Row(
            "unicode, value kept exactly",
            glm("write_file", newlines, path="ü.txt", content="\n  東京\n"),
            [("write_file", {"path": "ü.txt", "content": "\n  東京\n"})],
        ),
        Row(
            "nested JSON object value",
            glm("search", newlines, filters='{"a": {"b": [1, {"c": true}]}}'),
            [("search", {"filters": {"a": {"b": [1, {"c": True}]}}})],
        ),
        Row(
            "a call quoted inside a value stays text",
            glm("write_file", newlines, path="notes.md", content=quoted),
            [("write_file", {"path": "notes.md", "content": quoted})],
        ),
        Row("empty arguments", "<tool_call>ping</tool_call>", [("ping", {})]),
        Row(
            "truncated inside a value, a quoted call after it",
            "<tool_call>write_file<arg_key>content</arg_key><arg_value>" + quoted,
            None,
            error="the value of content in the call to write_file has no matching </arg_value>",
        ),
        Row(
            "a call after an unreadable one is not run",
            "<tool_call>get_weather<arg_key>city</arg_key></tool_call>" + glm("ping", newlines),
            None,
            error="the argument city of get_weather has no <arg_value>",
        ),
        Row(
            "schema typing",
            glm(
                "search",
                newlines,
                query="7",
                limit=" 3 ",
                exact="true",
                tags="[1, 2]",
                filters="{'k': None}",
                page="null",
            ),
            [
                (
                    "search",
                    {
                        "query": "7",
                        "limit": 3,
                        "exact": True,
                        "tags": [1, 2],
                        "filters": {"k": None},
                        "page": None,
                    },
                )
            ],
        ),
        Row(
            "a string stays exactly the text",
            glm("write_file", newlines, content='"quoted"', path="null"),
            [("write_file", {"content": '"quoted"', "path": "null"})],
        ),
        *schema_branch_rows(lambda name, **args: glm(name, newlines, **args)),
        Row(
            "parameters without a schema are read as JSON when they are JSON",
            glm("get_weather", newlines, units="[1]", extra="7", label="Paris", q='"x"'),
            [("get_weather", {"units": [1], "extra": 7, "label": "Paris", "q": '"x"'})],
        ),
    ]


# --- DeepSeek V3 / V3.1, Kimi K2 --------------------------------------------------------------


def ds_v3(name: str, arguments: str) -> str:
    """One DeepSeek V3 call: type, separator, name, fenced JSON."""
    return f"{DS_CALL}function{DS_SEP}{name}\n```json\n{arguments}\n```{DS_CALL_END}"


def ds_v31(name: str, arguments: str) -> str:
    """One DeepSeek V3.1 call: name, separator, JSON."""
    return f"{DS_CALL}{name}{DS_SEP}{arguments}{DS_CALL_END}"


def kimi(name: str, arguments: str, index: int = 0) -> str:
    """One Kimi K2 call: ``functions.NAME:IDX`` id, then JSON."""
    return f"{KIMI_CALL}functions.{name}:{index}{KIMI_ARGS}{arguments}{KIMI_CALL_END}"


def section_rows(begin: str, end: str, call_end: str, one, markup: str) -> list[Row]:
    """The table of a format whose calls sit in a section (DeepSeek, Kimi)."""

    def section(*calls: str) -> str:
        return begin + "".join(calls) + end

    return [
        Row(
            "single",
            section(one("get_weather", '{"city":"Paris"}')),
            [("get_weather", {"city": "Paris"})],
            arguments=['{"city":"Paris"}'],
        ),
        Row(
            "parallel, content before and after",
            "Checking.\n" + section(one("ping", "{}"), one("get_weather", '{"days": 2}')) + "\nok",
            [("ping", {}), ("get_weather", {"days": 2})],
            "Checking.\n\nok",
        ),
        Row(
            "unicode and nested JSON",
            section(one("search", '{"query": "ñ 東京", "filters": {"a": [[{"b": null}]]}}')),
            [("search", {"query": "ñ 東京", "filters": {"a": [[{"b": None}]]}})],
        ),
        Row(
            "markup inside a value",
            section(one("write_file", json.dumps({"content": markup}))),
            [("write_file", {"content": markup})],
        ),
        Row("empty arguments", section(one("ping", "{}")), [("ping", {})]),
        Row(
            "unclosed section and call (generation stopped)",
            begin + one("ping", "{}").removesuffix(call_end),
            [("ping", {})],
        ),
        Row("truncated", begin + one("get_weather", '{"city": "Par')[:-10], None),
        Row("prose", "Nothing to call.", None),
    ]


DEEPSEEK_V3_ROWS = section_rows(DS_CALLS, DS_CALLS_END, DS_CALL_END, ds_v3, ds_v31("rm", "{}"))
DEEPSEEK_V31_ROWS = section_rows(DS_CALLS, DS_CALLS_END, DS_CALL_END, ds_v31, ds_v31("rm", "{}"))
KIMI_ROWS = [
    *section_rows(KIMI_CALLS, KIMI_CALLS_END, KIMI_CALL_END, kimi, kimi("rm", "{}")),
    Row(
        "ids are the model's functions.NAME:IDX",
        KIMI_CALLS + kimi("ping", "{}", 3) + kimi("get_weather", "{}", 4) + KIMI_CALLS_END,
        [("ping", {}), ("get_weather", {})],
        ids=["functions.ping:3", "functions.get_weather:4"],
    ),
]

# --- gpt-oss (harmony) ------------------------------------------------------------------------

H_START, H_END, H_MSG, H_CALL, H_RETURN = (
    "<|start|>",
    "<|end|>",
    "<|message|>",
    "<|call|>",
    "<|return|>",
)


def h_call(name: str, arguments: str, end: str = H_CALL, constrain: bool = True) -> str:
    """One call message as gpt-oss writes it: commentary, recipient, content type, JSON."""
    ctype = " <|constrain|>json" if constrain else ""
    return f"<|channel|>commentary to=functions.{name}{ctype}{H_MSG}{arguments}{end}"


def h_msg(channel: str, body: str, end: str = H_END) -> str:
    """One message without a recipient (reasoning, preamble, or the answer)."""
    return f"<|channel|>{channel}{H_MSG}{body}{end}"


def h_then(*messages: str) -> str:
    """Messages of one assistant output: each after the first opens with its header."""
    return messages[0] + "".join(H_START + "assistant" + m for m in messages[1:])


THINK = h_msg("analysis", "The user wants the weather; call get_weather.")
GPT_OSS_ROWS = [
    Row(
        "reasoning then a call",
        h_then(THINK, h_call("get_weather", '{"city":"Paris"}')),
        [("get_weather", {"city": "Paris"})],
        arguments=['{"city":"Paris"}'],
        reasoning="The user wants the weather; call get_weather.",
    ),
    Row(
        # The server strips the stop token <|call|> from the text it returns.
        "stop token stripped",
        h_then(THINK, h_call("get_weather", '{"city": "Oslo"}', end="")),
        [("get_weather", {"city": "Oslo"})],
    ),
    Row(
        "recipient in the role header, content type without <|constrain|>",
        h_then(THINK, "")
        + ' to=functions.get_weather<|channel|>commentary json<|message|>{"days": 2}',
        [("get_weather", {"days": 2})],
    ),
    Row(
        "first message with the recipient before the channel",
        " to=functions.ping<|channel|>commentary json<|message|>{}<|call|>",
        [("ping", {})],
    ),
    Row(
        "the answer, reasoning apart",
        h_then(THINK, h_msg("final", "It is sunny in Paris.", H_RETURN)),
        None,
        answer="It is sunny in Paris.",
        reasoning="The user wants the weather; call get_weather.",
        quiet=True,
    ),
    Row(
        "the answer, stop token stripped",
        h_then(THINK, h_msg("final", "Sunny.", "")),
        None,
        answer="Sunny.",
        quiet=True,
    ),
    Row(
        "a preamble is content",
        h_then(THINK, h_msg("commentary", "Let me check."), h_call("get_weather", "{}")),
        [("get_weather", {})],
        "Let me check.",
    ),
    Row(
        "parallel calls",
        h_then(h_call("ping", "{}"), h_call("get_weather", '{"city": "Rome"}', constrain=False)),
        [("ping", {}), ("get_weather", {"city": "Rome"})],
    ),
    Row("no arguments", h_call("ping", ""), [("ping", {})], arguments=["{}"]),
    Row(
        "a call on the analysis channel",
        '<|channel|>analysis to=functions.get_weather<|message|>{"city": "Nice"}<|call|>',
        [("get_weather", {"city": "Nice"})],
    ),
    Row(
        "unicode and nested JSON",
        h_call("search", '{"query": "Zürich 東京", "filters": {"a": [{"b": null}]}}'),
        [("search", {"query": "Zürich 東京", "filters": {"a": [{"b": None}]}})],
    ),
    Row(
        "markup inside a value",
        h_call("write_file", json.dumps({"content": H_CALL + H_START + h_call("rm", "{}")})),
        [("write_file", {"content": H_CALL + H_START + h_call("rm", "{}")})],
    ),
    Row(
        "truncated inside the arguments",
        h_then(THINK, h_call("get_weather", '{"city": "Pa', end="")),
        None,
        error="the arguments of the call to get_weather are not one complete JSON object",
    ),
    Row(
        "arguments that are no object",
        h_call("get_weather", '"Paris"'),
        None,
        error="the arguments of the call to get_weather are not one complete JSON object",
    ),
    Row(
        "text after the arguments",
        h_call("get_weather", '{"city": "Paris"} and more'),
        None,
        error="text follows the arguments of the call to get_weather",
    ),
    Row(
        # Built-in tools (python, browser) are no functions this env offers.
        "a built-in tool's recipient",
        "<|channel|>commentary to=python<|message|>print(1)<|call|>",
        None,
        error="the message is addressed to python, which is no function",
    ),
    Row(
        "the model writes a tool's answer itself",
        h_call("ping", "{}")
        + H_START
        + 'functions.ping to=assistant<|channel|>commentary<|message|>{"ok": true}<|end|>',
        None,
        error="the output holds a message from functions.ping",
    ),
    Row(
        "cut off in a call's header",
        h_then(THINK, "") + "<|channel|>commentary to=functions.get_weather",
        None,
        error="cut off in the header of a call",
    ),
    Row(
        "prose quoting the markup is no harmony output",
        "Calls look like <|channel|>commentary to=functions.ping<|message|>{}<|call|> here.",
        None,
        quiet=True,
    ),
    Row(
        "reasoning cut off, no answer yet",
        h_msg("analysis", "Let me think", ""),
        None,
        answer="",
        reasoning="Let me think",
        quiet=True,
    ),
    Row("plain text", "No tool needed.", None, quiet=True),
]


# --- calls the model did not make (issue 23), each verbatim ------------------------------------

ALICE = '{"name": "Alice", "age": 30, "city": "Paris"}'
TAG_PROSE = "Wrap calls in <tool_call> and </tool_call> tags."
ECHOED = json.dumps(
    {
        "name": "get_weather",
        "description": "Get the weather for a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    }
)
EMAIL_ARGS = '{"to": "bob@example.com", "subject": "Hi"}'
HERMES_PING = '<tool_call>\n{"name": "ping", "arguments": {}}\n</tool_call>'


def fenced(call: str) -> str:
    """A call shown in a Markdown code block inside an answer."""
    return f"Here is how a call looks:\n```\n{call}\n```\nThat is all."


def inline(call: str) -> str:
    """A call shown in inline code inside an answer."""
    return f"Write `{call}` to call it."


PHANTOM_ROWS: dict[str, list[Row]] = {
    "llama3_json": [
        Row("a JSON answer with a name key is an answer", ALICE, None, quiet=True),
        Row("an echoed tool definition is an answer", ECHOED, None, quiet=True),
        Row(
            "arguments under args: unreadable, not run without them",
            '{"name": "send_email", "args": ' + EMAIL_ARGS + "}",
            None,
            error='puts its arguments under "args"',
        ),
    ],
    "hermes": [
        Row("prose naming the tags is no call", TAG_PROSE, None, quiet=True),
        Row(
            "arguments under args: unreadable, not run without them",
            '<tool_call>{"name": "send_email", "args": ' + EMAIL_ARGS + "}</tool_call>",
            None,
            error='the call to send_email puts its arguments under "args"',
        ),
        Row(
            "arguments under input: unreadable, not run without them",
            '<tool_call>{"name": "send_email", "input": ' + EMAIL_ARGS + "}</tool_call>",
            None,
            error='the call to send_email puts its arguments under "input"',
        ),
        Row(
            "an echoed tool definition is no call with the schema as arguments",
            f"<tool_call>{ECHOED}</tool_call>",
            None,
            error='has members a call does not have: "description"',
        ),
        Row("a call in a fenced code block is a quotation", fenced(HERMES_PING), None, quiet=True),
        Row("a call in inline code is a quotation", inline(HERMES_PING), None, quiet=True),
        Row(
            "a quotation, then a real call",
            fenced(HERMES_PING) + "\n" + HERMES_PING,
            [("ping", {})],
            fenced(HERMES_PING),
        ),
        Row(
            "a fence inside an argument value does not hide the next call",
            '<tool_call>{"name": "write_file", "arguments": {"content": "```\\nx"}}</tool_call>'
            + HERMES_PING,
            [("write_file", {"content": "```\nx"}), ("ping", {})],
        ),
        Row(
            # Re-serialised (the raw newline), the escape stays an escape.
            "a lone surrogate escape stays an escape",
            '<tool_call>{"name": "write_file", "arguments": {"content": "a\n\\ud800"}}</tool_call>',
            [("write_file", {"content": "a\n\ud800"})],
            arguments=['{"content": "a\\n\\ud800"}'],
        ),
    ],
    "glm45": [
        Row("prose naming the tags is no call", TAG_PROSE, None, quiet=True),
        Row(
            "a call in a fenced code block is a quotation",
            fenced("<tool_call>ping</tool_call>"),
            None,
            quiet=True,
        ),
        Row(
            "a lone surrogate escape stays an escape",
            '<tool_call>search<arg_key>filters</arg_key><arg_value>{"k": "\\ud800"}</arg_value>'
            "</tool_call>",
            [("search", {"filters": {"k": "\ud800"}})],
            arguments=['{"filters": {"k": "\\ud800"}}'],
        ),
    ],
    "qwen3_coder": [
        Row(
            # Qwen3-Coder sometimes drops <tool_call>; its own serving stack reads the block.
            "a bare function block is a call",
            "Checking.\n<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n</function>",
            [("get_weather", {"city": "Paris"})],
            "Checking.",
        ),
        Row(
            "a bare function block cut off is unreadable",
            "<function=get_weather>\n<parameter=city>\nPar",
            None,
            error="has no matching </parameter>",
        ),
        Row(
            "a call in a fenced code block is a quotation",
            fenced("<tool_call>\n<function=ping>\n</function>\n</tool_call>"),
            None,
            quiet=True,
        ),
        Row(
            "a lone surrogate escape stays an escape",
            "<tool_call>\n<function=search>\n<parameter=filters>\n"
            '{"k": "\\ud800"}\n</parameter>\n</function>\n</tool_call>',
            [("search", {"filters": {"k": "\ud800"}})],
            arguments=['{"filters": {"k": "\\ud800"}}'],
        ),
    ],
    "kimi_k2": [
        *(
            Row(
                f"an id without its index: {call_id}",
                KIMI_CALLS
                + f"{KIMI_CALL}{call_id}{KIMI_ARGS}"
                + '{"city": "Paris"}'
                + KIMI_CALL_END
                + KIMI_CALLS_END,
                None,
                error=f"the call id {call_id!r} is not functions.NAME:INDEX",
            )
            for call_id in (
                "functions.get_weather.0",
                "get_weather.0",
                "invalid_get_weather.0",
                "functions.get_weather",
                "0",
            )
        ),
        Row(
            # Special tokens: no prose writes them, so a fence does not make them a quotation.
            "a call in a fenced code block is still a call",
            fenced(KIMI_CALLS + kimi("ping", "{}") + KIMI_CALLS_END),
            [("ping", {})],
            "Here is how a call looks:\n```\n\n```\nThat is all.",
        ),
    ],
}
PHANTOM_ROWS["mistral"] = [
    Row(
        # [TOOL_CALLS] is a control token: in a fence it is still the model's call.
        "a call in a fenced code block is still a call",
        "```\n" + '[TOOL_CALLS]get_weather[ARGS]{"city": "Paris"}',
        [("get_weather", {"city": "Paris"})],
        "```",
    ),
]
PHANTOM_ROWS["gpt_oss"] = PHANTOM_ROWS["harmony"] = [
    Row(
        # A call is a message of its own: markup inside the answer's text is text.
        "harmony markup quoted inside the answer is no call",
        h_msg("final", "Write <|channel|>commentary to=functions.ping<|message|>{}", H_CALL),
        None,
        answer="Write <|channel|>commentary to=functions.ping<|message|>{}",
        quiet=True,
    ),
]
PHANTOM_ROWS["llama4_json"] = PHANTOM_ROWS["llama3_json"]
PHANTOM_ROWS["qwen"] = PHANTOM_ROWS["hermes"]
PHANTOM_ROWS["glm47"] = PHANTOM_ROWS["glm45"]

TABLES: dict[str, list[Row]] = {
    "hermes": hermes_rows("tool_call"),
    "qwen": hermes_rows("tool_call"),
    "longcat": hermes_rows("longcat_tool_call"),
    "mistral": MISTRAL_ROWS,
    "llama3_json": LLAMA_ROWS,
    "llama4_json": LLAMA_ROWS,
    "qwen3_coder": QWEN3_CODER_ROWS,
    "glm45": glm_rows(newlines=True),
    "glm47": glm_rows(newlines=False),
    "deepseek_v3": DEEPSEEK_V3_ROWS,
    "deepseek_v3_1": DEEPSEEK_V31_ROWS,
    "kimi_k2": KIMI_ROWS,
    "gpt_oss": GPT_OSS_ROWS,
    "harmony": GPT_OSS_ROWS,
}
for _fmt, _rows in PHANTOM_ROWS.items():
    TABLES[_fmt] = TABLES[_fmt] + _rows
CASES = [
    pytest.param(fmt, row, id=f"{fmt}: {row.id}") for fmt, rows in TABLES.items() for row in rows
]


def check(parser_name: str, fmt: str, row: Row) -> None:
    """Parse the row's text and compare with what the row expects."""
    outcome = get_parser(parser_name).read(row.text, row.tools)
    if row.reasoning is not None:
        assert outcome.reasoning == row.reasoning
    if row.calls is None:
        content = row.text if row.answer is None else row.answer
        assert (outcome.content, outcome.tool_calls) == (content, None)
        if row.error is not None:
            assert outcome.error is not None and row.error in outcome.error
        if row.quiet:
            assert outcome.error is None
        return
    calls = outcome.tool_calls
    assert calls is not None, outcome.error
    got = [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]
    assert got == row.calls
    assert outcome.content == row.content
    for c in calls:  # never a lone surrogate: every consumer encodes these as UTF-8
        c["function"]["name"].encode("utf-8"), c["function"]["arguments"].encode("utf-8")
    if row.arguments is not None:
        assert [c["function"]["arguments"] for c in calls] == row.arguments
    if row.ids is not None:
        assert [c["id"] for c in calls] == row.ids
    if fmt == "mistral":  # Mistral's templates refuse any other id
        assert all(MISTRAL_ID.fullmatch(c["id"]) for c in calls)


@pytest.mark.parametrize(("fmt", "row"), CASES)
def test_format_table(fmt: str, row: Row) -> None:
    check(fmt, fmt, row)


@pytest.mark.parametrize(("fmt", "row"), CASES)
def test_auto_reads_the_table_alike(fmt: str, row: Row) -> None:
    if not row.auto:
        pytest.skip("auto reads this row differently, on purpose")
    check("auto", fmt, row)
