"""Interface, registry and OpenAI-form helpers shared by every tool-call parser."""

from __future__ import annotations

import os
import re
import string
from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

from hermes_envgen.runtime.errors import UnknownParserError

from ._json import JSON_DECODER, STRICT_JSON_DECODER, encode_json, has_surrogate
from .schema import ToolSchemas, tool_schemas

__all__ = [
    "NoCallMeant",
    "ParseOutcome",
    "ParseResult",
    "ToolCallParser",
    "UnknownParserError",
    "UnreadableCall",
    "get_parser",
    "list_parsers",
    "make_tool_call",
    "new_call_id",
    "normalize_arguments",
    "register_parser",
]

ParseResult = tuple[str | None, list[dict[str, Any]] | None]


class UnreadableCall(Exception):
    """Raised inside a parser: the text opens a call that cannot be read unambiguously."""


class NoCallMeant(Exception):
    """Raised inside a parser: the text holds the format's markup, but no call was meant.

    Prose naming the tags, a call shown in Markdown code, a JSON answer where a Llama call
    would be: no call, and no mistake to tell the model about.
    """


@dataclass(frozen=True)
class ParseOutcome:
    """What a parser made of one text: content, calls, and why a call could not be read."""

    content: str | None
    tool_calls: list[dict[str, Any]] | None
    error: str | None = None  # one line for the model; set only when tool_calls is None
    # Reasoning a channel format carries apart from the answer (gpt-oss's analysis channel).
    reasoning: str | None = None
    # No call, and none was meant: the markup is only named in prose or quoted in Markdown
    # code, or it is a channel format's answer. Not a parse failure to tell the model about.
    settled: bool = False


# Tests flip this to see internal errors instead of the silent `(text, None)` fallback.
_RAISE_INTERNAL_ERRORS = False


_ALNUM = string.ascii_letters + string.digits
_CONTROL = re.compile(r"[\x00-\x1f]")


def new_call_id() -> str:
    """Return a fresh OpenAI-style tool-call id: ``call_`` plus 24 hex digits."""
    return "call_" + os.urandom(12).hex()


def new_alnum_id(length: int = 9) -> str:
    """Return a fresh alphanumeric id (Mistral's templates require exactly 9 characters)."""
    return "".join(_ALNUM[byte % len(_ALNUM)] for byte in os.urandom(length))


def verbatim_arguments(raw: str | None) -> str | None:
    """``raw`` when it is strict JSON text of an object, else None (then re-serialise).

    ``raw`` is text a parser already decoded into an object; strict JSON differs only in
    refusing raw control characters inside strings, so only text holding one is decoded again.
    """
    if raw is None or has_surrogate(raw):
        return None
    if _CONTROL.search(raw) is None:
        return raw if raw.startswith("{") else None
    try:
        decoded = STRICT_JSON_DECODER.decode(raw)
    except (ValueError, RecursionError):
        return None
    return raw if isinstance(decoded, dict) else None


def normalize_arguments(arguments: Any) -> str | None:
    """Turn model-given arguments into a JSON object string, or None when they are not an object."""
    if arguments is None:
        return "{}"
    if isinstance(arguments, dict):
        return encode_json(arguments) if arguments else "{}"
    if isinstance(arguments, str):
        if not arguments.strip():
            return "{}"
        try:
            decoded = JSON_DECODER.decode(arguments)
        except (ValueError, RecursionError):
            return None
        if isinstance(decoded, dict):
            return encode_json(decoded) if decoded else "{}"
    return None


def make_tool_call(
    name: Any, arguments: Any, *, raw: str | None = None, call_id: str | None = None
) -> dict[str, Any] | None:
    """Build one OpenAI-form tool call, or None when the name or arguments are unusable.

    ``raw`` is the text ``arguments`` was decoded from, exactly as the model wrote it: when it
    is strict JSON it becomes ``function.arguments`` unchanged, so a chat template that prints
    the arguments string re-renders the model's own text. ``call_id`` is the id the format's
    template expects (default: ``call_`` plus 24 hex digits).
    """
    if not isinstance(name, str):
        return None
    name = name.strip()
    if not name or has_surrogate(name):
        return None
    try:
        args = normalize_arguments(arguments)
    except (ValueError, RecursionError):  # e.g. a dict nested too deep to serialise
        return None
    if args is None:
        return None
    if isinstance(arguments, dict):
        args = verbatim_arguments(raw) or args
    return {
        "id": call_id or new_call_id(),
        "type": "function",
        "function": {"name": name, "arguments": args},
    }


class ToolCallParser(ABC):
    """Finds tool calls in raw generated text; subclasses implement one markup format."""

    name: ClassVar[str] = ""
    format: ClassVar[str] = ""
    # At least one of these substrings must occur for the parser to find a call (fast exit).
    markers: ClassVar[tuple[str, ...]] = ()

    def parse(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParseResult:
        """Split ``text`` into ``(content, tool_calls)``; ``(text, None)`` when there is no call.

        ``tools`` are the OpenAI tool definitions offered to the model: formats that write
        values as raw text (Qwen3-Coder, GLM) type them by these schemas.
        """
        outcome = self.read(text, tools)
        return outcome.content, outcome.tool_calls

    def read(self, text: str, tools: list[dict[str, Any]] | None = None) -> ParseOutcome:
        """Like :meth:`parse`, also saying why a call the text opens could not be read."""
        if not isinstance(text, str):
            raise TypeError(f"parse() needs a str, got {type(text).__name__}")
        return self.read_with_schemas(text, tool_schemas(tools))

    def read_with_schemas(self, text: str, schemas: ToolSchemas) -> ParseOutcome:
        """:meth:`read` with the tools' parameter schemas already looked up by name."""
        if self.markers and not any(marker in text for marker in self.markers):
            return ParseOutcome(text, None)
        try:
            result = self._parse(text, schemas)
        except UnreadableCall as exc:
            return ParseOutcome(text, None, str(exc))
        except NoCallMeant:
            return ParseOutcome(text, None, settled=True)
        except Exception:
            # The contract is "never raise": a parser bug must not crash a rollout.
            if _RAISE_INTERNAL_ERRORS:
                raise
            return ParseOutcome(text, None)
        if isinstance(result, ParseOutcome):  # a channel format: content and reasoning split
            return result
        content, calls = result
        if not calls:
            return ParseOutcome(text, None)
        return ParseOutcome(content, calls)

    @abstractmethod
    def _parse(self, text: str, schemas: ToolSchemas) -> ParseResult | ParseOutcome:
        """Format-specific parsing; may return ``(text, None)`` or raise UnreadableCall.

        Raises NoCallMeant when the markup is only named, quoted or an answer. Channel formats
        return a whole ParseOutcome, reasoning apart.
        """

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
