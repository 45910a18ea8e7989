"""Format detection: pick the parser whose markers occur, most specific first, and delegate.

Auto never guesses: a call in Markdown code or markup named in prose (``settled``) is no call
for any candidate. The first candidate that sees an unreadable call decides: later candidates
are not tried, as their calls may be quoted inside the broken one
(``<tool_call>x</tool_call>`` then a Qwen3-Coder call is unreadable, not a GLM call ``x``).
"""

from __future__ import annotations

from . import deepseek, glm, gpt_oss, hermes, kimi_k2, llama, mistral, qwen3_coder
from ._scan import MarkdownCode, skip_ws
from .base import (
    NoCallMeant,
    ParseOutcome,
    ParseResult,
    ToolCallParser,
    UnreadableCall,
    register_parser,
)
from .schema import ToolSchemas

__all__ = ["AutoParser", "detect_formats"]

_QWEN3_CODER = qwen3_coder.Qwen3CoderParser()
_GLM = glm.Glm47Parser()  # reads GLM-4.5 layout too
_HERMES = hermes.HermesParser()
_LONGCAT = hermes.LongcatParser()
_MISTRAL = mistral.MistralParser()
_DEEPSEEK_V3 = deepseek.DeepSeekV3Parser()
_DEEPSEEK_V31 = deepseek.DeepSeekV31Parser()
_KIMI = kimi_k2.KimiK2Parser()
_LLAMA = llama.Llama3JsonParser()
_GPT_OSS = gpt_oss.GptOssParser()

TOOL_CALL = "<tool_call>"


def _first_unquoted(text: str, tag: str) -> int:
    """Where ``tag`` first occurs outside Markdown code, else where it first occurs, or -1.

    The body after it decides which ``<tool_call>`` format to try first; a quoted example
    before the real call must not decide.
    """
    first = text.find(tag)
    code = MarkdownCode(text)
    at = first
    while at >= 0:
        if not code.inside(at):
            return at
        at = text.find(tag, at + 1)
    return first


def _candidates(text: str) -> list[ToolCallParser]:
    """Parsers whose markers occur in ``text``, in the order to try them.

    Formats are ordered by where their first marker appears: real markup comes before
    anything quoted inside its own arguments, so a Kimi call whose arguments mention
    ``<tool_call>`` is still read as Kimi. Formats sharing an opening marker are ordered
    most specific first, judged by what follows that marker.
    """
    found: list[tuple[int, int, ToolCallParser]] = []  # (position, tie-break, parser)
    if text.lstrip().startswith((gpt_oss.CHANNEL, gpt_oss.START, "to=" + gpt_oss.FUNCTIONS)):
        # Harmony output opens with its header: the whole text is harmony messages.
        return [_GPT_OSS]
    if text.lstrip().startswith(("{", llama.PYTHON_TAG)):
        # Llama calls are the whole message: when they parse, nothing else can be markup.
        found.append((-1, 0, _LLAMA))
    at = _first_unquoted(text, TOOL_CALL)
    if at >= 0:
        body = skip_ws(text, at + len(TOOL_CALL), len(text))
        if text.startswith(qwen3_coder.FUNCTION_OPEN, body):
            order = [_QWEN3_CODER, _GLM, _HERMES]
        elif text.startswith("{", body):
            order = [_HERMES, _QWEN3_CODER, _GLM]
        else:
            order = [_GLM, _QWEN3_CODER, _HERMES]
        if glm.KEY_OPEN in text and order[0] is not _GLM:
            # GLM's <arg_key> is more specific than a Hermes body that failed to look like JSON.
            order.remove(_GLM)
            order.insert(1, _GLM)
        found += [(at, rank, parser) for rank, parser in enumerate(order)]
    bare = text.find(qwen3_coder.FUNCTION_OPEN)
    if bare >= 0 and (at < 0 or bare < at):
        found.append((bare, 0, _QWEN3_CODER))  # a <function=...> block without <tool_call>
    for marker, parser in (("<longcat_tool_call>", _LONGCAT), (mistral.MARKER, _MISTRAL)):
        at = text.find(marker)
        if at >= 0:
            found.append((at, 0, parser))
    at = text.find(deepseek.CALL_BEGIN)
    if at >= 0:
        body = skip_ws(text, at + len(deepseek.CALL_BEGIN), len(text))
        v3_first = text.startswith("function", body) and text.startswith(
            deepseek.SEP, skip_ws(text, body + len("function"), len(text))
        )
        order = [_DEEPSEEK_V3, _DEEPSEEK_V31] if v3_first else [_DEEPSEEK_V31, _DEEPSEEK_V3]
        found += [(at, rank, parser) for rank, parser in enumerate(order)]
    at = text.find(kimi_k2.CALL_BEGIN)
    if at >= 0:
        found.append((at, 0, _KIMI))
    found.sort(key=lambda item: (item[0], item[1]))
    return [parser for _, _, parser in found]


def detect_formats(text: str) -> list[str]:
    """Names of the parsers whose markers occur in ``text``, in the order auto tries them."""
    return [parser.name for parser in _candidates(text)]


@register_parser("auto")
class AutoParser(ToolCallParser):
    """Recognises any supported format from its markers and delegates to that parser."""

    format = "any supported format, recognised from its markers (most specific first)"
    markers = tuple(
        sorted(
            {TOOL_CALL, "<longcat_tool_call>", mistral.MARKER, deepseek.CALL_BEGIN}
            | {kimi_k2.CALL_BEGIN, "{", qwen3_coder.FUNCTION_OPEN, gpt_oss.MESSAGE}
        )
    )

    def _parse(self, text: str, schemas: ToolSchemas) -> ParseResult | ParseOutcome:
        """Try the candidate parsers in order; the first one that finds a call wins.

        Harmony output (it opens with ``<|channel|>`` or ``<|start|>``) is gpt-oss's alone,
        and its reading, answer and reasoning split, is auto's.

        When a more specific candidate saw a call it could not read, a later candidate's
        calls may be quoted inside that call's value: the text is an unreadable call then.
        A candidate whose own markup occurs but that reads neither a call nor an error is
        treated the same way (Llama's ``{`` is no markup: JSON prose is an answer).
        """
        settled = False
        for parser in _candidates(text):
            outcome = parser.read_with_schemas(text, schemas)
            if parser is _GPT_OSS:
                if outcome.error is not None:
                    raise UnreadableCall(f"{outcome.error} (read as {parser.name})")
                return outcome
            if outcome.tool_calls:
                return outcome.content, outcome.tool_calls
            if outcome.settled:
                settled = True  # markup only named or quoted, or a JSON answer: no call meant
                continue
            if outcome.error is not None:
                raise UnreadableCall(f"{outcome.error} (read as {parser.name})")
            marker = next((m for m in parser.markers if m in text), None)
            if parser is not _LLAMA and marker is not None:
                raise UnreadableCall(
                    f"the text holds {marker} but no call could be read from it"
                    f" (read as {parser.name})"
                )
        if settled:
            raise NoCallMeant
        return text, None
