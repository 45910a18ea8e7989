"""Hermes-style JSON tool calls in ``<tool_call>`` tags (Hermes, Qwen 2.5/3, LongCat).

Differences from common serving stacks, on purpose: ``function.arguments`` is the argument
object exactly as the model wrote it (Qwen3's template prints it back unchanged); an opening
tag whose JSON does not read makes the text an unreadable call instead of being skipped, since
a later tag may sit inside its cut-off strings. An unclosed last tag still counts: its JSON is
complete.
"""

from __future__ import annotations

from ._scan import BodyResult, TaggedCallParser, TextScan, arguments_key, call_from_object
from .base import register_parser

__all__ = ["HermesParser", "LongcatParser", "QwenParser"]


def read_json_call(scan: TextScan, start: int) -> BodyResult | None:
    """Read a ``{"name": ..., "arguments": ...}`` object starting at ``start``."""
    decoded = scan.object_at(start)
    if decoded is None:
        return None
    obj, obj_start, stop = decoded
    call = call_from_object(obj)
    if call is None:
        return None
    raw = scan.member_text(obj_start, (arguments_key(obj),)) if isinstance(call[1], dict) else None
    return BodyResult(call[0], call[1], stop, raw)


@register_parser("hermes")
class HermesParser(TaggedCallParser):
    """Hermes JSON calls: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``."""

    format = '<tool_call>{"name": ..., "arguments": {...}}</tool_call>, repeatable'
    markers = ("<tool_call>",)
    call_open = "<tool_call>"
    call_close = "</tool_call>"

    def _parse_body(self, scan: TextScan, start: int) -> BodyResult | None:
        """The body is exactly one JSON object."""
        return read_json_call(scan, start)


@register_parser("qwen")
class QwenParser(HermesParser):
    """Qwen 2.5 / Qwen 3 chat templates use the Hermes markup unchanged."""

    format = '<tool_call>{"name": ..., "arguments": {...}}</tool_call> (Hermes markup)'


@register_parser("longcat")
class LongcatParser(HermesParser):
    """LongCat: Hermes JSON calls in ``<longcat_tool_call>`` tags."""

    format = '<longcat_tool_call>{"name": ..., "arguments": {...}}</longcat_tool_call>'
    markers = ("<longcat_tool_call>",)
    call_open = "<longcat_tool_call>"
    call_close = "</longcat_tool_call>"
