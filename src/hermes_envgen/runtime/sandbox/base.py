"""The sandbox interface every backend implements, and the pieces host-directory backends share."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import signal
import time
import uuid
import weakref
from abc import ABC, abstractmethod
from collections.abc import Awaitable, Callable, Collection
from dataclasses import dataclass
from pathlib import Path

from hermes_envgen.runtime.errors import (
    FileTooLarge,
    PathOutsideWorkspace,
    SandboxError,
    SandboxUnavailable,
)
from hermes_envgen.runtime.sandbox.process import SpawnedProcess, spawn
from hermes_envgen.runtime.sandbox.procfs import is_alive
from hermes_envgen.runtime.sandbox.workspace_files import WorkspaceFiles, file_errors, remove_tree

__all__ = ["PathOutsideWorkspace", "SandboxError", "SandboxUnavailable", "remove_tree"]

TIMEOUT_EXIT_CODE = 124
# The most ``read_bytes`` takes of a workspace file into the host's memory unless the caller
# asks for more: the agent makes the files (``truncate -s 1G`` costs it nothing).
MAX_HOST_READ_BYTES = 32 * 1024 * 1024


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
    workspace_mb: int | None = None  # the workspace's size (and 64 files per MiB)
    cpus: float | None = None  # CPUs the sandbox's processes may use together
    docker_image: str = "python:3.11-slim"  # the docker backend's image


# Variables a command may see. Everything else, API keys and tokens included, stays out.
_PASSED_VARIABLES = ("PATH", "TZ", "TERM")

# The same locale on every host: UTF-8 text, and the C rules for everything else (sort order,
# messages, number formats), so a command's output, and a reward read from it, does not
# change with the host's LANG. Only LC_CTYPE: with LANG, every shell loads all twelve locale
# categories (0.17 ms on top of the 0.9 ms bash takes to start); and a host's LC_ALL naming a
# locale the sandbox lacks made bash warn in every output.
_LOCALE = {"LC_CTYPE": "C.UTF-8"}


# Every command's processes carry ``<sandbox id>.<command number>`` in this variable, so that a
# timeout or cleanup finds the descendants that left the process group (setsid, daemons).
RUN_TAG_VARIABLE = "HERMES_SANDBOX_RUN"


def command_environment(home: str, verifying: bool = False) -> dict[str, str]:
    """The environment a sandboxed command runs with: an allowlist, never the host's secrets.

    ``verifying``: a verification command's, which nothing of the agent's shapes: ``home``
    lies outside the workspace and Python ignores user site-packages (``usercustomize``).
    """
    env = {name: os.environ[name] for name in _PASSED_VARIABLES if name in os.environ}
    env.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    env.update(_LOCALE)
    env.update(HOME=home, PWD=home, USER="agent", SHELL="/bin/bash", PYTHONDONTWRITEBYTECODE="1")
    if verifying:
        env["PYTHONNOUSERSITE"] = "1"
    return env


class Sandbox(ABC):
    """One task's isolated place to run commands and keep files."""

    def __init__(self, task_id: str, settings: SandboxSettings) -> None:
        self.task_id = task_id
        self.settings = settings
        self.last_used = time.monotonic()
        self.closed = False
        self.running = 0  # commands under way; a busy sandbox is never reaped
        self.verifying = False  # set by stop_agent_processes: commands now verify the rollout

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

    async def start(self) -> None:
        """Start the sandbox now rather than at its first use (raises SandboxUnavailable).

        A rollout starts its sandbox before the model is asked anything, so that a backend
        that cannot start fails it with one clear error instead of a tool error per call.
        """
        if self.closed:
            raise SandboxError(f"sandbox {self.task_id} is closed")
        self.touch()
        await self._prepare()

    async def _prepare(self) -> None:  # noqa: B027  (a hook: most backends need nothing)
        """Start what the sandbox needs before a command runs (a container, say); optional."""

    @abstractmethod
    async def _run(self, command: str, timeout: float | None) -> CommandResult:
        """Run one command (``timeout`` None: the settings' default) and collect its output."""

    async def read_bytes(self, path: str, limit: int = MAX_HOST_READ_BYTES) -> bytes:
        """Read a file of the workspace (relative, or absolute inside the workspace).

        A file larger than ``limit`` bytes is refused (a ``SandboxError`` that says so), read
        no further than that: the host's memory is not the agent's to fill.
        """
        data = await self.read_head(path, limit + 1)
        if len(data) > limit:
            raise FileTooLarge(path, limit)
        return data

    @abstractmethod
    async def read_head(self, path: str, limit: int) -> bytes:
        """At most the first ``limit`` bytes of a workspace file, read in bounded pieces."""

    @abstractmethod
    async def write_bytes(self, path: str, data: bytes) -> None:
        """Write a file of the workspace, creating parent directories."""

    @abstractmethod
    async def list_files(self, path: str = ".") -> list[str]:
        """Every regular file below ``path``, relative to the workspace root, sorted."""

    @abstractmethod
    async def close(self) -> None:
        """Kill every process the sandbox started and remove its workspace."""

    async def stop_agent_processes(self) -> None:
        """End the rollout: kill every process the agent started, before its verification.

        Every command after this runs as verification: in a fresh process, with an
        environment the agent did not shape (``command_environment(..., verifying=True)``).
        """
        self.verifying = True
        await self._kill_everything()

    @abstractmethod
    async def _kill_everything(self) -> None:
        """Kill every process running in the sandbox, keeping its workspace."""

    async def install_checks(self, files: dict[str, bytes]) -> str:
        """Put verification files into a fresh directory; its path as commands see it.

        This default writes them into the workspace, under a name the agent cannot guess;
        backends that can also place them where the sandbox's user cannot change them do.
        """
        directory = f".verify-{uuid.uuid4().hex}"
        for name, data in files.items():
            await self.write_bytes(f"{directory}/{check_file_name(name)}", data)
        return directory


def check_file_name(name: str) -> str:
    """A verification file's name, relative and without ``..`` (it is the env author's)."""
    parts = [part for part in name.split("/") if part not in ("", ".")]
    if not parts or ".." in parts or "\x00" in name:
        raise SandboxError(f"invalid check file name {name!r}")
    return "/".join(parts)


class HostDirectorySandbox(Sandbox):
    """A sandbox whose workspace is a directory on the host (local and bwrap backends)."""

    def __init__(
        self,
        task_id: str,
        settings: SandboxSettings,
        workspace: Path,
        owner: tuple[int, int] | None = None,
    ) -> None:
        super().__init__(task_id, settings)
        self.workspace = _real_directory(workspace.parent) / workspace.name
        self.workspace.mkdir(parents=True, exist_ok=False)
        if owner is not None:
            os.chown(self.workspace, *owner)
        self.files = WorkspaceFiles(self.workspace, self.workdir, owner)
        self._process_groups: set[int] = set()
        # run directory name first: a later run finds what this one left by it (see runs)
        self._tag_prefix = f"{self.workspace.parent.name}.{uuid.uuid4().hex[:16]}."
        self._commands_started = 0
        self._swept_through = 0  # commands whose escaped processes a sweep has killed

    def host_path(self, path: str) -> Path:
        """Map a path the agent gave to the host, resolving symlinks as the sandbox would."""
        return self.workspace.joinpath(*self.files.resolve(path))

    async def read_bytes(self, path: str, limit: int = MAX_HOST_READ_BYTES) -> bytes:
        self.touch()
        # The size first: a larger file (a sparse gigabyte) is refused before a byte is read.
        read = lambda: self.files.read(path, limit + 1, refuse_over=limit)  # noqa: E731
        data = await asyncio.to_thread(file_errors, path, read)
        if len(data) > limit:  # it grew since
            raise FileTooLarge(path, limit)
        return data

    async def read_head(self, path: str, limit: int) -> bytes:
        self.touch()
        return await asyncio.to_thread(file_errors, path, lambda: self.files.read(path, limit))

    async def write_bytes(self, path: str, data: bytes) -> None:
        self.touch()
        await asyncio.to_thread(file_errors, path, lambda: self.files.write(path, data))

    async def list_files(self, path: str = ".") -> list[str]:
        self.touch()
        return await asyncio.to_thread(file_errors, path, lambda: self.files.list(path))

    @property
    @abstractmethod
    def verification_home(self) -> str:
        """``HOME`` of verification commands, as they see it: outside the workspace."""

    @abstractmethod
    def _command_argv(self, command: str) -> list[str]:
        """The argv that runs ``command`` inside this sandbox, in its working directory.

        The argv enters the workspace itself (no ``cwd``), so the command can be started
        with posix_spawn.
        """

    async def _run(self, command: str, timeout: float | None) -> CommandResult:
        timeout = self.settings.command_timeout if timeout is None else timeout
        self._commands_started += 1
        tag = f"{self._tag_prefix}{self._commands_started}"
        home = self.verification_home if self.verifying else self.workdir
        env = command_environment(home, self.verifying)
        env[RUN_TAG_VARIABLE] = tag
        process = await self._spawn(self._command_argv(command), env)
        if process.pid is not None:
            self._process_groups.add(process.pid)

        async def kill() -> None:
            await self._kill_command(process, tag)

        result = await finish_command(process, self.settings.max_output_bytes, timeout, kill)
        if process.pid is not None and not _group_alive(process.pid):
            self._process_groups.discard(process.pid)
        return result

    async def _spawn(self, argv: list[str], env: dict[str, str]) -> SpawnedProcess:
        """Start a command's argv in a new session, stdout and stderr into one pipe."""
        return await spawn(argv, env)

    async def _kill_command(self, process: SpawnedProcess, tag: str) -> None:
        """Kill a command and all it started: its process group and what carries its tag."""
        kill_processes(process.pid, tag)

    async def _kill_everything(self) -> None:
        for pgid in self._process_groups:
            _kill_group(pgid)
        self._process_groups.clear()
        started = self._commands_started
        if started > self._swept_through:  # no command since the last sweep: nothing to find
            await kill_tagged_shared(self._tag_prefix)
            self._swept_through = started

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        try:
            await self._kill_everything()
        finally:
            await asyncio.to_thread(self._remove_workspace)

    def _remove_workspace(self) -> None:
        """Delete the workspace (and whatever else the sandbox keeps on the host)."""
        remove_tree(self.workspace)


@functools.lru_cache(maxsize=64)
def _real_directory(directory: Path) -> Path:
    """A directory's path without symlinks, resolved once per directory.

    Sandboxes live in their run's directory, which the run made and never moves; resolving
    it for every sandbox cost a system call per path component.
    """
    return directory.resolve()


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
    found: list[int] = []
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
            if value in tags or any(value.startswith(prefix) for prefix in prefixes):
                if is_alive(int(name)):
                    found.append(int(name))
                break
    return found


# A scan of /proc waits this many times its own CPU time after the last one ended
# before it starts: sweeps then take at most a fifth of a core however many processes the host
# has, and the sandboxes that close in between share the next one.
SWEEP_SPACING = 4


class _SharedSweep:
    """Kills what closing sandboxes left behind, one scan of /proc for all that wait.

    Reading every process's environment takes from a millisecond to tens of them (a host
    with thousands of processes) and a run closes a sandbox per rollout: the sandboxes that
    close while a scan runs or waits its turn share the next one.
    """

    def __init__(self) -> None:
        self._waiting: list[tuple[str, asyncio.Future]] = []
        self._worker: asyncio.Task | None = None
        self._next_scan = 0.0  # event-loop time before which no scan starts

    async def kill(self, prefix: str) -> None:
        loop = asyncio.get_running_loop()
        done = loop.create_future()
        self._waiting.append((prefix, done))
        if self._worker is None or self._worker.done():
            self._worker = loop.create_task(self._work())
        await asyncio.shield(done)  # a cancelled close still has its processes killed

    async def _work(self) -> None:
        loop = asyncio.get_running_loop()
        while self._waiting:
            if (pause := self._next_scan - loop.time()) > 0:
                await asyncio.sleep(pause)
            batch, self._waiting = self._waiting, []
            try:
                took = await asyncio.to_thread(_timed_kill, {prefix for prefix, _ in batch})
                self._next_scan = loop.time() + SWEEP_SPACING * took
            finally:
                for _, done in batch:
                    if not done.done():
                        done.set_result(None)


def _timed_kill(prefixes: set[str]) -> float:
    """Kill what carries any of ``prefixes``; the CPU seconds the scans took.

    CPU time, not wall time: waits for the interpreter lock are the event loop's work.
    """
    started = time.thread_time()
    kill_processes(None, prefixes)
    return time.thread_time() - started


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

    def result(self, exit_code: int, timed_out_after: float | None) -> CommandResult:
        """The command's result, with visible notices for cut output and a timeout."""
        output = bytes(self.head).decode("utf-8", errors="replace")
        if self.dropped:
            output += f"\n[output truncated: {self.dropped} more bytes not shown]"
        if timed_out_after is not None:
            output += f"\n[command timed out after {timed_out_after:g} s and was killed]"
            return CommandResult(TIMEOUT_EXIT_CODE, output, True, self.dropped)
        return CommandResult(exit_code, output, truncated_bytes=self.dropped)


async def finish_command(
    process: SpawnedProcess,
    max_output_bytes: int,
    timeout: float,
    kill: Callable[[], Awaitable[None]],
) -> CommandResult:
    """Collect a started command's capped output and exit under a timeout (every backend).

    ``kill`` kills the command and all it started. It runs on a timeout, when background
    children still hold the output pipe a moment after the command exited, and when the
    caller is cancelled, so that no command outlives its call.
    """
    captured = CappedOutput(max_output_bytes)
    reader = asyncio.ensure_future(captured.drain(process.stdout))
    timed_out = False
    try:
        if not await _finishes_within(process.exited, timeout):
            timed_out = True
            await kill()
        await process.wait()
        # Background children may hold the pipe after the shell exited; give them a moment.
        if not await _finishes_within(reader, 1.0):
            await kill()
            await _finishes_within(reader, 1.0)
    finally:
        if process.returncode is None:  # cancelled: never leave the command running
            await asyncio.shield(kill())
        if not reader.done():  # something no kill reached still holds the pipe
            reader.cancel()
    assert process.returncode is not None  # waited for above (a cancel raised instead)
    return captured.result(process.returncode, timeout if timed_out else None)


async def _finishes_within(future: asyncio.Future, seconds: float) -> bool:
    """Wait up to ``seconds`` for ``future`` (without cancelling it); whether it finished.

    No task and no shield: a command's exit and output are awaited this way, twice per
    command, and each layer costs a turn of the event loop.
    """
    if not future.done():
        await asyncio.wait([future], timeout=seconds)
    return future.done()
