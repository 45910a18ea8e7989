"""Typing raw-text parameter values (Qwen3-Coder, GLM) by the offered tools' JSON schemas.

Those formats write every value as text. Like the models' own serving stacks, a value is
typed by its parameter's schema: a ``string`` stays exactly the text the model wrote (``"42"``
stays ``"42"``, ``null`` stays ``"null"``); integer, number, boolean, object and array values
are parsed (object and array also from Python literals such as ``{'k': 'v'}``, which these
models write). A value that does not fit its type stays the text, so the tool's own argument
check tells the model. The types come from ``type``, else from the branches of ``anyOf`` /
``oneOf``, else from the values of ``enum`` / ``const`` (``[1, 2]`` types as integer); when
``string`` is among them the text is kept. Parameters without a schema follow the format's
convention (``Untyped``).

Python literals are read with ``ast.literal_eval``, whose parser costs about 1.5 µs per
character (thirty times JSON's): one parsed text reads at most ``PYTHON_LITERAL_BUDGET``
characters that way, so a turn of megabyte-long literals cannot stall a rollout. A value
past the budget must be JSON to be typed; otherwise it stays text.
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from enum import Enum
from typing import Any

from ._json import JSON_DECODER, encode_json

__all__ = [
    "PYTHON_LITERAL_BUDGET",
    "LiteralBudget",
    "ToolSchemas",
    "Untyped",
    "param_types",
    "tool_schemas",
    "typed_value",
]

# tool name -> parameter name -> that parameter's JSON schema
ToolSchemas = Mapping[str, Mapping[str, Any]]

_SCALAR_TYPES = {"string", "integer", "number", "boolean", "null", "object", "array"}

# Characters of Python-literal values read per parsed text (about 0.15 s of CPU).
PYTHON_LITERAL_BUDGET = 100_000


class LiteralBudget:
    """How many more characters one parse may read as Python literals."""

    __slots__ = ("left",)

    def __init__(self, chars: int = PYTHON_LITERAL_BUDGET) -> None:
        """Start with ``chars`` characters to spend."""
        self.left = chars

    def take(self, chars: int) -> bool:
        """Spend ``chars`` characters; False (nothing spent) when fewer are left."""
        if chars > self.left:
            return False
        self.left -= chars
        return True


class Untyped(Enum):
    """How a format reads a value whose parameter has no type in the offered schemas."""

    TEXT = "text"  # Qwen3-Coder: the value stays the text
    JSON = "json"  # GLM: parsed when it reads as a JSON non-string, else the text


def tool_schemas(tools: Any) -> dict[str, Mapping[str, Any]]:
    """Parameter schemas by tool name from OpenAI tool definitions; malformed entries skipped."""
    schemas: dict[str, Mapping[str, Any]] = {}
    if not isinstance(tools, (list, tuple)):
        return schemas
    for tool in tools:
        function = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            continue
        parameters = function.get("parameters")
        properties = parameters.get("properties") if isinstance(parameters, Mapping) else None
        schemas[function["name"]] = properties if isinstance(properties, Mapping) else {}
    return schemas


def param_types(schema: Any) -> list[str] | None:
    """The JSON types a parameter schema allows, in order, or None when it names none."""
    if not isinstance(schema, Mapping):
        return None
    declared = schema.get("type")
    if isinstance(declared, str):
        declared = [declared]
    if isinstance(declared, list):
        types = [t.lower() for t in declared if isinstance(t, str) and t.lower() in _SCALAR_TYPES]
        return types or None
    for key in ("anyOf", "oneOf"):
        options = schema.get(key)
        if isinstance(options, list):
            types = [t for option in options for t in (param_types(option) or [])]
            return list(dict.fromkeys(types)) or None
    values = schema.get("enum", [schema["const"]] if "const" in schema else None)
    if isinstance(values, list):
        # An enum without a type allows the types of its values: [1, 2] is an integer.
        types = [_json_type(value) for value in values]
        return list(dict.fromkeys(types)) or None
    return None


def _json_type(value: Any) -> str:
    """The JSON type of a decoded JSON value."""
    if isinstance(value, str):
        return "string"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "number"
    if value is None:
        return "null"
    return "array" if isinstance(value, (list, tuple)) else "object"


def _json_value(text: str) -> Any:
    """The JSON value ``text`` holds; raises ValueError when it holds none."""
    try:
        return JSON_DECODER.decode(text)
    except RecursionError as exc:
        raise ValueError("nested too deep") from exc


def _literal(text: str, kind: type, budget: LiteralBudget) -> Any:
    """A JSON-serialisable dict or list from JSON or a Python literal, else ValueError."""
    try:
        value = _json_value(text)
    except ValueError:
        if not budget.take(len(text)):
            raise ValueError("too long to read as a Python literal") from None
        try:
            value = ast.literal_eval(text)
        except Exception as exc:  # SyntaxError, MemoryError, RecursionError, ...
            raise ValueError("not a literal") from exc
        if isinstance(value, tuple) and kind is list:
            value = list(value)
        try:
            value = _json_value(encode_json(value))  # sets, bytes, ... are no JSON
        except (TypeError, ValueError, RecursionError) as exc:
            raise ValueError("not JSON-serialisable") from exc
    if not isinstance(value, kind):
        raise ValueError("wrong kind")
    return value


def _as_type(text: str, kind: str, budget: LiteralBudget) -> Any:
    """``text`` read as one JSON type; raises ValueError when it does not fit."""
    if kind == "boolean":
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        raise ValueError("not a boolean")
    if kind == "null":
        if text.lower() in ("null", "none"):
            return None
        raise ValueError("not null")
    if kind == "object":
        return _literal(text, dict, budget)
    if kind == "array":
        return _literal(text, list, budget)
    value = _json_value(text)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ValueError("not a number")
    if kind == "integer" and not isinstance(value, int):
        if not value.is_integer():
            raise ValueError("not an integer")
        value = int(value)
    return value


def typed_value(text: str, types: list[str] | None, untyped: Untyped, budget: LiteralBudget) -> Any:
    """The value of one raw-text parameter, typed by the JSON types its schema allows.

    ``budget`` is shared by every value of one parsed text.
    """
    stripped = text.strip()
    if types is None:
        if untyped is Untyped.TEXT or not stripped or stripped[0] == '"':
            return text  # JSON strings stay verbatim, quotes included
        try:
            return _json_value(stripped)
        except ValueError:
            return text
    if "string" in types:
        return None if "null" in types and stripped == "null" else text
    for kind in types:
        try:
            return _as_type(stripped, kind, budget)
        except ValueError:
            continue
    return text
