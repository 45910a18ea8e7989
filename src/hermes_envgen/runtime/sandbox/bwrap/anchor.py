"""The host's side of a bwrap sandbox's anchor: start it, have it start commands, stop it.

The anchor (``anchor_server.py``) is the sandbox's first process: a small python3 that
holds its namespaces and, already inside them, in its cgroup, under its limits and as its
user, starts each command with one ``posix_spawn``. Entering the sandbox from the host
instead (``nsenter`` after a shell that joins the cgroups) costs three execs and a cgroup
move per command, several milliseconds on a busy host; see benchmarks/bench_sandbox.py.
"""

from __future__ import annotations

import array
import asyncio
import contextlib
import errno
import fcntl
import functools
import os
import select
import signal
import socket
import subprocess
import time
from pathlib import Path

from hermes_envgen.runtime.errors import SandboxError
from hermes_envgen.runtime.sandbox.process import SpawnedProcess, shell_exit_code

ANCHOR_FD = 3  # where the anchor finds its socket to the host
WORKSPACE_FD = 4  # where bwrap's first process finds the workspace to bind (if it is passed)
START_TIMEOUT = 20.0  # for the anchor to start, and to answer a request
RESET_TIMEOUT = 10.0  # for the anchor to end the agent's turn (it allows itself 5 s)
MAX_REQUEST = 1 << 20  # a command's argv and environment; exec refuses far less anyway
KILLED = 128 + signal.SIGKILL  # a command's exit code when its sandbox died under it
PYTHON_DIRECTORIES = ("/usr/local/bin", "/usr/bin")  # as the sandbox's PATH orders them
ENDED = "the sandbox ended before the command started (its anchor was killed)"


class AnchorGone(SandboxError):
    """The anchor had ended when a request was sent: the command did not start at all."""


@functools.cache
def anchor_source() -> str:
    """The anchor's program."""
    return Path(__file__).with_name("anchor_server.py").read_text()


# Run by the sandbox's python3 once per host process: its own bytecode of the anchor, which
# every sandbox start then loads instead of compiling the source (2 ms of CPU a start).
_COMPILE = (
    "import marshal,sys;"
    "sys.stdout.buffer.write(marshal.dumps(compile(sys.stdin.read(),'anchor_server.py','exec')))"
)
# The anchor's command line: its code from stdin (a pipe ``Anchor.start`` fills), which keeps
# the command line short in the agent's ``ps``.
_LOAD = "import marshal,sys;exec(marshal.loads(sys.stdin.buffer.read()))"


@functools.cache
def anchor_code() -> bytes:
    """The anchor's program as the sandbox's python3 compiled it (``marshal``)."""
    try:
        compiled = subprocess.run(
            [sandbox_python(), "-I", "-S", "-c", _COMPILE],
            input=anchor_source().encode(),
            capture_output=True,
            timeout=60,
            check=True,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise SandboxError(f"the sandbox's python3 cannot compile the anchor: {exc}") from None
    return compiled.stdout


@functools.cache
def sandbox_python() -> str:
    """A python3 the sandbox can run (one under /usr, the only host directory it sees)."""
    for directory in PYTHON_DIRECTORIES:
        path = os.path.join(directory, "python3")
        if os.path.realpath(path).startswith("/usr/") and os.access(path, os.X_OK):
            return path
    raise SandboxError(
        "the bwrap backend needs python3 under /usr, from the python3-minimal package"
        " (run scripts/install-system-deps.sh)"
    )


def anchor_argv(limits: list[tuple[int, int]], drop: str = "") -> list[str]:
    """The argv, run inside the sandbox, of the anchor that confines itself (``drop``, see
    ``anchor_server``) and applies ``limits`` (RLIMIT_* number, value).

    The anchor reads its compiled program from its stdin (``Anchor.start`` passes it
    through a pipe).
    """
    encoded = ",".join(f"{number}:{value}" for number, value in limits)
    return [sandbox_python(), "-I", "-S", "-c", _LOAD, encoded, drop, str(ANCHOR_FD)]


class Anchor:
    """A started sandbox: bwrap's process tree and the anchor inside it, with its socket.

    Started with posix_spawn from the event loop's thread (bwrap's --die-with-parent ties
    the sandbox to that thread), reaped by ``os.waitpid`` rather than through a loop, so that
    a manager used from several event loops in turn (as tests do) still cleans up.
    """

    def __init__(self, bwrap_pid: int, control: socket.socket, pidfd: int) -> None:
        self.bwrap_pid = bwrap_pid
        self.target = _pidfd_pid(pidfd)  # the anchor's pid on the host
        self._control = control
        self._pidfd = pidfd  # readable once the anchor has exited
        self._reaped = False  # once bwrap is reaped its pid may be reused: never signal it
        self._stopped = False

    @classmethod
    async def start(
        cls, argv: list[str], env: dict[str, str], workspace: int | None = None
    ) -> Anchor:
        """Start bwrap (``argv`` ends in ``anchor_argv``) and wait for its anchor's greeting.

        ``workspace``: a descriptor bwrap's first process gets as ``WORKSPACE_FD``.
        """
        control, remote = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        read_errors, write_errors = os.pipe()
        read_source, write_source = os.pipe()
        try:
            os.write(write_source, anchor_code())  # a few KiB: the pipe holds them
        finally:
            os.close(write_source)
        workspace_copy = None
        try:
            # Every descriptor here is close-on-exec; dup2 gives bwrap the ones it keeps (none
            # of them below 3, where an earlier dup2 could overwrite it).
            read_source, write_errors = _above_stdio(read_source), _above_stdio(write_errors)
            remote = socket.socket(fileno=_above_stdio(remote.detach()))
            passed = []
            if workspace is not None:  # numbered above both targets: no dup2 overwrites it
                workspace_copy = fcntl.fcntl(workspace, fcntl.F_DUPFD_CLOEXEC, WORKSPACE_FD + 1)
                passed.append((os.POSIX_SPAWN_DUP2, workspace_copy, WORKSPACE_FD))
            pid = os.posix_spawn(
                argv[0],
                argv,
                env,
                file_actions=[
                    (os.POSIX_SPAWN_DUP2, read_source, 0),
                    (os.POSIX_SPAWN_OPEN, 1, os.devnull, os.O_WRONLY, 0),
                    (os.POSIX_SPAWN_DUP2, write_errors, 2),
                    (os.POSIX_SPAWN_DUP2, remote.fileno(), ANCHOR_FD),
                    *passed,
                ],
                setsid=True,  # its own process group: killing the group kills the sandbox
            )
        except BaseException:
            control.close()
            os.close(read_errors)
            raise
        finally:
            os.close(read_source)
            os.close(write_errors)
            remote.close()
            if workspace_copy is not None:
                os.close(workspace_copy)
        control.setblocking(False)
        control.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, MAX_REQUEST)
        try:
            return cls(pid, control, await _greeting(pid, control, read_errors))
        except BaseException:
            control.close()
            _kill_and_reap(pid)
            raise
        finally:
            os.close(read_errors)

    def alive(self) -> bool:
        """Whether the anchor still runs and answers."""
        if not self._reaped:
            self._reaped = _reap_if_exited(self.bwrap_pid)
        if self._reaped or self._stopped:
            return False
        # The anchor never writes after its greeting: a readable socket is its end of file;
        # a readable pidfd, its exit (the socket closes first, as it dies).
        poller = select.poll()
        poller.register(self._control, select.POLLIN)
        poller.register(self._pidfd, select.POLLIN)
        return not poller.poll(0)

    async def spawn(self, argv: list[str], env: dict[str, str]) -> SpawnedProcess:
        """Have the anchor start ``argv`` in a new session, stdout and stderr into one pipe."""
        request = _request(argv, env)
        loop = asyncio.get_running_loop()
        read_fd, write_fd = os.pipe()
        replies, remote = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            await self._send(request, [write_fd, remote.fileno()])
        except BaseException:
            os.close(read_fd)
            replies.close()
            raise
        finally:
            os.close(write_fd)
            remote.close()
        replies.setblocking(False)
        command = _CommandReplies(loop, replies)
        try:
            pid = await asyncio.wait_for(asyncio.shield(command.started), START_TIMEOUT)
        except asyncio.TimeoutError:
            os.close(read_fd)
            command.close()
            raise await self._replaced() from None
        except BaseException:
            os.close(read_fd)
            command.close()
            raise
        reader = asyncio.StreamReader(limit=2**20)
        await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(read_fd, "rb", buffering=0)
        )
        return AnchoredProcess(pid, reader, command.exited, self)

    async def reset(self, empty_scratch: bool = True) -> bool:
        """End the agent's turn in this sandbox: every process but the anchor killed, ``/tmp``
        and ``/dev/shm`` emptied (``empty_scratch``); whether the sandbox is now as it started
        (else the caller stops it: verification then starts a fresh one)."""
        if not self.alive():
            return False
        replies, remote = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            try:
                await self._send(b"K" if empty_scratch else b"k", [remote.fileno()])
            finally:
                remote.close()
            loop = asyncio.get_running_loop()
            replies.setblocking(False)
            answer = await asyncio.wait_for(loop.sock_recv(replies, 1024), RESET_TIMEOUT)
        except (OSError, SandboxError, asyncio.TimeoutError):  # gone, stuck or stopped
            return False
        finally:
            replies.close()
        return answer == b"K"

    async def _send(self, request: bytes, fds: list[int]) -> None:
        """Send a request with its descriptors, waiting (boundedly) while the anchor is behind."""
        rights = [(socket.SOL_SOCKET, socket.SCM_RIGHTS, array.array("i", fds))]
        deadline = time.monotonic() + START_TIMEOUT
        while True:
            try:
                self._control.sendmsg([request], rights)
                return
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise await self._replaced() from None
                await asyncio.sleep(0.01)
            except OSError as exc:
                if exc.errno == errno.EMSGSIZE:
                    raise OSError(errno.E2BIG, os.strerror(errno.E2BIG)) from None
                raise AnchorGone(ENDED) from None

    async def _replaced(self) -> SandboxError:
        """Stop an anchor that does not answer (stopped, or stuck); the error to tell."""
        await self.stop()
        return SandboxError(
            "the sandbox stopped answering; it was killed and restarts at the next command"
        )

    async def stop(self) -> None:
        """Kill the sandbox (bwrap, the namespace's init, so everything in it) and reap bwrap."""
        if self._stopped:
            return
        self._stopped = True
        self._control.close()
        os.close(self._pidfd)
        if not self._reaped:
            self._reaped = True
            await asyncio.to_thread(_kill_and_reap, self.bwrap_pid)


class AnchoredProcess(SpawnedProcess):
    """A command the anchor started; ``pid`` is None if it exited before the host learned it."""

    def __init__(
        self, pid: int | None, stdout: asyncio.StreamReader, waiter: asyncio.Future, anchor: Anchor
    ) -> None:
        super().__init__(pid, stdout, waiter)
        self.anchor = anchor


class _CommandReplies:
    """The anchor's replies about one command: its pid once started, its exit code at the end."""

    def __init__(self, loop: asyncio.AbstractEventLoop, sock: socket.socket) -> None:
        self.started: asyncio.Future = loop.create_future()  # its pid, None if unknown
        self.exited: asyncio.Future = loop.create_future()  # its exit code, as a shell's
        self._loop = loop
        self._sock = sock
        loop.add_reader(sock.fileno(), self._read)

    def _read(self) -> None:
        try:
            data, fds = _receive(self._sock, 4096)
        except BlockingIOError:
            return
        except OSError:
            data, fds = b"", []
        kind, body = data[:1], data[1:]
        if kind == b"S" and len(fds) == 1 and not self.started.done():
            self.started.set_result(_pidfd_pid(fds[0]))
        for fd in fds:
            os.close(fd)
        if kind == b"S":
            return
        if kind == b"F" and not self.started.done():
            number, _, message = body.decode(errors="replace").partition(":")
            code = int(number) if number.isdigit() else errno.EIO
            self.started.set_exception(OSError(code, message[:500] or os.strerror(code)))
        elif kind == b"E" and not self.exited.done():
            self.exited.set_result(_exit_code(body))
        self.close()  # the last reply, or the anchor is gone (end of file) or confused

    def close(self) -> None:
        """Stop listening; what has not been told by now never will be."""
        if self._sock.fileno() >= 0:
            self._loop.remove_reader(self._sock.fileno())
            self._sock.close()
        # The anchor died (and the sandbox with it): whether or not the command had started,
        # it ended as if killed; what it wrote is still read from its pipe.
        if not self.started.done():
            self.started.set_result(None)
        if not self.exited.done():
            self.exited.set_result(KILLED)


async def _greeting(pid: int, control: socket.socket, errors_fd: int) -> int:
    """Wait for the anchor's first message (a pidfd of itself) while bwrap runs; the pidfd.

    Woken by the loop when the socket is readable or bwrap has exited (its pidfd), not by
    polling: a start's wait took some fifteen wake-ups of the loop, a quarter of the host
    process's CPU for a start on a busy machine.
    """
    loop = asyncio.get_running_loop()
    bwrap = os.pidfd_open(pid)
    woken = asyncio.Event()
    loop.add_reader(control.fileno(), woken.set)  # level-triggered: no wake-up is lost
    loop.add_reader(bwrap, woken.set)
    deadline = time.monotonic() + START_TIMEOUT
    try:
        while True:
            try:
                data, fds = _receive(control, 16)
            except BlockingIOError:
                data, fds = None, []
            if data is not None:
                if data == b"R" and len(fds) == 1:
                    return fds[0]
                for fd in fds:
                    os.close(fd)
                message = _read_available(errors_fd)
                raise SandboxError(f"the sandbox's anchor did not start: {message or 'no message'}")
            finished, status = os.waitpid(pid, os.WNOHANG)
            if finished:
                message = _read_available(errors_fd)
                raise SandboxError(
                    f"bwrap could not start the sandbox (exit "
                    f"{os.waitstatus_to_exitcode(status)}): {message or 'no message'}"
                )
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise SandboxError(f"the sandbox did not start in {START_TIMEOUT:g} s")
            woken.clear()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(woken.wait(), remaining)
    finally:
        loop.remove_reader(control.fileno())
        loop.remove_reader(bwrap)
        os.close(bwrap)


def _request(argv: list[str], env: dict[str, str]) -> bytes:
    """A command's request: argc, argv and ``NAME=value`` pairs, NUL-separated."""
    fields = [str(len(argv)), *argv, *(f"{name}={value}" for name, value in env.items())]
    if any("\0" in field for field in fields):
        raise ValueError("embedded null byte")
    request = "\0".join(fields).encode("utf-8", "surrogateescape")
    if len(request) > MAX_REQUEST:
        raise OSError(errno.E2BIG, os.strerror(errno.E2BIG))
    return request


def _above_stdio(fd: int) -> int:
    """``fd`` itself, or a close-on-exec copy numbered 3 or more if it is 0, 1 or 2."""
    if fd > 2:
        return fd
    try:
        return fcntl.fcntl(fd, fcntl.F_DUPFD_CLOEXEC, 3)
    finally:
        os.close(fd)


def _receive(sock: socket.socket, size: int) -> tuple[bytes, list[int]]:
    """One message and the descriptors that came with it (close-on-exec)."""
    fds = array.array("i")
    data, ancillary, _, _ = sock.recvmsg(
        size, socket.CMSG_SPACE(4 * fds.itemsize), socket.MSG_CMSG_CLOEXEC
    )
    for level, kind, payload in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            fds.frombytes(payload[: len(payload) - len(payload) % fds.itemsize])
    return data, list(fds)


def _pidfd_pid(pidfd: int) -> int | None:
    """The host pid a pidfd refers to; None once that process has been reaped (or not a pidfd)."""
    try:
        with open(f"/proc/self/fdinfo/{pidfd}") as file:
            for line in file:
                if line.startswith("Pid:"):
                    pid = int(line.split()[1])
                    return pid if pid > 0 else None
    except (OSError, ValueError, IndexError):
        pass
    return None


def _exit_code(body: bytes) -> int:
    """A shell's exit code from a wait status the anchor sent."""
    try:
        return shell_exit_code(os.waitstatus_to_exitcode(int(body)))
    except ValueError:
        return KILLED


def _reap_if_exited(pid: int) -> bool:
    """Reap child ``pid`` if it exited; whether it has."""
    try:
        finished, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return True
    return finished != 0


def _kill_and_reap(pid: int) -> None:
    """SIGKILL a process group (bwrap's) and wait for its leader."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    with contextlib.suppress(ChildProcessError):
        os.waitpid(pid, 0)


def _read_available(fd: int) -> str:
    """What a pipe holds now, without waiting for more."""
    os.set_blocking(fd, False)
    chunks = []
    with contextlib.suppress(BlockingIOError, OSError):
        while chunk := os.read(fd, 65536):
            chunks.append(chunk)
    return b"".join(chunks).decode(errors="replace").strip()[:1000]
