"""web_fetch of each URL, run inside the DNS rebinding test's network namespace.

    python rebinding_fetch.py NETWORK URL...

The namespace's NETWORK plays the public Internet here: its addresses count as global (the
only change to what the fetcher refuses; loopback stays refused), so that a name answering
one of them passes the check as a public name would. Prints one JSON line: per URL, the
tool's answer or its error.
"""

from __future__ import annotations

import asyncio
import ipaddress
import json
import sys

from hermes_envgen.runtime.errors import ToolExecutionError
from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.sandbox import SandboxManager
from hermes_envgen.runtime.tools.web import WebSettings, WebToolset

NETWORK = ipaddress.ip_network(sys.argv[1])
_is_global = ipaddress.IPv4Address.is_global


def _global_here(address: ipaddress.IPv4Address) -> bool:
    return address in NETWORK or bool(_is_global.__get__(address))


ipaddress.IPv4Address.is_global = property(_global_here)  # type: ignore[assignment,method-assign]


async def main() -> None:
    toolset = WebToolset(WebSettings(backend="tavily", timeout=10.0))
    ctx = ToolContext("rebinding", SandboxManager(), services={"web": toolset})
    results = {}
    for url in sys.argv[2:]:
        try:
            results[url] = {"text": await ctx.call_tool("web_fetch", {"url": url})}
        except ToolExecutionError as exc:
            results[url] = {"error": str(exc)}
    print(json.dumps(results), flush=True)


if __name__ == "__main__":
    asyncio.run(main())
