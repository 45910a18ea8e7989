"""The JSON reader and writer every parser shares."""

from __future__ import annotations

import json
import re
from typing import Any

__all__ = ["JSON_DECODER", "STRICT_JSON_DECODER", "encode_json", "has_surrogate"]


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


# A lone surrogate (from an escape such as \ud800 that the model wrote) cannot be encoded as
# UTF-8; a proper pair is one code point in a Python str, so any match here is lone.
_SURROGATE = re.compile("[\ud800-\udfff]")


def _escape_surrogate(match: re.Match[str]) -> str:
    """The JSON escape of one lone surrogate, as the model wrote it."""
    return f"\\u{ord(match.group()):04x}"


def encode_json(value: Any) -> str:
    """JSON text with non-ASCII kept as is, the way the parsers write arguments.

    Lone surrogates stay JSON escapes: the text is always valid UTF-8, and decodes to the
    same value.
    """
    return _SURROGATE.sub(_escape_surrogate, _ENCODER.encode(value))


def has_surrogate(text: str) -> bool:
    """True when ``text`` holds a lone surrogate, which no UTF-8 consumer accepts."""
    return _SURROGATE.search(text) is not None
