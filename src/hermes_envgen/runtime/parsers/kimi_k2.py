"""Kimi K2 calls: ``<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}``.

The call id is ``functions.NAME:IDX`` as the model wrote it: Kimi's template prints the id
back as the call's header, and the argument JSON is kept as written. On purpose, unlike
stacks that skip a broken call, one that does not read makes the text an unreadable call, and
so does an id that is not ``functions.NAME:IDX`` (``get_weather.0``, a bare ``0``): it names
no function for sure. The markers are special tokens no prose writes, so a call inside
Markdown code is still a call.
"""

from __future__ import annotations

import re

from ._scan import BodyResult, TaggedCallParser, TextScan, is_valid_name, object_body
from .base import UnreadableCall, register_parser

__all__ = ["KimiK2Parser"]

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
# Some Kimi checkpoints spell the section markers in the singular.
SECTION_BEGIN_ALT = "<|tool_call_section_begin|>"
SECTION_END_ALT = "<|tool_call_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
CALL_END = "<|tool_call_end|>"
ARGUMENT_BEGIN = "<|tool_call_argument_begin|>"


# The id Kimi's template writes: ``functions.NAME:INDEX`` (the prefix is sometimes left out).
_CALL_ID = re.compile(r"(?P<name>\w[^\s<>{}\[\]\"'`:]*):[0-9]+")


def name_from_call_id(call_id: str) -> str:
    """``functions.get_weather:0`` -> ``get_weather``; raises UnreadableCall on other ids.

    An id without its ``:INDEX`` or a bare counter (``get_weather.0``, ``0``) names no
    function unambiguously: read as a name it would call a tool the model never named.
    """
    match = _CALL_ID.fullmatch(call_id.strip().removeprefix("functions."))
    if match is None or not is_valid_name(match["name"]):
        raise UnreadableCall(f"the call id {call_id.strip()[:80]!r} is not functions.NAME:INDEX")
    return match["name"]


@register_parser("kimi_k2")
class KimiK2Parser(TaggedCallParser):
    """Kimi K2: a section of calls, each ``functions.NAME:IDX`` plus a JSON argument object."""

    format = (
        "<|tool_calls_section_begin|><|tool_call_begin|>functions.NAME:IDX"
        "<|tool_call_argument_begin|>{...}<|tool_call_end|>...<|tool_calls_section_end|>"
    )
    markers = (CALL_BEGIN,)
    call_open = CALL_BEGIN
    call_close = CALL_END
    section_markers = (SECTION_BEGIN, SECTION_END, SECTION_BEGIN_ALT, SECTION_END_ALT)

    def _parse_body(self, scan: TextScan, start: int) -> BodyResult | None:
        """Call id up to the argument marker, then one JSON object."""
        arg_at = scan.find(ARGUMENT_BEGIN, start, self._bound(scan, start))
        if arg_at < 0:
            return None
        call_id = scan.text[start:arg_at].strip()
        name = name_from_call_id(call_id)
        return object_body(scan, name, arg_at + len(ARGUMENT_BEGIN), call_id)

    def _call_id(self, result: BodyResult) -> str:
        """The id as the model wrote it (``functions.NAME:IDX``): the template prints it back."""
        return result.call_id or f"functions.{result.name}:0"
