"""The bwrap backend: each task's commands run in a bubblewrap sandbox over its workspace.

What a command sees: the host's ``/usr`` (and the ``/bin``, ``/lib*`` links into it) and a few
``/etc`` files, all read-only; its own ``/dev``, ``/proc`` and size-capped ``/tmp``; the task's
workspace, writable, at ``/workspace`` (its working directory and ``HOME``). Nothing else of
the host: not its home directories, not ``/work``, not other tasks' workspaces. It runs in
its own user, PID, mount, network (loopback only, unless ``settings.network``), IPC and UTS
namespaces, with a scrubbed environment and no capabilities, under resource limits.

One sandbox per task. The first command starts bwrap with a placeholder process (``sleep
infinity``, the *anchor*) that holds the namespaces; every command then enters them with
``nsenter``: one extra exec, instead of building the namespaces and mounts again (which
costs about 6x a plain ``bash -c``, against under 3x; see benchmarks/bench_sandbox.py). As
with the local backend, background processes outlive the command that started them, until
the task's sandbox is closed: closing kills the namespace's init, and with it, by the
kernel, every process of the sandbox. A timeout kills the command's process group and every
process carrying its run tag (see ``base.kill_processes``): ``setsid`` and ``nohup`` children.

Process limit. RLIMIT_NPROC is set (``ulimit -u``) in each command's shell, inside the
sandbox's own user namespace, where the kernel counts the processes of (namespace, uid): the
sandbox's processes only, not the uid's processes elsewhere on the host. The kernel ignores
RLIMIT_NPROC for uid 0, so when the host process is root the sandbox runs as an unprivileged
uid (``SANDBOX_UID``): bwrap itself runs as root (so that it can bind a workspace below
directories that uid cannot enter), the anchor drops to the uid with ``setpriv`` and makes
the user namespace with ``unshare --user``, and ``nsenter -S`` enters it as that uid. When
the host process is not root, bwrap makes the user namespace and the caller's uid is kept.
The anchor itself runs under the same limits, so a command that takes it over with ptrace
gains nothing.

Verification. ``stop_agent_processes`` kills the anchor, so every process of the rollout; the
next command starts a fresh sandbox over the same workspace, with ``HOME`` on its new empty
``/tmp``. ``install_checks`` binds the check files read-only at ``/verify-<random>``, outside
the workspace: no sandbox process can write them or replace their directory.

Files: see ``workspace_files`` (a symlink to ``/workspace/x`` leads to the workspace's ``x``,
one to any other absolute path is refused; opened below a descriptor of the workspace with
``O_NOFOLLOW``, so a symlink swapped in meanwhile cannot redirect the host).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import glob
import logging
import os
import shutil
import signal
import time
import uuid
from pathlib import Path

from hermes_envgen.runtime.sandbox.base import (
    CommandResult,
    HostDirectorySandbox,
    SandboxError,
    SandboxSettings,
    check_file_name,
)
from hermes_envgen.runtime.sandbox.host_limits import (
    SandboxCgroup,
    mount_workspace,
    unmount_below,
)
from hermes_envgen.runtime.sandbox.limits import ISOLATED_DEFAULTS, ResourceLimits
from hermes_envgen.runtime.sandbox.workspace_files import remove_tree

logger = logging.getLogger(__name__)

WORKDIR = "/workspace"
HOSTNAME = "sandbox"
SANDBOX_UID = 65534  # "nobody": the uid commands run as when the host process is root
TMP_SIZE_MB = 512  # /tmp and /dev/shm are memory-backed: capped so they cannot eat the host's
SHM_SIZE_MB = 64
PATH_INSIDE = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ANCHOR_START_TIMEOUT = 20.0
PROCESS_SLACK = 8  # the cgroup's process cap: the limit plus bwrap's and nsenter's own

# /etc entries programs commonly read (users, name resolution, the dynamic linker, TLS roots,
# time zone, Debian's alternatives); bound read-only when present, the rest of /etc stays out.
ETC_ENTRIES = (
    "passwd",
    "group",
    "hosts",
    "host.conf",
    "resolv.conf",
    "nsswitch.conf",
    "gai.conf",
    "ld.so.cache",
    "ld.so.conf",
    "ld.so.conf.d",
    "alternatives",
    "ssl",
    "ca-certificates",
    "ca-certificates.conf",
    "localtime",
    "timezone",
    "mime.types",
    "protocols",
    "services",
    "os-release",
    "debian_version",
    "inputrc",
    "magic",
    "magic.mime",
)

# Namespaces a command enters, as nsenter's options, when the anchor's differ from the host's.
NAMESPACE_OPTIONS = {
    "user": "-U",
    "mnt": "-m",
    "uts": "-u",
    "ipc": "-i",
    "net": "-n",
    "pid": "-p",
    "cgroup": "-C",
}


def find_tool(name: str, package: str) -> str:
    """The path of a host executable, or a SandboxError naming the package that has it."""
    search = f"{os.environ.get('PATH', '')}:/usr/local/bin:/usr/bin:/usr/sbin:/bin:/sbin"
    found = shutil.which(name, path=search)
    if found is None:
        hint = " (run scripts/install-system-deps.sh)" if package == "bubblewrap" else ""
        raise SandboxError(f"the bwrap backend needs {name}, from the {package} package{hint}")
    return found


@functools.cache
def system_mounts(root: str = "/") -> tuple[str, ...]:
    """bwrap arguments that show the host's system directories, read-only, inside."""
    args: list[str] = ["--ro-bind", os.path.join(root, "usr"), "/usr"]
    # Merged-/usr systems have /bin, /lib... as links into /usr: recreate the links, since
    # binding over them would fail; on older layouts they are real directories: bind them.
    for name in ("bin", "sbin", "lib", "lib32", "lib64", "libx32"):
        host = os.path.join(root, name)
        if os.path.islink(host):
            args += ["--symlink", os.readlink(host), f"/{name}"]
        elif os.path.isdir(host):
            args += ["--ro-bind", host, f"/{name}"]
    args += ["--perms", "0755", "--dir", "/etc"]  # else made 0700 when bwrap runs as root
    entries = list(ETC_ENTRIES) + sorted(
        os.path.basename(p) for p in glob.glob(os.path.join(root, "etc", "python3*"))
    )
    for name in entries:
        host = os.path.join(root, "etc", name)
        if os.path.islink(host):
            real = os.path.realpath(host)
            if real.startswith(os.path.join(root, "usr") + "/"):
                args += ["--symlink", os.readlink(host), f"/etc/{name}"]  # resolves inside
            elif os.path.exists(real):
                args += ["--ro-bind", real, f"/etc/{name}"]  # e.g. resolv.conf -> /run/...
        elif os.path.exists(host):
            args += ["--ro-bind", host, f"/etc/{name}"]
    return tuple(args)


def device_mounts(as_root: bool) -> list[str]:
    """bwrap arguments for /dev: the usual device nodes, a capped /dev/shm, nothing writable."""
    if as_root:
        args = ["--dev", "/dev"]  # includes a private devpts, so ptys work
    else:
        # bwrap's --dev would, unprivileged, nest a second user namespace (to mount devpts)
        # that nsenter could not enter with the rights it needs: build /dev by hand, no ptys.
        args = ["--tmpfs", "/dev"]
        for node in ("null", "zero", "full", "random", "urandom", "tty"):
            args += ["--dev-bind", f"/dev/{node}", f"/dev/{node}"]
        args += ["--symlink", "/proc/self/fd", "/dev/fd"]
        for number, name in enumerate(("stdin", "stdout", "stderr")):
            args += ["--symlink", f"/proc/self/fd/{number}", f"/dev/{name}"]
    args += ["--perms", "1777", "--size", str(SHM_SIZE_MB << 20), "--tmpfs", "/dev/shm"]
    return [*args, "--remount-ro", "/dev"]


class BwrapSandbox(HostDirectorySandbox):
    """Runs a task's commands in a bubblewrap sandbox whose only writable place is its workspace."""

    def __init__(self, task_id: str, settings: SandboxSettings, workspace: Path) -> None:
        self.as_root = os.geteuid() == 0
        self.bwrap = find_tool("bwrap", "bubblewrap")
        self.nsenter = find_tool("nsenter", "util-linux")
        if self.as_root:  # used inside the sandbox, where only /usr is visible
            self.setpriv = find_tool("setpriv", "util-linux")
            self.unshare = find_tool("unshare", "util-linux")
        self._owner = (SANDBOX_UID, SANDBOX_UID) if self.as_root else None
        super().__init__(task_id, settings, workspace, self._owner)
        self.limits = ResourceLimits.from_settings(settings, ISOLATED_DEFAULTS)
        # Verification files: host directories bound read-only into the sandbox (see
        # install_checks), kept beside the workspace and removed with it.
        self._checks_root = self.workspace.with_name(f"{self.workspace.name}.checks")
        self._check_binds: list[tuple[str, str]] = []
        limits = self.limits
        self._cgroup = SandboxCgroup.create(
            self.workspace.parent.name,
            self.workspace.name,
            limits.memory_mb,
            None if limits.max_processes is None else limits.max_processes + PROCESS_SLACK,
            limits.cpus,
        )
        self._mounted = limits.workspace_mb is not None and mount_workspace(
            self.workspace, limits.workspace_mb, self._owner
        )
        self._anchor: _Anchor | None = None
        self._anchor_lock = asyncio.Lock()
        self._enter: list[str] = []

    @property
    def workdir(self) -> str:
        return WORKDIR

    @property
    def verification_home(self) -> str:
        return "/tmp"  # the fresh tmpfs of the sandbox restarted for verification

    # -- the anchor: the long-lived process that holds the sandbox's namespaces -------------

    def bwrap_argv(self) -> list[str]:
        """The argv that starts the sandbox with its anchor process."""
        args = [self.bwrap]
        if self.as_root:
            # No user namespace from bwrap (it would map the sandbox to uid 0, which the
            # kernel exempts from RLIMIT_NPROC); ``unshare --user`` makes one after the drop.
            args += ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
            if not self.settings.network:
                args.append("--unshare-net")
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]  # for setpriv only
        else:
            args.append("--unshare-all")
            if self.settings.network:
                args.append("--share-net")
        args += ["--die-with-parent", "--new-session", "--hostname", HOSTNAME]
        args += system_mounts()
        args += device_mounts(self.as_root)
        args += [
            "--proc", "/proc",
            "--perms", "1777", "--size", str(TMP_SIZE_MB << 20), "--tmpfs", "/tmp",
            "--perms", "0755", "--dir", "/var", "--symlink", "../tmp", "/var/tmp",
            "--symlink", "../proc/self/mounts", "/etc/mtab",
            "--bind", str(self.workspace), WORKDIR,
            *(arg for host, inside in self._check_binds for arg in ("--ro-bind", host, inside)),
            "--remount-ro", "/",  # the sandbox's root is a tmpfs: no writing around in it
            "--chdir", WORKDIR,
            "--clearenv", "--setenv", "PATH", PATH_INSIDE,
            "--",
        ]  # fmt: skip
        if self.as_root:
            uid, gid = self._owner or (SANDBOX_UID, SANDBOX_UID)
            args += [
                self.setpriv, "--reuid", str(uid), "--regid", str(gid), "--clear-groups",
                "--inh-caps", "-all", "--no-new-privs", "--",
                self.unshare, "--user", "--map-current-user", "--",
            ]  # fmt: skip
        # The anchor runs under the commands' limits: a command that takes it over with
        # ptrace (it is the same uid) gains nothing.
        args += ["bash", "-c", f"{self.limits.ulimit_commands()}; exec sleep infinity"]
        return self._cgroup.enter_argv(args) if self._cgroup is not None else args

    async def _ensure_anchor(self) -> None:
        """Start the sandbox if it is not running (first command, or its anchor was killed)."""
        async with self._anchor_lock:
            if self.closed:
                raise SandboxError(f"sandbox {self.task_id} is closed")
            if self._anchor is not None and self._anchor.alive():
                return
            if self._anchor is not None:
                logger.warning("sandbox of task %s lost its anchor; restarting it", self.task_id)
                await self._anchor.stop()
            self._anchor = await _Anchor.start(self.bwrap_argv())
            options = [NAMESPACE_OPTIONS[name] for name in self._anchor.namespaces]
            if self.as_root:
                credentials = ["-S", str(SANDBOX_UID), "-G", str(SANDBOX_UID)]
            else:
                credentials = ["--preserve-credentials"]  # stay the caller's uid, as mapped
            self._enter = [
                self.nsenter, "-t", str(self._anchor.target), *options, *credentials,
                "-r", "-w", "--",
            ]  # fmt: skip

    # -- commands --------------------------------------------------------------------------

    async def _run(self, command: str, timeout: float | None) -> CommandResult:
        await self._ensure_anchor()
        return await super()._run(command, timeout)

    def _command_argv(self, command: str) -> list[str]:
        # Line 1 sets PATH and the limits and enters the workspace (whatever the anchor's
        # cwd); the command starts on line 2, as with the local backend, so that bash reports
        # the same line numbers on both.
        setup = (
            f"export PATH={PATH_INSIDE}; {self.limits.ulimit_commands()}; cd {WORKDIR} || exit 1"
        )
        argv = [*self._enter, "bash", "-c", f"{setup}\n{command}"]
        return self._cgroup.enter_argv(argv) if self._cgroup is not None else argv

    async def _kill_everything(self) -> None:
        # Under the lock: a start under way finishes first. The next command starts a fresh
        # sandbox (new namespaces, an empty /tmp) over the same workspace.
        async with self._anchor_lock:
            await self._stop_anchor()
            await super()._kill_everything()
            if self._cgroup is not None:
                self._cgroup.kill_all()

    async def _stop_anchor(self) -> None:
        """Kill the sandbox's namespaces: the PID namespace's init dies, so all inside it."""
        if self._anchor is not None:
            await self._anchor.stop()
            self._anchor = None

    async def install_checks(self, files: dict[str, bytes]) -> str:
        """Bind the files read-only at a fresh path outside the workspace; return that path.

        They belong to the host's user, and the sandbox restarts with the new bind: no
        process of the sandbox can write them or replace their directory (a mount point).
        """
        name = f"verify-{uuid.uuid4().hex}"
        host = self._checks_root / name

        def write() -> None:
            self._checks_root.mkdir(mode=0o755, exist_ok=True)
            host.mkdir(mode=0o755)
            for relative, data in files.items():
                target = host / check_file_name(relative)
                target.parent.mkdir(mode=0o755, parents=True, exist_ok=True)
                target.write_bytes(data)
                target.chmod(0o644)

        await asyncio.to_thread(write)
        async with self._anchor_lock:
            self._check_binds.append((str(host), f"/{name}"))
            await self._stop_anchor()  # the next command's sandbox has the bind
        return f"/{name}"

    def _remove_workspace(self) -> None:
        if self._mounted:  # the tmpfs goes with its files, however many
            unmount_below(self.workspace)
        super()._remove_workspace()
        remove_tree(self._checks_root)
        if self._cgroup is not None:
            self._cgroup.remove()


class _Anchor:
    """The sandbox's bwrap process tree; ``target`` is the anchor, whose namespaces commands enter.

    Started with posix_spawn from the event loop's thread (bwrap's --die-with-parent ties
    the sandbox to that thread), reaped by ``os.waitpid`` rather than through a loop, so that
    a manager used from several event loops in turn (as tests do) still cleans up.
    """

    def __init__(self, bwrap_pid: int, target: int, started: bytes) -> None:
        self.bwrap_pid = bwrap_pid
        self.target = target
        self._started = started  # the target's start time: a reused pid is not our anchor
        self._reaped = False  # once bwrap is reaped its pid may be reused: never signal it
        # The namespaces commands enter (those not the host's), as they were at the start:
        # a sandbox process could ptrace the anchor into others; then it is not trusted.
        self._identity = _namespace_identity(target)
        host = _namespace_identity(os.getpid())
        self.namespaces = [name for name in NAMESPACE_OPTIONS if self._identity[name] != host[name]]

    @classmethod
    async def start(cls, argv: list[str]) -> _Anchor:
        """Start bwrap and wait until its anchor runs in all the sandbox's namespaces."""
        read_errors, write_errors = os.pipe()
        try:
            pid = os.posix_spawn(
                argv[0],
                argv,
                {"PATH": PATH_INSIDE},
                file_actions=[
                    (os.POSIX_SPAWN_OPEN, 0, os.devnull, os.O_RDONLY, 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                    (os.POSIX_SPAWN_DUP2, write_errors, 2),
                    (os.POSIX_SPAWN_CLOSE, read_errors),
                    (os.POSIX_SPAWN_CLOSE, write_errors),
                ],
                setsid=True,  # its own process group: killing the group kills the sandbox
            )
        finally:
            os.close(write_errors)
        reaped = False
        try:
            deadline = time.monotonic() + ANCHOR_START_TIMEOUT
            delay = 0.001
            while True:
                target = _anchor_process(pid)
                if target is not None:
                    return cls(pid, target, _start_time(target))
                finished, status = os.waitpid(pid, os.WNOHANG)
                if finished:
                    reaped = True  # its pid may be reused now: never signal it again
                    message = _read_available(read_errors)
                    raise SandboxError(
                        f"bwrap could not start the sandbox (exit "
                        f"{os.waitstatus_to_exitcode(status)}): {message or 'no message'}"
                    )
                if time.monotonic() > deadline:
                    raise SandboxError(f"the sandbox did not start in {ANCHOR_START_TIMEOUT:g} s")
                await asyncio.sleep(delay)
                delay = min(delay * 2, 0.02)
        except BaseException:
            if not reaped:
                _kill_and_reap(pid)
            raise
        finally:
            os.close(read_errors)

    def alive(self) -> bool:
        """Whether the anchor still runs, the same process in the same namespaces."""
        if not self._reaped:
            self._reaped = _reap_if_exited(self.bwrap_pid)
        return (
            not self._reaped
            and _start_time(self.target) == self._started
            and _namespace_identity(self.target) == self._identity
        )

    async def stop(self) -> None:
        """Kill the sandbox (bwrap, the namespace's init, so everything in it) and reap bwrap."""
        if not self._reaped:
            self._reaped = True
            await asyncio.to_thread(_kill_and_reap, self.bwrap_pid)


def _anchor_process(bwrap_pid: int) -> int | None:
    """The anchor's pid once it runs ``sleep`` (after bwrap's setup and the uid drop)."""
    for init in _children(bwrap_pid):
        for child in _children(init):
            try:
                if os.readlink(f"/proc/{child}/exe").endswith("/sleep"):
                    return child
            except OSError:
                continue
    return None


def _namespace_identity(pid: int) -> dict[str, tuple[int, int] | None]:
    """Each namespace of a process as (device, inode); None where it cannot be read."""
    identity: dict[str, tuple[int, int] | None] = {}
    for name in NAMESPACE_OPTIONS:
        try:
            info = os.stat(f"/proc/{pid}/ns/{name}")
            identity[name] = (info.st_dev, info.st_ino)
        except OSError:
            identity[name] = None
    return identity


def _children(pid: int) -> list[int]:
    """The child processes of ``pid``."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as file:
            return [int(child) for child in file.read().split()]
    except FileNotFoundError:
        if not os.path.exists(f"/proc/{pid}"):
            return []
    except OSError:
        return []
    # a kernel without CONFIG_PROC_CHILDREN: find them by their parent pid
    children = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as file:
                    if int(file.read().rsplit(b")", 1)[-1].split()[1]) == pid:
                        children.append(int(name))
            except (OSError, IndexError, ValueError):
                continue
    return children


def _start_time(pid: int) -> bytes:
    """A process's start time (clock ticks since boot), or b"" if it is gone or a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            fields = file.read().rsplit(b")", 1)[-1].split()
    except OSError:
        return b""
    return b"" if fields[0] in (b"Z", b"X") else fields[19]


def _reap_if_exited(pid: int) -> bool:
    """Reap child ``pid`` if it exited; whether it has."""
    try:
        finished, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return finished != 0


def _kill_and_reap(pid: int) -> None:
    """SIGKILL a process group (bwrap's) and wait for its leader."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _read_available(fd: int) -> str:
    """What a pipe holds now, without waiting for more."""
    os.set_blocking(fd, False)
    chunks = []
    with contextlib.suppress(BlockingIOError, OSError):
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace").strip()[:1000]
