"""A started command's capped output and its exit under a timeout: what every backend collects."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from hermes_envgen.runtime.sandbox.base import TIMEOUT_EXIT_CODE, CommandResult
from hermes_envgen.runtime.sandbox.process import SpawnedProcess


class CappedOutput:
    """The first ``limit`` bytes of a command's output and a count of the rest.

    Kept outside the reading task, so that what was read survives when reading is cut off.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.head = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        """Keep what fits of ``chunk`` and count the rest."""
        room = self.limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
        self.dropped += max(0, len(chunk) - max(room, 0))

    async def drain(self, stream: asyncio.StreamReader) -> None:
        """Read ``stream`` to its end."""
        while chunk := await stream.read(65536):
            self.add(chunk)

    def result(self, exit_code: int, timed_out_after: float | None) -> CommandResult:
        """The command's result, with visible notices for cut output and a timeout."""
        output = bytes(self.head).decode("utf-8", errors="replace")
        if self.dropped:
            output += f"\n[output truncated: {self.dropped} more bytes not shown]"
        if timed_out_after is not None:
            output += f"\n[command timed out after {timed_out_after:g} s and was killed]"
            return CommandResult(TIMEOUT_EXIT_CODE, output, True, self.dropped)
        return CommandResult(exit_code, output, truncated_bytes=self.dropped)


async def finish_command(
    process: SpawnedProcess,
    max_output_bytes: int,
    timeout: float,
    kill: Callable[[], Awaitable[None]],
) -> CommandResult:
    """Collect a started command's capped output and exit under a timeout (every backend).

    ``kill`` kills the command and all it started. It runs on a timeout, when background
    children still hold the output pipe a moment after the command exited, and when the
    caller is cancelled, so that no command outlives its call.
    """
    captured = CappedOutput(max_output_bytes)
    reader = asyncio.ensure_future(captured.drain(process.stdout))
    timed_out = False
    try:
        if not await _finishes_within(process.exited, timeout):
            timed_out = True
            await kill()
        await process.wait()
        # Background children may hold the pipe after the shell exited; give them a moment.
        if not await _finishes_within(reader, 1.0):
            await kill()
            await _finishes_within(reader, 1.0)
    finally:
        if process.returncode is None:  # cancelled: never leave the command running
            await asyncio.shield(kill())
        if not reader.done():  # something no kill reached still holds the pipe
            reader.cancel()
    assert process.returncode is not None  # waited for above (a cancel raised instead)
    return captured.result(process.returncode, timeout if timed_out else None)


async def _finishes_within(future: asyncio.Future, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``future`` (without cancelling it); whether it finished.

    No task and no shield: a command's exit and output are awaited this way, twice per
    command, and each layer costs a turn of the event loop.
    """
    if not future.done():
        await asyncio.wait([future], timeout=seconds)
    return future.done()
