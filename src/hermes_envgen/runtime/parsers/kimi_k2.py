"""Kimi K2 calls: ``<|tool_call_begin|>functions.NAME:IDX<|tool_call_argument_begin|>{json}``.

The call id is ``functions.NAME:IDX`` as the model wrote it: Kimi's template prints the id
back as the call's header, and the argument JSON is kept as written. On purpose, unlike
stacks that skip a broken call, one that does not read makes the text an unreadable call.
"""

from __future__ import annotations

from ._scan import BodyResult, TaggedCallParser, TextScan, is_valid_name, object_body
from .base import register_parser

__all__ = ["KimiK2Parser"]

SECTION_BEGIN = "<|tool_calls_section_begin|>"
SECTION_END = "<|tool_calls_section_end|>"
# Some Kimi checkpoints spell the section markers in the singular.
SECTION_BEGIN_ALT = "<|tool_call_section_begin|>"
SECTION_END_ALT = "<|tool_call_section_end|>"
CALL_BEGIN = "<|tool_call_begin|>"
CALL_END = "<|tool_call_end|>"
ARGUMENT_BEGIN = "<|tool_call_argument_begin|>"


def name_from_call_id(call_id: str) -> str:
    """``functions.get_weather:0`` -> ``get_weather`` (prefix and index are optional)."""
    name = call_id.strip()
    name = name.removeprefix("functions.")
    head, colon, index = name.rpartition(":")
    if colon and index.isascii() and index.isdigit():
        name = head
    return name.strip()


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
        if not is_valid_name(name):
            return None
        return object_body(scan, name, arg_at + len(ARGUMENT_BEGIN), call_id)

    def _call_id(self, result: BodyResult) -> str:
        """The id as the model wrote it (``functions.NAME:IDX``): the template prints it back."""
        return result.call_id or f"functions.{result.name}:0"
