"""Qwen3-Coder XML-ish calls: ``<tool_call><function=NAME><parameter=KEY>VALUE</parameter>``.

Differences from common serving stacks, on purpose:

- A value runs to the ``</parameter>`` that balances it, so a call the model quotes inside a
  value (a coding agent writing a file about tool calls) stays text of that value and is never
  run. Stacks that cut at the first tag run the quoted call instead.
- A call that cannot be read (cut off, unbalanced markup in a value, a missing
  ``</parameter>``) makes the whole text an unreadable call the model is told about; nothing
  after its opening tag is read as another call, since it may be inside the broken value.
  Stacks that end a value at the next ``<parameter=`` guess instead.
- A ``<function=NAME>`` block without ``<tool_call>`` around it (the model dropped the
  wrapper) is a call too, as in the model's own serving stack, when it is a whole block:
  ``<function=NAME>`` then ``<parameter=`` or ``</function>``. One that starts so and does
  not read is an unreadable call; ``<function=x>`` in prose is no call.
- A call in Markdown code (a fenced block or an inline span), or a ``<tool_call>`` followed
  by prose, is a quotation and no call: these tags are plain text a model also writes when
  it explains the format.
- Values are typed by the offered tool's schema (see ``schema``); a parameter the schema does
  not type stays text, as in the model's own parser. The model's chat template prints a
  typed boolean or null back through Jinja's ``string`` (``True``, ``None``), so only those
  values re-render differently from a model that wrote ``true`` / ``null``.
"""

from __future__ import annotations

from typing import Any

from ._scan import (
    BodyResult,
    TaggedCallParser,
    TextScan,
    is_valid_name,
    skip_ws,
    strip_layout_newlines,
)
from .base import UnreadableCall, register_parser
from .schema import Untyped, param_types, typed_value

__all__ = ["Qwen3CoderParser"]

FUNCTION_OPEN = "<function="
FUNCTION_CLOSE = "</function>"
PARAM_OPEN = "<parameter="
PARAM_CLOSE = "</parameter>"


def tag_name(scan: TextScan, start: int, what: str) -> tuple[str, int]:
    """The name in ``<function=NAME>`` / ``<parameter=NAME>`` from ``start``; and past ``>``."""
    end = scan.find(">", start)
    name = scan.text[start:end].strip() if end >= 0 else ""
    if not is_valid_name(name):
        raise UnreadableCall(f"a {what} name is missing or is not a name")
    return name, end + 1


@register_parser("qwen3_coder")
class Qwen3CoderParser(TaggedCallParser):
    """Qwen3-Coder: raw-text parameter values, typed by the offered tool's schema."""

    format = "<tool_call><function=NAME><parameter=KEY>VALUE</parameter>...</function></tool_call>"
    markers = (FUNCTION_OPEN,)
    call_open = "<tool_call>"
    call_close = "</tool_call>"
    bare_open = FUNCTION_OPEN
    quotable = True

    def _is_mention(self, scan: TextScan, open_at: int, bare: bool) -> bool:
        """A bare ``<function=...>`` not followed by a parameter or its end is prose."""
        if not bare:
            return super()._is_mention(scan, open_at, bare)
        text, n = scan.text, len(scan.text)
        name_at = open_at + len(FUNCTION_OPEN)
        end = scan.find(">", name_at)
        # Names are short: a far ">" is prose (and bounds the work per mention).
        if end < 0 or end - name_at > 256 or not is_valid_name(text[name_at:end].strip()):
            return True
        after = skip_ws(text, end + 1, n)
        return not text.startswith((PARAM_OPEN, FUNCTION_CLOSE), after)

    def _parse_body(self, scan: TextScan, start: int) -> BodyResult | None:
        """A complete ``<function=...>...</function>`` block; ``</tool_call>`` may be missing."""
        text, n = scan.text, len(scan.text)
        pos = skip_ws(text, start, n)
        if not text.startswith(FUNCTION_OPEN, pos):
            raise UnreadableCall("<tool_call> is not followed by <function=NAME>")
        name, pos = tag_name(scan, pos + len(FUNCTION_OPEN), "function")
        schema = scan.schemas.get(name, {})
        arguments: dict[str, Any] = {}
        while True:
            pos = skip_ws(text, pos, n)
            if text.startswith(FUNCTION_CLOSE, pos):
                return BodyResult(name, arguments, pos + len(FUNCTION_CLOSE))
            if not text.startswith(PARAM_OPEN, pos):
                raise UnreadableCall(
                    f"the call to {name} is cut off or has text outside its parameters"
                )
            key, value_start = tag_name(scan, pos + len(PARAM_OPEN), "parameter")
            value_end = scan.closing_tag(value_start, PARAM_OPEN, PARAM_CLOSE)
            if value_end < 0:
                raise UnreadableCall(
                    f"the value of {key} in the call to {name} has no matching {PARAM_CLOSE}"
                )
            raw = strip_layout_newlines(text[value_start:value_end])
            arguments[key] = typed_value(
                raw, param_types(schema.get(key)), Untyped.TEXT, scan.literal_budget
            )
            pos = value_end + len(PARAM_CLOSE)
