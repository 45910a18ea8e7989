"""The docker backend: one container per task, commands through its kept channel.

The container (``settings.docker_image``, default ``DEFAULT_DOCKER_IMAGE``; it needs bash)
starts with its rollout and runs ``sleep infinity`` under docker's init. It has no network
(``--network none``) unless ``settings.network``; a read-only root filesystem with size-capped
tmpfs mounts at ``/workspace`` (the working directory and ``HOME``; ``workspace_mb``) and
``/tmp``; no capabilities; no new privileges; commands as an unprivileged user (init and the
anchor as root: out of the agent's reach by ptrace or signal); memory, process-count, CPU and
file-size limits (see ``limits``). ``close`` removes it with ``docker rm -f``. A container
that cannot start (no engine, no image, no bash in it) is a ``SandboxUnavailable`` naming what
is missing.

The kept channel (``docker_channel``): once the container runs, one ``docker exec -i`` of a
small python3 agent, as the agent's user, carries every command, file script and socket
connection (the ``python`` tool's, the MCP relay's), a few milliseconds each instead of a
``docker exec`` (~60 ms). The sandbox's processes may kill or stop that agent: the call under
way is then a tool error, and the next call starts another; ``stop_agent_processes`` closes
it, so verification runs through one started after the agent's processes were gone. An image
whose python3 is missing or older than 3.9 has no channel (said once, as a warning): every
command is then a ``docker exec`` as below.

Commands: ``bash -c``, each carrying a run tag in its environment, stderr joined to stdout
inside. A timeout kills every process with the command's tag (from the host when the engine
runs here and we may, and inside the container: by the channel's agent, else by a ``docker
exec`` of a kill script, which also kills a ``docker exec`` client: killing the client alone
would leave the command running). Files: read (no further than the caller asks:
``read_head``), written and listed by small ``sh`` scripts, byte for byte through
stdin/stdout; each first resolves the path with ``realpath`` inside the container (symlinks
as the container sees them) and refuses anything outside ``/workspace``.

Verification: ``stop_agent_processes`` kills every process but docker's init and the
``sleep``, empties ``/tmp`` and makes the verification's ``HOME`` there; ``install_checks``
writes the check files as root (``docker exec --user 0``), read-only, into a directory of
root's.

Engines: the one of ``DOCKER_HOST``, or a pool (``settings.docker_hosts``, see
``docker_pool``): each container starts on one engine of it, the next if that one fails, and
every docker command of the container names its engine (``--host``).

Every container carries the label ``hermes-envgen.run=<host>/<run>`` and the run's directory
notes the engines (``runs.ENGINE_FILE``): a run killed before it removed its containers has
them removed by the next run, or ``hermes-envgen cleanup``, on each engine.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import errno
import logging
import os
import posixpath
import re
import shutil
import signal
import uuid
from pathlib import Path

from hermes_envgen.runtime.errors import FileTooLarge
from hermes_envgen.runtime.sandbox.base import (
    DEFAULT_DOCKER_IMAGE,
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
)
from hermes_envgen.runtime.sandbox.command_output import finish_command
from hermes_envgen.runtime.sandbox.docker.channel import (
    ANSWER_TIMEOUT,
    ChannelGone,
    ChannelProcess,
    DockerChannel,
    NotSent,
    boot_command,
)
from hermes_envgen.runtime.sandbox.docker.engine import (
    ENGINE_GONE,
    FILE_TIMEOUT,
    LABEL,
    RUN_LABEL,
    kill_container_processes,
    record_engine,
    run_label,
    start_failure,
)
from hermes_envgen.runtime.sandbox.docker.engine import docker_cli as _docker
from hermes_envgen.runtime.sandbox.docker.engine import docker_exec as _exec
from hermes_envgen.runtime.sandbox.docker.pool import (
    connect_failure,
    engine_failure,
    is_local,
    pool_of,
)
from hermes_envgen.runtime.sandbox.docker.shell import (
    DENIED,
    DIRECTORY,
    HEAD_SCRIPT,
    INSTALL_SCRIPT,
    KILL_AGENT_SCRIPT,
    KILL_ALL_SCRIPT,
    KILL_SCRIPT,
    LIST_SCRIPT,
    MISSING,
    NO_PARENT,
    NOT_REGULAR,
    OUTSIDE,
    SIZED_SCRIPT,
    TOO_LARGE,
    VERIFICATION_TMP_SCRIPT,
    WRITE_SCRIPT,
)
from hermes_envgen.runtime.sandbox.limits import (
    ISOLATED_DEFAULTS,
    ResourceLimits,
    tmpfs_size_options,
)
from hermes_envgen.runtime.sandbox.process import spawn
from hermes_envgen.runtime.sandbox.reaping import kill_processes

logger = logging.getLogger(__name__)

WORKDIR = "/workspace"
HOSTNAME = "sandbox"
AGENT_USER = "65534:65534"  # nobody: every command and file script runs as it
# docker's init and the anchor run as root (with no capabilities, as all in the container):
# of another user than the agent's, which can neither ptrace nor signal them.
ANCHOR_USER = "0:0"
TMP_SIZE_MB = 512  # a tmpfs, as the workspace (limits.workspace_mb): the host's memory
START_TIMEOUT = 600.0  # includes pulling the image the first time
RUNTIME_EXEC_FAILED = "OCI runtime exec failed"  # docker exec's start failure, exit code 126
CANNOT_START = 126
# How the docker client's output starts when it reached no engine (unix socket; TCP, SSH).
CLIENT_FAILED = (ENGINE_GONE, "error during connect")


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
        # The engines of sandbox_docker_hosts, if any (else DOCKER_HOST's); the container's
        # own, once it started: every docker command of it goes there.
        self.pool = pool_of(getattr(settings, "docker_hosts", None) or ())
        self.host: str | None = None
        self.image = getattr(settings, "docker_image", None) or DEFAULT_DOCKER_IMAGE
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
        # The kept channel (docker_channel): every command and file script goes through it
        # when it runs; else (an image without python3 3.9+) each is a docker exec.
        self.kept_channel = True
        self.channel_answer_timeout = ANSWER_TIMEOUT  # then a silent agent is replaced
        self._channel: DockerChannel | None = None
        self._channel_lock = asyncio.Lock()
        self.channels_started = 0

    @property
    def workdir(self) -> str:
        return WORKDIR

    # -- the container ---------------------------------------------------------------------

    def cli(self) -> list[str]:
        """The docker client, talking to this sandbox's engine."""
        return [self.docker] if self.host is None else [self.docker, "--host", self.host]

    def run_argv(self) -> list[str]:
        """The ``docker run`` argv that creates this task's container."""
        environment = command_environment(WORKDIR)
        environment.pop("PATH", None)  # the image knows its PATH; the host's means nothing here
        # ISOLATED_DEFAULTS fills in every limit the settings leave unset: never None here
        assert self.limits.workspace_mb is not None
        workspace_size = tmpfs_size_options(self.limits.workspace_mb)
        args = [
            *self.cli(), "run", "--detach", "--init",
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
        args = [*self.cli(), "exec", "--workdir", WORKDIR, "--user", user or AGENT_USER]
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
            record_engine(self.run_directory, self.pool.hosts if self.pool else None)
            try:
                await self._start_on_an_engine()
            except SandboxUnavailable as exc:
                self._start_error = str(exc)
                raise
            self._started = True

    async def _start_on_an_engine(self) -> None:
        """Start the container: on DOCKER_HOST's engine, or on the pool's, the next if one fails."""
        if self.pool is None:
            code, out = await self._start_container()
            if code != 0:
                raise SandboxUnavailable(start_failure(out, self.image))
            return
        tried: set[str] = set()
        while True:
            self.host = self.pool.pick(tried)  # SandboxUnavailable with every engine out
            try:
                # A network engine that takes no connection is asked for nothing.
                why = await connect_failure(self.host)
                code, out = (1, why) if why else await self._start_container()
            except BaseException:  # cancelled (the rollout's budget, Ctrl-C): not open here
                self.pool.release(self.host)
                raise
            if code == 0:
                self.pool.working(self.host)
                return
            self.pool.release(self.host)
            why = why or engine_failure(code, out)
            if why is None:  # the engine answered: the image, say, which another may lack too
                raise SandboxUnavailable(start_failure(out, self.image, self.host))
            self.pool.out(self.host, why)
            tried.add(self.host)

    async def _start_container(self) -> tuple[int, str]:
        """``docker run`` this sandbox's container on its engine; the exit code and output."""
        code, out = await _docker(self.run_argv(), timeout=START_TIMEOUT)
        if code == 0:
            code, out = await self._check_bash()
        if code != 0:
            await self._drop_channel()
            # A container may have been created before it failed to start: remove it.
            await _docker([*self.cli(), "rm", "--force", "--volumes", self.container], 60)
        return code, out

    async def _check_bash(self) -> tuple[int, str]:
        """Every command runs with bash: an image without it fails here, at the start.

        Through the kept channel, started now: before any command of the agent's, so that
        no process of the agent's is there to watch it start.
        """
        channel = await self._kept(starting=True)
        if channel is None:
            return await _docker(self.exec_argv("bash", "-c", "exit 0"), timeout=60)
        try:
            process = await channel.spawn(["bash", "-c", "exit 0"], {})
        except OSError as exc:  # in docker exec's words, which start_failure knows
            return 127, f'exec: "bash": executable file not found in $PATH ({exc.strerror})'
        except ChannelGone:
            return await _docker(self.exec_argv("bash", "-c", "exit 0"), timeout=60)
        try:
            return await process.wait(), ""
        finally:
            channel.forget(process)

    def _engine_lost(self, output: str) -> SandboxUnavailable:
        """The engine stopped under a running sandbox: out of the pool, and the error to raise."""
        if self.pool is not None and self.host is not None:
            self.pool.out(self.host, engine_failure(1, output) or output.strip()[:200])
        return SandboxUnavailable(start_failure(output, self.image, self.host))

    async def close(self) -> None:
        if self.closed:
            return
        self.closed = True
        await self._drop_channel()
        async with self._start_lock:
            if self._started:
                await _docker([*self.cli(), "rm", "--force", "--volumes", self.container], 60)
                if self.pool is not None and self.host is not None:
                    self.pool.release(self.host)

    # -- the kept channel ------------------------------------------------------------------

    def channel_argv(self) -> list[str]:
        """The ``docker exec`` argv of the channel's agent (``channel_server``)."""
        args = [*self.cli(), "exec", "--interactive", "--workdir", WORKDIR, "--user", AGENT_USER]
        return [*args, self.container, *boot_command()]

    async def _kept(self, starting: bool = False) -> DockerChannel | None:
        """The container's kept channel, started if need be; None where there can be none
        (then every command is a ``docker exec``, as it was before the channel).

        ``starting``: the container is starting (``_started`` is not yet set).
        """
        if not self.kept_channel or self.closed or not (self._started or starting):
            return None
        channel = self._channel
        if channel is not None and channel.alive():
            return channel
        async with self._channel_lock:
            if self._channel is not None and self._channel.alive():
                return self._channel
            if self._channel is not None:  # killed or stopped by the sandbox's processes
                await self._drop_channel()
            try:
                self._channel = await DockerChannel.start(
                    self.channel_argv(), dict(os.environ), self.channel_answer_timeout
                )
            except ChannelGone as exc:
                if any(words in str(exc) for words in CLIENT_FAILED):
                    raise self._engine_lost(str(exc)) from None
                if "python" in str(exc).lower() or "executable file not found" in str(exc):
                    self.kept_channel = False  # said once: the image cannot have one
                    logger.warning(
                        "docker backend: %s; every command of %s is a docker exec (slower)",
                        exc, self.image,
                    )  # fmt: skip
                logger.debug("docker channel did not start: %s", exc)
                return None  # a container out of processes, say: this command by exec
            self.channels_started += 1
            return self._channel

    async def _drop_channel(self) -> None:
        """Close the kept channel; an agent that stopped answering is killed in the container."""
        channel, self._channel = self._channel, None
        if channel is None:
            return
        await channel.close()
        if channel.stuck and not self.closed and channel.agent_pid is not None:
            # Stopped (SIGSTOP), it would never read the end of its stdin. By its pid: being
            # non-dumpable, it shows no environment, so no run tag, to the agent's user.
            kill = self.exec_argv("sh", "-c", KILL_AGENT_SCRIPT, "sh", str(channel.agent_pid))
            await _docker(kill, timeout=30)

    def _command_environment(self, tag: str) -> dict[str, str]:
        """What a command gets besides the container's environment (as ``exec_argv``)."""
        environment = {RUN_TAG_VARIABLE: tag}
        if self.verifying:
            environment |= {"HOME": self._verification_home, "PYTHONNOUSERSITE": "1"}
        return environment

    def _next_tag(self) -> str:
        self._commands_started += 1
        return f"{self._tag_prefix}{self._commands_started}"

    async def _kill_on_channel(
        self, channel: DockerChannel, process: ChannelProcess, tag: str
    ) -> None:
        """Kill a command started on the channel: from the host when the engine runs here
        (see ``_kill``), and by the agent; by ``docker exec`` if the channel is gone."""
        kill_processes(None, tag)
        try:
            await channel.kill(process, f"{RUN_TAG_VARIABLE}={tag}")
        except ChannelGone:
            await self._kill(None, tag)

    # -- commands --------------------------------------------------------------------------

    async def _prepare(self) -> None:
        await self._ensure_started()

    async def _run(self, command: str, timeout: float | None) -> CommandResult:
        timeout = self.settings.command_timeout if timeout is None else timeout
        tag = self._next_tag()
        # The command starts on line 2, as on the other backends (same line numbers in errors).
        # docker exec carries stdout and stderr as two streams whose order the client loses:
        # joining them inside keeps the order the command wrote them in.
        script = f"exec 2>&1; cd -- {WORKDIR} || exit 1\n{command}"
        channel = await self._kept()
        if channel is not None:
            try:
                return await self._run_on_channel(channel, script, tag, timeout)
            except NotSent:  # it had ended since the last call, unnoticed: a new one
                channel = await self._kept()
                if channel is not None:
                    return await self._run_on_channel(channel, script, tag, timeout)
        argv = self.exec_argv("bash", "-c", script, tag=tag)
        process = await spawn(argv, dict(os.environ))  # the client needs DOCKER_TLS_* & co.

        async def kill() -> None:
            await self._kill(process.pid, tag)

        result = await finish_command(process, self.settings.max_output_bytes, timeout, kill)
        if result.exit_code != 0 and result.output.startswith(CLIENT_FAILED):
            # The engine stopped under a running sandbox: that is no result of the command.
            raise self._engine_lost(result.output)
        return explain_start_failure(result)

    async def _run_on_channel(
        self, channel: DockerChannel, script: str, tag: str, timeout: float
    ) -> CommandResult:
        """Run a command's script through the kept channel (``_run``)."""
        try:
            try:
                process = await channel.spawn(["bash", "-c", script],
                                              self._command_environment(tag))  # fmt: skip
            except OSError as exc:
                return could_not_start(exc)

            async def kill() -> None:
                await self._kill_on_channel(channel, process, tag)

            try:
                limit = self.settings.max_output_bytes
                return await finish_command(process, limit, timeout, kill)
            finally:
                channel.forget(process)
        except ChannelGone:
            # Killed by the sandbox's processes, or the engine went: the next channel says.
            await self._kept()  # SandboxUnavailable if no engine answers any more
            raise

    async def _kill_everything(self) -> None:
        await self._drop_channel()  # the agent's processes may have touched it: a new one
        if not self._started:
            return
        # From the host first, as _kill does: a fork bomb may leave no slot for docker exec.
        code, out = await _docker(
            [*self.cli(), "inspect", "--format", "{{.State.Pid}} {{.Id}}", self.container], 30
        )
        # A pid of an engine elsewhere means nothing here (it may name a process of ours).
        pid, _, container_id = out.strip().partition(" ")
        if code == 0 and pid.isdigit() and len(container_id) == 64 and is_local(self.host):
            kill_container_processes(int(pid), container_id)
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
            if code != 0 and out.startswith(CLIENT_FAILED):
                raise self._engine_lost(out)  # the rollout fails as a rollout, not the run
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
        channel = await self._kept()
        if channel is not None:
            try:
                return await self._script_on_channel(
                    channel, ["sh", "-c", script, *arguments], data
                )
            except ChannelGone:
                await self._kept()  # SandboxUnavailable if no engine answers any more
                raise
        argv = self.exec_argv("sh", "-c", script, *arguments, stdin=data is not None)
        code, out, err = await _exec(argv, data)
        if code != 0 and err.startswith(CLIENT_FAILED):  # the client's words, not the script's
            raise self._engine_lost(err)
        return code, out, err

    async def _script_on_channel(
        self, channel: DockerChannel, argv: list[str], data: bytes | None
    ) -> tuple[int, bytes, str]:
        """A file script through the kept channel; killed after ``FILE_TIMEOUT`` (a FIFO
        swapped in for a file blocks it), as ``docker_exec`` kills its client."""
        tag = self._next_tag()
        try:
            process = await channel.spawn(argv, self._command_environment(tag), stdin=data)
        except OSError as exc:
            return CANNOT_START, b"", could_not_start(exc).output
        outputs = asyncio.gather(process.stdout.read(), process.stderr.read(), process.wait())
        try:
            out, err, code = await asyncio.wait_for(outputs, FILE_TIMEOUT)
        except asyncio.TimeoutError:
            await self._kill_on_channel(channel, process, tag)
            message = f"the file operation timed out after {FILE_TIMEOUT:g} s"
            return TIMEOUT_EXIT_CODE, b"", message
        except BaseException:
            with contextlib.suppress(SandboxError):
                await asyncio.shield(self._kill_on_channel(channel, process, tag))
            raise
        finally:
            channel.forget(process)
        return code, out, err.decode(errors="replace")

    async def connect_socket(
        self, directory: str, limit: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection, through the kept channel, to ``directory/socket`` in the container."""
        channel = await self._kept()
        if channel is None:
            return None
        try:
            return await channel.connect(directory, limit)
        except (OSError, SandboxError):
            return None

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


def could_not_start(exc: OSError) -> CommandResult:
    """The result of a command the channel's agent could not start (``posix_spawn`` failed)."""
    if exc.errno in (errno.EAGAIN, errno.ENOMEM):  # a fork bomb holds every slot
        why = "the sandbox is out of processes or memory"
    else:
        why = exc.strerror or str(exc)
    return CommandResult(CANNOT_START, f"the command could not start: {why} ({exc})\n")


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
