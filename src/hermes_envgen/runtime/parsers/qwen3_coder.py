"""Qwen3-Coder XML-ish calls: ``<tool_call><function=NAME><parameter=KEY>VALUE</parameter>``."""

from __future__ import annotations

from typing import Any

from ._scan import (
    BodyResult,
    TaggedCallParser,
    TextScan,
    convert_param_value,
    is_valid_name,
    skip_ws,
)
from .base import register_parser

__all__ = ["Qwen3CoderParser"]

FUNCTION_OPEN = "<function="
FUNCTION_CLOSE = "</function>"
PARAM_OPEN = "<parameter="
PARAM_CLOSE = "</parameter>"


@register_parser("qwen3_coder")
class Qwen3CoderParser(TaggedCallParser):
    """Qwen3-Coder: raw-text parameter values, typed when they read as JSON non-strings."""

    format = "<tool_call><function=NAME><parameter=KEY>VALUE</parameter>...</function></tool_call>"
    markers = (FUNCTION_OPEN,)
    call_open = "<tool_call>"
    call_close = "</tool_call>"

    def _parse_body(self, scan: TextScan, start: int) -> BodyResult | None:
        """A complete ``<function=...>...</function>`` block; ``</tool_call>`` may be missing."""
        # Raw-text values cannot contain markup, so the body ends at the next tag.
        text, end = scan.text, self._bound(scan, start)
        pos = skip_ws(text, start, end)
        if not text.startswith(FUNCTION_OPEN, pos, end):
            return None
        name_start = pos + len(FUNCTION_OPEN)
        name_end = scan.find(">", name_start, end)
        function_end = scan.find(FUNCTION_CLOSE, name_start, end)
        if name_end < 0 or function_end < 0 or name_end > function_end:
            return None  # no </function>: the call was cut off, its arguments may be partial
        name = text[name_start:name_end].strip()
        if not is_valid_name(name):
            return None
        arguments: dict[str, Any] = {}
        pos = name_end + 1
        while True:
            pos = skip_ws(text, pos, function_end)
            if pos >= function_end:
                break
            if not text.startswith(PARAM_OPEN, pos, function_end):
                return None  # stray text inside the function block
            key_start = pos + len(PARAM_OPEN)
            key_end = scan.find(">", key_start, function_end)
            if key_end < 0:
                return None
            key = text[key_start:key_end].strip()
            if not key:
                return None
            value_start = key_end + 1
            # Like upstream, a missing </parameter> ends at the next parameter or </function>.
            value_end = function_end
            closed = False
            close_at = scan.find(PARAM_CLOSE, value_start, function_end)
            if close_at >= 0:
                value_end, closed = close_at, True
            next_at = scan.find(PARAM_OPEN, value_start, value_end)
            if next_at >= 0:
                value_end, closed = next_at, False
            arguments[key] = convert_param_value(text[value_start:value_end])
            pos = value_end + len(PARAM_CLOSE) if closed else value_end
        return name, arguments, function_end + len(FUNCTION_CLOSE)
