"""The programs the tools run inside a sandbox, as their commands carry them.

Each program (``interpreter_program``, ``mcp_relay_program``) imports what it shares with the
other from ``sandbox_channel``; shipped, that import is replaced by the module's text, so a
program is one standalone text that the sandbox's own ``python3 -I -S`` runs from its argv
(``BOOT``) on every backend: nothing is installed in the sandbox.
"""

from __future__ import annotations

import base64
import functools
import re
from pathlib import Path

from hermes_envgen.runtime.tools import sandbox_channel

BOOT = sandbox_channel.BOOT
_HERE = Path(__file__).parent
_CHANNEL_IMPORT = re.compile(
    r"^from hermes_envgen\.runtime\.tools\.sandbox_channel import (\([^)]*\)|[^\n]*)\n",
    re.MULTILINE,
)


@functools.cache
def shipped_source(program: str) -> str:
    """``program``'s text (a module name of this package) with the channel inlined, base64."""
    text = (_HERE / f"{program}.py").read_text(encoding="utf-8")
    channel = (_HERE / "sandbox_channel.py").read_text(encoding="utf-8")
    shipped, count = _CHANNEL_IMPORT.subn(lambda _: channel, text, count=1)
    if count != 1:
        raise RuntimeError(f"{program}.py does not import sandbox_channel")
    return base64.b64encode(shipped.encode("utf-8")).decode("ascii")


def boot_argv(python: str, program: str, *arguments: str) -> list[str]:
    """The argv that runs ``program`` with ``arguments`` in the sandbox."""
    return [python, "-I", "-S", "-c", BOOT, shipped_source(program), *arguments]
