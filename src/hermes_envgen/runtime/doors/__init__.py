"""The doors through which trainers other than Atropos take an env, each on ``runtime.session``.

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

from hermes_envgen.runtime.base_env import HermesAgentBaseEnv
from hermes_envgen.runtime.errors import DoorUnavailable
from hermes_envgen.runtime.session import SessionThread, open_env
from hermes_envgen.runtime.tools.registry import INJECTED_PARAMETERS, Tool


def require(module: str, distribution: str, supported: tuple[str, str], extra: str) -> ModuleType:
    """``module``, imported, when ``distribution`` is installed at a version in
    [``supported[0]``, ``supported[1]``); else :class:`DoorUnavailable` naming the extra."""
    from packaging.version import Version

    low, high = supported
    install = f"pip install 'hermes-envgen[{extra}]'"
    try:
        found = version(distribution)
    except PackageNotFoundError:
        raise DoorUnavailable(f"{distribution} is not installed: {install}") from None
    if not Version(low) <= Version(found) < Version(high):
        raise DoorUnavailable(
            f"{distribution} {found} is not supported (>={low},<{high}): {install}"
        ) from None
    return importlib.import_module(module)


def typed_function(function: Callable[..., Any], tool: Tool, *, method: bool = False) -> None:
    """Give ``function`` (which takes the tool's arguments as keywords) ``tool``'s name, typed
    signature and a docstring with an ``Args:`` line per parameter, as libraries that read a
    function to describe a tool want it (transformers' ``get_json_schema``, FastMCP)."""
    hints = typing.get_type_hints(tool.function)
    kind = inspect.Parameter.POSITIONAL_OR_KEYWORD
    parameters = [inspect.Parameter("self", kind)] if method else []
    docs = []
    properties = tool.parameters.get("properties", {})
    for parameter in inspect.signature(tool.function).parameters.values():
        if parameter.name in INJECTED_PARAMETERS:
            continue
        parameters.append(parameter.replace(annotation=hints.get(parameter.name, str)))
        described = properties.get(parameter.name, {}).get("description") or parameter.name
        docs.append(f"    {parameter.name}: {' '.join(described.split())}")
    function.__name__ = function.__qualname__ = tool.name
    function.__signature__ = inspect.Signature(parameters, return_annotation=str)  # type: ignore[attr-defined]
    function.__annotations__ = {
        p.name: p.annotation for p in parameters if p.name != "self" or not method
    } | {"return": str}
    function.__doc__ = tool.description + ("\n\nArgs:\n" + "\n".join(docs) if docs else "")


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
