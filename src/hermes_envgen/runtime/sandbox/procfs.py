"""What /proc/<pid>/stat says about a process: its state, its parent, its start time."""

from __future__ import annotations

DEAD_STATES = ("Z", "X")  # a zombie or a dead process: gone for every purpose here


def stat_fields(pid: int) -> list[str] | None:
    """The fields of ``/proc/<pid>/stat`` after the command name (the state first), or None.

    The command name is cut off at its last ``)``: it may itself hold spaces and parentheses.
    """
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            text = file.read()
    except OSError:
        return None
    fields = text.rsplit(b")", 1)[-1].decode("ascii", errors="replace").split()
    return fields or None


def process_state(pid: int) -> str | None:
    """A process's state letter (R, S, Z...), or None if there is no such process."""
    fields = stat_fields(pid)
    return fields[0] if fields else None


def is_alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    return process_state(pid) not in (None, *DEAD_STATES)


def parent_pid(pid: int) -> int | None:
    """A process's parent pid, or None if it is gone."""
    fields = stat_fields(pid)
    return int(fields[1]) if fields and len(fields) > 1 else None


def start_time(pid: int) -> str:
    """A live process's start time (clock ticks since boot); "" if it is gone or a zombie."""
    fields = stat_fields(pid)
    if not fields or fields[0] in DEAD_STATES or len(fields) < 20:
        return ""
    return fields[19]
