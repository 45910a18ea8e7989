"""GLM-4.5 / 4.6 / 4.7 calls: ``<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>``.

Differences from common serving stacks, on purpose (as for Qwen3-Coder):

- A value runs to the ``</arg_value>`` that balances it, so a call quoted inside a value is
  text of that value, never a call.
- A call that cannot be read makes the whole text an unreadable call the model is told about;
  nothing after its opening tag is read as another call.
- A call must end with ``</tool_call>``, which the template always writes: without it the
  output was cut and arguments may be missing, so it is unreadable rather than run short.
- The tags are plain text prose also writes: a ``<tool_call>`` followed by a space and words
  (``Wrap calls in <tool_call> and </tool_call> tags.``), or inside Markdown code, is a
  quotation and no call; the template writes the name right after the tag.
- A value is kept exactly as written (the template writes it with no layout of its own);
  typing by the schema strips whitespace only to read numbers, booleans, objects and arrays.
  A parameter the schema does not type is read as JSON when it is a JSON non-string, as in
  the model's own parser.
"""

from __future__ import annotations

from typing import Any

from ._scan import BodyResult, TaggedCallParser, TextScan, earliest, is_valid_name, skip_ws
from .base import UnreadableCall, register_parser
from .schema import Untyped, param_types, typed_value

__all__ = ["Glm45Parser", "Glm47Parser"]

KEY_OPEN = "<arg_key>"
KEY_CLOSE = "</arg_key>"
VALUE_OPEN = "<arg_value>"
VALUE_CLOSE = "</arg_value>"
CALL_CLOSE = "</tool_call>"


@register_parser("glm45")
class Glm45Parser(TaggedCallParser):
    """GLM-4.5/4.6: name line then key/value tag pairs; values typed by the tool's schema."""

    format = "<tool_call>NAME\\n<arg_key>K</arg_key>\\n<arg_value>V</arg_value>...</tool_call>"
    markers = ("<tool_call>",)
    call_open = "<tool_call>"
    call_close = CALL_CLOSE
    close_required = True  # a call without </tool_call> may have lost arguments
    quotable = True  # a call in Markdown code, or the tag in prose, is a quotation

    def _parse_body(self, scan: TextScan, start: int) -> BodyResult | None:
        """Name up to a newline or the first key, then ``<arg_key>``/``<arg_value>`` pairs."""
        text, n = scan.text, len(scan.text)
        pos = skip_ws(text, start, n)
        name_end = earliest(
            scan.find(KEY_OPEN, pos), scan.find("\n", pos), scan.find(CALL_CLOSE, pos)
        )
        name = text[pos : name_end if name_end >= 0 else n].strip()
        if not is_valid_name(name):
            raise UnreadableCall("<tool_call> is not followed by a function name")
        schema = scan.schemas.get(name, {})
        arguments: dict[str, Any] = {}
        pos = name_end if name_end >= 0 else n
        while True:
            stop = pos
            pos = skip_ws(text, pos, n)
            if not text.startswith(KEY_OPEN, pos):
                # Anything else ends the call; the caller wants </tool_call> next.
                return BodyResult(name, arguments, stop)
            key_start = pos + len(KEY_OPEN)
            key_end = scan.find(KEY_CLOSE, key_start)
            key = text[key_start:key_end].strip() if key_end >= 0 else ""
            if not is_valid_name(key):
                raise UnreadableCall(f"an argument name in the call to {name} is not a name")
            pos = skip_ws(text, key_end + len(KEY_CLOSE), n)
            if not text.startswith(VALUE_OPEN, pos):
                raise UnreadableCall(f"the argument {key} of {name} has no {VALUE_OPEN}")
            value_start = pos + len(VALUE_OPEN)
            value_end = scan.closing_tag(value_start, VALUE_OPEN, VALUE_CLOSE)
            if value_end < 0:
                raise UnreadableCall(
                    f"the value of {key} in the call to {name} has no matching {VALUE_CLOSE}"
                )
            raw = text[value_start:value_end]
            arguments[key] = typed_value(
                raw, param_types(schema.get(key)), Untyped.JSON, scan.literal_budget
            )
            pos = value_end + len(VALUE_CLOSE)


@register_parser("glm47")
class Glm47Parser(Glm45Parser):
    """GLM-4.7: as GLM-4.5 but the newlines between name and pairs may be missing."""

    format = "<tool_call>NAME<arg_key>K</arg_key><arg_value>V</arg_value>...</tool_call>"
