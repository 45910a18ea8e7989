"""Fetches compression bombs from a server on 127.0.0.1 and says how much memory that took.

Run as a program by tests/runtime/tools/test_web.py, so that the peak memory (``ru_maxrss``) it
reports is the fetcher's alone. Each bomb is a small body that expands to ``INNER`` bytes of
zeros: built by streaming compressors a megabyte at a time, so building them costs little
memory. Prints one JSON line: ``{"errors": {name: tool error or null}, "grown_mib": ...}``.
"""

from __future__ import annotations

import asyncio
import json
import resource
import sys
import zlib

from aiohttp import web

from hermes_envgen.runtime.errors import ToolExecutionError
from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.sandbox import SandboxManager
from hermes_envgen.runtime.tools.web import WebSettings, WebToolset

INNER = 64 * 1024 * 1024  # what each bomb expands to
MIB = b"\0" * (1 << 20)


def zlib_bomb(wbits: int) -> bytes:
    compressor = zlib.compressobj(6, zlib.DEFLATED, wbits)
    return b"".join(compressor.compress(MIB) for _ in range(INNER >> 20)) + compressor.flush()


def bombs() -> dict[str, tuple[str, bytes]]:
    """name: (Content-Encoding, body)."""
    gzip = zlib_bomb(zlib.MAX_WBITS | 16)
    outer = zlib.compressobj(9, zlib.DEFLATED, zlib.MAX_WBITS | 16)
    made = {
        "gzip": ("gzip", gzip),
        "gzip, gzip": ("gzip, gzip", outer.compress(gzip) + outer.flush()),
        "deflate": ("deflate", zlib_bomb(zlib.MAX_WBITS)),
        "raw deflate": ("deflate", zlib_bomb(-zlib.MAX_WBITS)),
    }
    try:
        import brotli

        compressor = brotli.Compressor(quality=1)
        body = b"".join(compressor.process(MIB) for _ in range(INNER >> 20)) + compressor.finish()
        made["br"] = ("br", body)
    except ImportError:
        pass
    try:
        import zstandard

        stream = zstandard.ZstdCompressor(level=1).compressobj()
        body = b"".join(stream.compress(MIB) for _ in range(INNER >> 20)) + stream.flush()
        made["zstd"] = ("zstd", body)
    except ImportError:
        pass
    return made


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


async def main() -> None:
    made = bombs()

    async def serve(request: web.Request) -> web.Response:
        name = request.query.get("name")
        if name is None:
            return web.Response(text="<p>small</p>", content_type="text/html")
        encoding, body = made[name]
        headers = {"Content-Type": "text/html", "Content-Encoding": encoding}
        return web.Response(body=body, headers=headers)

    app = web.Application()
    app.add_routes([web.get("/", serve)])
    runner = web.AppRunner(app, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    toolset = WebToolset(WebSettings(backend="tavily", allow_private=True))
    ctx = ToolContext("bombs", SandboxManager(), services={"web": toolset})
    await ctx.call_tool("web_fetch", {"url": f"http://127.0.0.1:{port}/"})  # all loaded
    before = peak_mib()
    errors: dict[str, str | None] = {}
    for name in made:
        try:
            await ctx.call_tool("web_fetch", {"url": f"http://127.0.0.1:{port}/?name={name}"})
            errors[name] = None
        except ToolExecutionError as exc:
            errors[name] = str(exc)
    await runner.cleanup()
    print(json.dumps({"errors": errors, "grown_mib": peak_mib() - before}))
    sys.stdout.flush()


if __name__ == "__main__":
    asyncio.run(main())
