"""Llama 3.x / 4 JSON tool calls: the whole message is ``{"name", "parameters"}`` object(s)."""

from __future__ import annotations

import re
from typing import Any

from ._json import JSON_DECODER
from ._scan import TextScan, arguments_key, call_from_object, call_object_problem, skip_ws
from .base import (
    NoCallMeant,
    ParseResult,
    ToolCallParser,
    UnreadableCall,
    make_tool_call,
    register_parser,
)
from .schema import ToolSchemas

__all__ = ["Llama3JsonParser", "Llama4JsonParser"]

PYTHON_TAG = "<|python_tag|>"
_CALL_START = re.compile(r'\{\s*"name"\s*:')


@register_parser("llama3_json")
class Llama3JsonParser(ToolCallParser):
    """Llama 3.x JSON calls; prose that merely contains JSON is not a call.

    An object is a call only with a string ``name``, an argument member (``parameters`` or
    ``arguments``) and nothing else but ``type``/``id``: a JSON answer that has a ``name``
    key, or an echoed tool definition, stays the answer. Arguments under a key such as
    ``args`` make it an unreadable call (running it would drop them).

    A message that opens with ``<|python_tag|>`` or a call object but is cut off, broken, or
    followed by anything but calls is an unreadable call, not an answer: its strings may quote
    calls of other formats, which ``auto`` must not read instead.
    """

    format = (
        '[<|python_tag|>]{"name": ..., "arguments"|"parameters": {...}}[; {...}] '
        "as the whole message"
    )
    markers = ("{", PYTHON_TAG)

    def _parse(self, text: str, schemas: ToolSchemas) -> ParseResult:
        """Read ``;``-separated call objects; a message opened by a call holds nothing else."""
        n = len(text)
        pos = skip_ws(text, 0, n)
        # The tag says a call follows: whatever does not read as one is an unreadable call.
        tagged = text.startswith(PYTHON_TAG, pos)
        if tagged:
            pos = skip_ws(text, pos + len(PYTHON_TAG), n)
        if pos >= n or text[pos] != "{":
            if tagged:
                raise UnreadableCall(f"{PYTHON_TAG} is not followed by a JSON call")
            return text, None
        # Decode on the message itself: the first decode error ends the scan, so its
        # O(position) line/column bookkeeping happens at most once.
        calls: list[dict[str, Any]] = []
        scan = TextScan(text)
        looks_like_call = tagged or _CALL_START.match(text, pos) is not None
        while True:
            start = pos
            try:
                obj, pos = JSON_DECODER.raw_decode(text, pos)
            except (ValueError, RecursionError):
                if calls or looks_like_call:
                    # Cut off or broken: its strings may quote calls of other formats.
                    raise UnreadableCall("the JSON call is cut off or is not valid JSON") from None
                return text, None
            # Only a call-shaped object is a call: {"name": "Alice", "age": 30} is an answer,
            # and so is an echoed tool definition ({"name", "description", "parameters"}).
            parsed = call_from_object(obj, arguments_required=True)
            call = None
            if parsed is not None:
                raw = None
                if isinstance(parsed[1], dict):
                    raw = scan.member_text(start, (arguments_key(obj),))
                call = make_tool_call(*parsed, raw=raw)
                if call is None:  # a call whose arguments are no object: meant, unreadable
                    raise UnreadableCall(
                        f"the JSON object at character {start} is not a call"
                        f" ({call_object_problem(obj)})"
                    )
            if call is None:
                if calls or tagged:
                    # Skipping it would run the calls around one the model meant.
                    raise UnreadableCall(
                        f"the JSON object at character {start} is not a call"
                        f" ({call_object_problem(obj)})"
                    )
                raise NoCallMeant  # JSON that is not a call: an answer
            calls.append(call)
            pos = skip_ws(text, pos, n)
            if pos < n and text[pos] == ";":
                pos = skip_ws(text, pos + 1, n)
                if pos < n and text[pos] == "{":
                    continue  # the next call
            if pos >= n:
                return None, calls
            # Prose after a call may quote calls of other formats, which must not run.
            raise UnreadableCall("a JSON call must be the whole message; text follows it")


@register_parser("llama4_json")
class Llama4JsonParser(Llama3JsonParser):
    """Llama 4 in JSON tool-call mode: same markup as Llama 3.x."""

    format = Llama3JsonParser.format
