"""Linear-time scanning helpers and the generic "tagged call" parser most formats build on."""

from __future__ import annotations

import re
from abc import abstractmethod
from typing import Any, ClassVar

from .base import JSON_DECODER, ParseResult, ToolCallParser, make_tool_call

# A single character class with `*`/`+`: cannot backtrack, so matching stays linear.
_WS = re.compile(r"\s*")
# A function name: starts with a word character, then no whitespace, quotes or brackets.
_NAME = re.compile(r"\w[^\s<>{}\[\]\"'`]*")

# (name, arguments, end of the consumed markup) as read from one call's body.
BodyResult = tuple[str, Any, int]


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

    __slots__ = ("_doc", "_memo", "text")

    def __init__(self, text: str) -> None:
        """Remember the text to search."""
        self.text = text
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

    def object_at(self, pos: int, end: int | None = None) -> tuple[dict[str, Any], int] | None:
        """Decode a JSON object starting at ``pos`` after whitespace, ending by ``end`` if given.

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
        if end is not None and result[1] > end:
            return None
        return result


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
    # Llama writes "parameters"; some Hermes fine-tunes do too.
    arguments = obj["arguments"] if "arguments" in obj else obj.get("parameters")
    return name, arguments


def convert_param_value(raw: str) -> Any:
    """Convert a raw-text parameter value: JSON number/bool/null/object/array, else the string."""
    # Strip exactly one leading and one trailing newline: the markup puts values on own lines.
    if raw.startswith("\r\n"):
        raw = raw[2:]
    elif raw.startswith("\n"):
        raw = raw[1:]
    if raw.endswith("\r\n"):
        raw = raw[:-2]
    elif raw.endswith("\n"):
        raw = raw[:-1]
    stripped = raw.strip()
    if not stripped or stripped[0] == '"':  # JSON strings stay verbatim, quotes included
        return raw
    try:
        value = JSON_DECODER.decode(stripped)
    except (ValueError, RecursionError):
        return raw
    return value


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
    """

    call_open: ClassVar[str] = ""
    call_close: ClassVar[str] = ""
    # Section markers end a call body and are dropped from content once a call is found.
    section_markers: ClassVar[tuple[str, ...]] = ()

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

    def _parse(self, text: str) -> ParseResult:
        """Scan every opening tag once, left to right."""
        scan = TextScan(text)
        call_open, call_close = self.call_open, self.call_close
        spans: list[tuple[int, int]] = []
        calls: list[dict[str, Any]] = []
        open_at = scan.find(call_open, 0)
        while open_at >= 0:
            body = open_at + len(call_open)
            result = self._parse_body(scan, body)
            call = make_tool_call(result[0], result[1]) if result is not None else None
            if result is None or call is None:
                open_at = scan.find(call_open, body)
                continue
            stop = result[2]
            after = skip_ws(text, stop, len(text))
            if text.startswith(call_close, after):
                stop = after + len(call_close)
            elif self._junk_before_close(scan, stop):
                open_at = scan.find(call_open, body)
                continue
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
