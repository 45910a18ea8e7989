"""Hermes-style JSON tool calls in ``<tool_call>`` tags (Hermes, Qwen 2.5/3, LongCat).

Differences from common serving stacks, on purpose: ``function.arguments`` is the argument
object exactly as the model wrote it (Qwen3's template prints it back unchanged); an opening
tag whose JSON does not read makes the text an unreadable call instead of being skipped, since
a later tag may sit inside its cut-off strings. An unclosed last tag still counts: its JSON is
complete. A call object has ``name``, ``arguments`` (or ``parameters``) and at most ``id`` and
``type``: any other member (``args``, ``input``, an echoed tool's ``description``) makes it an
unreadable call, never one run without its arguments. The tags are plain text a model also
writes when it explains the format, so a call in Markdown code (a fenced block or inline
span) and a tag followed by prose (``<tool_call> and </tool_call>``) are quotations, no call.
"""

from __future__ import annotations

from ._scan import (
    BodyResult,
    TaggedCallParser,
    TextScan,
    arguments_key,
    call_from_object,
    call_object_problem,
)
from .base import UnreadableCall, register_parser

__all__ = ["HermesParser", "LongcatParser", "QwenParser"]


def read_json_call(scan: TextScan, start: int) -> BodyResult | None:
    """Read a ``{"name": ..., "arguments": ...}`` object starting at ``start``."""
    decoded = scan.object_at(start)
    if decoded is None:
        return None
    obj, obj_start, stop = decoded
    if not isinstance(obj.get("name"), str):
        return None
    call = call_from_object(obj)
    if call is None:
        # Inside the tags the model meant a call: say what is wrong with it.
        raise UnreadableCall(call_object_problem(obj))
    raw = scan.member_text(obj_start, (arguments_key(obj),)) if isinstance(call[1], dict) else None
    return BodyResult(call[0], call[1], stop, raw)


@register_parser("hermes")
class HermesParser(TaggedCallParser):
    """Hermes JSON calls: ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``."""

    format = '<tool_call>{"name": ..., "arguments": {...}}</tool_call>, repeatable'
    markers = ("<tool_call>",)
    call_open = "<tool_call>"
    call_close = "</tool_call>"
    quotable = True  # a call in Markdown code, or the tag in prose, is a quotation

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
