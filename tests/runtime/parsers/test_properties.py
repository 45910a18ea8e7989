"""Property tests: every parser, on random, marker-heavy and mutated input, never misbehaves."""

from __future__ import annotations

import json
import re
from collections.abc import Callable

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
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from hermes_envgen.runtime.parsers import ToolCallParser, get_parser, list_parsers
from hermes_envgen.runtime.parsers import base as parsers_base

NAMES = [name for name, _ in list_parsers()]  # aliases included
PARSERS = [get_parser(name) for name in NAMES]
# The ids each format's chat template expects; auto gives any of them.
IDS = {
    "mistral": re.compile(r"[A-Za-z0-9]{9}"),
    "kimi_k2": re.compile(r"\S(?:.*\S)?", re.DOTALL),  # as the model wrote it
}
OPENAI_ID = re.compile(r"call_[0-9a-f]{24}")
# Channel formats split the answer from the reasoning even when the text holds no call.
HARMONY = {"gpt_oss", "harmony"}
HARMONY_OPENERS = ("<|channel|>", "<|start|>", "to=functions.")
FAST = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


# What each parser looks for: no parser may find a call in text containing none of these.
ALL_MARKERS = sorted({marker for parser in PARSERS for marker in parser.markers})
# Every piece of markup of every format, used to build marker-heavy input.
MARKUP = [
    "<tool_call>",
    "</tool_call>",
    "<longcat_tool_call>",
    "</longcat_tool_call>",
    "<function=",
    "</function>",
    "<parameter=",
    "</parameter>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
    "<|python_tag|>",
    DS_CALLS,
    DS_CALLS_END,
    DS_CALL,
    DS_CALL_END,
    DS_SEP,
    "function",
    "```json",
    "```",
    KIMI_CALLS,
    KIMI_CALLS_END,
    KIMI_CALL,
    KIMI_ARGS,
    KIMI_CALL_END,
    "functions.f:0",
    "<|start|>",
    "assistant",
    "<|channel|>",
    "analysis",
    "commentary",
    "final",
    " to=functions.f",
    " to=python",
    "<|constrain|>",
    " json",
    "<|message|>",
    "<|end|>",
    "<|call|>",
    "<|return|>",
    "```\n",
    "`",
]
JSON_BITS = ['{"name": "f", "arguments": ', '"parameters": ', '{"a": 1}', "{", "}", "[", "]"]
JSON_BITS += ['"', ":", ",", ";", "\n", " ", "f", ">", "1", "null", "\\", "\\u12", "NaN"]
FRAGMENTS = MARKUP + ALL_MARKERS + JSON_BITS


def run(
    parser: ToolCallParser, text: str, tools: list[dict] | None = None
) -> tuple[str | None, list[dict] | None]:
    """Parse with internal errors surfacing, and check the result's contract."""
    parsers_base._RAISE_INTERNAL_ERRORS = True
    try:
        result = parser.parse(text, tools)
    finally:
        parsers_base._RAISE_INTERNAL_ERRORS = False
    assert isinstance(result, tuple) and len(result) == 2
    content, calls = result
    if calls is None:
        if splits_channels(parser, text):
            assert isinstance(content, str)
        else:
            assert content is text
        return result
    assert isinstance(calls, list) and calls
    assert content is None or (isinstance(content, str) and content and content == content.strip())
    for call in calls:
        assert set(call) == {"id", "type", "function"}
        forms = [*IDS.values(), OPENAI_ID] if parser.name == "auto" else []
        forms = forms or [IDS.get(parser.name, OPENAI_ID)]
        assert isinstance(call["id"], str) and any(f.fullmatch(call["id"]) for f in forms)
        assert call["type"] == "function"
        name, arguments = call["function"]["name"], call["function"]["arguments"]
        assert isinstance(name, str) and name and name == name.strip()
        assert isinstance(arguments, str)
        assert isinstance(json.loads(arguments), dict)
        # No lone surrogate, whatever escapes the model wrote: both encode as UTF-8.
        name.encode("utf-8"), arguments.encode("utf-8")
    return result


def splits_channels(parser: ToolCallParser, text: str) -> bool:
    """True when the parser reads ``text`` as harmony, whose content is the answer alone."""
    if parser.name == "auto":
        return text.lstrip().startswith(HARMONY_OPENERS)
    return parser.name in HARMONY


def run_all(text: str) -> None:
    """Every registered parser keeps its contract on ``text``."""
    for parser in PARSERS:
        run(parser, text)


def has_marker(text: str) -> bool:
    """True if any parser's marker, or any markup at all, occurs in ``text``."""
    return any(m in text for m in ALL_MARKERS) or any(m in text for m in MARKUP)


# --- random and marker-heavy input -------------------------------------------------------


@settings(FAST, max_examples=1500)
@given(st.text(max_size=300))
def test_random_text(text: str) -> None:
    run_all(text)
    if not any(m in text for m in ALL_MARKERS):
        for parser in PARSERS:
            result = parser.parse(text)
            assert result == (text, None) and result[0] is text


@settings(FAST, max_examples=300)
@given(st.text(max_size=60), st.sampled_from(['"\\ud800"', '"\\udfff x"', '"a\\ud83d"']))
def test_lone_surrogate_escapes_never_reach_the_arguments(text: str, escape: str) -> None:
    # Every format, its values written as JSON or as raw text, with a lone surrogate escape.
    value = '{"k": ' + escape + ', "t": ' + json.dumps(text) + "}"
    outputs = [
        f'<tool_call>{{"name": "f", "arguments": {{"a": {value}, "n": "x\ny"}}}}</tool_call>',
        f'<tool_call>{{"name": "f", "arguments": {json.dumps(value)}}}</tool_call>',
        f"<tool_call><function=f><parameter=a>{value}</parameter></function></tool_call>",
        f"<tool_call>f<arg_key>a</arg_key><arg_value>{value}</arg_value></tool_call>",
        f"<tool_call>f<arg_key>a</arg_key><arg_value>{escape}</arg_value></tool_call>",
        f"[TOOL_CALLS]f[ARGS]{value}",
        f'{{"name": "f", "parameters": {value}}}',
        f"<|channel|>commentary to=functions.f<|message|>{value}<|call|>",
    ]
    tools = [{"type": "function", "function": {"name": "f", "parameters": {"properties": {}}}}]
    typed = [
        {
            "type": "function",
            "function": {"name": "f", "parameters": {"properties": {"a": {"type": "object"}}}},
        }
    ]
    for output in outputs:
        for parser in PARSERS:
            run(parser, output, tools)
            run(parser, output, typed)


@settings(FAST, max_examples=300)
@given(st.text(alphabet=st.characters(blacklist_characters="{[<"), max_size=300))
def test_text_without_markers_is_returned_unchanged(text: str) -> None:
    for parser in PARSERS:
        result = parser.parse(text)
        assert result == (text, None) and result[0] is text


marker_soup = st.lists(st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=4)), max_size=40).map(
    "".join
)


@pytest.mark.slow
@settings(FAST, max_examples=1500)
@given(marker_soup)
def test_marker_soup(text: str) -> None:
    run_all(text)


# --- valid calls: round trip, then mutations -----------------------------------------------

names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.\-]{0,15}", fullmatch=True)
json_scalars = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=False, allow_infinity=False),
    st.text(max_size=12),
    # Markup of any format quoted inside an argument must not cut the call short.
    st.lists(st.sampled_from(FRAGMENTS), max_size=4).map("".join),
)
json_values = st.recursive(
    json_scalars,
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
json_args = st.dictionaries(st.text(max_size=8), json_values, max_size=4)
# Raw-text formats (Qwen3-Coder, GLM) type their values, so a string must not read as JSON.
raw_strings = st.text(
    alphabet=st.characters(blacklist_characters="<\r", blacklist_categories=("Cs",)), max_size=20
).map(lambda s: "s" + s)
# Each key ends in its JSON type, so the tool schema the loop would offer follows from it.
raw_args = st.dictionaries(
    st.from_regex(r"[a-z_][a-z0-9_]{0,8}", fullmatch=True),
    st.one_of(
        st.tuples(st.just("null"), st.none()),
        st.tuples(st.just("boolean"), st.booleans()),
        st.tuples(st.just("integer"), st.integers()),
        st.tuples(st.just("string"), raw_strings),
        st.tuples(st.just("array"), st.lists(st.integers(), max_size=3)),
    ),
    max_size=4,
).map(lambda args: {f"{key}_{kind}": value for key, (kind, value) in args.items()})
prose = st.text(max_size=40).filter(lambda s: not has_marker(s) and "{" not in s)

Call = tuple[str, dict]


def _dump(value: object, draw_ascii: bool) -> str:
    """JSON text, ASCII-escaped or not."""
    return json.dumps(value, ensure_ascii=draw_ascii)


def _raw(value: object) -> str:
    """How a raw-text format writes a value: strings as is, everything else as JSON."""
    return value if isinstance(value, str) else json.dumps(value)


def render_json_tagged(open_tag: str, close_tag: str) -> Callable:
    """Renderer for ``<tag>{"name", "arguments"}</tag>`` formats."""

    def render(calls: list[Call], draw) -> tuple[str, list[Call], str | None]:
        before, after = draw(prose), draw(prose)
        parts, kept = [before], []
        for index, (name, args) in enumerate(calls):
            as_string = draw(st.booleans())
            obj = {"name": name, "arguments": json.dumps(args) if as_string else args}
            parts.append(
                open_tag + draw(st.sampled_from(["", "\n"])) + _dump(obj, draw(st.booleans()))
            )
            parts.append(draw(st.sampled_from(["", "\n"])) + close_tag)
            between = draw(prose)
            parts.append(between)
            # Whitespace between two calls is dropped; after the last call it is just trailing.
            if index == len(calls) - 1 or not between.isspace():
                kept.append(between)
        parts.append(after)
        content = (before + "".join(kept) + after).strip() or None
        return "".join(parts), calls, content

    return render


def render_mistral(calls: list[Call], draw) -> tuple[str, list[Call], str | None]:
    """Mistral, either as a JSON array or as v11 ``[TOOL_CALLS]name{args}`` segments."""
    before = draw(prose)
    if draw(st.booleans()):
        body = "[TOOL_CALLS]" + _dump([{"name": n, "arguments": a} for n, a in calls], False)
    else:
        sep = draw(st.sampled_from(["", "[ARGS]"]))
        body = "".join(f"[TOOL_CALLS]{n}{sep}{_dump(a, False)}" for n, a in calls)
    return before + body, calls, before.strip() or None


def render_llama(calls: list[Call], draw) -> tuple[str, list[Call], str | None]:
    """Llama: the whole message is ``;``-separated call objects."""
    key = draw(st.sampled_from(["parameters", "arguments"]))
    objs = [_dump({"name": n, key: a}, draw(st.booleans())) for n, a in calls]
    tag = draw(st.sampled_from(["", "<|python_tag|>"]))
    return tag + draw(st.sampled_from([";", "; ", ";\n"])).join(objs), calls, None


def render_qwen3_coder(calls: list[Call], draw) -> tuple[str, list[Call], str | None]:
    """Qwen3-Coder function/parameter blocks."""
    before, after = draw(prose), draw(prose)
    blocks = []
    for name, args in calls:
        params = "".join(f"<parameter={k}>\n{_raw(v)}\n</parameter>\n" for k, v in args.items())
        blocks.append(f"<tool_call>\n<function={name}>\n{params}</function>\n</tool_call>")
    return before + "\n".join(blocks) + after, calls, (before + after).strip() or None


def render_glm(newlines: bool) -> Callable:
    """GLM key/value blocks, with or without newlines between the parts."""
    nl = "\n" if newlines else ""

    def render(calls: list[Call], draw) -> tuple[str, list[Call], str | None]:
        before, after = draw(prose), draw(prose)
        blocks = []
        for name, args in calls:
            pairs = "".join(
                f"<arg_key>{k}</arg_key>{nl}<arg_value>{_raw(v)}</arg_value>{nl}"
                for k, v in args.items()
            )
            blocks.append(f"<tool_call>{name}{nl}{pairs}</tool_call>")
        return before + "".join(blocks) + after, calls, (before + after).strip() or None

    return render


def render_section(begin: str, end: str, one: Callable[[str, str], str]) -> Callable:
    """Formats whose calls sit between section markers (DeepSeek, Kimi)."""

    def render(calls: list[Call], draw) -> tuple[str, list[Call], str | None]:
        before, after = draw(prose), draw(prose)
        inner = draw(st.sampled_from(["", "\n"])).join(one(n, _dump(a, False)) for n, a in calls)
        return before + begin + inner + end + after, calls, (before + after).strip() or None

    return render


def render_harmony(calls: list[Call], draw) -> tuple[str, list[Call], str | None]:
    """gpt-oss: optional analysis, then one commentary message per call, recipient anywhere."""
    messages = []
    reasoning = draw(prose)
    if reasoning.strip():
        messages.append(f"<|channel|>analysis<|message|>{reasoning}<|end|>")
    for index, (name, args) in enumerate(calls):
        header = draw(
            st.sampled_from(
                [
                    f"<|channel|>commentary to=functions.{name} <|constrain|>json",
                    f" to=functions.{name}<|channel|>commentary json",
                    f"<|channel|>commentary to=functions.{name}",
                ]
            )
        )
        last = index == len(calls) - 1
        end = draw(st.sampled_from(["<|call|>", ""])) if last else "<|call|>"
        messages.append(f"{header}<|message|>{_dump(args, draw(st.booleans()))}{end}")
    # The first message follows the prompt's <|start|>assistant; later ones open their own.
    text = messages[0] + "".join("<|start|>assistant" + m for m in messages[1:])
    return text, calls, None


RENDERERS: dict[str, tuple[Callable, bool]] = {
    # parser name -> (renderer, uses raw-text values)
    "hermes": (render_json_tagged("<tool_call>", "</tool_call>"), False),
    "qwen": (render_json_tagged("<tool_call>", "</tool_call>"), False),
    "longcat": (render_json_tagged("<longcat_tool_call>", "</longcat_tool_call>"), False),
    "mistral": (render_mistral, False),
    "llama3_json": (render_llama, False),
    "llama4_json": (render_llama, False),
    "qwen3_coder": (render_qwen3_coder, True),
    "glm45": (render_glm(True), True),
    "glm47": (render_glm(False), True),
    "deepseek_v3": (
        render_section(
            DS_CALLS,
            DS_CALLS_END,
            lambda n, a: f"{DS_CALL}function{DS_SEP}{n}\n```json\n{a}\n```{DS_CALL_END}",
        ),
        False,
    ),
    "deepseek_v3_1": (
        render_section(
            DS_CALLS, DS_CALLS_END, lambda n, a: f"{DS_CALL}{n}{DS_SEP}{a}{DS_CALL_END}"
        ),
        False,
    ),
    "kimi_k2": (
        render_section(
            KIMI_CALLS,
            KIMI_CALLS_END,
            lambda n, a: f"{KIMI_CALL}functions.{n}:0{KIMI_ARGS}{a}{KIMI_CALL_END}",
        ),
        False,
    ),
}
RENDERERS["deepseek_v31"] = RENDERERS["deepseek_v3_1"]
RENDERERS["gpt_oss"] = RENDERERS["harmony"] = (render_harmony, False)
assert set(RENDERERS) | {"auto"} == set(NAMES)


@st.composite
def rendered(draw) -> tuple[str, str, list[Call], str | None]:
    """(parser name, text, expected calls, expected content) for a random valid output."""
    fmt = draw(st.sampled_from(sorted(RENDERERS)))
    render, raw = RENDERERS[fmt]
    calls = draw(st.lists(st.tuples(names, raw_args if raw else json_args), min_size=1, max_size=3))
    text, expected, content = render(calls, draw)
    return fmt, text, expected, content


def tools_for(calls: list[Call]) -> list[dict]:
    """The tool definitions of the called functions, typed by the keys' type suffixes."""
    properties: dict[str, dict] = {}
    for name, args in calls:
        props = properties.setdefault(name, {})
        props.update({key: {"type": key.rsplit("_", 1)[-1]} for key in args})
    return [
        {"type": "function", "function": {"name": n, "parameters": {"properties": p}}}
        for n, p in properties.items()
    ]


def decoded(calls: list[dict]) -> list[Call]:
    """(name, arguments object) per call."""
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.slow
@settings(FAST, max_examples=1200)
@given(rendered())
def test_valid_output_round_trips(case: tuple[str, str, list[Call], str | None]) -> None:
    fmt, text, expected, content = case
    for parser in (get_parser(fmt), get_parser("auto")):
        got_content, calls = run(parser, text, tools_for(expected))
        assert calls is not None, (parser.name, text)
        assert decoded(calls) == [(n, a) for n, a in expected]
        if parser.name == fmt:
            assert got_content == content


# Formats whose markup is plain text prose and Markdown quote; Llama's call is the whole
# message and harmony's a message of its own, so quoting one in an answer makes no call.
QUOTABLE = {"hermes", "qwen", "longcat", "qwen3_coder", "glm45", "glm47"}
NOT_IN_ANSWERS = QUOTABLE | {"llama3_json", "llama4_json", "gpt_oss", "harmony"}


@pytest.mark.slow
@settings(FAST, max_examples=600)
@given(rendered(), st.sampled_from(["fence", "tilde fence", "inline"]), prose)
def test_a_call_quoted_in_markdown_code_never_runs(
    case: tuple[str, str, list[Call], str | None], how: str, before: str
) -> None:
    fmt, text, expected, _ = case
    assume(fmt in NOT_IN_ANSWERS and "`" not in text and "~~~" not in text)
    if how == "inline":
        assume("\n" not in text)  # an inline span ends with its line here
        answer = f"{before} Write `{text}` to call it."
    else:
        fence = "```" if how == "fence" else "~~~"
        answer = f"{before}\n{fence}\n{text}\n{fence}\nThat is the format."
    for parser in (get_parser(fmt), get_parser("auto")):
        outcome = parser.read(answer, tools_for(expected))
        assert outcome.tool_calls is None, (parser.name, answer)
        # A quotation, no mistake to tell the model about. (auto may still refuse another
        # format's special token quoted inside it: that token is a call wherever it is.)
        if fmt in QUOTABLE and parser.name == fmt:
            assert outcome.error is None, (parser.name, answer, outcome.error)


@st.composite
def mutated(draw) -> str:
    """A valid output after random insertions, deletions, duplications and truncation."""
    _, text, _, _ = draw(rendered())
    for _ in range(draw(st.integers(1, 5))):
        op = draw(st.sampled_from(["insert", "fragment", "delete", "duplicate", "truncate"]))
        i = draw(st.integers(0, len(text)))
        j = draw(st.integers(i, min(len(text), i + 12)))
        if op == "insert":
            text = text[:i] + draw(st.text(max_size=4)) + text[i:]
        elif op == "fragment":
            text = text[:i] + draw(st.sampled_from(FRAGMENTS)) + text[i:]
        elif op == "delete":
            text = text[:i] + text[j:]
        elif op == "duplicate":
            text = text[:j] + text[i:j] + text[j:]
        else:
            text = text[:i]
    return text


@pytest.mark.slow
@settings(FAST, max_examples=1500)
@given(mutated())
def test_mutated_valid_output(text: str) -> None:
    run_all(text)


# --- a call nested inside another call's value is never run --------------------------------

VICTIM = "nested_victim"
WRITE_TOOL = [
    {
        "type": "function",
        "function": {
            "name": "write_file",
            "parameters": {"properties": {"content_string": {"type": "string"}}},
        },
    }
]


@st.composite
def nested_call(draw) -> tuple[str, str, list[Call] | None, int]:
    """(outer format, text, the calls written or None when cut, real victim calls).

    Several outer calls, one of them with a call quoted in its value, at any position;
    sometimes a real call to the quoted function comes before it (a parser that reads the
    quoted call then runs it twice). The text may be cut anywhere, as output that hit the
    token limit is.
    """
    inner_fmt, outer_fmt = (
        draw(st.sampled_from(sorted(RENDERERS))),
        draw(st.sampled_from(sorted(RENDERERS))),
    )
    victim_args = draw(st.sampled_from([{}, {"path_string": "/"}]))
    inner, _, _ = RENDERERS[inner_fmt][0]([(VICTIM, victim_args)], draw)
    # Values start and end with a letter: raw-text formats drop one layout newline each side.
    nested = ("write_file", {"content_string": "s" + draw(prose) + inner + draw(prose) + "e"})

    def plain() -> Call:
        return ("write_file", {"content_string": "s" + draw(prose) + "e"})

    before = [
        draw(st.sampled_from([(VICTIM, victim_args), plain()]))
        for _ in range(draw(st.integers(0, 2)))
    ]
    after = [plain() for _ in range(draw(st.integers(0, 2)))]
    calls = [*before, nested, *after]
    text, _, _ = RENDERERS[outer_fmt][0](calls, draw)
    real_victims = sum(name == VICTIM for name, _ in calls)
    if draw(st.booleans()):
        cut = draw(st.integers(0, len(text) - 1))
        return outer_fmt, text[:cut], None, real_victims
    return outer_fmt, text, calls, real_victims


@pytest.mark.slow
@settings(FAST, max_examples=1500)
@given(nested_call())
def test_a_call_nested_in_a_value_never_runs(
    case: tuple[str, str, list[Call] | None, int],
) -> None:
    fmt, text, written, real_victims = case
    for parser in (get_parser(fmt), get_parser("auto")):
        _, calls = run(parser, text, WRITE_TOOL)
        names = [call["function"]["name"] for call in calls or []]
        assert names.count(VICTIM) <= real_victims, (parser.name, text)
        if written is not None:  # read whole: the nested call is text of the outer call's value
            assert calls is not None, (parser.name, text)
            assert decoded(calls) == written
