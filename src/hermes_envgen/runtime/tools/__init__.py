"""Tools, toolsets and their registry; importing this registers the built-in toolsets
(``terminal``, ``file``, ``python``, ``web``)."""

from hermes_envgen.runtime.errors import ToolExecutionError, UnknownToolError
from hermes_envgen.runtime.tools import builtin as _builtin  # noqa: F401  (registers tools)
from hermes_envgen.runtime.tools import interpreter as _interpreter  # noqa: F401  (python)
from hermes_envgen.runtime.tools import web as _web  # noqa: F401  (web_search, web_fetch)
from hermes_envgen.runtime.tools.registry import (
    REGISTRY,
    Tool,
    ToolRegistry,
    tool,
    tool_from_function,
)

__all__ = [
    "REGISTRY",
    "Tool",
    "ToolExecutionError",
    "ToolRegistry",
    "UnknownToolError",
    "tool",
    "tool_from_function",
]
