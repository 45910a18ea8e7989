"""ToolContext: a reward function's handle on the sandbox a rollout ran in.

The agent's tools and the ToolContext handed to ``compute_reward`` address the same sandbox
(the same ``task_id``), so a reward can run the tests the agent was asked to make pass, read
the files it wrote, or put fresh check files in place after the rollout.
"""

from __future__ import annotations

import asyncio
import logging
import posixpath
from collections.abc import Awaitable, Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import Any, TypedDict, TypeVar

from hermes_envgen.runtime.loop.sync_bridge import wait_here
from hermes_envgen.runtime.sandbox import Sandbox, SandboxError, SandboxManager
from hermes_envgen.runtime.sandbox.base import MAX_HOST_READ_BYTES
from hermes_envgen.runtime.tools import REGISTRY, ToolRegistry

logger = logging.getLogger(__name__)

_default_manager: SandboxManager | None = None
_cleanups_running: set[asyncio.Task[None]] = set()
T = TypeVar("T")


def default_sandbox_manager() -> SandboxManager:
    """The process-wide sandbox manager (the env sets it up from its config)."""
    global _default_manager
    if _default_manager is None:
        _default_manager = SandboxManager()
    return _default_manager


def set_default_sandbox_manager(manager: SandboxManager) -> None:
    """Make ``manager`` the one ToolContexts use when given none (the env's, at setup)."""
    global _default_manager
    _default_manager = manager


def confined(directory: str | Path, relative: str) -> Path:
    """``directory / relative``, refusing a ``relative`` that would lead out of ``directory``."""
    parts = relative.split("/")
    if relative.startswith("/") or any(part in ("", ".", "..") for part in parts):
        raise SandboxError(f"refusing to write {relative!r} outside {directory}")
    return Path(directory).joinpath(*parts)


class CommandOutput(TypedDict):
    """What a command run for a reward did: its exit code and its combined stdout/stderr."""

    exit_code: int
    output: str


def _cleanup_done(task: asyncio.Task[None]) -> None:
    """Forget a finished clean-up; say why it failed when nobody awaited it to hear it."""
    _cleanups_running.discard(task)
    if not task.cancelled() and (error := task.exception()) is not None:
        logger.warning("a sandbox's clean-up failed: %s", error)


class CommandRun(Mapping[str, Any]):
    """A command of ``ToolContext.terminal``: awaited, it runs and gives its ``CommandOutput``;
    read without ``await`` (``run["exit_code"]``) inside ``compute_reward``, it runs then, the
    reward waiting for it, as the Hermes skill's binary reward reads it."""

    def __init__(self, context: ToolContext, command: str, timeout: float | None) -> None:
        self._context = context
        self._command = command
        self._timeout = timeout
        self._output: CommandOutput | None = None
        self._started = False

    async def _run(self) -> CommandOutput:
        self._started = True
        if self._output is None:
            result = await self._context.sandbox.run(self._command, timeout=self._timeout)
            self._output = CommandOutput(exit_code=result.exit_code, output=result.output)
        return self._output

    def __await__(self) -> Generator[Any, None, CommandOutput]:
        return self._run().__await__()

    __hash__ = object.__hash__  # one command, one object: asyncio.gather keys its arguments

    def _result(self) -> CommandOutput:
        if self._output is None:
            wait_here(self._run(), f"ctx.terminal({self._command!r})")
        assert self._output is not None
        return self._output

    def __getitem__(self, key: str) -> Any:
        return self._result()[key]  # type: ignore[literal-required]

    def __iter__(self) -> Iterator[str]:
        return iter(self._result())

    def __len__(self) -> int:
        return len(self._result())

    def __repr__(self) -> str:
        state = "not run" if self._output is None else repr(self._output)
        return f"<ctx.terminal({self._command!r}): {state}>"

    def __del__(self) -> None:
        if not self._started:  # neither awaited nor read: it never ran, and nobody knows
            logger.warning(
                "ctx.terminal(%r) never ran: it was neither awaited nor read (write `await "
                "ctx.terminal(...)`)",
                self._command,
            )


class ToolContext:
    """Run commands, move files and call tools in the sandbox of one task."""

    def __init__(
        self,
        task_id: str,
        sandboxes: SandboxManager | None = None,
        registry: ToolRegistry | None = None,
        services: Mapping[str, Any] | None = None,
    ) -> None:
        self.task_id = task_id
        self.sandboxes = sandboxes if sandboxes is not None else default_sandbox_manager()
        self.registry = registry if registry is not None else REGISTRY
        # The env's toolset objects (their settings, shared clients), by toolset name.
        self.services: Mapping[str, Any] = services or {}
        # What toolsets keep for this rollout (pages fetched, sessions), by toolset name.
        self.state: dict[str, Any] = {}
        self._cleanups: list[Callable[[], Awaitable[Any]]] = []

    def service(self, name: str, default: Callable[[], T]) -> T:
        """The env's object of toolset ``name``, or ``default()`` when the env set none."""
        found = self.services.get(name)
        return found if found is not None else default()

    def add_cleanup(self, callback: Callable[[], Awaitable[Any]]) -> None:
        """Have ``cleanup`` await ``callback()`` before the sandbox goes (a toolset's sessions)."""
        self._cleanups.append(callback)

    @property
    def fetched_pages(self) -> list[dict[str, Any]]:
        """The pages the agent fetched with ``web_fetch``: url, status, content type, text."""
        return list(self.state.get("web", {}).get("fetched", []))

    @property
    def sandbox(self) -> Sandbox:
        """The rollout's sandbox (made on first use): what the agent's tools ran in."""
        return self.sandboxes.get(self.task_id)

    def terminal(self, command: str, timeout: float | None = None) -> CommandRun:
        """Run a shell command in the workspace: ``{"exit_code": int, "output": str}``.

        ``await ctx.terminal(...)``; in ``compute_reward`` a plain
        ``ctx.terminal(...)["exit_code"]`` works too (the command runs when read)."""
        return CommandRun(self, command, timeout)

    async def read_file(self, path: str, limit: int = MAX_HOST_READ_BYTES) -> str:
        """A workspace file's text (undecodable bytes replaced); larger than ``limit`` bytes:
        a ``SandboxError`` that says so."""
        return (await self.sandbox.read_bytes(path, limit)).decode("utf-8", errors="replace")

    async def write_file(self, path: str, content: str | bytes) -> None:
        """Write text or bytes to a workspace file, creating parent directories."""
        data = content.encode("utf-8") if isinstance(content, str) else content
        await self.sandbox.write_bytes(path, data)

    async def upload_file(self, local_path: str | Path, remote_path: str) -> None:
        """Copy a host file into the workspace, byte for byte."""
        data = await asyncio.to_thread(Path(local_path).read_bytes)
        await self.sandbox.write_bytes(remote_path, data)

    async def upload_dir(self, local_dir: str | Path, remote_dir: str) -> list[str]:
        """Copy a host directory tree into the workspace; return the workspace paths written."""
        local_dir = Path(local_dir)
        files = await asyncio.to_thread(
            lambda: sorted(p for p in local_dir.rglob("*") if p.is_file())
        )
        written = []
        for file in files:
            remote = f"{remote_dir.rstrip('/')}/{file.relative_to(local_dir).as_posix()}"
            await self.upload_file(file, remote)
            written.append(remote)
        return written

    async def download_file(
        self, remote_path: str, local_path: str | Path, limit: int = MAX_HOST_READ_BYTES
    ) -> Path:
        """Copy a workspace file to the host, byte for byte; larger than ``limit`` bytes: a
        ``SandboxError`` that says so (the agent's file is held in memory on the way)."""
        data = await self.sandbox.read_bytes(remote_path, limit)
        local_path = Path(local_path)

        def write() -> None:
            local_path.parent.mkdir(parents=True, exist_ok=True)
            local_path.write_bytes(data)

        await asyncio.to_thread(write)
        return local_path

    async def download_dir(self, remote_dir: str, local_dir: str | Path) -> list[Path]:
        """Copy a workspace directory tree to the host; return the host paths written.

        Every file lands below ``local_dir``, whatever names the agent gave its files.
        """
        sandbox = self.sandbox
        base = posixpath.normpath(remote_dir)
        if base.startswith("/"):  # absolute: relative to the workspace as commands see it
            base = posixpath.relpath(base, sandbox.workdir)
        written = []
        for name in await sandbox.list_files(remote_dir):
            relative = posixpath.relpath(name, base) if base != "." else name
            if relative == "." or relative.startswith("../"):  # reached through a link
                relative = posixpath.basename(name) if relative == "." else name
            written.append(await self.download_file(name, confined(local_dir, relative)))
        return written

    async def call_tool(self, name: str, arguments: dict[str, Any] | None = None) -> str:
        """Call a registered tool in this sandbox, as the agent would."""
        tool = self.registry.get(name)
        # A tool that takes no sandbox never makes one: a rollout of pure Python tools
        # creates, scans and removes nothing.
        sandbox = self.sandbox if "sandbox" in tool.injected else None
        return await tool.call(arguments or {}, sandbox=sandbox, context=self)

    def cleanup(self) -> Awaitable[None]:
        """End the toolsets' sessions, kill everything the task started, remove its workspace.

        Started at once on the running loop: awaiting it waits for it, and a ``ctx.cleanup()``
        left without ``await`` (in a ``finally``, as the Hermes skill writes it) runs anyway."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no loop: the caller runs the coroutine itself
            return self._cleanup()
        task = loop.create_task(self._cleanup())
        _cleanups_running.add(task)  # kept alive until done, awaited or not
        task.add_done_callback(_cleanup_done)
        return task

    async def _cleanup(self) -> None:
        try:
            while self._cleanups:
                callback = self._cleanups.pop()
                try:
                    await callback()
                except Exception as exc:  # one toolset's failure must not keep the sandbox
                    logger.warning("task %s: a toolset's clean-up failed: %s", self.task_id, exc)
        finally:
            await self.sandboxes.release(self.task_id)
