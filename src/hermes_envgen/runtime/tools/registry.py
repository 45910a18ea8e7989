"""Tools the agent can call: JSON schemas generated from typed Python functions and docstrings.

An env author adds a tool with one decorator::

    @tool(toolset="math")
    def add(a: int, b: int) -> int:
        \"\"\"Add two integers.

        Args:
            a: The first number.
            b: The second number.
        \"\"\"
        return a + b

A parameter named ``sandbox`` is not shown to the model: the runtime passes the rollout's
sandbox in, so a tool can run commands or touch files where the agent works. Nor is one named
``context``: the rollout's ``ToolContext`` (its settings of the toolsets, its per-rollout
state, its clean-up).
"""

from __future__ import annotations

import asyncio
import inspect
import json
import re
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, TypeVar, overload

from hermes_envgen.runtime.errors import ToolExecutionError, UnknownToolError

INJECTED_PARAMETERS = frozenset({"sandbox", "context"})


@dataclass
class Tool:
    """A registered tool: its schema for the model and the function that runs it."""

    name: str
    description: str
    parameters: dict[str, Any]
    function: Callable[..., Any]
    toolset: str
    injected: frozenset[str] = field(default_factory=frozenset)

    @property
    def schema(self) -> dict[str, Any]:
        """The OpenAI ``tools`` entry for this tool."""
        return {
            "type": "function",
            "function": {
                "name": self.name,
                "description": self.description,
                "parameters": self.parameters,
            },
        }

    def check_arguments(self, arguments: dict[str, Any]) -> None:
        """Refuse missing required and unknown arguments, naming them for the model."""
        properties = self.parameters.get("properties", {})
        missing = [p for p in self.parameters.get("required", []) if p not in arguments]
        unknown = [a for a in arguments if a not in properties]
        problems = []
        if missing:
            problems.append(f"missing required argument(s): {', '.join(missing)}")
        if unknown:
            problems.append(
                f"unknown argument(s): {', '.join(unknown)} "
                f"(valid: {', '.join(properties) or 'none'})"
            )
        if problems:
            raise ToolExecutionError(f"{self.name}: " + "; ".join(problems))

    async def call(
        self, arguments: dict[str, Any], sandbox: Any = None, context: Any = None
    ) -> str:
        """Run the tool; sync functions run in a thread so the event loop never blocks."""
        self.check_arguments(arguments)
        kwargs = dict(arguments)
        if "sandbox" in self.injected:
            kwargs["sandbox"] = sandbox
        if "context" in self.injected:
            kwargs["context"] = context
        if inspect.iscoroutinefunction(self.function):
            result = await self.function(**kwargs)
        else:
            result = await asyncio.to_thread(self.function, **kwargs)
        if isinstance(result, str):
            return printable(result)
        return printable(json.dumps(result, ensure_ascii=False, default=str))


def printable(text: str) -> str:
    """``text`` as valid Unicode for the model: undecodable bytes of file names and outputs
    (lone surrogates, from ``surrogateescape``) become ``\\xNN`` escapes, never a crash."""
    try:
        text.encode("utf-8")
        return text
    except UnicodeEncodeError:
        pass
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # surrogates no byte stands for: replace them
        return text.encode("utf-8", "replace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


class ToolRegistry:
    """Named tools grouped into toolsets."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}

    def add(self, tool: Tool) -> Tool:
        """Register ``tool`` (under its name, replacing one of the same name)."""
        self._tools[tool.name] = tool
        return tool

    def get(self, name: str) -> Tool:
        """The tool named ``name``; an unknown name fails with the list of valid ones."""
        try:
            return self._tools[name]
        except KeyError:
            raise UnknownToolError(
                f"unknown tool {name!r}; valid tools: {', '.join(sorted(self._tools))}"
            ) from None

    def names(self) -> list[str]:
        """Every registered tool's name, sorted."""
        return sorted(self._tools)

    def toolsets(self) -> dict[str, list[str]]:
        """Toolset name -> the names of its tools."""
        sets: dict[str, list[str]] = {}
        for tool in self._tools.values():
            sets.setdefault(tool.toolset, []).append(tool.name)
        return {name: sorted(tools) for name, tools in sorted(sets.items())}

    def resolve(
        self, enabled: list[str] | None = None, disabled: list[str] | None = None
    ) -> list[Tool]:
        """The tools an agent gets: the enabled toolsets (all when None) minus the disabled.

        Each entry may name a toolset or a single tool; an unknown name fails with the list of
        valid ones, so a typo is caught at startup rather than silently giving fewer tools.
        """
        selected = self._expand(enabled) if enabled is not None else set(self._tools)
        selected -= self._expand(disabled or [])
        return [self._tools[name] for name in sorted(selected)]

    def _expand(self, names: list[str]) -> set[str]:
        sets = self.toolsets()
        out: set[str] = set()
        for name in names:
            if name in sets:
                out.update(sets[name])
            elif name in self._tools:
                out.add(name)
            else:
                raise UnknownToolError(
                    f"unknown toolset or tool {name!r}; valid toolsets: "
                    f"{', '.join(sets) or 'none'}; valid tools: {', '.join(self.names())}"
                )
        return out


REGISTRY = ToolRegistry()

F = TypeVar("F", bound=Callable[..., Any])


@overload
def tool(
    function: F,
    *,
    name: str | None = None,
    toolset: str = "custom",
    registry: ToolRegistry | None = None,
) -> F: ...


@overload
def tool(
    function: None = None,
    *,
    name: str | None = None,
    toolset: str = "custom",
    registry: ToolRegistry | None = None,
) -> Callable[[F], F]: ...


def tool(
    function: F | None = None,
    *,
    name: str | None = None,
    toolset: str = "custom",
    registry: ToolRegistry | None = None,
) -> F | Callable[[F], F]:
    """Register a function as a tool; usable as ``@tool`` or ``@tool(toolset=...)``.

    The function is returned as it was (still callable directly); the model sees its name, its
    docstring's summary and ``Args:`` descriptions, and a JSON schema of its typed parameters.
    """

    def register(func: F) -> F:
        (registry if registry is not None else REGISTRY).add(
            tool_from_function(func, name=name, toolset=toolset)
        )
        return func

    return register(function) if function is not None else register


def tool_from_function(
    func: Callable[..., Any], *, name: str | None = None, toolset: str = "custom"
) -> Tool:
    """Build a Tool from a typed function; its docstring gives the descriptions."""
    summary, arg_docs = _parse_docstring(inspect.getdoc(func) or "")
    hints = typing.get_type_hints(func)
    properties: dict[str, dict[str, Any]] = {}
    required: list[str] = []
    injected = set()
    for param in inspect.signature(func).parameters.values():
        if param.name in INJECTED_PARAMETERS:
            injected.add(param.name)
            continue
        if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
            raise TypeError(f"tool {func.__name__}: *args and **kwargs cannot be described")
        schema = _json_schema(hints.get(param.name, str))
        if param.name in arg_docs:
            schema["description"] = arg_docs[param.name]
        if param.default is inspect.Parameter.empty:
            required.append(param.name)
        elif param.default is not None:
            schema["default"] = param.default
        properties[param.name] = schema
    parameters: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        parameters["required"] = required
    return Tool(
        name=name or func.__name__,
        description=summary or func.__name__,
        parameters=parameters,
        function=func,
        toolset=toolset,
        injected=frozenset(injected),
    )


_SIMPLE_TYPES = {str: "string", int: "integer", float: "number", bool: "boolean"}


def _json_schema(annotation: Any) -> dict[str, Any]:
    origin = typing.get_origin(annotation)
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if origin in (typing.Union, types.UnionType):
        return (
            _json_schema(args[0]) if len(args) == 1 else {"anyOf": [_json_schema(a) for a in args]}
        )
    if origin is Literal:
        return {"enum": list(typing.get_args(annotation))}
    if annotation in _SIMPLE_TYPES:
        return {"type": _SIMPLE_TYPES[annotation]}
    if origin in (list, tuple, set, frozenset) or annotation in (list, tuple):
        return {"type": "array", "items": _json_schema(args[0])} if args else {"type": "array"}
    if origin is dict or annotation is dict:
        return {"type": "object"}
    return {"type": "string"}


def _parse_docstring(doc: str) -> tuple[str, dict[str, str]]:
    """Split a Google-style docstring into its summary and its ``Args:`` descriptions."""
    parts = re.split(r"^\s*(?:Args|Arguments|Parameters):\s*$", doc, maxsplit=1, flags=re.M)
    summary = " ".join(parts[0].split("\n\n")[0].split())
    arg_docs: dict[str, str] = {}
    if len(parts) == 2:
        current = None
        for line in parts[1].splitlines():
            if re.match(r"^\S", line):  # a new top-level section (Returns:, ...) ends Args
                break
            match = re.match(r"^\s+(\w+)(?:\s*\([^)]*\))?:\s*(.*)$", line)
            if match:
                current = match.group(1)
                arg_docs[current] = match.group(2).strip()
            elif current and line.strip():
                arg_docs[current] += " " + line.strip()
    return summary, arg_docs
