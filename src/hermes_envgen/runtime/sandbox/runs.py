"""Each run's sandboxes under one directory, locked while the run lives, removed when it ends.

A run (one ``SandboxManager``) keeps its workspaces in ``<root>/hermes-envgen/<name>/``
and holds an exclusive ``flock`` on ``<name>.lock`` beside it for as long as its process
lives; the kernel drops the lock however the process dies (``kill -9`` included). A run
that ends normally, or by SIGTERM/SIGINT turned into an exit, removes its directory and
kills what it started at interpreter exit. Whatever a run that died harder left (its
directory, mounts and cgroups, a local command's daemons, a bwrap sandbox started as it was
killed, its Docker containers, found by their run label on each engine noted in
``ENGINE_FILE``) is removed by the next run under the same root, or by ``hermes-envgen
cleanup``: a directory whose lock nobody holds is stale.

A run's name, ``<pid>-<ms>-<pid namespace>``, is unique on the host: a pid is unique in its
namespace only. Whether a run is gone is never read from its pid, which a run in another
pid namespace (another container) cannot see or sees as another process: only from its
locks, the run directory's and, on the host, its cgroup directory's (``host_limits``).
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import logging
import os
import signal
import tempfile
import threading
import time
from pathlib import Path

from hermes_envgen.runtime.sandbox import procfs
from hermes_envgen.runtime.sandbox.docker.engine import ENGINE_FILE, remove_run_containers
from hermes_envgen.runtime.sandbox.host_limits import (
    cgroup_parents,
    mount_points,
    remove_run_cgroups,
    remove_run_cgroups_unless_held,
    unmount_below,
)
from hermes_envgen.runtime.sandbox.reaping import kill_processes
from hermes_envgen.runtime.sandbox.workspace_files import remove_tree

logger = logging.getLogger(__name__)

LOCK_SUFFIX = ".lock"
RUNS_DIRECTORY = "hermes-envgen"
_stamp_lock = threading.Lock()


def runs_directory(root: str | Path | None) -> Path:
    """Where the runs under a sandbox root (default: the temp directory) keep their sandboxes."""
    return Path(root or tempfile.gettempdir()) / RUNS_DIRECTORY


class RunDirectory:
    """This process's directory of workspaces, and its lock."""

    def __init__(self, parent: Path) -> None:
        self.parent = parent
        self.name = f"{os.getpid()}-{_stamp()}-{procfs.own_pid_namespace()}"
        self.path = parent / self.name
        self._lock: int | None = None

    def claim(self) -> None:
        """Take the run's lock and make its directory (once, until released).

        From now on, no other run reaps this directory.
        """
        if self._lock is not None:
            return
        self.parent.mkdir(parents=True, exist_ok=True)
        lock = self.parent / (self.name + LOCK_SUFFIX)
        while True:
            fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)
            # A run reaping this directory took the new lock file, unlocked, for a stale one
            # and removed it before the lock was ours: only the lock file in place counts.
            with contextlib.suppress(FileNotFoundError):
                if os.path.samestat(os.fstat(fd), os.stat(lock)):
                    break
            os.close(fd)
        self._lock = fd
        _LIVE.add(self)  # held until the run is released: removed at exit at the latest
        self.path.mkdir(exist_ok=True)

    def release(self) -> None:
        """The run closed all its sandboxes: remove the empty directory and drop the lock.

        A directory that is not empty (a close cut short, e.g. cancelled on Ctrl-C) keeps the
        run locked and live: it is reaped at exit, or by the next run once this one is gone.
        """
        try:
            if set(os.listdir(self.path)) - {ENGINE_FILE}:
                return
            with contextlib.suppress(FileNotFoundError):
                (self.path / ENGINE_FILE).unlink()  # its containers went with their sandboxes
            self.path.rmdir()
        except FileNotFoundError:
            pass
        except OSError:
            return
        remove_run_cgroups(self.name)  # the run's cgroup directories, emptied by each close
        self._unlock()

    def remove(self) -> None:
        """Kill what the run's sandboxes still run, delete its directory, drop the lock."""
        reap(self.parent, self.name)
        self._unlock()

    def _unlock(self) -> None:
        if self._lock is not None:
            with contextlib.suppress(OSError):
                os.unlink(self.parent / (self.name + LOCK_SUFFIX))
            os.close(self._lock)
            self._lock = None
        _LIVE.discard(self)


_last_stamp = 0


def _stamp() -> int:
    """Milliseconds since the epoch, never the same twice in this process: two runs made in one
    millisecond would share a name, and the second would wait forever for the first's lock."""
    global _last_stamp
    with _stamp_lock:
        _last_stamp = max(int(time.time() * 1000), _last_stamp + 1)
        return _last_stamp


def reap_stale_runs(parent: Path) -> list[str]:
    """Remove the run directories under ``parent`` whose run is gone; return their names."""
    try:
        names = os.listdir(parent)
    except OSError:
        return []
    reaped = []
    for name in names:
        if name.endswith(LOCK_SUFFIX):  # a lock left without its directory
            name = name[: -len(LOCK_SUFFIX)]
            if name in names:
                continue
        if not _is_run_name(name):
            continue
        lock = _stale_run_lock(parent, name)
        if lock is None:
            continue
        try:  # under its lock: a run that is claiming that name waits, then starts over
            logger.info("removing what a run that ended without cleaning up left: %s", name)
            reap(parent, name)
            with contextlib.suppress(OSError):
                os.unlink(parent / (name + LOCK_SUFFIX))
        finally:
            if lock >= 0:
                os.close(lock)
        reaped.append(name)
    return reaped


def reap_dead_runs_on_host() -> None:
    """What runs that died under any root left on the host: cgroups and mounted workspaces.

    Both outlive a run killed under a root no later run uses (a temporary directory). A run's
    cgroup directory is locked by its run for as long as it lives, in whatever pid namespace
    or container: one nobody holds is removed. Those named as runs before these locks
    (``<pid>-<ms>``) are left alone, their pid being no proof. A mounted workspace names its
    run's directory, so that directory's runs are reaped as the next run there would.
    """
    for parent in cgroup_parents():
        try:
            names = os.listdir(parent)
        except OSError:
            continue
        for name in names:
            if _is_run_name(name) and name.count("-") == 2:
                remove_run_cgroups_unless_held(parent / name)
    marker = f"/{RUNS_DIRECTORY}/".encode()
    parents = set()
    for point in mount_points():
        head, found, rest = point.rpartition(marker)
        if found and _is_run_name(os.fsdecode(rest.split(b"/")[0])) and rest.count(b"/") == 1:
            parents.add(Path(os.fsdecode(head + marker)))
    for parent in parents:
        reap_stale_runs(parent)


def reap(parent: Path, name: str) -> None:
    """Kill every process of run ``name``'s sandboxes and delete its directory."""
    directory = str(parent / name)
    kill_processes(None, f"{name}.")  # commands: their run tags start with the run's name
    for pid in procfs.naming(directory):  # bwrap sandboxes: their argv binds a workspace
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    unmount_below(parent / name)  # size-limited workspaces (bwrap as root)
    if (parent / name / ENGINE_FILE).exists():  # containers on a Docker engine
        remove_run_containers(parent / name)
    remove_run_cgroups(name)
    remove_tree(parent / name)


def _is_run_name(name: str) -> bool:
    """``<pid>-<ms>-<pid namespace>``, or ``<pid>-<ms>`` as runs were named before."""
    parts = name.split("-")
    return len(parts) in (2, 3) and all(part.isdigit() for part in parts)


def _stale_run_lock(parent: Path, name: str) -> int | None:
    """The lock of run ``name``, taken, if the run is gone (-1: it has none); None if it lives.

    A run takes its lock before it makes its directory and removes it after: a directory
    without a lock is stale.
    """
    try:
        fd = os.open(parent / (name + LOCK_SUFFIX), os.O_RDWR | os.O_CLOEXEC)
    except FileNotFoundError:
        return -1
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


def _run_is_live(parent: Path, name: str) -> bool:
    """Whether the run still holds its lock."""
    lock = _stale_run_lock(parent, name)
    if lock is not None and lock >= 0:
        os.close(lock)
    return lock is None


# The runs of this process that hold their lock, whether or not their manager still exists.
_LIVE: set[RunDirectory] = set()


@atexit.register
def _remove_live_runs() -> None:
    """At interpreter exit, remove what this process's runs left (closed or not)."""
    for run in list(_LIVE):
        with contextlib.suppress(Exception):
            run.remove()


def exit_on_termination() -> None:
    """Turn SIGTERM into a normal exit, so that sandboxes are removed at exit as on SIGINT.

    Only where SIGTERM still has its default action, and from the main thread.
    """
    with contextlib.suppress(ValueError):  # not the main thread
        if signal.getsignal(signal.SIGTERM) is signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _exit_on_signal)


def _exit_on_signal(signum: int, _frame) -> None:
    raise SystemExit(128 + signum)
