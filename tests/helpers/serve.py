"""serve mode's command line (serve_command, GROUP_SIZE), and a byte pipe between two streams
(the proxy of the delivery tests)."""

from __future__ import annotations

import asyncio
import sys

from conftest import EXAMPLES

GROUP_SIZE = 4


def serve_command(model_url: str, tokenizer, rollout_server: str, sandboxes, *flags: str) -> list:
    """The example env's ``serve`` against the stub model and a run-api, plus ``flags``."""
    return [
        sys.executable, str(EXAMPLES / "terminal_env.py"), "serve",
        "--openai.base_url", model_url,
        "--env.tokenizer_name", str(tokenizer),
        "--env.rollout_server_url", rollout_server,
        "--env.group_size", str(GROUP_SIZE),
        "--env.sandbox_root", str(sandboxes),
        *flags,
    ]  # fmt: skip


async def pipe_stream(source: asyncio.StreamReader, sink: asyncio.StreamWriter) -> None:
    try:
        while data := await source.read(1 << 16):
            sink.write(data)
            await sink.drain()
    except ConnectionError:
        pass
    finally:
        sink.close()
