"""The doors through which trainers other than Atropos take an env, each on ``session``.

One module per door: ``trl`` (TRL's ``environment_factory``, reward functions, dataset rows
and ``rollout_func``), ``openenv`` (an OpenEnv MCP environment server) and ``verifiers`` (the
env served to a verifiers taskset, ``hermes_envgen_verifiers``, which runs in verifiers' own
environment). Each imports its library only when used, and a library that is missing or at a
version the door does not support stops with one line naming the extra to install
(``DoorUnavailable``, exit 2). Atropos's own modes use none of this.
"""

from __future__ import annotations

import atexit
import contextlib
import importlib
import inspect
import json
import threading
import typing
from collections.abc import Callable
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType
from typing import Any

from hermes_envgen.runtime.doors.session import SessionThread, open_env
from hermes_envgen.runtime.env.base_env import HermesAgentBaseEnv
from hermes_envgen.runtime.errors import DoorUnavailable
from hermes_envgen.runtime.tools.registry import INJECTED_PARAMETERS, Tool


def require(module: str, distribution: str, supported: tuple[str, str], extra: str) -> ModuleType:
    """``module``, imported, when ``distribution`` is installed at a version in
    [``supported[0]``, ``supported[1]``); else :class:`DoorUnavailable` naming the extra."""
    if not refuse_unsupported(distribution, supported, extra):
        raise DoorUnavailable(
            f"{distribution} is not installed: pip install 'hermes-envgen[{extra}]'"
        ) from None
    return importlib.import_module(module)


def refuse_unsupported(distribution: str, supported: tuple[str, str], extra: str) -> bool:
    """Whether ``distribution`` is installed; :class:`DoorUnavailable` naming the extra when it
    is, at a version outside [``supported[0]``, ``supported[1]``)."""
    from packaging.version import Version

    low, high = supported
    try:
        found = version(distribution)
    except PackageNotFoundError:
        return False
    if not Version(low) <= Version(found) < Version(high):
        raise DoorUnavailable(
            f"{distribution} {found} is not supported (>={low},<{high}): "
            f"pip install 'hermes-envgen[{extra}]'"
        ) from None
    return True


def typed_function(function: Callable[..., Any], tool: Tool, *, method: bool = False) -> None:
    """Give ``function`` (which takes the tool's arguments as keywords) ``tool``'s name, typed
    signature and a docstring with an ``Args:`` line per parameter, as libraries that read a
    function to describe a tool want it (transformers' ``get_json_schema``, FastMCP)."""
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    parameters = [inspect.Parameter("self", kind)] if method else []
    docs = []
    properties = tool.parameters.get("properties", {})
    for parameter in _parameters(tool):
        parameters.append(parameter)
        described = properties.get(parameter.name, {}).get("description") or parameter.name
        docs.append(f"    {parameter.name}: {' '.join(described.split())}")
    function.__name__ = function.__qualname__ = tool.name
    function.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    function.__annotations__ = {
        p.name: p.annotation for p in parameters if p.name != "self" or not method
    } | {"return": str}
    function.__doc__ = tool.description + ("\n\nArgs:\n" + "\n".join(docs) if docs else "")


# A JSON schema's types as Python's, for the tools known by their schema alone (an MCP server's).
_JSON_TYPES: dict[str, type] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
}


def _parameters(tool: Tool) -> list[inspect.Parameter]:
    """The parameters the model fills of ``tool``: its function's, typed by its hints; for a
    function that takes any keywords (an MCP server's tool), those of its JSON schema."""
    signature = inspect.signature(tool.function)
    if not any(p.kind is p.VAR_KEYWORD for p in signature.parameters.values()):
        hints = typing.get_type_hints(tool.function)
        return [
            p.replace(annotation=hints.get(p.name, str))
            for p in signature.parameters.values()
            if p.name not in INJECTED_PARAMETERS
        ]
    required = set(tool.parameters.get("required", []))
    found = []
    for name, spec in tool.parameters.get("properties", {}).items():
        if not name.isidentifier():
            raise DoorUnavailable(
                f"the tool {tool.name!r} has a parameter {name!r} that is no Python name"
            )
        kind = spec.get("type") if isinstance(spec, dict) else None
        annotation: Any = _JSON_TYPES.get(kind, str) if isinstance(kind, str) else str
        if name in required:
            found.append(
                inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, annotation=annotation)
            )
        else:
            found.append(
                inspect.Parameter(
                    name,
                    inspect.Parameter.KEYWORD_ONLY,
                    annotation=annotation | None,
                    default=None,
                )
            )
    return found


# -- one instance of an env per process and settings, shared by the doors' sessions ---------

_threads: dict[str, SessionThread] = {}
_threads_lock = threading.Lock()


def shared_sessions(
    env_cls: type[HermesAgentBaseEnv], settings: dict[str, Any], idle_timeout: float
) -> SessionThread:
    """This process's instance of ``env_cls`` with ``settings`` (``open_env``'s keywords) and
    its sessions, on a thread of their own; made on first use."""
    where = f"{env_cls.__module__}.{env_cls.__qualname__}"
    key = where + json.dumps(settings, sort_keys=True, default=str)
    with _threads_lock:
        found = _threads.get(key)
        if found is None:
            found = SessionThread(lambda: open_env(env_cls, **settings), idle_timeout=idle_timeout)
            _threads[key] = found
        return found


@atexit.register
def _close_threads() -> None:
    # Late in the interpreter's shutdown a sandbox may no longer close (no threads to run its
    # clean-up): its run directory is then reaped by the next run under the same root.
    for thread in list(_threads.values()):
        with contextlib.suppress(RuntimeError):
            thread.close()
    _threads.clear()
