"""The docker backend: one container per task, commands through ``docker exec``.

The container (``settings.docker_image``, default ``python:3.11-slim``; it must have bash)
starts with its rollout and runs ``sleep infinity`` under docker's init. It has no network
(``--network none``) unless ``settings.network``; a read-only root filesystem with size-capped
tmpfs mounts at ``/workspace`` (the working directory and ``HOME``; ``workspace_mb``) and
``/tmp``; no capabilities; no new privileges; commands as an unprivileged user (init and the
anchor as root: out of the agent's reach by ptrace or signal); memory, process-count, CPU and
file-size limits (see ``limits``). ``close`` removes it with ``docker rm -f``. A container
that cannot start (no engine, no image, no bash in it) is a ``SandboxUnavailable`` naming what
is missing.

Commands: ``docker exec`` of ``bash -c``, each carrying a run tag in its environment, stderr
joined to stdout inside. A timeout kills every process with the command's tag (from the host
when the engine runs here and we may, and inside the container) and the ``docker exec``
client: killing the client alone would leave the command running. Files: read (no further
than the caller asks: ``read_head``), written and listed by small ``sh`` scripts run with
``docker exec``, byte for byte through stdin/stdout; each first resolves the path with
``realpath`` inside the container (symlinks as the container sees them) and refuses anything
outside ``/workspace``.

Verification: ``stop_agent_processes`` kills every process but docker's init and the
``sleep``, empties ``/tmp`` and makes the verification's ``HOME`` there; ``install_checks``
writes the check files as root (``docker exec --user 0``), read-only, into a directory of
root's.

Every container carries the label ``hermes-envgen.run=<host>/<run>`` and the run's directory
notes the engine (``runs.ENGINE_FILE``): a run killed before it removed its containers has
them removed by the next run, or ``hermes-envgen cleanup``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
import os
import posixpath
import re
import shutil
import signal
import socket
import subprocess
import uuid
from pathlib import Path

from hermes_envgen.runtime.errors import FileTooLarge
from hermes_envgen.runtime.sandbox.base import (
    MAX_HOST_READ_BYTES,
    RUN_TAG_VARIABLE,
    TIMEOUT_EXIT_CODE,
    CommandResult,
    PathOutsideWorkspace,
    Sandbox,
    SandboxError,
    SandboxSettings,
    SandboxUnavailable,
    check_file_name,
    command_environment,
    finish_command,
    kill_processes,
)
from hermes_envgen.runtime.sandbox.limits import (
    ISOLATED_DEFAULTS,
    ResourceLimits,
    tmpfs_size_options,
)
from hermes_envgen.runtime.sandbox.process import spawn
from hermes_envgen.runtime.sandbox.procfs import parent_pid, start_time
from hermes_envgen.runtime.sandbox.runs import ENGINE_FILE
from hermes_envgen.runtime.sandbox.workspace_files import MAX_LIST_DEPTH, MAX_LISTED_FILES

logger = logging.getLogger(__name__)

WORKDIR = "/workspace"
HOSTNAME = "sandbox"
DEFAULT_IMAGE = "python:3.11-slim"
AGENT_USER = "65534:65534"  # nobody: every command and file script runs as it
# docker's init and the anchor run as root (with no capabilities, as all in the container):
# of another user than the agent's, which can neither ptrace nor signal them.
ANCHOR_USER = "0:0"
TMP_SIZE_MB = 512  # a tmpfs, as the workspace (limits.workspace_mb): the host's memory
LABEL = "hermes-envgen.sandbox"
RUN_LABEL = "hermes-envgen.run"  # host/run directory: what a next run reaps if this one dies
START_TIMEOUT = 600.0  # includes pulling the image the first time
ENGINE_GONE = "Cannot connect to the Docker daemon"  # what the CLI says when none answers
RUNTIME_EXEC_FAILED = "OCI runtime exec failed"  # docker exec's start failure, exit code 126
CANNOT_START = 126
FILE_TIMEOUT = 300.0  # seconds a file script may take (a GiB through docker exec: a few)
# Exit codes of the file scripts.
OUTSIDE, MISSING, DIRECTORY, NO_PARENT, NOT_REGULAR, DENIED, TOO_LARGE = 3, 4, 5, 6, 7, 8, 9

# Each file script gets the workspace as $1 and the path as $2 (already absolute and
# lexically inside, its bytes escaped by escaped_path); it resolves symlinks with realpath,
# as the container sees them. The dots keep a name's trailing newlines from $(...).
_CONFINE = """ws=$1
t=$(printf '%b.' "$2"); t=${t%.}
p=$(realpath -m -- "$t" && echo .) || exit 3
p=${p%.}; p=${p%?}
case $p in "$ws"|"$ws"/*) ;; *) echo "$t resolves to $p" >&2; exit 3 ;; esac
"""
_READABLE = """[ -e "$p" ] || exit 4
[ -d "$p" ] && exit 5
[ -f "$p" ] || exit 7
[ -r "$p" ] || exit 8
"""
# A path checked is not yet a file opened: a link swapped in meanwhile by a process of the
# agent's would lead outside. So the file is opened first (descriptor 3), and what the
# descriptor holds is checked before a byte moves.
_OPENED_INSIDE = """case $(readlink /proc/self/fd/3) in
  "$ws"/*) ;; *) echo "$t changed into a link while it was opened" >&2; exit 3 ;; esac
"""
_OPEN_TO_READ = _CONFINE + _READABLE + 'exec 3< "$p"\n' + _OPENED_INSIDE
READ_SCRIPT = _OPEN_TO_READ + "exec cat <&3\n"
# At most the first $3 bytes: a huge (or sparse) file never crosses docker exec whole.
HEAD_SCRIPT = _OPEN_TO_READ + 'exec head -c "$3" <&3\n'
# The same, refusing (exit 9) a file whose size is over $4 before a byte moves.
SIZED_SCRIPT = (
    _OPEN_TO_READ + '[ "$(stat -L -c %s /proc/self/fd/3)" -le "$4" ] || exit 9\n'
    'exec head -c "$3" <&3\n'
)
# The agent's user may not write every place of the workspace (chmod): the checks say so
# with an exit code, as the other backends say "permission denied", not in sh's words.
# $a: the deepest part of the parent directory that exists, where mkdir would start. The
# script enters the parent (a link swapped in later cannot move it), opens the file there
# without truncating it, checks what it opened, and only then truncates and writes it.
WRITE_SCRIPT = (
    _CONFINE
    + """[ -d "$p" ] && exit 5
parent=${p%/*}
a=$parent
while [ -n "$a" ] && [ ! -e "$a" ]; do a=${a%/*}; done
[ -d "$a" ] || exit 6
[ "$a" = "$parent" ] || [ -w "$a" ] || exit 8
mkdir -p -- "$parent" || exit 1
cd -P -- "$parent" || exit 1
case $(pwd -P) in "$ws"|"$ws"/*) ;; *) echo "$t changed into a link" >&2; exit 3 ;; esac
name=./${p##*/}
if [ -e "$name" ]; then [ -f "$name" ] || exit 7; [ -w "$name" ] || exit 8; fi
[ -e "$name" ] || [ -w . ] || exit 8
exec 3>> "$name"
"""
    + _OPENED_INSIDE
    + "exec cat > /proc/self/fd/3\n"
)
# Bounded as the other backends' listing (workspace_files): no deeper than MAX_LIST_DEPTH
# directories, at most MAX_LISTED_FILES files; what cannot be read is left out.
LIST_SCRIPT = (
    _CONFINE
    + f"""if [ -f "$p" ] && [ ! -L "$p" ]; then printf '%s\\0' "$p"; exit 0; fi
[ -d "$p" ] || exit 0
find "$p" -maxdepth {MAX_LIST_DEPTH + 1} -type f -print0 2>/dev/null |
  head -z -n {MAX_LISTED_FILES}
"""
)
# Kills every process whose environment holds the tag ($1); run by bash as the container's
# user. Only builtins: a fork bomb may hold every process slot the container has. Rounds
# catch children forked while their parents were being killed.
KILL_SCRIPT = """for round in 1 2 3 4 5 6 7 8 9 10; do
  found=
  for d in /proc/[0-9]*; do
    pid=${d#/proc/}
    [ "$pid" = "$$" ] && continue
    while IFS= read -r -d '' variable; do
      if [ "$variable" = "$1" ]; then kill -9 "$pid"; found=1; break; fi
    done < "$d/environ"
  done 2>/dev/null
  [ -z "$found" ] && break
done
exit 0
"""

# Kills every process of the container but docker's init (pid 1) and its first child, the
# ``sleep infinity`` that keeps the container up; run by bash, builtins only (no process
# slot needed beyond its own); rounds catch what forked meanwhile.
KILL_ALL_SCRIPT = """read -r anchor _ < /proc/1/task/1/children
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
# Before verification, as the agent's user (the owner of all it left): /tmp emptied (as on
# bwrap, where verification gets a fresh one) and the verification's HOME ($1) made.
VERIFICATION_TMP_SCRIPT = """chmod -R u+rwX /tmp/* /tmp/.[!.]* /tmp/..?* 2>/dev/null
find /tmp -mindepth 1 -delete 2>/dev/null
mkdir -m 0700 -- "$1"
"""
# Writes stdin to the check file $2 below the fresh check directory $1, as root: the
# directory (in the sticky /tmp) and the file are root's and read-only to everyone else.
INSTALL_SCRIPT = """umask 022
[ -d "$1" ] || mkdir -m 0755 -- "$1" || exit 1
mkdir -p -- "$(dirname -- "$2")" && cat > "$2" && chmod 0444 -- "$2"
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


def escaped_path(path: str) -> str:
    """A path as a file script's argument: its bytes as ASCII, decoded by ``printf %b`` inside.

    docker exec carries its argv as JSON text, which turns bytes that are not UTF-8 (names
    the agent made, reaching us surrogate-escaped) into U+FFFD: such a file could be listed
    but never read. Printable ASCII but the backslash passes as it is.
    """
    return "".join(
        chr(byte) if 0x20 <= byte < 0x7F and byte != 0x5C else f"\\0{byte:03o}"
        for byte in os.fsencode(path)
    )


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
        self.run_directory = workspace.parent  # the run's (see runs): reaped with it
        self._started = False
        self._start_error: str | None = None  # why the container could not start, once known
        self._start_lock = asyncio.Lock()
        self._commands_started = 0
        self._tag_prefix = f"{uuid.uuid4().hex[:16]}."
        # HOME of verification commands: made by stop_agent_processes, once the agent is gone.
        self._verification_home = f"/tmp/.home-{uuid.uuid4().hex}"
        self._verification_home_made = False

    @property
    def workdir(self) -> str:
        return WORKDIR

    # -- the container ---------------------------------------------------------------------

    def run_argv(self) -> list[str]:
        """The ``docker run`` argv that creates this task's container."""
        environment = command_environment(WORKDIR)
        environment.pop("PATH", None)  # the image knows its PATH; the host's means nothing here
        # ISOLATED_DEFAULTS fills in every limit the settings leave unset: never None here
        assert self.limits.workspace_mb is not None
        workspace_size = tmpfs_size_options(self.limits.workspace_mb)
        args = [
            self.docker, "run", "--detach", "--init",
            "--name", self.container,
            "--hostname", HOSTNAME,
            "--label", f"{LABEL}={self.task_id[:200]}",
            "--label", f"{RUN_LABEL}={run_label(self.run_directory)}",
            "--network", "bridge" if self.settings.network else "none",
            "--read-only",
            "--tmpfs", f"{WORKDIR}:rw,exec,nosuid,nodev,mode=1777,{workspace_size}",
            "--tmpfs", f"/tmp:rw,exec,nosuid,nodev,mode=1777,size={TMP_SIZE_MB}m",
            # No --workdir here: with it, docker 20.10 mounts the /workspace tmpfs root-owned
            # 0755 whatever its mode option says, and the agent cannot write its own workspace.
            # Every exec enters the workspace itself (exec_argv).
            "--user", ANCHOR_USER,
            "--cap-drop", "ALL",
            "--security-opt", "no-new-privileges",
            *self.limits.docker_flags(),
        ]  # fmt: skip
        for name, value in sorted(environment.items()):
            args += ["--env", f"{name}={value}"]
        return [*args, "--entrypoint", "sleep", self.image, "infinity"]

    def exec_argv(
        self, *command: str, stdin: bool = False, tag: str | None = None, user: str | None = None
    ) -> list[str]:
        """The ``docker exec`` argv that runs ``command`` in the container's workspace."""
        args = [self.docker, "exec", "--workdir", WORKDIR, "--user", user or AGENT_USER]
        if stdin:
            args.append("--interactive")
        if tag is not None:
            args += ["--env", f"{RUN_TAG_VARIABLE}={tag}"]
        if self.verifying:  # an environment the agent did not shape (see stop_agent_processes)
            args += ["--env", f"HOME={self._verification_home}", "--env", "PYTHONNOUSERSITE=1"]
        return [*args, self.container, *command]

    async def _ensure_started(self) -> None:
        """Create the container on first use."""
        async with self._start_lock:
            if self._started:
                return
            if self.closed:
                raise SandboxError(f"sandbox {self.task_id} is closed")
            if self._start_error is not None:  # once is enough: the same error, at once
                raise SandboxUnavailable(self._start_error)
            record_engine(self.run_directory)
            code, out = await _docker(self.run_argv(), timeout=START_TIMEOUT)
            if code == 0:
                # Every command runs with bash: an image without it fails here, at the start.
                code, out = await _docker(self.exec_argv("bash", "-c", "exit 0"), timeout=60)
            if code != 0:
                # A container may have been created before it failed to start: remove it.
                await _docker([self.docker, "rm", "--force", "--volumes", self.container], 60)
                self._start_error = start_failure(out, self.image)
                raise SandboxUnavailable(self._start_error)
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
        # docker exec carries stdout and stderr as two streams whose order the client loses:
        # joining them inside keeps the order the command wrote them in.
        script = f"exec 2>&1; cd -- {WORKDIR} || exit 1\n{command}"
        argv = self.exec_argv("bash", "-c", script, tag=tag)
        process = await spawn(argv, dict(os.environ))  # the client needs DOCKER_HOST & co.

        async def kill() -> None:
            await self._kill(process.pid, tag)

        result = await finish_command(process, self.settings.max_output_bytes, timeout, kill)
        if result.exit_code != 0 and result.output.startswith(ENGINE_GONE):
            # The engine stopped under a running sandbox: that is no result of the command.
            raise SandboxUnavailable(start_failure(result.output, self.image))
        return explain_start_failure(result)

    async def _kill_everything(self) -> None:
        if not self._started:
            return
        # From the host first, as _kill does: a fork bomb may leave no slot for docker exec.
        code, out = await _docker(
            [self.docker, "inspect", "--format", "{{.State.Pid}}", self.container], 30
        )
        if code == 0 and out.strip().isdigit():
            kill_container_processes(int(out.strip()))
        await _docker(self.exec_argv("bash", "-c", KILL_ALL_SCRIPT), timeout=30)

    async def stop_agent_processes(self) -> None:
        await super().stop_agent_processes()
        # Made only now, once (a reward may stop the agent again): nothing of the agent's
        # can have prepared it.
        if self._started and not self._verification_home_made:
            script = self.exec_argv(
                "sh", "-c", VERIFICATION_TMP_SCRIPT, "sh", self._verification_home
            )
            code, out = await _docker(script, timeout=60)
            if code != 0:
                raise SandboxError(f"cannot make the verification's HOME: {out.strip()[:500]}")
            self._verification_home_made = True

    async def install_checks(self, files: dict[str, bytes]) -> str:
        """Write the check files as root, read-only, into a fresh directory of root's in /tmp.

        The agent's user can neither change them nor rename or replace their directory
        (``/tmp`` is sticky), even from code of the agent's that a check runs.
        """
        await self._ensure_started()
        directory = f"/tmp/.verify-{uuid.uuid4().hex}"
        for name, data in files.items():
            target = f"{directory}/{check_file_name(name)}"
            argv = self.exec_argv(
                "sh", "-c", INSTALL_SCRIPT, "sh", directory, target, stdin=True, user="0"
            )
            code, _, err = await _exec(argv, data)
            if code != 0:
                raise SandboxError(f"cannot install check file {name!r}: {err.strip()[:500]}")
        return directory

    async def _kill(self, client_pid: int | None, tag: str) -> None:
        """Kill a command: inside the container by its tag, and its ``docker exec`` client."""
        # An engine on this machine runs the container's processes here too: when we may
        # signal them (root), kill them directly. That needs no process slot in the container,
        # and a fork bomb at the container's process limit leaves none for docker exec.
        kill_processes(None, tag)
        kill = self.exec_argv("bash", "-c", KILL_SCRIPT, "bash", f"{RUN_TAG_VARIABLE}={tag}")
        await _docker(kill, timeout=30)
        if client_pid is not None:  # spawn() always knows it; SpawnedProcess may not
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(client_pid, signal.SIGKILL)

    # -- files -----------------------------------------------------------------------------

    async def read_bytes(self, path: str, limit: int = MAX_HOST_READ_BYTES) -> bytes:
        self.touch()
        target = container_path(path)
        await self._ensure_started()
        code, out, err = await self._script(SIZED_SCRIPT, target, str(limit + 1), str(limit))
        if code == TOO_LARGE or len(out) > limit:
            raise FileTooLarge(path, limit)
        self._raise_for(code, path, err)
        return out

    async def read_head(self, path: str, limit: int) -> bytes:
        self.touch()
        target = container_path(path)
        await self._ensure_started()
        code, out, err = await self._script(HEAD_SCRIPT, target, str(max(limit, 0)))
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
        self, script: str, target: str, *args: str, data: bytes | None = None
    ) -> tuple[int, bytes, str]:
        """Run a file script in the container: its exit code, stdout and stderr."""
        arguments = ["sh", WORKDIR, escaped_path(target), *args]
        argv = self.exec_argv("sh", "-c", script, *arguments, stdin=data is not None)
        return await _exec(argv, data)

    @staticmethod
    def _raise_for(code: int, path: str, err: str) -> None:
        """Turn a file script's exit code into the sandbox's error."""
        if code == 0:
            return
        if code == OUTSIDE:
            raise PathOutsideWorkspace(f"{path} leads outside the workspace {WORKDIR}")
        if code == MISSING:
            raise SandboxError(f"{path}: no such file")
        if code == DIRECTORY:
            raise SandboxError(f"{path} is a directory")
        if code == NOT_REGULAR:
            raise SandboxError(f"{path} is not a regular file")
        if code == NO_PARENT:
            raise SandboxError(f"{path}: a part of the path is not a directory")
        if code == DENIED:
            raise SandboxError(f"{path}: permission denied")
        raise SandboxError(f"{path}: {err.strip()[:500] or f'docker exec failed ({code})'}")


async def _exec(
    argv: list[str], data: bytes | None, timeout: float = FILE_TIMEOUT
) -> tuple[int, bytes, str]:
    """Run a ``docker exec`` argv with ``data`` on its stdin: its exit code, stdout, stderr.

    After ``timeout`` seconds the client is killed (what it ran inside goes with the
    sandbox's processes): a file operation that blocks (a FIFO swapped in for a file) fails
    rather than hold its rollout forever.
    """
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE if data is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(data), timeout)
    except asyncio.TimeoutError:
        process.kill()
        await process.wait()
        return TIMEOUT_EXIT_CODE, b"", f"the file operation timed out after {timeout:g} s"
    return await process.wait(), out, err.decode(errors="replace")  # exited: at once


def kill_container_processes(init_pid: int) -> None:
    """SIGKILL, from the host, every process of a container but its init and that one's first child.

    Only when the engine runs on this machine and we may signal the container's processes
    (root); otherwise nothing happens and the in-container script does the work.
    """
    try:
        namespace = os.readlink(f"/proc/{init_pid}/ns/pid")
    except OSError:
        return
    children = [pid for pid in _pids() if parent_pid(pid) == init_pid]
    # The anchor is init's oldest child: what the agent orphaned came to init later.
    oldest = min(children, key=lambda pid: int(start_time(pid) or 2**63), default=None)
    keep = {init_pid, oldest}
    for _ in range(20):
        found = False
        for pid in _pids():
            if pid in keep:
                continue
            with contextlib.suppress(OSError):
                if os.readlink(f"/proc/{pid}/ns/pid") == namespace:
                    os.kill(pid, signal.SIGKILL)
                    found = True
        if not found:
            return


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


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
        raise SandboxUnavailable(
            "the docker backend needs the docker CLI on PATH (Debian: apt-get install docker.io)"
        ) from None
    try:
        out, _ = await asyncio.wait_for(process.communicate(), timeout)
    except asyncio.TimeoutError:
        process.kill()
        await process.wait()
        return TIMEOUT_EXIT_CODE, f"{argv[1]} timed out after {timeout:g} s"
    return await process.wait(), out.decode(errors="replace")  # exited: at once


def explain_start_failure(result: CommandResult) -> CommandResult:
    """A command runc could not start, said in the sandbox's words rather than the runtime's.

    Seen when a fork bomb left in the background holds the container's memory and process
    slots: ``docker exec`` exits 126 with "OCI runtime exec failed: ...".
    """
    if result.exit_code != CANNOT_START or not result.output.startswith(RUNTIME_EXEC_FAILED):
        return result
    detail = result.output.strip().splitlines()[0][:300]
    message = "the command could not start: the sandbox is out of processes or memory"
    return dataclasses.replace(result, output=f"{message} ({detail})\n")


def run_label(run_directory: Path) -> str:
    """The run label's value: the host and the run, unique on an engine that hosts share."""
    return f"{socket.gethostname()}/{run_directory.name}"


def record_engine(run_directory: Path) -> None:
    """Note in the run's directory which engine its containers run on (for ``reap``)."""
    engine = {name: value for name, value in os.environ.items() if name.startswith("DOCKER_")}
    path = run_directory / ENGINE_FILE
    if not path.exists():
        with contextlib.suppress(OSError):
            path.write_text(json.dumps(engine))


def remove_run_containers(run_directory: Path) -> int:
    """Remove the containers a run left on its engine, if it used one; how many."""
    try:
        engine = json.loads((run_directory / ENGINE_FILE).read_text())
    except (OSError, ValueError):
        return 0  # the run started no container
    environment = {**os.environ, **engine}
    docker = shutil.which("docker") or "docker"

    def cli(*args: str) -> str:
        return subprocess.run(
            [docker, *args], env=environment, capture_output=True, text=True, timeout=120
        ).stdout

    try:
        label = f"label={RUN_LABEL}={run_label(run_directory)}"
        containers = cli("ps", "--all", "--quiet", "--filter", label).split()
        if containers:
            cli("rm", "--force", "--volumes", *containers)
    except (OSError, subprocess.TimeoutExpired) as exc:
        logger.warning("cannot remove the containers of run %s: %s", run_directory.name, exc)
        return 0
    return len(containers)


def engine_address() -> str:
    """The Docker engine the CLI talks to, as a message names it."""
    host = os.environ.get("DOCKER_HOST")
    return host or "the docker CLI's default (DOCKER_HOST is unset: /var/run/docker.sock)"


def start_failure(output: str, image: str) -> str:
    """One line saying why ``docker run`` could not start a sandbox, and what to do."""
    engine = engine_address()
    if "tls:" in output or "x509:" in output or "remote error: tls" in output:
        # The engine answers but the certificates do not match: not "no engine" (the CLI
        # never falls back to plain TCP with DOCKER_TLS_VERIFY set).
        reason = next(line for line in output.splitlines() if "tls" in line or "x509" in line)
        where = os.environ.get("DOCKER_CERT_PATH") or "~/.docker"
        return (
            f"docker backend: the TLS handshake with the engine at {engine} fails "
            f"({reason.strip()[-200:]}); the certificates in {where} (ca.pem, cert.pem, "
            "key.pem) must be the engine's CA and a client certificate it trusts"
        )
    if ENGINE_GONE in output or "error during connect" in output:
        return (
            f"docker backend: no Docker engine answers at {engine}; start one (dockerd, or"
            " systemctl start docker) or set DOCKER_HOST to one that runs"
        )
    if "Unable to find image" in output or "No such image" in output:
        return (
            f"docker backend: image {image!r} is not on the engine at {engine} and could not"
            " be pulled; pull or build it there, or set sandbox_image to an image it has"
        )
    if "executable file not found" in output and "bash" in output:
        return (
            f"docker backend: image {image!r} has no bash, which every command runs with;"
            " use an image with bash and coreutils (e.g. python:3.11-slim, debian:bookworm)"
        )
    last_line = (output.strip().splitlines() or ["no output"])[-1][:500]
    return f"docker backend: could not start a container of {image!r} on {engine}: {last_line}"
