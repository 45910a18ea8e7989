"""ToolSettings: which tools the agent gets and how the toolsets run, as one group."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from hermes_envgen.runtime.tools.interpreter import PythonSettings
    from hermes_envgen.runtime.tools.mcp_tools import McpServerSettings
    from hermes_envgen.runtime.tools.web import WebSettings


@dataclass(frozen=True)
class ToolSettings:
    """The tools' settings of an env (``config.tool_settings()``): the toolsets offered and
    taken away, the MCP servers, and the ``python`` and ``web`` toolsets' own."""

    python: PythonSettings  # the python_* settings
    web: WebSettings  # the web_* settings
    enabled_toolsets: list[str] | None = None  # None: every tool (or the env's defaults)
    disabled_toolsets: list[str] = field(default_factory=list)  # taken away after enabled
    mcp_servers: list[McpServerSettings] = field(default_factory=list)  # toolset 'mcp'

    def services(self, tools: set[str] | None = None) -> dict[str, Any]:
        """The toolsets' settings and shared objects, by toolset name (see ToolContext).

        ``tools``: the names the agent gets; a toolset among them whose settings cannot work
        fails here, at start-up (EnvConfigError naming the setting).
        """
        from hermes_envgen.runtime.tools.web import WebToolset

        web = WebToolset(self.web)
        if tools is None or tools & {"web_search", "web_fetch"}:
            web.check()
        return {"python": self.python, "web": web}
