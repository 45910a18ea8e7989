"""GLM-4.5 / 4.6 / 4.7 calls: ``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>``."""

from __future__ import annotations

from typing import Any

from ._scan import (
    BodyResult,
    TaggedCallParser,
    TextScan,
    convert_param_value,
    earliest,
    is_valid_name,
    skip_ws,
)
from .base import register_parser

__all__ = ["Glm45Parser", "Glm47Parser"]

KEY_OPEN = "<arg_key>"
KEY_CLOSE = "</arg_key>"
VALUE_OPEN = "<arg_value>"
VALUE_CLOSE = "</arg_value>"


@register_parser("glm45")
class Glm45Parser(TaggedCallParser):
    """GLM-4.5/4.6: name line then key/value tag pairs; values typed like Qwen3-Coder's."""

    format = "<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>...</tool_call>"
    markers = ("<tool_call>",)
    call_open = "<tool_call>"
    call_close = "</tool_call>"

    def _parse_body(self, scan: TextScan, start: int) -> BodyResult | None:
        """Name up to a newline or the first ``<arg_key>``, then whitespace-separated pairs."""
        # Raw-text values cannot contain markup, so the body ends at the next tag.
        text, end = scan.text, self._bound(scan, start)
        pos = skip_ws(text, start, end)
        key_at = scan.find(KEY_OPEN, pos, end)
        newline = scan.find("\n", pos, end)
        name_end = earliest(key_at, newline)
        if name_end < 0:
            name_end = end
        name = text[pos:name_end].strip()
        if not is_valid_name(name):
            return None
        arguments: dict[str, Any] = {}
        pos = name_end
        while True:
            stop = pos
            pos = skip_ws(text, pos, end)
            if not text.startswith(KEY_OPEN, pos, end):
                # Anything else ends the call; the caller rejects it before a closing tag.
                return name, arguments, stop
            key_start = pos + len(KEY_OPEN)
            key_end = scan.find(KEY_CLOSE, key_start, end)
            if key_end < 0:
                return None
            key = text[key_start:key_end].strip()
            if not key:
                return None
            pos = skip_ws(text, key_end + len(KEY_CLOSE), end)
            if not text.startswith(VALUE_OPEN, pos, end):
                return None
            value_start = pos + len(VALUE_OPEN)
            value_end = scan.find(VALUE_CLOSE, value_start, end)
            if value_end < 0:
                return None  # value cut off
            arguments[key] = convert_param_value(text[value_start:value_end])
            pos = value_end + len(VALUE_CLOSE)


@register_parser("glm47")
class Glm47Parser(Glm45Parser):
    """GLM-4.7: as GLM-4.5 but the newlines between name and pairs may be missing."""

    format = "<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>"
