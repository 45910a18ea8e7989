"""The JSON reader and writer every parser shares."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["JSON_DECODER", "STRICT_JSON_DECODER", "encode_json"]


def _reject_constant(token: str) -> Any:
    """Refuse NaN/Infinity, which Python's json accepts but no other JSON reader does."""
    raise ValueError(f"non-standard JSON constant {token}")


def _finite_float(token: str) -> float:
    """Parse a JSON float, refusing literals that overflow to infinity."""
    value = float(token)
    if value in (float("inf"), float("-inf")):
        raise ValueError(f"float literal out of range: {token[:20]}")
    return value


# strict=False: models often put raw newlines/tabs inside JSON strings; they are unambiguous.
JSON_DECODER = json.JSONDecoder(
    strict=False, parse_constant=_reject_constant, parse_float=_finite_float
)


# Decides whether the model's own argument text may be passed on as is: strict JSON only
# (no raw control characters in strings), so every consumer's json.loads accepts it.
STRICT_JSON_DECODER = json.JSONDecoder(parse_constant=_reject_constant, parse_float=_finite_float)

# One shared encoder: json.dumps(..., ensure_ascii=False) would build a new one per call.
_ENCODER = json.JSONEncoder(ensure_ascii=False)


def encode_json(value: Any) -> str:
    """JSON text with non-ASCII kept as is, the way the parsers write arguments.

    Valid UTF-8 always: a ``"\\ud800"`` escape in the model's text decodes to a lone
    surrogate, written here as U+FFFD (never raw into ``function.arguments``).
    """
    text = _ENCODER.encode(value)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:  # the package takes only the standard library: not runtime.text
        text = _SURROGATE.sub("\ufffd", text)  # decoded JSON holds no pair, only halves
    return text


_SURROGATE = re.compile("[\ud800-\udfff]")
