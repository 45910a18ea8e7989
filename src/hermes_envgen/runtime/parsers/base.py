"""Interface, registry and OpenAI-form helpers shared by every tool-call parser."""

from __future__ import annotations

import json
import os
from abc import ABC, abstractmethod
from collections.abc import Callable
from typing import Any, ClassVar, TypeVar

from hermes_envgen.runtime.errors import UnknownParserError

__all__ = [
    "ParseResult",
    "ToolCallParser",
    "UnknownParserError",
    "get_parser",
    "list_parsers",
    "make_tool_call",
    "new_call_id",
    "normalize_arguments",
    "register_parser",
]

ParseResult = tuple[str | None, list[dict[str, Any]] | None]

# Tests flip this to see internal errors instead of the silent `(text, None)` fallback.
_RAISE_INTERNAL_ERRORS = False


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


# One shared encoder: json.dumps(..., ensure_ascii=False) would build a new one per call.
_ENCODER = json.JSONEncoder(ensure_ascii=False)


def new_call_id() -> str:
    """Return a fresh OpenAI-style tool-call id: ``call_`` plus 24 hex digits."""
    return "call_" + os.urandom(12).hex()


def normalize_arguments(arguments: Any) -> str | None:
    """Turn model-given arguments into a JSON object string, or None when they are not an object."""
    if arguments is None:
        return "{}"
    if isinstance(arguments, dict):
        return _ENCODER.encode(arguments) if arguments else "{}"
    if isinstance(arguments, str):
        if not arguments.strip():
            return "{}"
        try:
            decoded = JSON_DECODER.decode(arguments)
        except (ValueError, RecursionError):
            return None
        if isinstance(decoded, dict):
            return _ENCODER.encode(decoded) if decoded else "{}"
    return None


def make_tool_call(name: Any, arguments: Any) -> dict[str, Any] | None:
    """Build one OpenAI-form tool call, or None when the name or arguments are unusable."""
    if not isinstance(name, str):
        return None
    name = name.strip()
    if not name:
        return None
    try:
        args = normalize_arguments(arguments)
    except (ValueError, RecursionError):  # e.g. a dict nested too deep to serialise
        return None
    if args is None:
        return None
    return {
        "id": new_call_id(),
        "type": "function",
        "function": {"name": name, "arguments": args},
    }


class ToolCallParser(ABC):
    """Finds tool calls in raw generated text; subclasses implement one markup format."""

    name: ClassVar[str] = ""
    format: ClassVar[str] = ""
    # At least one of these substrings must occur for the parser to find a call (fast exit).
    markers: ClassVar[tuple[str, ...]] = ()

    def parse(self, text: str) -> ParseResult:
        """Split ``text`` into ``(content, tool_calls)``; ``(text, None)`` when there is no call."""
        if not isinstance(text, str):
            raise TypeError(f"parse() needs a str, got {type(text).__name__}")
        if self.markers and not any(marker in text for marker in self.markers):
            return text, None
        try:
            content, calls = self._parse(text)
        except Exception:
            # The contract is "never raise": a parser bug must not crash a rollout.
            if _RAISE_INTERNAL_ERRORS:
                raise
            return text, None
        if not calls:
            return text, None
        return content, calls

    @abstractmethod
    def _parse(self, text: str) -> ParseResult:
        """Format-specific parsing; may return ``(text, None)`` or an empty call list."""

    def __repr__(self) -> str:
        """Show the registered name, which is what users select parsers by."""
        return f"<{type(self).__name__} name={self.name!r}>"


_PARSERS: dict[str, type[ToolCallParser]] = {}
_ALIASES: dict[str, str] = {}

P = TypeVar("P", bound=type[ToolCallParser])


def _key(name: str) -> str:
    """Normalise a user-given parser name so ``DeepSeek-V3`` finds ``deepseek_v3``."""
    return name.strip().lower().replace("-", "_")


def _same_class(a: type, b: type) -> bool:
    """True for the same class, or the same class re-created by a module reload."""
    return a is b or (a.__module__, a.__qualname__) == (b.__module__, b.__qualname__)


def register_parser(name: str, *aliases: str) -> Callable[[P], P]:
    """Class decorator registering a parser under ``name`` (its ``.name``) and ``aliases``."""

    def decorate(cls: P) -> P:
        keys = [_key(name), *(_key(alias) for alias in aliases)]
        for key in keys:
            owner = _PARSERS.get(key) or _PARSERS.get(_ALIASES.get(key, ""))
            if owner is not None and not _same_class(owner, cls):
                raise ValueError(f"parser name {key!r} is already registered")
        cls.name = keys[0]
        _PARSERS[keys[0]] = cls
        for alias in keys[1:]:
            _ALIASES[alias] = keys[0]
        return cls

    return decorate


def _valid_names() -> list[str]:
    """All names and aliases, sorted, for listings and error messages."""
    return sorted([*_PARSERS, *_ALIASES])


def get_parser(name: str) -> ToolCallParser:
    """Return a new instance of the parser registered under ``name`` or one of its aliases."""
    key = _key(name) if isinstance(name, str) else ""
    key = _ALIASES.get(key, key)
    cls = _PARSERS.get(key)
    if cls is None:
        raise UnknownParserError(
            f"unknown tool-call parser {name!r}; valid names: {', '.join(_valid_names())}"
        )
    return cls()


def list_parsers() -> list[tuple[str, str]]:
    """Return ``(name, format)`` rows for every parser and alias, sorted by name."""
    rows = [(key, cls.format) for key, cls in _PARSERS.items()]
    rows += [(alias, f"alias of {target}") for alias, target in _ALIASES.items()]
    return sorted(rows)
