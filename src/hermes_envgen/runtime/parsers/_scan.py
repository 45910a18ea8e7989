"""Linear-time scanning helpers and the generic "tagged call" parser most formats build on."""

from __future__ import annotations

import re
from abc import abstractmethod
from json.decoder import scanstring as _scanstring  # type: ignore[attr-defined]  # not in typeshed
from typing import Any, ClassVar, NamedTuple

from ._json import JSON_DECODER
from .base import (
    NoCallMeant,
    ParseResult,
    ToolCallParser,
    UnreadableCall,
    make_tool_call,
    new_call_id,
)
from .schema import LiteralBudget, ToolSchemas

# A single character class with `*`/`+`: cannot backtrack, so matching stays linear.
_WS = re.compile(r"\s*")
# A function name: starts with a word character, then no whitespace, quotes or brackets.
_NAME = re.compile(r"\w[^\s<>{}\[\]\"'`]*")


class BodyResult(NamedTuple):
    """One call as read from its body."""

    name: str
    arguments: Any
    stop: int  # end of the consumed markup
    raw: str | None = None  # the argument object exactly as written, when the format has one
    call_id: str | None = None  # the id the model wrote, when the format has one


class _JsonDoc(str):
    """The text to decode, with line/column bookkeeping for decode errors made O(1).

    ``json.JSONDecodeError`` counts newlines from the start of the document on every failure,
    which would make many failed decodes in one long text quadratic. Only error messages use
    those numbers, and this module never shows them.
    """

    __slots__ = ()

    def count(self, *args: Any) -> int:
        """Pretend there is no newline before the error (only feeds the error's lineno)."""
        return 0

    def rfind(self, *args: Any) -> int:
        """Pretend there is no newline before the error (only feeds the error's colno)."""
        return -1


class TextScan:
    """Per-parse scanning state: memoised ``find`` and JSON reading at any position.

    ``find`` remembers, per needle, where it last searched and what it found, so a scan
    that moves forward never reads the same text twice for the same needle.
    """

    __slots__ = ("_doc", "_memo", "literal_budget", "schemas", "text")

    def __init__(self, text: str, schemas: ToolSchemas | None = None) -> None:
        """Remember the text to search and the offered tools' parameter schemas."""
        self.text = text
        self.schemas: ToolSchemas = schemas or {}
        self.literal_budget = LiteralBudget()  # shared by every raw-text value of this text
        self._memo: dict[str, tuple[int, int]] = {}
        self._doc: _JsonDoc | None = None

    def find(self, needle: str, start: int, end: int | None = None) -> int:
        """Index of the first ``needle`` wholly inside ``[start, end)``, or -1."""
        searched_from, found = self._memo.get(needle, (-1, -1))
        if searched_from < 0 or (start >= searched_from and 0 <= found < start):
            found = self.text.find(needle, start)  # no usable memo: search forward
        elif start < searched_from:
            # Only the stretch before the last search is unknown; the old answer covers the rest.
            hit = self.text.find(needle, start, searched_from + len(needle) - 1)
            if hit >= 0:
                found = hit
        else:
            start = searched_from  # the memo answers: nothing between, `found` is next
        self._memo[needle] = (start, found)
        if found < 0 or (end is not None and found + len(needle) > end):
            return -1
        return found

    def value_at(self, pos: int) -> tuple[Any, int] | None:
        """Decode one JSON value starting at ``pos``; ``(value, end index)`` or None."""
        if self._doc is None:
            self._doc = _JsonDoc(self.text)
        try:
            return JSON_DECODER.raw_decode(self._doc, pos)
        except (ValueError, RecursionError):
            return None

    def object_at(self, pos: int) -> tuple[dict[str, Any], int, int] | None:
        """Decode a JSON object starting at ``pos`` after whitespace: ``(object, start, end)``.

        The object may run past markup inside its strings, so a tag quoted in an argument
        does not cut the call short.
        """
        text = self.text
        start = skip_ws(text, pos, len(text))
        # Cheap rejections first: an exception costs more than a (memoised) look for "}".
        if start >= len(text) or text[start] != "{" or self.find("}", start) < 0:
            return None
        result = self.value_at(start)
        if result is None or not isinstance(result[0], dict):
            return None
        return result[0], start, result[1]

    def member_text(self, start: int, keys: tuple[str, ...]) -> str | None:
        """The text of the last of ``keys`` in the (already decoded) JSON object at ``start``.

        Walks the object's top-level members again, so the argument object keeps exactly the
        text the model wrote.
        """
        text, n = self.text, len(self.text)
        pos, found = start + 1, None
        while True:
            pos = skip_ws(text, pos, n)
            if pos >= n or text[pos] != '"':
                return found
            key, pos = _scanstring(text, pos + 1, False)
            pos = skip_ws(text, pos, n)
            if pos >= n or text[pos] != ":":
                return found
            pos = skip_ws(text, pos + 1, n)
            decoded = self.value_at(pos)
            if decoded is None:
                return found
            if key in keys:
                found = text[pos : decoded[1]]
            pos = skip_ws(text, decoded[1], n)
            if pos >= n or text[pos] != ",":
                return found
            pos += 1

    def closing_tag(self, start: int, open_tag: str, close_tag: str) -> int:
        """Index of the ``close_tag`` that balances the tags from ``start`` on, or -1.

        Raw-text values may quote markup, a whole call included: nested open/close pairs
        are skipped, so a call written inside a value stays part of that value.
        """
        pattern = _TAG_PAIRS.get((open_tag, close_tag))
        if pattern is None:
            pattern = re.compile(f"{re.escape(open_tag)}|{re.escape(close_tag)}")
            _TAG_PAIRS[(open_tag, close_tag)] = pattern
        depth, pos = 0, start
        while True:
            match = pattern.search(self.text, pos)
            if match is None:
                return -1
            if match.group() == close_tag:
                if depth == 0:
                    return match.start()
                depth -= 1
            else:
                depth += 1
            pos = match.end()


_TAG_PAIRS: dict[tuple[str, str], re.Pattern[str]] = {}


def object_body(
    scan: TextScan, name: str, pos: int, call_id: str | None = None
) -> BodyResult | None:
    """A call whose arguments are the JSON object at ``pos``, its text kept as written."""
    decoded = scan.object_at(pos)
    if decoded is None:
        return None
    arguments, start, stop = decoded
    return BodyResult(name, arguments, stop, scan.text[start:stop], call_id)


# What changes Markdown's code state: a line break, a backtick run, a tilde fence.
_MD_EVENT = re.compile(r"\n|`+|~{3,}")
# Text right after an opening tag that is prose, not a call body: up to the next tag.
_NOT_PROSE = re.compile(r"[\n<{]")


class MarkdownCode:
    """Whether a position lies in Markdown code: a fenced block or an inline code span.

    Reads the text between calls once, left to right (call markup is skipped with
    :meth:`skip_to`, so a fence inside an argument value changes nothing). Close enough to
    CommonMark for the one question asked: a fence is three or more backticks or tildes
    opening a line (after at most three spaces) and is closed by a like run opening a line;
    an inline span is a backtick run closed by one of the same length on the same line, and
    an unclosed run counts as open to the end of its line (a call after it is not trusted).
    """

    __slots__ = ("_fence", "_inline", "_line_start", "_pos", "_text")

    def __init__(self, text: str) -> None:
        """Start before the first character, outside code."""
        self._text = text
        self._pos = 0
        self._line_start = 0
        self._fence = ""  # the run that opened the fenced block we are in
        self._inline = 0  # length of the backtick run that opened an inline span

    def skip_to(self, pos: int) -> None:
        """Jump over text that is no Markdown (a call's markup)."""
        self._pos = max(self._pos, pos)

    def inside(self, pos: int) -> bool:
        """True when ``pos`` (at or after the last position asked) lies in code."""
        text = self._text
        for event in _MD_EVENT.finditer(text, self._pos, max(pos, self._pos)):
            run, at = event.group(), event.start()
            if run == "\n":
                self._line_start, self._inline = at + 1, 0
                continue
            opens_line = at - self._line_start <= 3 and not text[self._line_start : at].strip(" ")
            if self._fence:
                if opens_line and run[0] == self._fence[0] and len(run) >= len(self._fence):
                    self._fence = ""
            elif opens_line and len(run) >= 3:
                self._fence, self._inline = run, 0
            elif run[0] == "`":
                self._inline = 0 if self._inline == len(run) else self._inline or len(run)
        self._pos = max(pos, self._pos)
        return bool(self._fence) or self._inline > 0


def earliest(*positions: int) -> int:
    """Smallest non-negative position, or -1 when all are -1."""
    best = -1
    for at in positions:
        if at >= 0 and (best < 0 or at < best):
            best = at
    return best


def skip_ws(text: str, pos: int, end: int) -> int:
    """Index of the first non-whitespace character at or after ``pos`` (at most ``end``)."""
    if pos >= end or not text[pos].isspace():  # the common case, without the regex call
        return pos
    return _WS.match(text, pos, end).end()  # type: ignore[union-attr]  # `\s*` always matches


def is_valid_name(name: str) -> bool:
    """True for a plausible function name written as raw text (no spaces or markup)."""
    return _NAME.fullmatch(name) is not None


# The members a call object may have. Anything else means the object is no call as the
# format writes it: an answer about someone named "Alice", an echoed tool definition
# ("description"), or arguments under a key no template writes ("args", "input").
CALL_KEYS = frozenset({"name", "arguments", "parameters", "id", "type"})
# Keys models put arguments under by mistake: the call is meant, but unreadable.
MISPLACED_ARGUMENT_KEYS = frozenset(
    {"args", "input", "inputs", "params", "kwargs", "argument", "parameter", "arguments_json"}
)


def call_from_object(obj: Any, *, arguments_required: bool = False) -> tuple[str, Any] | None:
    """``(name, arguments)`` from a decoded ``{"name", "arguments" | "parameters"}`` object.

    None when the object is no call (no string ``name``, members a call does not have, or,
    with ``arguments_required``, no argument member). Raises ``UnreadableCall`` when it is
    meant as a call but its arguments sit under another key: running it would drop them.
    """
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str):
        return None
    extra = obj.keys() - CALL_KEYS
    misplaced = sorted(extra & MISPLACED_ARGUMENT_KEYS)
    if misplaced and not obj.keys() & {"arguments", "parameters"}:
        raise UnreadableCall(
            f'the call to {name[:80]} puts its arguments under "{misplaced[0]}"; they belong'
            ' under "arguments" (or "parameters")'
        )
    if extra or ("arguments" in obj and "parameters" in obj):
        return None
    if arguments_required and not obj.keys() & {"arguments", "parameters"}:
        return None
    return name, obj.get(arguments_key(obj))


def call_object_problem(obj: Any) -> str:
    """Why a decoded object in a call's place is not a call, in one line for the model."""
    if not isinstance(obj, dict) or not isinstance(obj.get("name"), str):
        return 'the JSON object has no string "name"'
    extra = sorted(obj.keys() - CALL_KEYS)
    if extra:
        shown = ", ".join(f'"{key[:40]}"' for key in extra[:3])
        return f"the call to {obj['name'][:80]} has members a call does not have: {shown}"
    if "arguments" in obj and "parameters" in obj:
        return f'the call to {obj["name"][:80]} has both "arguments" and "parameters"'
    return f"the arguments of the call to {obj['name'][:80]} are not a JSON object"


def arguments_key(obj: dict[str, Any]) -> str:
    """The key holding a call object's arguments: Llama and some Hermes fine-tunes write
    ``parameters``."""
    return "arguments" if "arguments" in obj else "parameters"


def strip_layout_newlines(raw: str) -> str:
    """Drop exactly one leading and one trailing newline: markup that puts values on own lines."""
    if raw.startswith("\r\n"):
        raw = raw[2:]
    elif raw.startswith("\n"):
        raw = raw[1:]
    if raw.endswith("\r\n"):
        raw = raw[:-2]
    elif raw.endswith("\n"):
        raw = raw[:-1]
    return raw


def assemble(text: str, spans: list[tuple[int, int]], calls: list[dict[str, Any]]) -> ParseResult:
    """Content is ``text`` minus the sorted, disjoint call ``spans``; no call gives (text, None)."""
    if not calls:
        return text, None
    pieces = []
    pos = 0
    for start, stop in spans:
        gap = text[pos:start]
        if pos == 0 or not gap.isspace():  # whitespace between two calls is layout, not content
            pieces.append(gap)
        pos = stop
    pieces.append(text[pos:])
    content = "".join(pieces).strip()
    return (content or None), calls


class TaggedCallParser(ToolCallParser):
    """Calls delimited by an opening and a closing tag, optionally inside section markers.

    Each opening tag is tried once, left to right. A body parser reads the call and says
    where its markup stopped; the closing tag must follow (after whitespace). A call without
    its closing tag still counts when nothing but a later call or the end of text follows
    before the next closing tag: the text after it then stays content. After a call the scan
    resumes past it, so tags quoted inside its arguments are never mistaken for calls.

    An opening tag whose call cannot be read makes the whole text an unreadable call
    (``UnreadableCall``): whatever follows it may be inside the arguments it failed to read
    (a call quoted in a value, then cut off), so no call further on is trusted. Common
    serving stacks skip to the next opening tag and can run such a quoted call.
    """

    call_open: ClassVar[str] = ""
    call_close: ClassVar[str] = ""
    # Section markers end a call body and are dropped from content once a call is found.
    section_markers: ClassVar[tuple[str, ...]] = ()
    # True where only the closing tag shows that the arguments are complete.
    close_required: ClassVar[bool] = False
    # True where the tags are plain text that prose and Markdown quote (``<tool_call>``):
    # a tag inside Markdown code, or followed by prose, is a quotation and no call. False
    # where the markup is special tokens no prose writes (Kimi, DeepSeek), which a call
    # may even contain a fence in.
    quotable: ClassVar[bool] = False
    # A call may also open with this, without ``call_open`` (Qwen3-Coder's ``<function=``).
    bare_open: ClassVar[str] = ""

    @abstractmethod
    def _parse_body(self, scan: TextScan, start: int) -> BodyResult | None:
        """Read one call whose body starts at ``start``; ``(name, arguments, stop)`` or None."""

    def _bound(self, scan: TextScan, start: int) -> int:
        """End of a body that cannot contain markup: the next tag of any kind, or end of text."""
        bound = len(scan.text)
        for needle in (self.call_close, self.call_open, *self.section_markers):
            at = scan.find(needle, start, bound)
            if at >= 0:
                bound = at
        return bound

    def _junk_before_close(self, scan: TextScan, stop: int) -> bool:
        """True when this call's closing tag comes later, after stray text."""
        close_at = scan.find(self.call_close, stop)
        if close_at < 0:
            return False
        return all(
            scan.find(needle, stop, close_at) < 0
            for needle in (self.call_open, *self.section_markers)
        )

    def _call_id(self, result: BodyResult) -> str:
        """The id the format's chat template expects; by default a fresh OpenAI-style one."""
        return new_call_id()

    def _is_mention(self, scan: TextScan, open_at: int, bare: bool) -> bool:
        """True when the tag at ``open_at`` is named in prose, not opening a call.

        ``Wrap calls in <tool_call> and </tool_call> tags.``: after the tag come a space and
        words on one line, no brace, no markup. No chat template writes a call that way.
        """
        text = scan.text
        body = open_at + len(self.call_open)
        if bare or body >= len(text) or text[body] not in " \t":
            return False
        bound = self._bound(scan, body)
        return _NOT_PROSE.search(text, body, bound) is None and not text[body:bound].isspace()

    def _next_open(self, scan: TextScan, pos: int) -> tuple[int, bool]:
        """The next opening at or after ``pos`` and whether it is a bare one; -1 when none."""
        at = scan.find(self.call_open, pos)
        if not self.bare_open:
            return at, False
        bare_at = scan.find(self.bare_open, pos, at if at >= 0 else None)
        return (bare_at, True) if bare_at >= 0 else (at, False)

    def _parse(self, text: str, schemas: ToolSchemas) -> ParseResult:
        """Scan every opening tag once, left to right."""
        scan = TextScan(text, schemas)
        call_open, call_close = self.call_open, self.call_close
        code = MarkdownCode(text) if self.quotable else None
        quoted = False
        spans: list[tuple[int, int]] = []
        calls: list[dict[str, Any]] = []
        open_at, bare = self._next_open(scan, 0)
        while open_at >= 0:
            body = open_at if bare else open_at + len(call_open)
            if code is not None and (code.inside(open_at) or self._is_mention(scan, open_at, bare)):
                quoted = True  # a quotation: the scan goes on after the tag
                open_at, bare = self._next_open(scan, open_at + 1)
                continue
            result = self._parse_body(scan, body)
            call = None
            if result is not None:
                call_id = self._call_id(result)
                call = make_tool_call(
                    result.name, result.arguments, raw=result.raw, call_id=call_id
                )
            if result is None or call is None:
                opened = self.bare_open if bare else call_open
                raise UnreadableCall(
                    f"the call opened by {opened} at character {open_at} could not be read"
                )
            stop = result.stop
            after = skip_ws(text, stop, len(text))
            if text.startswith(call_close, after):
                stop = after + len(call_close)
            elif bare:
                pass  # a bare call ends with its own block
            elif self.close_required:
                raise UnreadableCall(f"the call to {result.name} is cut off before {call_close}")
            elif self._junk_before_close(scan, stop):
                raise UnreadableCall(
                    f"the call to {result.name} has stray text before its {call_close}"
                )
            spans.append((open_at, stop))
            calls.append(call)
            if code is not None:
                code.skip_to(stop)
            open_at, bare = self._next_open(scan, stop)
        if not calls and quoted:
            raise NoCallMeant
        content, found = assemble(text, spans, calls)
        if found is None:
            return text, None
        if content is not None and self.section_markers:
            for marker in self.section_markers:
                content = content.replace(marker, "")
            content = content.strip() or None
        return content, found
