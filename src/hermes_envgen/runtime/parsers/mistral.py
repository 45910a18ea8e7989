"""Mistral ``[TOOL_CALLS]`` calls: a JSON array (tokenizer < v11) or ``name{args}`` (v11+).

Ids are what Mistral's chat templates require (they raise on anything else): 9 alphanumeric
characters, the model's own when it wrote one (``"id"`` in the array, ``[CALL_ID]`` in v13).
The argument object keeps the text the model wrote, which v11+ templates print back. On
purpose, unlike stacks that skip what they cannot read, a ``[TOOL_CALLS]`` segment or array
that does not read, an array element that is not a call, or an array without a call makes
the text an unreadable call: what follows may be inside its strings.
Text after the calls is not content (the model ends its turn there).
"""

from __future__ import annotations

import re
from typing import Any

from ._scan import TextScan, arguments_key, call_from_object, earliest, is_valid_name, skip_ws
from .base import (
    ParseResult,
    ToolCallParser,
    UnreadableCall,
    make_tool_call,
    new_alnum_id,
    register_parser,
)
from .schema import ToolSchemas

__all__ = ["MistralParser"]

MARKER = "[TOOL_CALLS]"
ARGS = "[ARGS]"
CALL_ID = "[CALL_ID]"
_MISTRAL_ID = re.compile(r"[A-Za-z0-9]{9}")


def mistral_id(written: Any) -> str:
    """The model's id when it is one Mistral's templates accept, else a fresh one."""
    if isinstance(written, str) and _MISTRAL_ID.fullmatch(written):
        return written
    return new_alnum_id(9)


def _object_call(scan: TextScan, obj: Any, start: int) -> dict[str, Any] | None:
    """The call a decoded ``{"name", "arguments", "id"?}`` object at ``start`` makes, or None."""
    parsed = call_from_object(obj)
    if parsed is None:
        return None
    raw = scan.member_text(start, (arguments_key(obj),)) if isinstance(parsed[1], dict) else None
    return make_tool_call(*parsed, raw=raw, call_id=mistral_id(obj.get("id")))


def _array_calls(scan: TextScan, start: int, calls: list[dict[str, Any]]) -> int:
    """Append calls from the JSON array at ``start``; return where reading stopped.

    Elements are decoded one by one so complete calls survive a missing ``]`` at the end.
    An element that is not a call, or an array without one, makes the text unreadable:
    skipping it would run whatever follows, which may be quoted inside what was meant.
    """
    text, n = scan.text, len(scan.text)
    pos = start + 1  # past "["
    found = len(calls)
    while True:
        pos = skip_ws(text, pos, n)
        if pos >= n or text[pos] == "]":
            break
        decoded = scan.value_at(pos)
        if decoded is None:
            # Broken JSON: a marker further on may sit inside one of its strings.
            raise UnreadableCall(f"the {MARKER} array is not valid JSON")
        call = _object_call(scan, decoded[0], pos)
        if call is None:
            raise UnreadableCall(f"the {MARKER} array element at character {pos} is not a call")
        calls.append(call)
        pos = skip_ws(text, decoded[1], n)
        if pos >= n or text[pos] != ",":
            break
        pos += 1
    if len(calls) == found:
        raise UnreadableCall(f"the {MARKER} array holds no call")
    return pos + 1 if pos < n and text[pos] == "]" else pos


def _named_call(scan: TextScan, start: int, end: int) -> tuple[dict[str, Any] | None, int]:
    """One v11+ call: ``name``, optional ``[CALL_ID]id`` and ``[ARGS]``, then a JSON object.

    The name part ends before ``end`` (the next marker); the arguments may run past it when
    a marker is quoted inside them. Returns the call (or None) and where reading stopped.
    """
    text = scan.text
    brace = text.find("{", start, end)
    name_end = earliest(brace, text.find("[", start, end))
    if name_end < 0:
        return None, start
    name = text[start:name_end].strip()
    if not is_valid_name(name):
        return None, start
    pos = name_end
    written_id = None
    if text.startswith(CALL_ID, pos, end):
        # The id runs up to "[ARGS]" or the arguments' opening brace.
        args_at = text.find(ARGS, pos, end)
        id_end = args_at if args_at >= 0 else (brace if brace >= 0 else end)
        written_id = text[pos + len(CALL_ID) : id_end].strip()
        pos = id_end
    if text.startswith(ARGS, pos, end):
        pos += len(ARGS)
    decoded = scan.object_at(pos)
    if decoded is None:
        return None, start
    arguments, obj_start, stop = decoded
    raw = text[obj_start:stop]
    return make_tool_call(name, arguments, raw=raw, call_id=mistral_id(written_id)), stop


@register_parser("mistral")
class MistralParser(ToolCallParser):
    """Mistral: ``[TOOL_CALLS][{...}, ...]`` or ``[TOOL_CALLS]name{...}[TOOL_CALLS]name{...}``."""

    format = '[TOOL_CALLS][{"name": ..., "arguments": {...}}, ...] or [TOOL_CALLS]name{args}...'
    markers = (MARKER,)

    def _parse(self, text: str, schemas: ToolSchemas) -> ParseResult:
        """Read the calls after each ``[TOOL_CALLS]``; markers inside read JSON are skipped."""
        scan = TextScan(text)
        n = len(text)
        first = scan.find(MARKER, 0)
        if first < 0:
            return text, None
        calls: list[dict[str, Any]] = []
        at = first
        while at >= 0:
            pos = skip_ws(text, at + len(MARKER), n)
            if text.startswith("[", pos):
                stop = _array_calls(scan, pos, calls)
                at = scan.find(MARKER, stop)
                continue
            call = None
            if text.startswith("{", pos):  # a bare object instead of a one-element array
                decoded = scan.object_at(pos)
                call = _object_call(scan, decoded[0], pos) if decoded else None
                stop = decoded[2] if decoded else pos
            elif pos < n:
                next_marker = scan.find(MARKER, pos)
                call, stop = _named_call(scan, pos, next_marker if next_marker >= 0 else n)
            if call is None:
                # Whatever follows may be inside the arguments it failed to read.
                raise UnreadableCall(f"the call after {MARKER} at character {at} could not be read")
            calls.append(call)
            at = scan.find(MARKER, stop)
        if not calls:
            return text, None
        return text[:first].strip() or None, calls
