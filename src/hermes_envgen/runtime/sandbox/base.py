"""The sandbox interface every backend implements, and the pieces host-directory backends share."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import stat
import sys
import time
import uuid
import weakref
from abc import ABC, abstractmethod
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path

from hermes_envgen.runtime.errors import PathOutsideWorkspace, SandboxError
from hermes_envgen.runtime.sandbox.process import spawn

TIMEOUT_EXIT_CODE = 124


@dataclass
class CommandResult:
    """What one command did: its exit code and its (capped) combined stdout/stderr."""

    exit_code: int
    output: str
    timed_out: bool = False
    truncated_bytes: int = 0

    def as_dict(self) -> dict:
        return {"exit_code": self.exit_code, "output": self.output}


@dataclass
class SandboxSettings:
    """How sandboxes are made; filled from the env config."""

    backend: str = "local"
    root: str | None = None  # where workspaces live; None = the system temp directory
    command_timeout: float = 60.0
    max_output_bytes: int = 64_000
    network: bool = False
    cpu_seconds: int | None = None
    memory_mb: int | None = None
    max_processes: int | None = None
    max_file_mb: int | None = None
    docker_image: str = "python:3.11-slim"  # the docker backend's image


# Variables a command may see. Everything else, API keys and tokens included, stays out.
_PASSED_VARIABLES = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")


# Every command's processes carry ``<sandbox id>.<command number>`` in this variable, so that a
# timeout or cleanup finds the descendants that left the process group (setsid, daemons).
RUN_TAG_VARIABLE = "HERMES_SANDBOX_RUN"


def command_environment(home: str) -> dict[str, str]:
    """The environment a sandboxed command runs with: an allowlist, never the host's secrets."""
    env = {name: os.environ[name] for name in _PASSED_VARIABLES if name in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.setdefault("LANG", "C.UTF-8")
    env.update(HOME=home, PWD=home, USER="agent", SHELL="/bin/bash", PYTHONDONTWRITEBYTECODE="1")
    return env


class Sandbox(ABC):
    """One task's isolated place to run commands and keep files."""

    def __init__(self, task_id: str, settings: SandboxSettings) -> None:
        self.task_id = task_id
        self.settings = settings
        self.last_used = time.monotonic()
        self.closed = False
        self.running = 0  # commands under way; a busy sandbox is never reaped

    def touch(self) -> None:
        self.last_used = time.monotonic()

    @property
    @abstractmethod
    def workdir(self) -> str:
        """The working directory as commands inside the sandbox see it."""

    async def run(self, command: str, timeout: float | None = None) -> CommandResult:
        """Run a shell command in the workspace; a timeout kills it and all it started."""
        if self.closed:
            raise SandboxError(f"sandbox {self.task_id} is closed")
        self.touch()
        self.running += 1  # a sandbox with a command under way is never reaped
        try:
            await self._prepare()
            return await self._run(command, timeout)
        finally:
            self.running -= 1
            self.touch()

    async def _prepare(self) -> None:  # noqa: B027  (a hook: most backends need nothing)
        """Start what the sandbox needs before a command runs (a container, say); optional."""

    @abstractmethod
    async def _run(self, command: str, timeout: float | None) -> CommandResult:
        """Run one command (``timeout`` None: the settings' default) and collect its output."""

    @abstractmethod
    async def read_bytes(self, path: str) -> bytes:
        """Read a file of the workspace (relative, or absolute inside the workspace)."""

    @abstractmethod
    async def write_bytes(self, path: str, data: bytes) -> None:
        """Write a file of the workspace, creating parent directories."""

    @abstractmethod
    async def list_files(self, path: str = ".") -> list[str]:
        """Every regular file below ``path``, relative to the workspace root, sorted."""

    @abstractmethod
    async def close(self) -> None:
        """Kill every process the sandbox started and remove its workspace."""


class HostDirectorySandbox(Sandbox):
    """A sandbox whose workspace is a directory on the host (local and bwrap backends)."""

    def __init__(self, task_id: str, settings: SandboxSettings, workspace: Path) -> None:
        super().__init__(task_id, settings)
        self.workspace = workspace.resolve()
        self.workspace.mkdir(parents=True, exist_ok=False)
        self._process_groups: set[int] = set()
        self._tag_prefix = f"{uuid.uuid4().hex[:16]}."
        self._commands_started = 0

    def host_path(self, path: str) -> Path:
        """Map a path the agent gave to the host, refusing anything outside the workspace."""
        if "\x00" in path:
            raise PathOutsideWorkspace(f"invalid path {path!r}")
        candidate = Path(path)
        if candidate.is_absolute():
            inside = Path(self.workdir)
            try:
                candidate = candidate.relative_to(inside)
            except ValueError:
                raise PathOutsideWorkspace(
                    f"{path} is outside the workspace {self.workdir}"
                ) from None
        resolved = (self.workspace / candidate).resolve()
        if resolved != self.workspace and self.workspace not in resolved.parents:
            raise PathOutsideWorkspace(f"{path} leads outside the workspace {self.workdir}")
        return resolved

    async def read_bytes(self, path: str) -> bytes:
        self.touch()
        target = self.host_path(path)
        try:
            return await asyncio.to_thread(target.read_bytes)
        except FileNotFoundError:
            raise SandboxError(f"{path}: no such file") from None
        except IsADirectoryError:
            raise SandboxError(f"{path} is a directory") from None

    async def write_bytes(self, path: str, data: bytes) -> None:
        self.touch()
        target = self.host_path(path)

        def write() -> None:
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)

        await asyncio.to_thread(write)

    async def list_files(self, path: str = ".") -> list[str]:
        self.touch()
        top = self.host_path(path)

        def walk() -> list[str]:
            if top.is_file():
                return [str(top.relative_to(self.workspace))]
            found = []
            for dirpath, _dirs, files in os.walk(top):
                for name in files:
                    full = Path(dirpath) / name
                    if full.is_file() and not full.is_symlink():
                        found.append(str(full.relative_to(self.workspace)))
            return sorted(found)

        return await asyncio.to_thread(walk)

    @abstractmethod
    def _command_argv(self, command: str) -> list[str]:
        """The argv that runs ``command`` inside this sandbox, in its working directory.

        The argv enters the workspace itself (no ``cwd``), so the command can be started
        with posix_spawn; ``HOME`` is the workspace as commands see it.
        """

    async def _run(self, command: str, timeout: float | None) -> CommandResult:
        timeout = self.settings.command_timeout if timeout is None else timeout
        self._commands_started += 1
        tag = f"{self._tag_prefix}{self._commands_started}"
        env = command_environment(self.workdir)
        env[RUN_TAG_VARIABLE] = tag
        process = await spawn(self._command_argv(command), env, preexec_fn=self._preexec())
        self._process_groups.add(process.pid)
        captured = CappedOutput(self.settings.max_output_bytes)
        reader = asyncio.ensure_future(captured.drain(process.stdout))
        timed_out = False
        try:
            try:
                await asyncio.wait_for(process.wait(), timeout)
            except asyncio.TimeoutError:
                timed_out = True
                kill_processes(process.pid, tag)
                await process.wait()
            # Background children may hold the pipe after the shell exited; give them a moment.
            if not await _finishes_within(reader, 1.0):
                kill_processes(process.pid, tag)
                await _finishes_within(reader, 1.0)
        finally:
            if process.returncode is None:  # cancelled: never leave the command running
                kill_processes(process.pid, tag)
            if not reader.done():  # something no kill reached still holds the pipe
                reader.cancel()
        if not _group_alive(process.pid):
            self._process_groups.discard(process.pid)
        return captured.result(process.returncode, timeout if timed_out else None)

    def _preexec(self):
        """A function run in the child before exec (resource limits); None for none."""
        return None

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        for pgid in self._process_groups:
            _kill_group(pgid)
        self._process_groups.clear()
        if self._commands_started:  # nothing ran, nothing to find
            await kill_tagged_shared(self._tag_prefix)
        await asyncio.to_thread(remove_tree, self.workspace)


def remove_tree(path: Path) -> None:
    """Delete a directory tree, even parts a command made unreadable (``chmod 000 dir``)."""

    def retry(function, failed: str, _error) -> None:
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(failed), stat.S_IRWXU)  # to unlink entries of it
            if function in (os.unlink, os.remove, os.rmdir):
                function(failed)
            elif os.path.isdir(failed) and not os.path.islink(failed):  # could not be listed
                os.chmod(failed, stat.S_IRWXU)
                shutil.rmtree(failed, **{_ON_ERROR: retry})

    with contextlib.suppress(FileNotFoundError):
        shutil.rmtree(path, **{_ON_ERROR: retry})


# shutil.rmtree's error hook: ``onerror`` is deprecated from Python 3.12 on.
_ON_ERROR = "onexc" if sys.version_info >= (3, 12) else "onerror"


def kill_processes(pgid: int | None, tag: str | Collection[str]) -> None:
    """SIGKILL a process group and every process whose run tag is ``tag`` (or starts with it).

    The tag finds what left the group (``setsid``, ``nohup ... &`` of a subshell); more rounds
    catch children forked while the previous round was killing their parents (a fork bomb).
    Several tags cost one scan of /proc per round, as one does.
    """
    if pgid is not None:
        _kill_group(pgid)
    for _ in range(20):
        found = tagged_processes(tag)
        if not found:
            return
        for pid in found:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)


def tagged_processes(tag: str | Collection[str]) -> list[int]:
    """The live processes (not zombies) whose environment has a run tag matching ``tag``.

    A tag ending in ``.`` is a sandbox's prefix and matches all its commands' tags; any other
    is one command's tag and matches exactly.
    """
    tags = {tag} if isinstance(tag, str) else set(tag)
    prefixes = {t for t in tags if t.endswith(".")}
    marker = f"{RUN_TAG_VARIABLE}=".encode()
    found = []
    try:
        entries = os.listdir("/proc")
    except OSError:  # no procfs (not Linux): the process group is all there is
        return found
    me = os.getpid()
    for name in entries:
        if not name.isdigit() or int(name) == me:
            continue
        try:
            with open(f"/proc/{name}/environ", "rb") as file:
                environ = file.read()
        except OSError:
            continue
        if marker not in environ:
            continue
        for entry in environ.split(b"\0"):
            if not entry.startswith(marker):
                continue
            value = entry[len(marker) :].decode("utf-8", errors="replace")
            if value in tags or value[: value.find(".") + 1] in prefixes:
                if _alive(int(name)):
                    found.append(int(name))
                break
    return found


class _SharedSweep:
    """Kills what closing sandboxes left behind, one scan of /proc for all that wait.

    Reading every process's environment takes milliseconds on a busy host and a run closes a
    sandbox per rollout: the sandboxes that close while a scan runs share the next one.
    """

    def __init__(self) -> None:
        self._waiting: list[tuple[str, asyncio.Future]] = []
        self._worker: asyncio.Task | None = None

    async def kill(self, prefix: str) -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        self._waiting.append((prefix, done))
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._work())
        await asyncio.shield(done)  # a cancelled close still has its processes killed

    async def _work(self) -> None:
        while self._waiting:
            batch, self._waiting = self._waiting, []
            try:
                await asyncio.to_thread(kill_processes, None, {prefix for prefix, _ in batch})
            finally:
                for _, done in batch:
                    if not done.done():
                        done.set_result(None)


_sweeps: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, _SharedSweep] = (
    weakref.WeakKeyDictionary()
)


async def kill_tagged_shared(prefix: str) -> None:
    """Kill every process tagged with a sandbox's ``prefix``, sharing the scan with others."""
    loop = asyncio.get_running_loop()
    sweep = _sweeps.get(loop)
    if sweep is None:
        sweep = _sweeps[loop] = _SharedSweep()
    await sweep.kill(prefix)


def _alive(pid: int) -> bool:
    """Whether a process exists and is not a zombie."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as file:
            return file.read().rsplit(b")", 1)[-1].split()[0] not in (b"Z", b"X")
    except (OSError, IndexError):
        return False


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


class CappedOutput:
    """The first ``limit`` bytes of a command's output and a count of the rest.

    Kept outside the reading task, so that what was read survives when reading is cut off.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.head = bytearray()
        self.dropped = 0

    def add(self, chunk: bytes) -> None:
        """Keep what fits of ``chunk`` and count the rest."""
        room = self.limit - len(self.head)
        if room > 0:
            self.head += chunk[:room]
        self.dropped += max(0, len(chunk) - max(room, 0))

    async def drain(self, stream: asyncio.StreamReader) -> None:
        """Read ``stream`` to its end."""
        while chunk := await stream.read(65536):
            self.add(chunk)

    def result(self, exit_code: int | None, timed_out_after: float | None) -> CommandResult:
        """The command's result, with visible notices for cut output and a timeout."""
        output = bytes(self.head).decode("utf-8", errors="replace")
        if self.dropped:
            output += f"\n[output truncated: {self.dropped} more bytes not shown]"
        if timed_out_after is not None:
            output += f"\n[command timed out after {timed_out_after:g} s and was killed]"
            return CommandResult(TIMEOUT_EXIT_CODE, output, True, self.dropped)
        return CommandResult(exit_code, output, truncated_bytes=self.dropped)


async def _finishes_within(task: asyncio.Future, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``task`` (without cancelling it); whether it finished."""
    with contextlib.suppress(asyncio.TimeoutError):
        await asyncio.wait_for(asyncio.shield(task), seconds)
    return task.done()
