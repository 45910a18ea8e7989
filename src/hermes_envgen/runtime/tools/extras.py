"""The libraries a toolset needs beyond the runtime's own, and the extra that installs them.

A node that runs an env installs only what its toolsets use (``pip install
'hermes-envgen[file,web]'``); an env whose toolset lacks its library stops at start-up in one
line that names the extra, before any rollout, rather than with an ImportError in the middle of
one. The libraries are looked up, not imported: start-up pays nothing for them.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterable

from hermes_envgen.runtime.errors import EnvConfigError

# toolset -> (the modules it imports, the extra of hermes-envgen that installs them)
TOOLSET_LIBRARIES: dict[str, tuple[tuple[str, ...], str]] = {
    "file": (("re2",), "file"),  # search_files: a linear-time regex engine (google-re2)
    "web": (("bm25s", "lxml"), "web"),  # web_search's offline ranking, web_fetch's page text
    "mcp": (("mcp",), "mcp"),  # the MCP SDK's client
}


def missing_libraries(toolset: str) -> list[str]:
    """The modules ``toolset`` needs that cannot be imported here."""
    modules, _ = TOOLSET_LIBRARIES.get(toolset, ((), ""))
    return [module for module in modules if importlib.util.find_spec(module) is None]


def require_toolsets(toolsets: Iterable[str]) -> None:
    """EnvConfigError naming the extra to install when one of ``toolsets`` lacks a library."""
    for toolset in sorted(set(toolsets)):
        missing = missing_libraries(toolset)
        if missing:
            extra = TOOLSET_LIBRARIES[toolset][1]
            raise EnvConfigError(
                f"the {toolset} toolset needs {', '.join(missing)}, which is not installed: "
                f"pip install 'hermes-envgen[{extra}]' (or take {toolset} out of "
                "enabled_toolsets)"
            )
