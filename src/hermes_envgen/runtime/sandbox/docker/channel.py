"""The host's side of a docker sandbox's kept channel (``channel_server``).

One long-lived ``docker exec --interactive`` per container carries, multiplexed, every
command, file script and socket connection of the sandbox: a command costs a round trip
to the agent and a ``posix_spawn`` inside instead of a ``docker exec`` (a client process, an
API call and a runc exec; see benchmarks/bench_docker_channel.py). It goes where the docker
client goes, so it works alike on a local engine and a remote one (TLS, SSH).

The agent runs as the sandbox's user, so the sandbox's processes may kill or stop it. Then
what ran through it fails with ``ChannelGone`` (a tool error, never a result), the channel
is closed, and the sandbox starts another at its next use; the tools' kept connections
through it end, and reconnect as when their server dies.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import functools
import logging
import os
import signal
import socket
from collections.abc import Coroutine
from pathlib import Path

from hermes_envgen.runtime.errors import SandboxError
from hermes_envgen.runtime.sandbox.process import SpawnedProcess

logger = logging.getLogger(__name__)

HEADER = 9  # payload length (4), stream id (4), kind (1)
MAX_PAYLOAD = 1 << 20
CHUNK = 1 << 16
START_TIMEOUT = 30.0  # for the agent to greet (python3's start in a busy container)
ANSWER_TIMEOUT = 20.0  # for the agent to say a command started, or a kill is done
# The agent's program comes on stdin (its length in argv): a short command line in ``ps``.
# Non-dumpable (prctl PR_SET_DUMPABLE 0) before it reads a byte: until then the sandbox's
# processes, of its user, could ptrace it or open its stdin through /proc and speak for the
# host. What is left of that window is python3's own start, not the program's transfer over
# the exec's stream (a round trip to a remote engine) and its compile.
BOOT = (
    "import os,sys\ntry:\n import _ctypes as C\n"
    " C.call_function(C.dlsym(C.dlopen(None),'prctl'),(4,0,0,0,0))\n"
    "except Exception:\n import ctypes\n ctypes.CDLL(None).prctl(4,0,0,0,0)\n"
    "b=b''\nn=int(sys.argv[1])\nwhile len(b)<n:\n c=os.read(0,n-len(b))\n"
    " if not c:sys.exit(1)\n b+=c\nexec(compile(b,'channel_server','exec'))"
)
GONE = (
    "the sandbox's command channel ended under the call (a process in the sandbox killed or "
    "stopped its agent); the call's result is lost. A new channel serves the next call"
)


class ChannelGone(SandboxError):
    """The channel ended or stopped answering: what ran through it has no result."""


class NotSent(ChannelGone):
    """The channel had ended before a request left the host: nothing of it ran."""


@functools.cache
def server_source() -> bytes:
    """The agent's program."""
    return Path(__file__).with_name("channel_server.py").read_bytes()


def boot_command(python: str = "python3") -> list[str]:
    """The command, run by ``docker exec --interactive`` in the container, of the agent."""
    return [python, "-I", "-S", "-c", BOOT, str(len(server_source()))]


def frame(ident: int, kind: bytes, payload: bytes = b"") -> bytes:
    return len(payload).to_bytes(4, "big") + ident.to_bytes(4, "big") + kind + payload


class ChannelProcess(SpawnedProcess):
    """A command the agent started; ``pid`` is the container's, ``stderr`` kept apart."""

    def __init__(
        self, ident: int, stdout: asyncio.StreamReader, stderr: asyncio.StreamReader,
        waiter: asyncio.Future, started: asyncio.Future,
    ) -> None:  # fmt: skip
        super().__init__(None, stdout, waiter)
        self.ident = ident
        self.stderr = stderr
        self.started = started


class _Stream:
    """What the host keeps of one stream: a command's or a connection's."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.started: asyncio.Future = loop.create_future()
        self.exited: asyncio.Future = loop.create_future()
        self.killed: asyncio.Future | None = None
        self.stdout = asyncio.StreamReader(limit=2**20)
        self.stderr = asyncio.StreamReader(limit=2**20)
        self.peer: asyncio.StreamWriter | None = None  # a connection's host end


class DockerChannel:
    """One container's kept channel: its ``docker exec`` client and the streams on it."""

    def __init__(
        self, process: asyncio.subprocess.Process, answer_timeout: float = ANSWER_TIMEOUT
    ) -> None:
        self.process = process
        self.answer_timeout = answer_timeout
        self.agent_pid: int | None = None  # in the container
        self._streams: dict[int, _Stream] = {}
        self._next = 1
        self._gone: str | None = None  # why, once it ended
        self.stuck = False  # it stopped answering (stopped, not ended): its agent may live on
        self._write_lock = asyncio.Lock()
        self._reader: asyncio.Task | None = None
        self._tasks: set[asyncio.Task] = set()  # writers of stdin and connections

    def _keep(self, work: Coroutine[object, object, None]) -> None:
        """Run ``work`` as a task held until it ends."""
        task = asyncio.ensure_future(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    @classmethod
    async def start(
        cls, argv: list[str], env: dict[str, str], answer_timeout: float = ANSWER_TIMEOUT
    ) -> DockerChannel:
        """Run ``argv`` (a ``docker exec -i`` of ``boot_command``) and wait for the greeting."""
        process = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE, env=env, limit=4 * MAX_PAYLOAD,
            start_new_session=True,
        )  # fmt: skip
        channel = cls(process, answer_timeout)
        assert process.stdin is not None and process.stdout is not None
        try:
            process.stdin.write(server_source())
            await process.stdin.drain()
            greeting = await asyncio.wait_for(channel._greeting(), START_TIMEOUT)
        except (asyncio.TimeoutError, OSError, ChannelGone, asyncio.IncompleteReadError) as exc:
            why = await channel._stderr_text()
            await channel._kill_client()
            raise ChannelGone(f"the channel's agent did not start: {why or exc}") from None
        except BaseException:
            await channel._kill_client()
            raise
        channel.agent_pid = greeting
        channel._reader = asyncio.ensure_future(channel._read_frames())
        return channel

    def alive(self) -> bool:
        """Whether the channel may carry the next request."""
        return self._gone is None and self.process.returncode is None

    # -- requests --------------------------------------------------------------------------

    async def spawn(
        self, argv: list[str], env: dict[str, str], stdin: bytes | None = None
    ) -> ChannelProcess:
        """Start ``argv`` in the container (``env`` added to the container's environment),
        ``stdin`` written to it (else /dev/null); raises ``OSError`` if it could not start."""
        fields = [str(len(argv)), *argv, *(f"{k}={v}" for k, v in env.items())]
        flags = b"\x01" if stdin is not None else b"\x00"
        request = flags + "\0".join(fields).encode("utf-8", "surrogateescape")
        if len(request) > MAX_PAYLOAD:  # as exec would refuse it (far less, per argument)
            raise OSError(errno.E2BIG, os.strerror(errno.E2BIG))
        ident, stream = self._open()
        await self._send(ident, b"S", request)
        if stdin is not None:
            # Written by a task of its own: a file larger than what the pipes hold must not
            # hold the caller, who reads the script's output meanwhile.
            self._keep(self._write_stdin(ident, stdin))
        process = ChannelProcess(ident, stream.stdout, stream.stderr, stream.exited,
                                 stream.started)  # fmt: skip
        await self._started(stream)
        return process

    async def _write_stdin(self, ident: int, data: bytes) -> None:
        with contextlib.suppress(ChannelGone):
            for start in range(0, len(data), MAX_PAYLOAD):
                await self._send(ident, b"I", data[start : start + MAX_PAYLOAD])
            await self._send(ident, b"i")

    async def kill(self, process: ChannelProcess, tag: str) -> None:
        """Kill a command (its process group) and every process with ``tag`` (``NAME=value``)
        in its environment; raises ``ChannelGone`` if the agent does not do it in time."""
        stream = self._streams.get(process.ident)
        forgotten = stream is None  # the command was done with: kept only for the answer
        if stream is None:
            stream = self._streams[process.ident] = _Stream(asyncio.get_running_loop())
        stream.killed = asyncio.get_running_loop().create_future()
        try:
            await self._send(process.ident, b"K", tag.encode("utf-8", "surrogateescape"))
            await self._answer(stream.killed)
        finally:
            if forgotten:
                self._streams.pop(process.ident, None)

    def forget(self, process: ChannelProcess) -> None:
        """The caller is done with a command: what else it sends is dropped."""
        self._streams.pop(process.ident, None)

    async def connect(
        self, directory: str, limit: int
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        """A connection to the Unix socket ``directory/socket`` in the container (no link
        followed there), as a stream of the host's; raises ``OSError`` if none listens."""
        ident, stream = self._open()
        await self._send(ident, b"C", directory.encode("utf-8", "surrogateescape"))
        try:
            await self._started(stream)
        except BaseException:
            self._streams.pop(ident, None)
            raise
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            peer_reader, stream.peer = await asyncio.open_unix_connection(sock=theirs)
            pair = await asyncio.open_unix_connection(sock=ours, limit=limit)
        except BaseException:
            ours.close()
            theirs.close()
            raise
        stream.stdout = peer_reader  # unused: the connection's bytes go to the peer
        self._keep(self._pump_connection(ident, peer_reader))
        return pair

    async def _pump_connection(self, ident: int, reader: asyncio.StreamReader) -> None:
        """The host end's bytes to the container's socket, then its end."""
        try:
            while chunk := await reader.read(CHUNK):
                await self._send(ident, b"D", chunk)
            # The host dropped the connection (it never half-closes one): whatever the
            # container's side still sends is for no one.
            stream = self._streams.pop(ident, None)
            if stream is not None and stream.peer is not None:
                stream.peer.close()
            await self._send(ident, b"d")
        except (ChannelGone, OSError):
            pass

    async def close(self) -> None:
        """End the channel: the client killed, the agent ends with its stdin (or, stopped,
        is killed by the sandbox's caller, see ``DockerSandbox``)."""
        self._end("closed")
        await self._kill_client()
        for task in [*self._tasks, *([self._reader] if self._reader else [])]:
            task.cancel()
        if self._reader is not None:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._reader

    # -- the stream --------------------------------------------------------------------------

    def _open(self) -> tuple[int, _Stream]:
        if not self.alive():
            raise NotSent(GONE)
        ident, self._next = self._next, self._next + 1
        stream = self._streams[ident] = _Stream(asyncio.get_running_loop())
        return ident, stream

    async def _send(self, ident: int, kind: bytes, payload: bytes = b"") -> None:
        stdin = self.process.stdin
        if not self.alive() or stdin is None:
            raise NotSent(GONE)
        try:
            stdin.write(frame(ident, kind, payload))
        except OSError:  # the client had exited: the request went nowhere
            await self._lost("the channel ended")
            raise NotSent(GONE) from None
        try:
            async with self._write_lock:
                await asyncio.wait_for(stdin.drain(), self.answer_timeout)
        except (OSError, asyncio.TimeoutError):
            self.stuck = True
            await self._lost("the agent stopped reading")
            raise ChannelGone(GONE) from None

    async def _started(self, stream: _Stream) -> None:
        await self._answer(stream.started)

    async def _answer(self, future: asyncio.Future) -> None:
        """Wait for the agent's answer; a channel that gives none in time is replaced."""
        try:
            await asyncio.wait_for(asyncio.shield(future), self.answer_timeout)
        except asyncio.TimeoutError:
            self.stuck = True
            await self._lost("the agent stopped answering")
            raise ChannelGone(GONE) from None

    async def _greeting(self) -> int:
        """The agent's pid, from its first frame; else ``ChannelGone`` with what came instead
        (the docker client prints why the exec failed on stdout: no python3, say)."""
        stdout = self.process.stdout
        assert stdout is not None
        try:
            header = await stdout.readexactly(HEADER)
        except asyncio.IncompleteReadError as exc:
            header = exc.partial
        size = int.from_bytes(header[:4], "big") if len(header) == HEADER else -1
        if 0 < size <= 32 and header[8:9] == b"R":
            payload = await stdout.readexactly(size)
            if payload.isdigit():
                return int(payload)
        try:
            rest = await asyncio.wait_for(stdout.read(4096), 1.0)
        except asyncio.TimeoutError:
            rest = b""
        said = " ".join((header + rest).decode(errors="replace").split())[:500]
        raise ChannelGone(said or "no greeting")

    async def _frame(self) -> tuple[int, bytes, bytes] | None:
        stdout = self.process.stdout
        assert stdout is not None
        try:
            header = await stdout.readexactly(HEADER)
            size = int.from_bytes(header[:4], "big")
            if size > MAX_PAYLOAD:
                return None  # not the agent's
            payload = await stdout.readexactly(size) if size else b""
        except (asyncio.IncompleteReadError, OSError):
            return None
        return int.from_bytes(header[4:8], "big"), header[8:9], payload

    async def _read_frames(self) -> None:
        try:
            while (received := await self._frame()) is not None:
                if not self._dispatch(*received):
                    break
        finally:
            if self._gone is None:
                await self._lost("the channel ended")

    def _dispatch(self, ident: int, kind: bytes, payload: bytes) -> bool:
        """Hand one frame to its stream; False for one the agent would never send."""
        stream = self._streams.get(ident)
        if stream is None:
            return True  # a stream the host gave up on
        if kind == b"s":
            _settle(stream.started, None)
        elif kind == b"F":
            number, _, message = payload.decode(errors="replace").partition(":")
            code = int(number) if number.isdigit() else 5
            if not stream.started.done():
                stream.started.set_exception(OSError(code, message[:500]))
            self._streams.pop(ident, None)
        elif kind == b"o" or kind == b"D":
            if stream.peer is not None:
                stream.peer.write(payload)
            else:
                stream.stdout.feed_data(payload)
        elif kind == b"e":
            stream.stderr.feed_data(payload)
        elif kind == b"O" or kind == b"d":
            if stream.peer is not None:
                with contextlib.suppress(OSError):
                    stream.peer.write_eof()
                self._streams.pop(ident, None)  # the agent dropped its socket
            else:
                stream.stdout.feed_eof()
        elif kind == b"E":
            stream.stderr.feed_eof()
        elif kind == b"x" and payload.isdigit():
            _settle(stream.exited, int(payload))
        elif kind == b"k" and stream.killed is not None:
            _settle(stream.killed, None)
        else:
            return False
        return True

    async def _lost(self, why: str) -> None:
        """The channel ended or cannot be trusted: every stream on it fails, the client goes."""
        self._end(why)
        await self._kill_client()

    def _end(self, why: str) -> None:
        if self._gone is not None:
            return
        self._gone = why
        if why != "closed":
            logger.warning("docker channel: %s; the next command starts a new one", why)
        for stream in self._streams.values():
            for future in (stream.started, stream.exited, stream.killed):
                if future is not None and not future.done():
                    future.set_exception(ChannelGone(GONE))
                    future.exception()  # retrieved: a stream nobody waits on says nothing
            for reader in (stream.stdout, stream.stderr):
                reader.feed_eof()
            if stream.peer is not None:
                stream.peer.close()
        self._streams.clear()

    async def _kill_client(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                self.process.kill()
        await self.process.wait()
        if self.process.stdin is not None:
            self.process.stdin.close()

    async def _stderr_text(self) -> str:
        stderr = self.process.stderr
        if stderr is None:
            return ""
        try:
            data = await asyncio.wait_for(stderr.read(4096), 1.0)
        except (asyncio.TimeoutError, OSError):
            return ""
        return " ".join(data.decode(errors="replace").split())[:500]


def _settle(future: asyncio.Future, value: object) -> None:
    if not future.done():
        future.set_result(value)
