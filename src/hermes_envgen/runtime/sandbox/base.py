"""The sandbox interface every backend implements: settings, a command's result, the environment.

Host-directory backends share ``host_directory``; every backend collects a command's output
with ``command_output``; what escaped a command is killed by ``reaping``.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from abc import ABC, abstractmethod
from dataclasses import dataclass, field

from hermes_envgen.runtime.errors import (
    FileTooLarge,
    PathOutsideWorkspace,
    SandboxError,
    SandboxUnavailable,
)

__all__ = [
    "MAX_HOST_READ_BYTES",
    "RUN_TAG_VARIABLE",
    "TIMEOUT_EXIT_CODE",
    "CommandResult",
    "PathOutsideWorkspace",
    "Sandbox",
    "SandboxError",
    "SandboxSettings",
    "SandboxUnavailable",
    "check_file_name",
    "command_environment",
]

TIMEOUT_EXIT_CODE = 124
# The most ``read_bytes`` takes of a workspace file into the host's memory unless the caller
# asks for more: the agent makes the files (``truncate -s 1G`` costs it nothing).
MAX_HOST_READ_BYTES = 32 * 1024 * 1024
# The docker backend's image unless the env names one: small, with bash and coreutils.
DEFAULT_DOCKER_IMAGE = "python:3.11-slim"


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
    pool: int = 0  # bwrap sandboxes started ahead of demand (see ``pool``); 0: none
    cpus: float | None = None  # CPUs the sandbox's processes may use together
    docker_image: str = DEFAULT_DOCKER_IMAGE  # the docker backend's image
    # The docker backend's engines (Docker host URLs); empty: the environment's DOCKER_HOST.
    docker_hosts: list[str] = field(default_factory=list)


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

    def host_root(self) -> str | None:
        """Where the host sees the sandbox's filesystem, if it can: the path that a path of
        the sandbox's is found below (``/`` for local), or None (a container's, say).

        The agent can change what lies there: open below it without following links.
        """
        return None

    async def connect_socket(
        self, directory: str, limit: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A kept connection to the Unix socket ``directory/socket`` of the sandbox, for a
        backend whose sockets the host cannot reach below ``host_root`` (docker: through its
        kept channel); None where there is none."""
        return None

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

    async def start_ahead(self) -> None:
        """Start the sandbox before a task has it (``sandbox_pool``); by default as ``start``."""
        await self.start()

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
