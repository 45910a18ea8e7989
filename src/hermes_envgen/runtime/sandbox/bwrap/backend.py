"""The bwrap backend: each task's commands run in a bubblewrap sandbox over its workspace.

What a command sees: the host's ``/usr`` (and the ``/bin``, ``/lib*`` links into it) and a few
``/etc`` files, all read-only; its own ``/dev``, ``/proc`` and size-capped ``/tmp``; the task's
workspace, writable, at ``/workspace`` (its working directory and ``HOME``). Nothing else of
the host: not its home directories, not ``/work``, not other tasks' workspaces. It runs in
its own user, PID, mount, network (loopback only, unless ``settings.network``), IPC and UTS
namespaces, with a scrubbed environment and no capabilities, under resource limits.

One sandbox per task. The first command starts bwrap with a small python3 process, the
*anchor* (see ``anchor``), that holds the namespaces and starts every command from inside
them with one ``posix_spawn``: a command costs about one process spawn, as on the host,
instead of building the namespaces and mounts again (about 6x a plain ``bash -c``) or
entering them from the host (``nsenter`` after a shell that joins the cgroups: three execs
and a cgroup move, 2x to 9x with the host's load; see benchmarks/bench_sandbox.py). As with
the local backend, background processes outlive the command that started them, until the
task's sandbox is closed: closing kills the namespace's init, and with it, by the kernel,
every process of the sandbox. A timeout kills the command's process group and every process
carrying its run tag (see ``reaping.kill_processes``): ``setsid`` and ``nohup`` children.

Process limit. RLIMIT_NPROC is set (``ulimit -u``) in each command's shell, inside the
sandbox's own user namespace, where the kernel counts the processes of (namespace, uid): the
sandbox's processes only, not the uid's processes elsewhere on the host. The kernel ignores
RLIMIT_NPROC for uid 0, so when the host process is root the sandbox runs as an unprivileged
uid (``SANDBOX_UID``): bwrap itself runs as root (so that it can bind a workspace below
directories that uid cannot enter), and the anchor, started as root with the capabilities
it needs for that and no more, binds the workspace, drops to the uid, makes the user namespace
and drops every capability (``anchor_server.confine``; ``setpriv`` and ``unshare --user`` did
it before, three more programs per start) before anything else runs; the commands it starts
run as that uid. When the host process is not root, bwrap makes the user
namespace and the caller's uid is kept. The anchor runs under the same limits as the
commands, but for CPU time (it lives as long as the sandbox) and a few more processes (so
that a command can start while the agent's processes fill their limit; each command lowers
it to the limit before anything else runs); it is non-dumpable, so no command can ptrace it.

Verification. ``stop_agent_processes`` has the anchor kill every other process of the
sandbox (``kill(-1)`` in its PID namespace: all of the rollout's, however they were started),
empty ``/tmp`` (verification's ``HOME``) and ``/dev/shm``, and check that nothing the agent's
processes could change of it was changed (its limits, priority, I/O priority, CPUs; no System
V IPC object or POSIX message queue left); verification then runs in the same sandbox,
without a second start. When the anchor cannot vouch for that (or does not answer), it is
killed, and with it every process of the rollout: the next command starts a fresh sandbox
over the same workspace, with ``HOME`` on its new empty ``/tmp``. ``install_checks`` writes
the check files as root into a fresh directory of root's in the sandbox's sticky ``/tmp``
(through the anchor's ``/proc/PID/root``), where the sandbox's user can neither write them nor
rename or replace their directory; when the host process is not root (so the sandbox's user
is the host's), it binds them read-only at ``/verify-<random>`` instead, which restarts the
sandbox.

Pool: with ``sandbox_pool``, sandboxes are started ahead of demand (see ``pool``); a task
takes one that no task has used, and it is closed after its rollout as any other.

Files: see ``workspace_files`` (a symlink to ``/workspace/x`` leads to the workspace's ``x``,
one to any other absolute path is refused; opened below a descriptor of the workspace with
``O_NOFOLLOW``, so a symlink swapped in meanwhile cannot redirect the host).
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import glob
import hashlib
import logging
import os
import shutil
import stat
import tempfile
import uuid
from pathlib import Path

from hermes_envgen.runtime.sandbox.base import (
    SandboxError,
    SandboxSettings,
    check_file_name,
)
from hermes_envgen.runtime.sandbox.bwrap.anchor import (
    WORKSPACE_FD,
    Anchor,
    AnchoredProcess,
    AnchorGone,
    anchor_argv,
    sandbox_python,
)
from hermes_envgen.runtime.sandbox.host_directory import HostDirectorySandbox
from hermes_envgen.runtime.sandbox.host_limits import (
    SandboxCgroup,
    detached_workspace,
    mount_workspace,
    unmount_below,
)
from hermes_envgen.runtime.sandbox.limits import ISOLATED_DEFAULTS, ResourceLimits
from hermes_envgen.runtime.sandbox.process import SpawnedProcess
from hermes_envgen.runtime.sandbox.workspace_files import WorkspaceFiles, remove_tree

logger = logging.getLogger(__name__)

WORKDIR = "/workspace"
HOSTNAME = "sandbox"
SANDBOX_UID = 65534  # "nobody": the uid commands run as when the host process is root
TMP_SIZE_MB = 512  # /tmp and /dev/shm are memory-backed: capped so they cannot eat the host's
SHM_SIZE_MB = 64
PATH_INSIDE = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
PROCESS_SLACK = 8  # the anchor's and the cgroup's process cap: the limit plus bwrap's, the
# anchor's and room for a command to start while the agent's processes fill the limit
MTAB_TARGET = "../proc/self/mounts"  # /etc/mtab, as the sandbox's mount(8) and df read it
KILL_GRACE = 2.0  # seconds for the anchor to report a killed command before it is replaced

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
    snapshot = etc_snapshot(root)
    if snapshot is not None:  # one bind: bwrap rereads its mount table for each bind
        return (*args, "--ro-bind", str(snapshot), "/etc")
    args += ["--perms", "0755", "--dir", "/etc"]  # else made 0700 when bwrap runs as root
    for name in _etc_entries(root):
        host = os.path.join(root, "etc", name)
        if os.path.islink(host):
            real = os.path.realpath(host)
            if real.startswith(os.path.join(root, "usr") + "/"):
                args += ["--symlink", os.readlink(host), f"/etc/{name}"]  # resolves inside
            elif os.path.exists(real):
                args += ["--ro-bind", real, f"/etc/{name}"]  # e.g. resolv.conf -> /run/...
        elif os.path.exists(host):
            args += ["--ro-bind", host, f"/etc/{name}"]
    return (*args, "--symlink", MTAB_TARGET, "/etc/mtab")


def _etc_entries(root: str) -> list[str]:
    """The names in /etc that sandboxes see: ETC_ENTRIES and Python's own configuration."""
    pythons = glob.glob(os.path.join(root, "etc", "python3*"))
    return list(ETC_ENTRIES) + sorted(os.path.basename(p) for p in pythons)


@functools.cache
def etc_snapshot(root: str = "/") -> Path | None:
    """A copy of the /etc entries sandboxes see, bound as their /etc; None if none can be made.

    Bound entry by entry, each of the two dozen binds made bwrap read its whole mount table
    again: a fifth of a sandbox's start. Kept under the user's cache directory by a digest of
    what it copies (names, sizes, times, link targets), so it is made once per change of /etc
    and shared by every run; read when a run starts its first sandbox. Only what every user
    may read is copied (not /etc/ssl/private): no more than the sandbox's user could read.
    """
    entries = _etc_entries(root)
    try:
        digest = _etc_digest(root, entries)
        cache = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        snapshot = cache / "hermes-envgen" / "etc" / digest
        if not snapshot.is_dir():
            snapshot.parent.mkdir(parents=True, exist_ok=True)
            building = Path(tempfile.mkdtemp(prefix=f".{digest}.", dir=snapshot.parent))
            try:
                building.chmod(0o755)
                for name in entries:
                    _copy_readable(os.path.join(root, "etc", name), building / name, root)
                (building / "mtab").symlink_to(MTAB_TARGET)
                os.rename(building, snapshot)
            except OSError:
                if not snapshot.is_dir():  # not made by another run meanwhile either
                    raise
            finally:
                if building.exists():
                    remove_tree(building)
        return snapshot
    except (OSError, RuntimeError) as exc:  # RuntimeError: no home directory
        logger.warning("cannot copy /etc for sandboxes (%s); binding its entries one by one", exc)
        return None


def _etc_digest(root: str, entries: list[str]) -> str:
    state = hashlib.sha256(f"{MTAB_TARGET}\n".encode())  # what is added to the copy
    for name in entries:
        top = os.path.join(root, "etc", name)
        for path in [top, *(os.path.join(d, f) for d, ds, fs in os.walk(top) for f in ds + fs)]:
            with contextlib.suppress(OSError):
                info = os.lstat(path)
                link = os.readlink(path) if stat.S_ISLNK(info.st_mode) else ""
                state.update(f"{path}\0{info.st_mode}\0{info.st_size}\0{info.st_mtime_ns}"
                             f"\0{info.st_ino}\0{link}\n".encode())  # fmt: skip
    return state.hexdigest()[:24]


def _copy_readable(host: str, target: Path, root: str) -> None:
    """Copy what of ``host`` every user may read: a link into /usr stays a link (it resolves
    inside), other links are followed (resolv.conf -> /run/...), the rest is copied."""
    if os.path.islink(host) and os.path.realpath(host).startswith(os.path.join(root, "usr") + "/"):
        os.symlink(os.readlink(host), target)
        return
    try:
        info = os.stat(host)
    except OSError:  # absent, or a dangling link
        return
    if stat.S_ISDIR(info.st_mode):
        if info.st_mode & 0o005 != 0o005:
            return
        target.mkdir()
        for name in sorted(os.listdir(host)):
            _copy_readable(os.path.join(host, name), target / name, root)
        target.chmod(stat.S_IMODE(info.st_mode))
    elif stat.S_ISREG(info.st_mode) and info.st_mode & 0o004:
        shutil.copyfile(host, target)
        target.chmod(stat.S_IMODE(info.st_mode))


def write_checks(anchor: Anchor, name: str, files: dict[str, bytes]) -> None:
    """Write check files as the host's root into a new directory ``name`` of the running
    sandbox's /tmp, taking no link on the way: root's, read-only to all."""
    sandbox_root = os.open(f"/proc/{anchor.target}/root", os.O_PATH | os.O_DIRECTORY)
    try:
        if not anchor.alive():  # that pid may be another process's by now
            raise OSError(errno.ESRCH, "the sandbox ended")
        root = os.open("tmp", os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=sandbox_root)
    finally:
        os.close(sandbox_root)
    try:
        os.mkdir(name, 0o755, dir_fd=root)
        for relative, data in files.items():
            parts = check_file_name(relative).split("/")
            directory = os.open(name, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=root)
            try:
                for part in parts[:-1]:
                    with contextlib.suppress(FileExistsError):
                        os.mkdir(part, 0o755, dir_fd=directory)
                        os.chmod(part, 0o755, dir_fd=directory)
                    below = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW,
                                    dir_fd=directory)  # fmt: skip
                    os.close(directory)
                    directory = below
                flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
                fd = os.open(parts[-1], flags, 0o644, dir_fd=directory)
                with os.fdopen(fd, "wb") as file:
                    file.write(data)
                    os.fchmod(file.fileno(), 0o644)  # whatever the host's umask
            finally:
                os.close(directory)
        os.chmod(name, 0o755, dir_fd=root)
    finally:
        os.close(root)


def device_mounts() -> list[str]:
    """bwrap arguments for /dev: the usual device nodes, a capped /dev/shm, nothing writable."""
    args = ["--dev", "/dev"]  # includes a private devpts, so ptys work
    args += ["--perms", "1777", "--size", str(SHM_SIZE_MB << 20), "--tmpfs", "/dev/shm"]
    # The IPC namespace's POSIX message queues, listed there: the anchor's reset finds any
    # the agent left (mq_open works without the mount; only the listing needs it).
    args += ["--mqueue", "/dev/mqueue"]
    return [*args, "--remount-ro", "/dev"]


class BwrapSandbox(HostDirectorySandbox):
    """Runs a task's commands in a bubblewrap sandbox whose only writable place is its workspace."""

    def __init__(self, task_id: str, settings: SandboxSettings, workspace: Path) -> None:
        self.as_root = os.geteuid() == 0
        self.bwrap = find_tool("bwrap", "bubblewrap")
        sandbox_python()  # the anchor's: fail now, with the package to install, if missing
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
        # The size-limited workspace: a tmpfs in no mount namespace but the sandbox's where
        # the host allows it (see host_limits), else mounted over the workspace directory.
        self._workspace_fd: int | None = None
        self._mounted = False
        if limits.workspace_mb is not None:
            self._workspace_fd = detached_workspace(limits.workspace_mb, self._owner)
            if self._workspace_fd is not None:
                self._directory = self.workspace  # left empty, removed at close
                self.workspace = Path(f"/proc/{os.getpid()}/fd/{self._workspace_fd}")
                self.files = WorkspaceFiles(self.workspace, WORKDIR, self._owner, linked=True)
            else:
                self._mounted = mount_workspace(self.workspace, limits.workspace_mb, self._owner)
        self._anchor: Anchor | None = None
        self._anchor_lock = asyncio.Lock()

    @property
    def workdir(self) -> str:
        return WORKDIR

    def host_root(self) -> str | None:
        """The running sandbox's root, through its anchor's /proc entry (None: not running)."""
        anchor = self._anchor
        if anchor is None or anchor.target is None or not anchor.alive():
            return None
        return f"/proc/{anchor.target}/root"

    @property
    def verification_home(self) -> str:
        return "/tmp"  # the fresh tmpfs of the sandbox restarted for verification

    # -- the anchor: the long-lived process that holds the sandbox's namespaces -------------

    def bwrap_argv(self) -> list[str]:
        """The argv that starts the sandbox with its anchor process."""
        args = [self.bwrap]
        if self.as_root:
            # No user namespace from bwrap (it would map the sandbox to uid 0, which the
            # kernel exempts from RLIMIT_NPROC); the anchor makes one after the drop.
            args += ["--unshare-ipc", "--unshare-pid", "--unshare-uts", "--unshare-cgroup-try"]
            if not self.settings.network:
                args.append("--unshare-net")
            args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]  # for the drop only
            if self._workspace_fd is not None:
                args += ["--cap-add", "CAP_SYS_ADMIN"]  # for binding the workspace only
        else:
            args.append("--unshare-all")
            if self.settings.network:
                args.append("--share-net")
        args += ["--die-with-parent", "--new-session", "--hostname", HOSTNAME]
        args += system_mounts()
        args += device_mounts()
        args += [
            "--proc", "/proc",
            "--perms", "1777", "--size", str(TMP_SIZE_MB << 20), "--tmpfs", "/tmp",
            "--perms", "0755", "--dir", "/var", "--symlink", "../tmp", "/var/tmp",
            *self._workspace_mount(),
            *(arg for host, inside in self._check_binds for arg in ("--ro-bind", host, inside)),
            "--remount-ro", "/",  # the sandbox's root is a tmpfs: no writing around in it
            "--chdir", WORKDIR,
            "--clearenv", "--setenv", "PATH", PATH_INSIDE,
            "--",
        ]  # fmt: skip
        drop = ""
        if self.as_root:
            # The anchor binds the workspace (in the sandbox's own namespace, the only one that
            # has it; the descriptor closed before the sandbox's user gets a process), then
            # drops to the user in a user namespace of its own.
            uid, gid = self._owner or (SANDBOX_UID, SANDBOX_UID)
            workspace = WORKSPACE_FD if self._workspace_fd is not None else -1
            drop = f"{uid}:{gid}:{workspace}:{WORKDIR}"
        # The anchor runs under the commands' limits, but for CPU time and a few processes
        # more (each command lowers its own limit first); everything it starts inherits them.
        anchor_limits = self.limits.rlimits(extra_processes=PROCESS_SLACK, cpu_time=False)
        args += anchor_argv(anchor_limits, drop)
        return self._cgroup.enter_argv(args) if self._cgroup is not None else args

    async def _ensure_anchor(self) -> Anchor:
        """The running sandbox's anchor, started if need be (first command, or it was killed)."""
        async with self._anchor_lock:
            if self.closed:
                raise SandboxError(f"sandbox {self.task_id} is closed")
            if self._anchor is not None and self._anchor.alive():
                return self._anchor
            if self._anchor is not None:
                logger.warning("sandbox of task %s lost its anchor; restarting it", self.task_id)
                await self._anchor.stop()
            self._anchor = await Anchor.start(
                self.bwrap_argv(), {"PATH": PATH_INSIDE}, self._workspace_fd
            )
            return self._anchor

    async def start_ahead(self) -> None:
        """Start the sandbox (bwrap, its anchor) before a task has it: a pool's."""
        await self._ensure_anchor()

    # -- commands --------------------------------------------------------------------------

    def _command_argv(self, command: str) -> list[str]:
        # Line 1 sets PATH and the limits (the process limit below the anchor's) and enters
        # the workspace; the command starts on line 2, as with the local backend, so that
        # bash reports the same line numbers on both.
        setup = (
            f"export PATH={PATH_INSIDE}; {self.limits.ulimit_commands()}; cd {WORKDIR} || exit 1"
        )
        return ["bash", "-c", f"{setup}\n{command}"]

    async def _spawn(self, argv: list[str], env: dict[str, str]) -> SpawnedProcess:
        try:
            return await (await self._ensure_anchor()).spawn(argv, env)
        except AnchorGone:  # killed (by a background process) since the check: start anew
            return await (await self._ensure_anchor()).spawn(argv, env)

    async def _kill_command(self, process: SpawnedProcess, tag: str) -> None:
        await super()._kill_command(process, tag)
        if process.returncode is None and isinstance(process, AnchoredProcess):
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(process.wait(), KILL_GRACE)
            if process.returncode is None:  # its anchor does not report it: stopped or stuck
                await process.anchor.stop()  # which ends the command; the next one restarts it

    async def _kill_everything(self) -> None:
        # Under the lock: a start under way finishes first. The next command starts a fresh
        # sandbox (new namespaces, an empty /tmp) over the same workspace.
        # No scan of /proc for the commands' run tags, as local needs: nothing leaves the
        # sandbox's PID namespace, which dies with its init when the anchor is stopped (with
        # hundreds of sandboxes open, those scans read thousands of environments each).
        async with self._anchor_lock:
            await self._stop_anchor()
            self._process_groups.clear()
            if self._cgroup is not None:
                self._cgroup.kill_all()

    async def _stop_anchor(self) -> None:
        """Kill the sandbox's namespaces: the PID namespace's init dies, so all inside it."""
        if self._anchor is not None:
            await self._anchor.stop()
            self._anchor = None

    async def stop_agent_processes(self) -> None:
        first = not self.verifying
        self.verifying = True
        async with self._anchor_lock:
            anchor = self._anchor
            # /tmp is emptied once: later, it holds the verification's own (its check files)
            if anchor is not None and await anchor.reset(empty_scratch=first):
                self._process_groups.clear()
                return
            if anchor is not None:
                logger.debug("sandbox of task %s restarts for verification", self.task_id)
        await self._kill_everything()

    async def install_checks(self, files: dict[str, bytes]) -> str:
        """Put the files where no process of the sandbox can change them; return that path.

        As root: a fresh directory of root's in the running sandbox's ``/tmp`` (sticky), the
        files root's and read-only. Else they belong to the host's user, which is the
        sandbox's: they are bound read-only at a fresh path outside the workspace, and the
        sandbox restarts with the new bind (a mount point no process can replace).
        """
        if self.as_root:
            async with self._anchor_lock:
                anchor = self._anchor
                target = anchor.target if anchor is not None and anchor.alive() else None
                if anchor is not None and target is not None:
                    name = f".verify-{uuid.uuid4().hex}"
                    try:
                        await asyncio.to_thread(write_checks, anchor, name, files)
                        return f"/tmp/{name}"
                    except OSError as exc:  # its /tmp is full, say: a bind, as when not root
                        logger.warning("cannot write check files into the sandbox: %s", exc)
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

    def _workspace_mount(self) -> list[str]:
        """bwrap arguments for the workspace: its directory bound, or a place to bind it."""
        if self._workspace_fd is not None:
            return ["--dir", WORKDIR]
        return ["--bind", str(self.workspace), WORKDIR]

    def _remove_workspace(self) -> None:
        if self._workspace_fd is not None:  # the tmpfs goes with its last reference
            os.close(self._workspace_fd)
            self._workspace_fd = None
            remove_tree(self._directory)
        else:
            if self._mounted:  # the tmpfs goes with its files, however many
                unmount_below(self.workspace)
            super()._remove_workspace()
        remove_tree(self._checks_root)
        if self._cgroup is not None:
            self._cgroup.remove()
