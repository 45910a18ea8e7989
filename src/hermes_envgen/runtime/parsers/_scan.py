"""Linear-time scanning helpers and the generic "tagged call" parser most formats build on."""

from __future__ import annotations

import re
from abc import abstractmethod
from json.decoder import scanstring as _scanstring
from typing import Any, ClassVar, NamedTuple

from ._json import JSON_DECODER
from .base import ParseResult, ToolCallParser, UnreadableCall, make_tool_call, new_call_id
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

    def count(self, *args: Any) -> int:  # type: ignore[override]
        """Pretend there is no newline before the error (only feeds the error's lineno)."""
        return 0

    def rfind(self, *args: Any) -> int:  # type: ignore[override]
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
            return JSON_DECODER.raw_decode(self._doc, pos)  # type: ignore[no-any-return]
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


def call_from_object(obj: Any) -> tuple[str, Any] | None:
    """``(name, arguments)`` from a decoded ``{"name", "arguments" | "parameters"}`` object."""
    if not isinstance(obj, dict):
        return None
    name = obj.get("name")
    if not isinstance(name, str):
        return None
    return name, obj.get(arguments_key(obj))


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

    def _parse(self, text: str, schemas: ToolSchemas) -> ParseResult:
        """Scan every opening tag once, left to right."""
        scan = TextScan(text, schemas)
        call_open, call_close = self.call_open, self.call_close
        spans: list[tuple[int, int]] = []
        calls: list[dict[str, Any]] = []
        open_at = scan.find(call_open, 0)
        while open_at >= 0:
            body = open_at + len(call_open)
            result = self._parse_body(scan, body)
            call = None
            if result is not None:
                call_id = self._call_id(result)
                call = make_tool_call(
                    result.name, result.arguments, raw=result.raw, call_id=call_id
                )
            if result is None or call is None:
                raise UnreadableCall(
                    f"the call opened by {call_open} at character {open_at} could not be read"
                )
            stop = result.stop
            after = skip_ws(text, stop, len(text))
            if text.startswith(call_close, after):
                stop = after + len(call_close)
            elif self.close_required:
                raise UnreadableCall(f"the call to {result.name} is cut off before {call_close}")
            elif self._junk_before_close(scan, stop):
                raise UnreadableCall(
                    f"the call to {result.name} has stray text before its {call_close}"
                )
            spans.append((open_at, stop))
            calls.append(call)
            open_at = scan.find(call_open, stop)
        content, found = assemble(text, spans, calls)
        if found is None:
            return text, None
        if content is not None and self.section_markers:
            for marker in self.section_markers:
                content = content.replace(marker, "")
            content = content.strip() or None
        return content, found
