"""The sandboxes whose workspace is a directory on the host (the local and bwrap backends)."""

from __future__ import annotations

import asyncio
import functools
import os
import uuid
from abc import abstractmethod
from pathlib import Path

from hermes_envgen.runtime.errors import FileTooLarge
from hermes_envgen.runtime.sandbox.base import (
    MAX_HOST_READ_BYTES,
    RUN_TAG_VARIABLE,
    CommandResult,
    Sandbox,
    SandboxSettings,
    command_environment,
)
from hermes_envgen.runtime.sandbox.command_output import finish_command
from hermes_envgen.runtime.sandbox.process import SpawnedProcess, spawn
from hermes_envgen.runtime.sandbox.reaping import (
    group_alive,
    kill_group,
    kill_processes,
    kill_tagged_shared,
)
from hermes_envgen.runtime.sandbox.workspace_files import WorkspaceFiles, file_errors, remove_tree


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
        if process.pid is not None and not group_alive(process.pid):
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
            kill_group(pgid)
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
