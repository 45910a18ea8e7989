"""The docker backend: one container per task, commands through ``docker exec``.

The container (``settings.docker_image``, default ``python:3.11-slim``) starts on first use
and runs ``sleep infinity`` under docker's init. It has no network (``--network none``)
unless ``settings.network``; a read-only root filesystem with size-capped tmpfs mounts at
``/workspace`` (the working directory and ``HOME``) and ``/tmp``; no capabilities; no new
privileges; an unprivileged user; memory, process-count and file-size limits (see
``limits``). ``close`` removes it with ``docker rm -f``.

Commands: ``docker exec`` of ``bash -c``, each carrying a run tag in its environment. A
timeout kills the ``docker exec`` client and then, inside the container, every process with
the command's tag (killing the client alone would leave the command running). Files: read,
written and listed by small ``sh`` scripts run with ``docker exec``, byte for byte through
stdin/stdout; each first resolves the path with ``realpath`` inside the container (symlinks
as the container sees them) and refuses anything outside ``/workspace``.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import posixpath
import re
import shutil
import signal
import uuid
from pathlib import Path

from hermes_envgen.runtime.sandbox.base import (
    RUN_TAG_VARIABLE,
    TIMEOUT_EXIT_CODE,
    CappedOutput,
    CommandResult,
    PathOutsideWorkspace,
    Sandbox,
    SandboxError,
    SandboxSettings,
    command_environment,
)
from hermes_envgen.runtime.sandbox.limits import ISOLATED_DEFAULTS, ResourceLimits

WORKDIR = "/workspace"
HOSTNAME = "sandbox"
DEFAULT_IMAGE = "python:3.11-slim"
CONTAINER_USER = "65534:65534"  # nobody: no root inside, even without a user namespace
WORKSPACE_SIZE_MB = 2048  # the workspace is a tmpfs: it counts against the host's memory
TMP_SIZE_MB = 512
LABEL = "hermes-envgen.sandbox"
START_TIMEOUT = 600.0  # includes pulling the image the first time
OUTSIDE, MISSING, NOT_A_FILE = 3, 4, 5  # exit codes of the file scripts

# Each file script gets the workspace as $1 and the path as $2 (already absolute and
# lexically inside); it resolves symlinks with realpath, as the container sees them.
_CONFINE = """ws=$1
p=$(realpath -m -- "$2") || exit 3
case $p in "$ws"|"$ws"/*) ;; *) echo "$2 resolves to $p" >&2; exit 3 ;; esac
"""
READ_SCRIPT = (
    _CONFINE
    + """[ -e "$p" ] || exit 4
[ -f "$p" ] || exit 5
exec cat -- "$p"
"""
)
WRITE_SCRIPT = (
    _CONFINE
    + """[ -d "$p" ] && exit 5
mkdir -p -- "$(dirname -- "$p")" || exit 6
exec cat > "$p"
"""
)
LIST_SCRIPT = (
    _CONFINE
    + """if [ -f "$p" ] && [ ! -L "$p" ]; then printf '%s\\0' "$p"; exit 0; fi
[ -d "$p" ] || exit 0
exec find "$p" -type f -print0
"""
)
# Kills every process whose environment holds the tag ($1); run as the container's user.
KILL_SCRIPT = """for d in /proc/[0-9]*; do
  [ "${d#/proc/}" = "$$" ] && continue
  if tr '\\0' '\\n' < "$d/environ" 2>/dev/null | grep -qx "$1"; then kill -9 "${d#/proc/}"; fi
done 2>/dev/null
exit 0
"""

# Kills every process of the container but docker's init (pid 1) and its first child, the
# ``sleep infinity`` that keeps the container up; rounds catch what forked meanwhile.
KILL_ALL_SCRIPT = """anchor=$(cut -d' ' -f1 /proc/1/task/1/children)
for round in 1 2 3 4 5 6 7 8 9 10; do
  found=
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    if [ "$pid" = 1 ] || [ "$pid" = "$anchor" ] || [ "$pid" = "$$" ]; then continue; fi
    kill -9 "$pid" 2>/dev/null && found=1
  done
  [ -z "$found" ] && break
done
exit 0
"""


def container_path(path: str, workdir: str = WORKDIR) -> str:
    """The absolute, normalised in-container path of an agent's path, if it stays inside.

    The lexical check, with the same rules as the other backends: a relative path starts at
    the workspace, an absolute one must start with it, ``..`` may not climb above it.
    Symlinks are checked by the file scripts, inside the container.
    """
    if "\x00" in path:
        raise PathOutsideWorkspace(f"invalid path {path!r}")
    parts = path.split("/")
    if path.startswith("/"):
        top = workdir.strip("/").split("/")
        parts = [part for part in parts if part not in ("", ".")]
        if parts[: len(top)] != top:
            raise PathOutsideWorkspace(f"{path} is outside the workspace {workdir}")
        parts = parts[len(top) :]
    resolved: list[str] = []
    for part in parts:
        if part in ("", "."):
            continue
        if part == "..":
            if not resolved:
                raise PathOutsideWorkspace(f"{path} leads outside the workspace {workdir}")
            resolved.pop()
        else:
            resolved.append(part)
    return "/".join([workdir, *resolved])


def container_name(task_id: str) -> str:
    """A unique, docker-valid container name for a task."""
    safe = re.sub(r"[^A-Za-z0-9_.-]", "_", task_id)[:40] or "task"
    return f"hermes-{safe}-{uuid.uuid4().hex[:8]}"


class DockerSandbox(Sandbox):
    """Runs a task's commands and keeps its files in a locked-down container of its own."""

    def __init__(self, task_id: str, settings: SandboxSettings, workspace: Path) -> None:
        super().__init__(task_id, settings)
        self.docker = shutil.which("docker") or "docker"
        self.image = getattr(settings, "docker_image", None) or DEFAULT_IMAGE
        self.limits = ResourceLimits.from_settings(settings, ISOLATED_DEFAULTS)
        self.container = container_name(task_id)
        self._started = False
        self._start_lock = asyncio.Lock()
        self._commands_started = 0
        self._tag_prefix = f"{uuid.uuid4().hex[:16]}."

    @property
    def workdir(self) -> str:
        return WORKDIR

    # -- the container ---------------------------------------------------------------------

    def run_argv(self) -> list[str]:
        """The ``docker run`` argv that creates this task's container."""
        environment = command_environment(WORKDIR)
        environment.pop("PATH", None)  # the image knows its PATH; the host's means nothing here
        args = [
            self.docker, "run", "--detach", "--init",
            "--name", self.container,
            "--hostname", HOSTNAME,
            "--label", f"{LABEL}={self.task_id[:200]}",
            "--network", "bridge" if self.settings.network else "none",
            "--read-only",
            "--tmpfs", f"{WORKDIR}:rw,exec,nosuid,nodev,mode=1777,size={WORKSPACE_SIZE_MB}m",
            "--tmpfs", f"/tmp:rw,exec,nosuid,nodev,mode=1777,size={TMP_SIZE_MB}m",
            "--workdir", WORKDIR,
            "--user", CONTAINER_USER,
            "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges",
            *self.limits.docker_flags(),
        ]  # fmt: skip
        for name, value in sorted(environment.items()):
            args += ["--env", f"{name}={value}"]
        return [*args, "--entrypoint", "sleep", self.image, "infinity"]

    def exec_argv(self, *command: str, stdin: bool = False, tag: str | None = None) -> list[str]:
        """The ``docker exec`` argv that runs ``command`` in the container's workspace."""
        args = [self.docker, "exec", "--workdir", WORKDIR]
        if stdin:
            args.append("--interactive")
        if tag is not None:
            args += ["--env", f"{RUN_TAG_VARIABLE}={tag}"]
        if self.verifying:  # an environment the agent did not shape (see stop_agent_processes)
            args += ["--env", "HOME=/tmp", "--env", "PYTHONNOUSERSITE=1"]
        return [*args, self.container, *command]

    async def _ensure_started(self) -> None:
        """Create the container on first use."""
        async with self._start_lock:
            if self._started:
                return
            if self.closed:
                raise SandboxError(f"sandbox {self.task_id} is closed")
            code, out = await _docker(self.run_argv(), timeout=START_TIMEOUT)
            if code != 0:
                raise SandboxError(f"docker could not start the sandbox: {out.strip()[:1000]}")
            self._started = True

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        async with self._start_lock:
            if self._started:
                await _docker([self.docker, "rm", "--force", "--volumes", self.container], 60)

    # -- commands --------------------------------------------------------------------------

    async def _prepare(self) -> None:
        await self._ensure_started()

    async def _run(self, command: str, timeout: float | None) -> CommandResult:
        timeout = self.settings.command_timeout if timeout is None else timeout
        self._commands_started += 1
        tag = f"{self._tag_prefix}{self._commands_started}"
        # The command starts on line 2, as on the other backends (same line numbers in errors).
        script = f"cd -- {WORKDIR} || exit 1\n{command}"
        process = await asyncio.create_subprocess_exec(
            *self.exec_argv("bash", "-c", script, tag=tag),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            start_new_session=True,
        )
        captured = CappedOutput(self.settings.max_output_bytes)
        reader = asyncio.ensure_future(captured.drain(process.stdout))
        timed_out = False
        try:
            try:
                await asyncio.wait_for(process.wait(), timeout)
            except asyncio.TimeoutError:
                timed_out = True
                await self._kill(process.pid, tag)
                await process.wait()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(reader), 5.0)
        finally:
            if process.returncode is None:  # cancelled: never leave the command running
                await asyncio.shield(self._kill(process.pid, tag))
            if not reader.done():
                reader.cancel()
        return captured.result(process.returncode, timeout if timed_out else None)

    async def _kill_everything(self) -> None:
        if self._started:
            await _docker(self.exec_argv("sh", "-c", KILL_ALL_SCRIPT), timeout=30)

    async def _kill(self, client_pid: int, tag: str) -> None:
        """Kill a command: inside the container by its tag, and its ``docker exec`` client."""
        kill = self.exec_argv("sh", "-c", KILL_SCRIPT, "sh", f"{RUN_TAG_VARIABLE}={tag}")
        await _docker(kill, timeout=30)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(client_pid, signal.SIGKILL)

    # -- files -----------------------------------------------------------------------------

    async def read_bytes(self, path: str) -> bytes:
        self.touch()
        target = container_path(path)
        await self._ensure_started()
        code, out, err = await self._script(READ_SCRIPT, target)
        self._raise_for(code, path, err)
        return out

    async def write_bytes(self, path: str, data: bytes) -> None:
        self.touch()
        target = container_path(path)
        await self._ensure_started()
        code, _, err = await self._script(WRITE_SCRIPT, target, data=data)
        self._raise_for(code, path, err)

    async def list_files(self, path: str = ".") -> list[str]:
        self.touch()
        target = container_path(path)
        await self._ensure_started()
        code, out, err = await self._script(LIST_SCRIPT, target)
        self._raise_for(code, path, err)
        names = [name.decode("utf-8", errors="surrogateescape") for name in out.split(b"\0")]
        return sorted(
            posixpath.relpath(name, WORKDIR)
            for name in names
            if name.startswith(WORKDIR + "/") and not name.endswith("/")
        )

    async def _script(
        self, script: str, target: str, data: bytes | None = None
    ) -> tuple[int, bytes, str]:
        """Run a file script in the container: its exit code, stdout and stderr."""
        argv = self.exec_argv("sh", "-c", script, "sh", WORKDIR, target, stdin=data is not None)
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE if data is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await process.communicate(data)
        return process.returncode, out, err.decode(errors="replace")

    @staticmethod
    def _raise_for(code: int, path: str, err: str) -> None:
        """Turn a file script's exit code into the sandbox's error."""
        if code == 0:
            return
        if code == OUTSIDE:
            raise PathOutsideWorkspace(f"{path} leads outside the workspace {WORKDIR}")
        if code == MISSING:
            raise SandboxError(f"{path}: no such file")
        if code == NOT_A_FILE:
            raise SandboxError(f"{path} is a directory or not a regular file")
        raise SandboxError(f"{path}: {err.strip()[:500] or f'docker exec failed ({code})'}")


async def _docker(argv: list[str], timeout: float) -> tuple[int, str]:
    """Run a docker CLI command; its exit code and combined output."""
    try:
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
        )
    except FileNotFoundError:
        raise SandboxError("the docker backend needs the docker CLI") from None
    try:
        out, _ = await asyncio.wait_for(process.communicate(), timeout)
    except asyncio.TimeoutError:
        process.kill()
        await process.wait()
        return TIMEOUT_EXIT_CODE, f"{argv[1]} timed out after {timeout:g} s"
    return process.returncode, out.decode(errors="replace")
