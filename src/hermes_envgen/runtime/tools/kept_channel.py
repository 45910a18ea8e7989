"""The host's kept connection to a server of a sandbox program (``sandbox_channel``).

Where the host can reach a sandbox's filesystem (``Sandbox.host_root``: local, bwrap) it
connects to the server's Unix socket itself and keeps the connection for the rollout, so a
message costs one round trip instead of a sandbox command; docker, whose sockets the host
cannot reach, connects through the container's kept channel (``Sandbox.connect_socket``).
The MCP relay and the ``python`` tool's interpreter are reached so.
"""

from __future__ import annotations

import asyncio
import os
import select
import stat

from hermes_envgen.runtime.sandbox import Sandbox

Stream = tuple[asyncio.StreamReader, asyncio.StreamWriter]


async def connect_below(sandbox: Sandbox, directory: str, limit: int) -> Stream | None:
    """A connection to the server listening in ``directory`` of the sandbox, if the host can
    reach it; opened without following a link, as the agent may have put one there."""
    root = sandbox.host_root()
    if root is None:
        return await sandbox.connect_socket(directory, limit)
    try:
        fd = socket_below(root, directory)
    except OSError:
        return None
    try:
        return await asyncio.open_unix_connection(f"/proc/self/fd/{fd}", limit=limit)
    except OSError:
        return None
    finally:
        os.close(fd)


def socket_below(root: str, directory: str) -> int:
    """An ``O_PATH`` descriptor of ``directory/socket`` below ``root``, every step taken
    without following a link (one would lead out of the sandbox, to a socket of the host's)."""
    fd = os.open(root, os.O_PATH | os.O_DIRECTORY)  # /proc/PID/root: the sandbox's, wanted
    try:
        for part in (part for part in directory.split("/") if part):
            below = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY, dir_fd=fd)
            os.close(fd)
            fd = below
        found = os.open("socket", os.O_PATH | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)
    if not stat.S_ISSOCK(os.fstat(found).st_mode):
        os.close(found)
        raise OSError(f"{directory}/socket is not a socket")
    return found


def usable(stream: Stream | None) -> bool:
    """Whether a kept connection may carry the next message: the server has not ended it, and
    the socket holds nothing unasked (its end of file, or a flood, that the event loop has not
    read yet: asked of the kernel directly, so that a server that died just before a call is
    not taken for one that died under it)."""
    if stream is None or stream[0].at_eof() or stream[1].is_closing():
        return False
    sock = stream[1].get_extra_info("socket")
    if sock is None:
        return False
    readable, _, _ = select.select([sock.fileno()], [], [], 0)
    return not readable
