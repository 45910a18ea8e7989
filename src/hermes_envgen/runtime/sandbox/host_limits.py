"""Caps on a whole sandbox that the host sets up as root: cgroups and a size-limited workspace.

``ulimit`` bounds each process; these bound the sandbox as a whole, whatever its processes:

- a cgroup (v1: the ``memory``, ``pids`` and ``cpu`` hierarchies) per sandbox, below the
  host process's own: its memory in total (workspace files on tmpfs included), its number
  of processes, and its CPU rate (background spinners share the sandbox's CPUs and no more).
  bwrap enters it before anything else runs (``enter_argv``), so every process of the
  sandbox, its commands included, is counted. A cgroup v2-only host, or a host process that
  is not root, gets no cgroup (the per-process limits remain); that is logged once.
  A run's sandboxes' cgroups sit in the run's own cgroup directory, which the run holds an
  exclusive ``flock`` on (``flock`` works on a cgroup directory; cgroupfs takes no files) from
  its first sandbox until it removes it. Runs that share the cgroup tree need not share a
  pid namespace or a file system: the lock tells them whether a run is gone
  (``remove_run_cgroups_unless_held``), which its pid cannot tell one in another namespace.
- the workspace as a tmpfs of a fixed size and number of files: writes past it fail with
  "No space left on device". Root only as well. Where the kernel lets a mount made with
  ``fsmount`` be bound from its descriptor (``detached_workspace``), the tmpfs is in no mount
  namespace but the sandbox's: every mount of the host's namespace is copied into each new
  sandbox and detached from it again, so 256 workspaces mounted on the host made every
  sandbox start 2.6 times slower. Elsewhere it is mounted over the workspace directory.
"""

from __future__ import annotations

import contextlib
import ctypes
import fcntl
import functools
import logging
import os
import shlex
import signal
import tempfile
import time
from pathlib import Path

from hermes_envgen.runtime.sandbox.limits import tmpfs_size_options

logger = logging.getLogger(__name__)

CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_DIRECTORY = "hermes-envgen"  # below the host process's own cgroup, per controller
CPU_PERIOD_US = 100_000
MS_NOSUID, MS_NODEV, MS_BIND = 2, 4, 4096
MNT_DETACH = 2
# The new mount API (Linux 5.2), numbered alike on every architecture.
SYS_FSOPEN, SYS_FSCONFIG, SYS_FSMOUNT = 430, 431, 432
FSOPEN_CLOEXEC, FSMOUNT_CLOEXEC = 1, 1
FSCONFIG_SET_STRING, FSCONFIG_CMD_CREATE = 1, 6
MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 2, 4
_warned = False


def _own_cgroup(controller: str) -> Path | None:
    """Where the host process sits in a cgroup v1 hierarchy, if it has that controller."""
    try:
        with open("/proc/self/cgroup") as file:
            lines = file.read().splitlines()
    except OSError:
        return None
    for line in lines:
        _, controllers, path = line.split(":", 2)
        if controller in controllers.split(","):
            base = CGROUP_ROOT / controller
            if (base / "cgroup.procs").exists():
                return base / path.lstrip("/")
    return None


class SandboxCgroup:
    """One sandbox's cgroups: made with its limits, entered by its commands, removed after."""

    def __init__(self, directories: list[Path]) -> None:
        self.directories = directories

    @classmethod
    def create(
        cls,
        run: str,
        name: str,
        memory_mb: int | None,
        max_processes: int | None,
        cpus: float | None,
    ) -> SandboxCgroup | None:
        """The sandbox's cgroups with these caps; None where the host offers none."""
        wanted: dict[str, dict[str, int]] = {}
        if memory_mb is not None:
            limit = memory_mb * 1024 * 1024
            # memsw (memory and swap together) only where swap is accounted
            wanted["memory"] = {
                "memory.limit_in_bytes": limit,
                "memory.memsw.limit_in_bytes": limit,
            }
        if max_processes is not None:
            wanted["pids"] = {"pids.max": max_processes}
        if cpus is not None:
            quota = max(1000, int(cpus * CPU_PERIOD_US))
            wanted["cpu"] = {"cpu.cfs_period_us": CPU_PERIOD_US, "cpu.cfs_quota_us": quota}
        if not wanted or os.geteuid() != 0:
            return None
        directories = []
        for controller, settings in wanted.items():
            base = _own_cgroup(controller)
            if base is None:
                continue
            directory = base / CGROUP_DIRECTORY / run / name
            try:
                _hold_run_cgroup(directory.parent)
                directory.mkdir(exist_ok=True)
                for setting, value in settings.items():
                    path = directory / setting
                    if path.exists():
                        path.write_text(str(value))
            except OSError as exc:
                _warn(f"cannot set up the {controller} cgroup ({exc})")
                with contextlib.suppress(OSError):
                    directory.rmdir()
                continue
            directories.append(directory)
        if not directories:
            _warn("no cgroup v1 hierarchy to use")
            return None
        return cls(directories)

    def enter_argv(self, argv: list[str]) -> list[str]:
        """``argv`` run by a shell that first moves itself into the sandbox's cgroups.

        Only bwrap pays this move (cgroup v1 migrations wait on the whole system, milliseconds
        on a busy host): its processes, the commands included, are born in the cgroups.
        """
        moves = " && ".join(
            f"echo $$ > {shlex.quote(str(d / 'cgroup.procs'))}" for d in self.directories
        )
        return ["/bin/sh", "-c", f'{moves} && exec "$@"', "sh", *argv]

    def kill_all(self) -> None:
        """SIGKILL every process in the sandbox's cgroups."""
        kill_cgroup_processes(self.directories)

    def remove(self) -> None:
        """Kill what is left and remove the cgroups."""
        remove_cgroups(self.directories)


def kill_cgroup_processes(directories: list[Path]) -> None:
    """SIGKILL the processes of these cgroups, in rounds (a fork bomb forks meanwhile) until a
    round finds none it has not signalled: a killed process forks no more, and one still
    listed is dying (it leaves the cgroup when reaped; ``remove_cgroups`` waits for that)."""
    signalled: set[str] = set()
    for _ in range(20):
        found = False
        for directory in directories:
            try:
                pids = (directory / "cgroup.procs").read_text().split()
            except OSError:
                continue
            for pid in pids:
                if pid in signalled:
                    continue
                found = True
                signalled.add(pid)
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(int(pid), signal.SIGKILL)
        if not found:
            return


REMOVE_WAIT = 1.0  # seconds


def remove_cgroups(directories: list[Path]) -> None:
    """Kill the processes of these cgroups and remove them (a cgroup with processes stays)."""
    kill_cgroup_processes(directories)
    for directory in directories:
        # Killed processes leave their cgroup when reaped, which on a busy machine takes more
        # than a few yields: wait up to REMOVE_WAIT, or the cgroup stays until the next run.
        deadline = time.monotonic() + REMOVE_WAIT
        while True:
            try:
                directory.rmdir()
                break
            except FileNotFoundError:
                break
            except OSError:
                if time.monotonic() > deadline:
                    break
                kill_cgroup_processes([directory])
                time.sleep(0.001)


def cgroup_parents() -> list[Path]:
    """The directories that hold each run's cgroups, one per hierarchy (that exists here)."""
    bases = (_own_cgroup(controller) for controller in ("memory", "pids", "cpu"))
    return [base / CGROUP_DIRECTORY for base in bases if base is not None]


# The cgroup directories of this process's runs, and the descriptors that hold their lock.
_held: dict[Path, int] = {}


def _hold_run_cgroup(directory: Path) -> None:
    """Make a run's cgroup directory (in one hierarchy) and lock it until the run removes it."""
    if directory in _held:
        return
    for _ in range(100):
        directory.mkdir(parents=True, exist_ok=True)
        try:
            fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            continue
        fcntl.flock(fd, fcntl.LOCK_EX)
        # Another run may have taken the new directory, unlocked, for a dead run's and
        # removed it before the lock was ours: only a lock on the directory in place counts.
        with contextlib.suppress(FileNotFoundError):
            if os.path.samestat(os.fstat(fd), os.stat(directory)):
                _held[directory] = fd
                return
        os.close(fd)
    raise OSError(f"{directory} was removed as it was made, a hundred times")


def remove_run_cgroups(run: str) -> None:
    """Remove the cgroups of run ``run``'s sandboxes, and the run's own cgroup directory.

    Only for this process's own runs, or a run known to be gone (its run directory's lock).
    """
    for parent in cgroup_parents():
        directory = parent / run
        try:
            _remove_run_cgroup(directory)
        finally:
            fd = _held.pop(directory, None)
            if fd is not None:
                os.close(fd)


def remove_run_cgroups_unless_held(directory: Path) -> bool:
    """Remove a run's cgroup directory (one hierarchy's) unless its run holds its lock, which
    the kernel drops however the run ended; whether it was removed."""
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:  # its run lives
        os.close(fd)
        return False
    try:  # removed under the lock: a run that is making it anew waits, and starts over
        _remove_run_cgroup(directory)
    finally:
        os.close(fd)
    return True


def _remove_run_cgroup(directory: Path) -> None:
    try:
        children = [child for child in directory.iterdir() if child.is_dir()]
    except OSError:
        return
    remove_cgroups([*children, directory])


# -- the workspace as a size-limited tmpfs ----------------------------------------------------


def mount_workspace(path: Path, size_mb: int, owner: tuple[int, int] | None) -> bool:
    """Mount a tmpfs of ``size_mb`` MiB over ``path``; whether it was mounted (root only)."""
    if os.geteuid() != 0:
        return False
    options = f"{tmpfs_size_options(size_mb)},mode=0755"
    if owner is not None:
        options += f",uid={owner[0]},gid={owner[1]}"
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.mount(b"tmpfs", os.fsencode(path), b"tmpfs", MS_NOSUID | MS_NODEV, options.encode()):
        _warn(f"cannot mount a size-limited workspace: {os.strerror(ctypes.get_errno())}")
        return False
    return True


def detached_workspace(size_mb: int, owner: tuple[int, int] | None) -> int | None:
    """A tmpfs of ``size_mb`` MiB attached to no mount namespace: a descriptor of its root.

    The host reaches its files through ``/proc/self/fd/<fd>``; the sandbox binds it from the
    descriptor (``mount --bind /proc/self/fd/N``). It goes away with its last reference: the
    descriptor closed and the sandbox's processes gone, however the host process ended.
    None where this host cannot (not root, an older kernel): mount it over the directory.
    """
    if os.geteuid() != 0 or not _binds_from_descriptors():
        return None
    return _fsmount_tmpfs(size_mb, owner)


def _fsmount_tmpfs(size_mb: int, owner: tuple[int, int] | None) -> int | None:
    libc = ctypes.CDLL(None, use_errno=True)
    options = dict(option.split("=", 1) for option in tmpfs_size_options(size_mb).split(","))
    options["mode"] = "0755"
    if owner is not None:
        options.update(uid=str(owner[0]), gid=str(owner[1]))
    context = libc.syscall(SYS_FSOPEN, b"tmpfs", FSOPEN_CLOEXEC)
    if context < 0:
        return None
    try:
        for key, value in options.items():
            if libc.syscall(SYS_FSCONFIG, context, FSCONFIG_SET_STRING, key.encode(),
                            value.encode(), 0):  # fmt: skip
                return None
        if libc.syscall(SYS_FSCONFIG, context, FSCONFIG_CMD_CREATE, None, None, 0):
            return None
        mount = libc.syscall(
            SYS_FSMOUNT, context, FSMOUNT_CLOEXEC, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
        )
        return mount if mount >= 0 else None
    finally:
        os.close(context)


@functools.cache
def _binds_from_descriptors() -> bool:
    """Whether a detached tmpfs can be bound from its descriptor here (tried once, on a
    directory of its own that is unmounted at once)."""
    mount = _fsmount_tmpfs(1, None)
    if mount is None:
        return False
    libc = ctypes.CDLL(None, use_errno=True)
    try:
        with tempfile.TemporaryDirectory(prefix="hermes-envgen-probe.") as target:
            if libc.mount(f"/proc/self/fd/{mount}".encode(), target.encode(), None, MS_BIND,
                          None):  # fmt: skip
                return False
            libc.umount2(target.encode(), MNT_DETACH)
            return True
    finally:
        os.close(mount)


def mount_points() -> list[bytes]:
    """Every mount point of this mount namespace."""
    try:
        with open("/proc/self/mountinfo", "rb") as file:
            return [line.split()[4].replace(b"\\040", b" ") for line in file]
    except OSError:
        return []


def mounts_below(directory: Path) -> list[bytes]:
    """The mount points at or below ``directory``, deepest first."""
    prefix = os.fsencode(directory)
    below = [p for p in mount_points() if p == prefix or p.startswith(prefix + b"/")]
    return sorted(below, key=len, reverse=True)


def unmount_below(directory: Path) -> None:
    """Detach every mount at or below ``directory`` (workspaces of a run)."""
    points = mounts_below(directory)
    if points:
        libc = ctypes.CDLL(None, use_errno=True)
        for point in points:
            libc.umount2(point, MNT_DETACH)


def _warn(message: str) -> None:
    global _warned
    if not _warned:
        _warned = True
        logger.warning("%s: sandboxes run with per-process limits only", message)
