"""The process that matches ``search_files`` patterns, so that no pattern can stall the env.

The env keeps a few of these (``python -I`` of this file: standard library and ``re2`` only,
some 40 ms to start) and hands each search to an idle one; a search that overruns its time
limit has its matcher killed, and the next search starts a fresh one. The pattern runs on
RE2, linear in the text, yet a small pattern can still cost minutes on a large file
(``[a-z]{1,1000}`` twice): here that burns this process's time, never the event loop's, and
ends at the limit.

Protocol, searches one after another: on stdin, the pattern as one JSON line, then per file
an 8-byte big-endian length and that many bytes, then the length ``END`` (no bytes). On
stdout: one JSON line ``[file_index, line_number, line]`` per matching line (the line cut at
``MAX_LINE_CHARS``; flushed at the end and every ``FLUSH_EVERY`` seconds before), at most
``MAX_MATCHES`` of them (the files after that are read and skipped), then ``"end"``. The
process exits at the end of stdin, or once it has waited ``IDLE_EXIT`` seconds for a search.
"""

from __future__ import annotations

import json
import select
import sys
import time

MAX_MATCHES = 200
MAX_LINE_CHARS = 500
END = (1 << 64) - 1  # the length that ends a search's files
END_LINE = '"end"'
FLUSH_EVERY = 0.1  # seconds: matches reach the env at least this often (and at the end)
IDLE_EXIT = 60.0  # seconds without a search before the process exits (the env never waits)


def compile_pattern(pattern: str):
    """The RE2 regex of ``pattern``; raises ``ValueError`` with RE2's reason."""
    import re2

    options = re2.Options()
    options.log_errors = False  # RE2 would print every refused pattern to the env's stderr
    try:
        return re2.compile(pattern, options)
    except re2.error as exc:
        reason = exc.args[0] if exc.args else exc
        if isinstance(reason, bytes):
            reason = reason.decode("utf-8", "replace")
        raise ValueError(str(reason)) from None


def file_filter(pattern: str):
    """A regex that finds a match in a file's text wherever ``pattern`` matches one of its
    lines (and perhaps elsewhere), or None: one search of the text spares the line by line
    searches of a file with no match, most files (RE2 costs some microseconds a call).

    ``(?m)``: ``^`` and ``$`` match at each line's start and end, as they do in the line;
    ``\\b`` sees a newline as a line's ends look. A pattern with ``\\A`` or ``\\z`` (text
    anchors) or flag groups (which could turn ``m`` off) gets none.
    """
    if "\\A" in pattern or "\\z" in pattern or "(?" in pattern:
        return None
    try:
        return compile_pattern("(?m)" + pattern)
    except ValueError:
        return None


def _read_exactly(stream, size: int) -> bytes | None:
    data = stream.read(size)
    return data if len(data) == size else None


def search(stdin, stdout, regex, whole=None) -> bool:
    """Match one search's files (``whole``: their ``file_filter``); False when stdin ended
    inside it."""
    found = 0
    index = 0
    flushed = time.monotonic()
    while (header := _read_exactly(stdin, 8)) is not None:
        size = int.from_bytes(header, "big")
        if size == END:
            stdout.write(END_LINE + "\n")
            stdout.flush()
            return True
        data = _read_exactly(stdin, size)
        if data is None:
            return False
        lines = data.decode("utf-8", "replace").splitlines()
        # Joined at "\n" alone: "$" in (?m) ends a line there, not at "\r" (splitlines does).
        if found < MAX_MATCHES and (whole is None or whole.search("\n".join(lines))):
            for number, line in enumerate(lines, 1):
                if regex.search(line):
                    stdout.write(json.dumps([index, number, line[:MAX_LINE_CHARS]]) + "\n")
                    found += 1
                    if found >= MAX_MATCHES:
                        break
            if time.monotonic() - flushed > FLUSH_EVERY:  # a slow search's matches so far
                stdout.flush()
                flushed = time.monotonic()
        index += 1
    return False


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout
    while select.select([stdin], [], [], IDLE_EXIT)[0]:
        line = stdin.readline()
        if not line:
            return
        pattern = json.loads(line)
        if not search(stdin, stdout, compile_pattern(pattern), file_filter(pattern)):
            return


if __name__ == "__main__":
    main()
