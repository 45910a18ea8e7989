"""The built-in toolsets: ``terminal`` (a shell in the sandbox) and ``file`` (workspace files)."""

from __future__ import annotations

import asyncio
import collections
import contextlib
import fnmatch
import json
import math
from collections.abc import Generator

from hermes_envgen.runtime.errors import ToolExecutionError
from hermes_envgen.runtime.sandbox import Sandbox, SandboxError
from hermes_envgen.runtime.tools import search_worker, workers
from hermes_envgen.runtime.tools.registry import printable, tool

MAX_SEARCH_MATCHES = search_worker.MAX_MATCHES
MAX_SEARCH_FILE_BYTES = 2_000_000  # larger files are skipped, unread
READ_AHEAD = 4  # files a search reads ahead (the host holds at most 5 x the size above)
MAX_SEARCH_TOTAL_BYTES = 64_000_000  # a search stops after reading this much
MAX_PATTERN_CHARS = 2_000  # a longer pattern is refused (RE2's work grows with its size)
MAX_READ_BYTES = 8_000_000  # read_file reads no further into a file
MAX_READ_CHARS = 200_000  # ... and returns at most this many characters
MAX_PATCH_BYTES = 8_000_000  # patch refuses larger files, read no further than this


@tool(toolset="terminal")
async def terminal(command: str, timeout: float | None = None, *, sandbox: Sandbox) -> str:
    """Run a bash command in your workspace and return its exit code and output.

    Args:
        command: The shell command to run; the working directory is your workspace.
        timeout: Seconds before the command is killed: at most the environment's limit,
            which is also the default.
    """
    limit = sandbox.settings.command_timeout
    result = await sandbox.run(command, timeout=command_timeout(timeout, limit))
    return json.dumps(result.as_dict(), ensure_ascii=False)


def command_timeout(requested: object, limit: float) -> float:
    """The timeout of an agent's command: the operator's ``limit`` is a ceiling it may only lower.

    A value that is not a finite, positive number (``Infinity``, ``-1``, ``"soon"``) is the
    agent's mistake, told as a tool error rather than run with some other limit.
    """
    if requested is None:
        return limit
    value = requested
    if isinstance(value, str):
        with contextlib.suppress(ValueError):
            value = float(value)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise ToolExecutionError(
            f"terminal: timeout must be a number of seconds, not {requested!r}"
        )
    if not math.isfinite(value) or value <= 0:
        raise ToolExecutionError(
            f"terminal: timeout must be a finite number of seconds above 0, not {requested!r}"
        )
    return min(float(value), limit)


@tool(toolset="file")
async def read_file(
    path: str, start_line: int | None = None, end_line: int | None = None, *, sandbox: Sandbox
) -> str:
    """Read a text file of your workspace, optionally only a range of lines.

    Args:
        path: The file's path, relative to the workspace.
        start_line: The first line to return, counting from 1.
        end_line: The last line to return (inclusive).
    """
    data = await _guard(sandbox.read_head(path, MAX_READ_BYTES + 1))
    notice = ""
    if len(data) > MAX_READ_BYTES:
        data = data[:MAX_READ_BYTES]
        notice = f"\n[file longer than {MAX_READ_BYTES} bytes: only its start was read]"
    text = data.decode("utf-8", errors="replace")
    if start_line is not None or end_line is not None:
        lines = text.splitlines(keepends=True)
        first = max(1, start_line or 1)
        text = "".join(lines[first - 1 : end_line])
    if len(text) > MAX_READ_CHARS:
        notice = (
            f"\n[cut at {MAX_READ_CHARS} of {len(text)} characters: read a range of lines "
            "with start_line and end_line]" + notice  # and that the file was read only in part
        )
        text = text[:MAX_READ_CHARS]
    return text + notice


@tool(toolset="file")
async def write_file(path: str, content: str, *, sandbox: Sandbox) -> str:
    """Create or overwrite a file of your workspace with the given content.

    Args:
        path: The file's path, relative to the workspace; parent directories are created.
        content: The complete new content of the file.
    """
    data = content.encode("utf-8")
    await _guard(sandbox.write_bytes(path, data))
    return f"wrote {len(data)} bytes to {path}"


@tool(toolset="file")
async def patch(
    path: str, old_text: str, new_text: str, replace_all: bool = False, *, sandbox: Sandbox
) -> str:
    """Replace an exact piece of text in a file of your workspace.

    Args:
        path: The file's path, relative to the workspace.
        old_text: The exact text to find; it must occur once unless replace_all is true.
        new_text: The text to put in its place.
        replace_all: Replace every occurrence instead of exactly one.
    """
    if not old_text:
        raise ToolExecutionError("patch: old_text must not be empty")
    # Bounded: a 1 GiB (sparse) file must not cost the host gigabytes of memory.
    data = await _guard(sandbox.read_head(path, MAX_PATCH_BYTES + 1))
    if len(data) > MAX_PATCH_BYTES:
        raise ToolExecutionError(
            f"patch: {path} is larger than {MAX_PATCH_BYTES} bytes, more than patch edits; "
            "change it with terminal commands (sed, python3)"
        )
    text = data.decode("utf-8", errors="replace")
    count = text.count(old_text)
    if count == 0:
        raise ToolExecutionError(f"patch: old_text was not found in {path}")
    if count > 1 and not replace_all:
        raise ToolExecutionError(
            f"patch: old_text occurs {count} times in {path}; make it unique or set replace_all"
        )
    grows = (count if replace_all else 1) * (len(new_text) - len(old_text))
    if len(text) + grows > MAX_PATCH_BYTES:  # "a" -> 1,000 characters, everywhere: gigabytes
        raise ToolExecutionError(
            f"patch: {path} would grow past {MAX_PATCH_BYTES} characters, more than patch "
            "writes; change it with terminal commands"
        )
    updated = (
        text.replace(old_text, new_text) if replace_all else text.replace(old_text, new_text, 1)
    )
    await _guard(sandbox.write_bytes(path, updated.encode("utf-8")))
    return f"replaced {count if replace_all else 1} occurrence(s) in {path}"


@tool(toolset="file")
async def search_files(
    pattern: str, path: str = ".", file_glob: str | None = None, *, sandbox: Sandbox
) -> str:
    """Search the files of your workspace for lines matching a regular expression.

    Args:
        pattern: A regular expression (RE2 syntax: Python's, without backreferences and
            lookaround), searched in each line.
        path: The directory (or file) to search, relative to the workspace.
        file_glob: Only search files whose name matches this glob, e.g. "*.py".
    """
    _check_pattern(pattern)
    files = await _guard(sandbox.list_files(path))
    if file_glob:
        files = [f for f in files if fnmatch.fnmatch(f.rsplit("/", 1)[-1], file_glob)]
    limit = sandbox.settings.command_timeout
    searched: list[str] = []  # the names of the files sent to the matcher, in order
    found: list[list] = []
    notes: list[str] = []
    # The matching runs in a process of its own, killed at the time limit: no pattern can
    # hold the event loop (Python's re keeps the interpreter lock through a catastrophic
    # match). The process is kept for later searches when this one ends cleanly.
    matchers = await workers.pool(search_worker)
    matcher = await matchers.acquire()
    assert matcher.process.stdout is not None  # a pipe
    reader = asyncio.ensure_future(_read_matches(matcher.process.stdout, found))
    clean = False

    async def search() -> int:
        skipped = await _feed(sandbox, matcher.process, pattern, files, searched, found, notes)
        if not await reader:
            code = await matcher.process.wait()
            raise ToolExecutionError(f"search_files: the matcher failed (exit {code})")
        return skipped

    try:
        skipped = await asyncio.wait_for(search(), limit)
        clean = True
    except asyncio.TimeoutError:
        notes.append(f"[search stopped after {limit:g} s: the pattern is too slow on these files]")
        skipped = 0
    finally:
        reader.cancel()
        await matchers.release(matcher, clean)
    if skipped:
        notes.append(f"[{skipped} binary or larger than {MAX_SEARCH_FILE_BYTES} bytes skipped]")
    if len(found) >= MAX_SEARCH_MATCHES:
        notes.insert(0, f"[stopped after {MAX_SEARCH_MATCHES} matches]")
    matches = [
        f"{printable(searched[index])}:{number}: {line}"
        for index, number, line in found[:MAX_SEARCH_MATCHES]
    ]
    return "\n".join(matches + notes) if matches else "\n".join(["no matches", *notes])


def _check_pattern(pattern: str) -> None:
    """Refuse, as a tool error naming the reason, a pattern the matcher would not take."""
    if len(pattern) > MAX_PATTERN_CHARS:
        raise ToolExecutionError(
            f"search_files: the pattern is longer than {MAX_PATTERN_CHARS} characters"
        )
    try:
        pattern.encode("utf-8")
        search_worker.compile_pattern(pattern)
    except UnicodeEncodeError:
        raise ToolExecutionError("search_files: invalid pattern: not valid Unicode") from None
    except ValueError as exc:
        raise ToolExecutionError(
            f"search_files: invalid pattern: {exc} (RE2 syntax: no backreferences, no "
            "lookahead or lookbehind)"
        ) from None


async def _feed(
    sandbox: Sandbox,
    worker: asyncio.subprocess.Process,
    pattern: str,
    files: list[str],
    searched: list[str],
    found: list[list],
    notes: list[str],
) -> int:
    """Send the pattern and the files to the matcher, in order; how many were skipped.

    The files stop at ``MAX_SEARCH_MATCHES`` matches or the byte budget; the end marker
    follows in every case but a matcher that stopped reading (it failed: it is not reused).
    """
    stdin = worker.stdin
    assert stdin is not None  # a pipe
    stdin.write(json.dumps(pattern).encode() + b"\n")
    skipped = 0
    budget = MAX_SEARCH_TOTAL_BYTES
    reads = _read_ahead(sandbox, files)
    try:
        for name, read in reads:
            if len(found) >= MAX_SEARCH_MATCHES:
                break
            data = await read
            if len(data) > MAX_SEARCH_FILE_BYTES or b"\x00" in data[:8192]:
                skipped += 1
                continue  # binary or huge: not worth a line search
            searched.append(name)
            stdin.write(len(data).to_bytes(8, "big") + data)
            await stdin.drain()
            budget -= len(data)
            if budget <= 0:
                notes.append(f"[stopped after reading {MAX_SEARCH_TOTAL_BYTES} bytes]")
                break
        stdin.write(search_worker.END.to_bytes(8, "big"))
        await stdin.drain()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the matcher died: the reader sees its end without the end line
    finally:
        reads.close()
    return skipped


def _read_ahead(
    sandbox: Sandbox, files: list[str]
) -> Generator[tuple[str, asyncio.Future[bytes]], None, None]:
    """Each file's name and its read, ``READ_AHEAD`` files read at once (a read is a hop to a
    thread, and one after another they cost more than the matching of a small workspace)."""
    pending: collections.deque[tuple[str, asyncio.Future[bytes]]] = collections.deque()
    names = iter(files)
    try:
        while True:
            while len(pending) < READ_AHEAD and (name := next(names, None)) is not None:
                head = _guard(sandbox.read_head(name, MAX_SEARCH_FILE_BYTES + 1))
                pending.append((name, asyncio.ensure_future(head)))
            if not pending:
                return
            yield pending.popleft()
    finally:  # stopped early (enough matches, a timeout): the reads ahead are not wanted
        for _, read in pending:
            if read.done() and not read.cancelled():
                read.exception()  # retrieved: a failed read no one waits for is no error
            read.cancel()


async def _read_matches(stdout: asyncio.StreamReader, found: list[list]) -> bool:
    """Collect the matcher's matches as they come (a timeout keeps those found so far);
    whether the search's end came (False: the matcher ended first)."""
    while line := await stdout.readline():
        if line.strip() == search_worker.END_LINE.encode():
            return True
        found.append(json.loads(line))
    return False


async def _guard(awaitable):
    """Turn a sandbox refusal (path outside the workspace, missing file) into a tool error."""
    try:
        return await awaitable
    except SandboxError as exc:
        raise ToolExecutionError(str(exc)) from None
