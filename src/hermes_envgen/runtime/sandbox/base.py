"""The sandbox interface every backend implements, and the pieces host-directory backends share."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import time
from abc import ABC, abstractmethod
from dataclasses import dataclass
from pathlib import Path

from hermes_envgen.runtime.sandbox.process import spawn

TIMEOUT_EXIT_CODE = 124


class SandboxError(Exception):
    """A sandbox operation the agent asked for was refused or failed."""


class PathOutsideWorkspace(SandboxError):
    """A path that leaves the task's workspace."""


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


# Variables a command may see. Everything else, API keys and tokens included, stays out.
_PASSED_VARIABLES = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TERM")


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

    @abstractmethod
    async def run(self, command: str, timeout: float | None = None) -> CommandResult:
        """Run a shell command in the workspace; a timeout kills it and all it started."""

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

    async def run(self, command: str, timeout: float | None = None) -> CommandResult:
        if self.closed:
            raise SandboxError(f"sandbox {self.task_id} is closed")
        self.touch()
        self.running += 1
        try:
            return await self._run(command, timeout)
        finally:
            self.running -= 1
            self.touch()

    async def _run(self, command: str, timeout: float | None) -> CommandResult:
        timeout = self.settings.command_timeout if timeout is None else timeout
        process = await spawn(
            self._command_argv(command),
            command_environment(self.workdir),
            preexec_fn=self._preexec(),
        )
        self._process_groups.add(process.pid)
        reader = asyncio.ensure_future(_read_capped(process.stdout, self.settings.max_output_bytes))
        timed_out = False
        try:
            await asyncio.wait_for(process.wait(), timeout)
        except asyncio.TimeoutError:
            timed_out = True
            _kill_group(process.pid)
            await process.wait()
        finally:
            if process.returncode is None:  # cancelled: never leave the command running
                _kill_group(process.pid)
        # Background children may hold the pipe open after the shell exited; give them a moment.
        try:
            head, dropped = await asyncio.wait_for(asyncio.shield(reader), 1.0)
        except asyncio.TimeoutError:
            _kill_group(process.pid)
            head, dropped = await reader
        if not _group_alive(process.pid):
            self._process_groups.discard(process.pid)
        output = head.decode("utf-8", errors="replace")
        if dropped:
            output += f"\n[output truncated: {dropped} more bytes not shown]"
        if timed_out:
            output += f"\n[command timed out after {timeout:g} s and was killed]"
            return CommandResult(TIMEOUT_EXIT_CODE, output, timed_out=True, truncated_bytes=dropped)
        return CommandResult(process.returncode, output, truncated_bytes=dropped)

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
        await asyncio.to_thread(shutil.rmtree, self.workspace, ignore_errors=True)


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except (ProcessLookupError, PermissionError):
        return False
    return True


async def _read_capped(stream: asyncio.StreamReader, limit: int) -> tuple[bytes, int]:
    """Read a stream to its end, keeping the first ``limit`` bytes and counting the rest."""
    head = bytearray()
    dropped = 0
    while chunk := await stream.read(65536):
        room = limit - len(head)
        if room > 0:
            head += chunk[:room]
            dropped += max(0, len(chunk) - room)
        else:
            dropped += len(chunk)
    return bytes(head), dropped
