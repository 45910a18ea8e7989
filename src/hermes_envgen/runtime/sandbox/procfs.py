"""What /proc says about processes: the one place that reads it.

Per process: its state, parent and start time (``/proc/<pid>/stat``). Across processes, one
scan (``pids``) under every search: by a variable of the environment (the sandboxes' run tags),
by the command line, the working directory, the pid namespace.
"""

from __future__ import annotations

import os
from collections.abc import Callable

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


# -- the one scan of /proc: every process but this one -------------------------------------------


def pids() -> list[int]:
    """Every process's pid but this process's own; [] where there is no procfs (not Linux)."""
    try:
        entries = os.listdir("/proc")
    except OSError:
        return []
    me = os.getpid()
    return [int(name) for name in entries if name.isdigit() and int(name) != me]


def exists(pid: int | str) -> bool:
    """Whether a process of that pid exists (a zombie included)."""
    return os.path.exists(f"/proc/{pid}")


def _read(pid: int, name: str) -> bytes | None:
    """``/proc/<pid>/<name>``'s bytes, or None when it is gone or not ours to read."""
    try:
        with open(f"/proc/{pid}/{name}", "rb") as file:
            return file.read()
    except OSError:
        return None


def _link(pid: int, name: str) -> str | None:
    """Where ``/proc/<pid>/<name>`` points (cwd, ns/pid), or None."""
    try:
        return os.readlink(f"/proc/{pid}/{name}")
    except OSError:
        return None


def with_variable(variable: str, matches: Callable[[str], bool]) -> list[int]:
    """Live processes (not zombies) whose environment sets ``variable`` to a value that matches.

    Reading every environment costs from a millisecond to tens of them on a host with
    thousands of processes: the marker is looked for in the raw bytes first.
    """
    marker = f"{variable}=".encode()
    found = []
    for pid in pids():
        environ = _read(pid, "environ")
        if environ is None or marker not in environ:
            continue
        for entry in environ.split(b"\0"):
            if entry.startswith(marker):
                value = entry[len(marker) :].decode("utf-8", errors="replace")
                if matches(value) and is_alive(pid):
                    found.append(pid)
                break
    return found


def naming(directory: str) -> list[int]:
    """Processes whose command line names a path inside ``directory``."""
    needle = directory.encode() + b"/"
    return [pid for pid in pids() if needle in (_read(pid, "cmdline") or b"")]


def working_in(directory: str) -> list[int]:
    """Processes whose working directory is ``directory`` or inside it."""
    found = []
    for pid in pids():
        cwd = _link(pid, "cwd")
        if cwd is not None and cwd.startswith(directory):
            found.append(pid)
    return found


def pid_namespace(pid: int) -> str | None:
    """The pid namespace a process lives in (``pid:[4026531836]``), or None."""
    return _link(pid, "ns/pid")


def own_pid_namespace() -> int:
    """This process's pid namespace, as a number unique among those alive (0: unknown)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return 0


def in_pid_namespace(namespace: str) -> list[int]:
    """The processes of a pid namespace (a container's, seen from the host)."""
    return [pid for pid in pids() if _link(pid, "ns/pid") == namespace]
