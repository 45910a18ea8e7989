"""The process that matches ``search_files`` patterns, so that no pattern can stall the env.

The env starts it per search (``python -I`` of this file: standard library and ``re2`` only,
some 40 ms) and kills it at the search's time limit. The pattern runs on RE2, linear in the
text, yet a small pattern can still cost minutes on a large file (``[a-z]{1,1000}`` twice):
here that burns this process's time, never the event loop's, and ends at the limit.

Protocol, on stdin: the pattern as one JSON line, then per file an 8-byte big-endian
length and that many bytes. On stdout: one JSON line ``[file_index, line_number, line]`` per
matching line (the line cut at ``MAX_LINE_CHARS``), flushed after each file; it stops after
``MAX_MATCHES`` matches or at the end of stdin.
"""

from __future__ import annotations

import json
import sys

MAX_MATCHES = 200
MAX_LINE_CHARS = 500


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


def _read_exactly(stream, size: int) -> bytes | None:
    data = stream.read(size)
    return data if len(data) == size else None


def main() -> None:
    stdin, stdout = sys.stdin.buffer, sys.stdout
    regex = compile_pattern(json.loads(stdin.readline()))
    found = 0
    index = 0
    while found < MAX_MATCHES and (header := _read_exactly(stdin, 8)) is not None:
        data = _read_exactly(stdin, int.from_bytes(header, "big"))
        if data is None:
            break
        for number, line in enumerate(data.decode("utf-8", "replace").splitlines(), start=1):
            if regex.search(line):
                stdout.write(json.dumps([index, number, line[:MAX_LINE_CHARS]]) + "\n")
                found += 1
                if found >= MAX_MATCHES:
                    break
        stdout.flush()
        index += 1


if __name__ == "__main__":
    main()
