"""The built-in toolsets: ``terminal`` (a shell in the sandbox) and ``file`` (workspace files)."""

from __future__ import annotations

import asyncio
import fnmatch
import json
import re

from hermes_envgen.runtime.sandbox import Sandbox, SandboxError
from hermes_envgen.runtime.tools.registry import ToolExecutionError, printable, tool

MAX_SEARCH_MATCHES = 200
MAX_SEARCH_FILE_BYTES = 2_000_000  # larger files are skipped, unread
MAX_SEARCH_TOTAL_BYTES = 64_000_000  # a search stops after reading this much
MAX_READ_BYTES = 8_000_000  # read_file reads no further into a file
MAX_READ_CHARS = 200_000  # ... and returns at most this many characters


@tool(toolset="terminal")
async def terminal(command: str, timeout: int | None = None, *, sandbox: Sandbox) -> str:
    """Run a bash command in your workspace and return its exit code and output.

    Args:
        command: The shell command to run; the working directory is your workspace.
        timeout: Seconds before the command is killed (defaults to the environment's limit).
    """
    result = await sandbox.run(command, timeout=timeout)
    return json.dumps(result.as_dict(), ensure_ascii=False)


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
            "with start_line and end_line]"
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
    text = (await _read(sandbox, path)).decode("utf-8", errors="replace")
    if not old_text:
        raise ToolExecutionError("patch: old_text must not be empty")
    count = text.count(old_text)
    if count == 0:
        raise ToolExecutionError(f"patch: old_text was not found in {path}")
    if count > 1 and not replace_all:
        raise ToolExecutionError(
            f"patch: old_text occurs {count} times in {path}; make it unique or set replace_all"
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
        pattern: A Python regular expression, searched in each line.
        path: The directory (or file) to search, relative to the workspace.
        file_glob: Only search files whose name matches this glob, e.g. "*.py".
    """
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ToolExecutionError(f"search_files: invalid pattern: {exc}") from None
    files = await _guard(sandbox.list_files(path))
    if file_glob:
        files = [f for f in files if fnmatch.fnmatch(f.rsplit("/", 1)[-1], file_glob)]
    matches: list[str] = []
    notes: list[str] = []
    skipped = 0
    budget = MAX_SEARCH_TOTAL_BYTES
    for name in files:
        data = await _guard(sandbox.read_head(name, MAX_SEARCH_FILE_BYTES + 1))
        if len(data) > MAX_SEARCH_FILE_BYTES or b"\x00" in data[:8192]:
            skipped += 1
            continue  # binary or huge: not worth a line search
        found = await asyncio.to_thread(_matching_lines, regex, name, data.decode(errors="replace"))
        matches.extend(found)
        budget -= len(data)
        if len(matches) >= MAX_SEARCH_MATCHES:
            matches = matches[:MAX_SEARCH_MATCHES]
            notes.append(f"[stopped after {MAX_SEARCH_MATCHES} matches]")
            break
        if budget <= 0:
            notes.append(f"[stopped after reading {MAX_SEARCH_TOTAL_BYTES} bytes]")
            break
    if skipped:
        notes.append(f"[{skipped} binary or larger than {MAX_SEARCH_FILE_BYTES} bytes skipped]")
    return "\n".join(matches + notes) if matches else "\n".join(["no matches", *notes])


def _matching_lines(regex: re.Pattern, name: str, text: str) -> list[str]:
    name = printable(name)
    return [
        f"{name}:{number}: {line[:500]}"
        for number, line in enumerate(text.splitlines(), start=1)
        if regex.search(line)
    ]


async def _read(sandbox: Sandbox, path: str) -> bytes:
    return await _guard(sandbox.read_bytes(path))


async def _guard(awaitable):
    """Turn a sandbox refusal (path outside the workspace, missing file) into a tool error."""
    try:
        return await awaitable
    except SandboxError as exc:
        raise ToolExecutionError(str(exc)) from None
