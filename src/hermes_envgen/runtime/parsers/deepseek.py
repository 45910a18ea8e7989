"""DeepSeek V3 / V3.1 calls between full-width ``<｜tool▁call▁begin｜>`` markers.

The templates concatenate ``function.arguments`` into the prompt as text, so it is kept
exactly as the model wrote it. On purpose, unlike stacks that skip a broken call, one that
does not read makes the text an unreadable call.
"""

from __future__ import annotations

from ._scan import (
    BodyResult,
    TaggedCallParser,
    TextScan,
    earliest,
    is_valid_name,
    object_body,
    skip_ws,
)
from .base import register_parser

__all__ = ["DeepSeekV3Parser", "DeepSeekV31Parser"]

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"
FENCE = "```"


class _DeepSeekBase(TaggedCallParser):
    """Shared DeepSeek markers; the two versions differ only in the call body."""

    markers = (CALL_BEGIN,)
    call_open = CALL_BEGIN
    call_close = CALL_END
    section_markers = (CALLS_BEGIN, CALLS_END)


@register_parser("deepseek_v3")
class DeepSeekV3Parser(_DeepSeekBase):
    """DeepSeek V3 / R1: ``function<｜tool▁sep｜>NAME`` then a fenced JSON block."""

    format = (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>NAME\\n```json\\n{...}\\n```"
        "<｜tool▁call▁end｜>...<｜tool▁calls▁end｜>"
    )

    def _parse_body(self, scan: TextScan, start: int) -> BodyResult | None:
        """``function``, separator, name up to the newline, optional ```json fence, object."""
        text, end = scan.text, self._bound(scan, start)
        sep = scan.find(SEP, start, end)
        if sep < 0 or text[start:sep].strip() != "function":
            return None
        name_start = sep + len(SEP)
        newline = scan.find("\n", name_start, end)
        fence = scan.find(FENCE, name_start, end)
        name_end = earliest(newline, fence)
        if name_end < 0:
            return None
        name = text[name_start:name_end].strip()
        if not is_valid_name(name):
            return None
        pos = skip_ws(text, name_end, end)
        if text.startswith(FENCE, pos, end):
            pos += len(FENCE)
            if text.startswith("json", pos, end):
                pos += len("json")
        decoded = scan.object_at(pos)
        if decoded is None:
            return None
        arguments, obj_start, stop = decoded
        raw = text[obj_start:stop]
        after = skip_ws(text, stop, len(text))
        if text.startswith(FENCE, after):
            stop = after + len(FENCE)
        return BodyResult(name, arguments, stop, raw)


@register_parser("deepseek_v3_1", "deepseek_v31")
class DeepSeekV31Parser(_DeepSeekBase):
    """DeepSeek V3.1: ``NAME<｜tool▁sep｜>{json}`` with no type prefix and no fence."""

    format = (
        "<｜tool▁calls▁begin｜><｜tool▁call▁begin｜>NAME<｜tool▁sep｜>{...}<｜tool▁call▁end｜>..."
        "<｜tool▁calls▁end｜>"
    )

    def _parse_body(self, scan: TextScan, start: int) -> BodyResult | None:
        """Name, separator, JSON object."""
        sep = scan.find(SEP, start, self._bound(scan, start))
        if sep < 0:
            return None
        name = scan.text[start:sep].strip()
        if not is_valid_name(name):
            return None
        return object_body(scan, name, sep + len(SEP))
