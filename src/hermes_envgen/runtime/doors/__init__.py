"""The doors through which trainers other than Atropos take an env, each on ``runtime.session``.

One module per door: ``trl`` (TRL's ``environment_factory``, reward functions, dataset rows
and ``rollout_func``), ``openenv`` (an OpenEnv MCP environment server) and ``verifiers`` (a
verifiers taskset). Each imports its library only when used, and a library that is missing or
at a version the door does not support stops with one line naming the extra to install
(``DoorUnavailable``, exit 2). Atropos's own modes use none of this.
"""

from __future__ import annotations

import importlib
from importlib.metadata import PackageNotFoundError, version
from types import ModuleType

from hermes_envgen.runtime.errors import DoorUnavailable


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
