"""The in-container side of a docker sandbox's kept channel: a small python3 agent.

Started by the host with one long-lived ``docker exec --interactive`` (as the agent's user,
in the workspace) and reached only through that exec's stdin and stdout: the same on a
local engine and a remote one (TLS, SSH), since it goes where the docker client goes. It
starts the sandbox's commands and file scripts (one ``posix_spawn`` each, instead of one
``docker exec``), relays their output, kills them, and connects the host to the Unix
sockets of the sandbox's programs (the ``python`` tool's interpreter, the MCP relay).

Framing, both ways: a payload's length (4 bytes, big-endian), a stream id (4 bytes), a kind
(1 byte), the payload. Host to agent: ``S`` start (flags byte: 1 = stdin is piped; then
``argc``, the argv and ``NAME=value`` pairs added to the agent's environment, NUL-separated),
``I`` stdin bytes, ``i`` end of stdin, ``K`` kill (the payload: the ``NAME=value`` run tag
whose processes to kill), ``C`` connect (the payload: the directory whose ``socket`` to
reach), ``D`` bytes for a connection, ``d`` its end (the host dropped it: closed whole).
Agent to host: ``R`` ready (its pid), ``s`` started (the pid), ``F`` failed
(``errno:message``), ``o``/``e`` stdout/stderr bytes, ``O``/``E`` their end, ``x`` exited (a
shell's exit code), ``k`` kill done, ``D``/``d`` a connection's bytes and end.

The agent is non-dumpable before it reads anything (its boot program, ``BOOT`` of
docker_channel.py, calls the prctl first; ``main`` again): the sandbox's processes, though of
its user, can neither ptrace it nor open its descriptors through /proc (so not write to the
host's channel). They can kill or stop it: the host then sees the channel end (or stop
answering) and starts another one. One started while the agent's processes run (after such a
kill) is open to them only while python3 starts (a few ms), before it has read a byte: that one
carries only the rollout's own calls, whose results the agent controls anyway; verification's
channel starts after every process of the agent's was killed.

Ends at the end of its stdin. Written for any python3 from 3.9, standard library only; the
host sends its text on stdin at the start.
"""

import os
import select
import sys

if not hasattr(os, "pidfd_open"):  # Python 3.8
    sys.exit("the docker channel needs python3 3.9 or later in the image")

# ruff: noqa: SIM105  (try/except/pass, not contextlib.suppress: its import costs every start)
import _signal  # type: ignore[import-not-found]  # CPython's own; typeshed has no stub
import _socket
import errno

PR_SET_DUMPABLE, PR_SET_NAME = 4, 15
HEADER = 9
MAX_PAYLOAD = 1 << 20
CHUNK = 1 << 16
MAX_PENDING = 8 << 20  # bytes held for children's stdin and sockets before reading pauses
KILL_ROUNDS = 10
DEFAULT_SIGNALS = tuple(
    n for n in _signal.valid_signals() if n not in (_signal.SIGKILL, _signal.SIGSTOP)
)


def libc(name, *arguments):
    """A C library function called with ints or bytes; its int result."""
    try:
        import _ctypes

        function = _ctypes.dlsym(_ctypes.dlopen(None), name)  # type: ignore[arg-type]
        return _ctypes.call_function(function, arguments)
    except (ImportError, AttributeError, OSError):
        import ctypes

        return getattr(ctypes.CDLL(None), name)(*arguments)


def frame(ident, kind, payload=b""):
    return len(payload).to_bytes(4, "big") + ident.to_bytes(4, "big") + kind + payload


def write_all(fd, data):
    view = memoryview(data)
    while view:
        try:
            written = os.write(fd, view)
        except InterruptedError:
            continue
        view = view[written:]


def exit_code(status):
    code = os.waitstatus_to_exitcode(status)
    return 128 - code if code < 0 else code


class Outlet:
    """Bytes the host sent for a child's stdin or a socket, written as it takes them."""

    def __init__(self, fd):
        self.fd = fd
        self.pending = bytearray()
        self.closing = False  # close once written


class Agent:
    def __init__(self, environment):
        self.environment = environment
        self.poller = select.poll()
        self.readers = {}  # fd -> (stream id, data kind, end kind)
        self.pidfds = {}  # pidfd -> (stream id, pid)
        self.outlets = {}  # fd -> Outlet
        self.by_stream = {}  # stream id -> the fd of its outlet
        self.sockets = {}  # fd -> socket object (kept alive)
        self.pids = {}  # stream id -> pid
        self.inbox = bytearray()
        self.reading = True

    def send(self, ident, kind, payload=b""):
        write_all(1, frame(ident, kind, payload))

    def pending(self):
        return sum(len(outlet.pending) for outlet in self.outlets.values())

    # -- requests --------------------------------------------------------------------------

    def handle(self, ident, kind, payload):
        if kind == b"S":
            self.start(ident, payload)
        elif kind in (b"I", b"D"):
            self.feed(ident, payload)
        elif kind in (b"i", b"d"):
            self.feed(ident, None)
        elif kind == b"K":
            self.kill(ident, payload.decode("utf-8", "surrogateescape"))
        elif kind == b"C":
            self.connect(ident, payload.decode("utf-8", "surrogateescape"))

    def start(self, ident, payload):
        piped = payload[:1] == b"\x01"
        fields = payload[1:].decode("utf-8", "surrogateescape").split("\0")
        opened = []
        try:
            argc = int(fields[0])
            argv, pairs = fields[1 : 1 + argc], fields[1 + argc :]
            if argc < 1 or not argv:
                raise ValueError("empty argv")
            env = dict(self.environment)
            env.update(pair.split("=", 1) for pair in pairs if "=" in pair)
            out_read, out_write = os.pipe()
            err_read, err_write = os.pipe()
            opened += [out_read, out_write, err_read, err_write]
            stdin: tuple = (os.POSIX_SPAWN_OPEN, 0, "/dev/null", os.O_RDONLY, 0)
            if piped:
                in_read, in_write = os.pipe()
                opened += [in_read, in_write]
                stdin = (os.POSIX_SPAWN_DUP2, in_read, 0)
            pid = os.posix_spawnp(
                argv[0], argv, env,
                file_actions=[stdin, (os.POSIX_SPAWN_DUP2, out_write, 1),
                              (os.POSIX_SPAWN_DUP2, err_write, 2)],
                setsid=True, setsigdef=DEFAULT_SIGNALS, setsigmask=(),
            )  # fmt: skip
            pidfd = os.pidfd_open(pid)
        except (OSError, ValueError) as exc:
            for fd in opened:
                os.close(fd)
            number = getattr(exc, "errno", None) or errno.EINVAL
            message = getattr(exc, "strerror", None) or str(exc)
            self.send(ident, b"F", f"{number}:{message}".encode())
            return
        os.close(out_write)
        os.close(err_write)
        self.pids[ident] = pid
        self.pidfds[pidfd] = (ident, pid)
        self.poller.register(pidfd, select.POLLIN)
        for fd, data, end in ((out_read, b"o", b"O"), (err_read, b"e", b"E")):
            self.readers[fd] = (ident, data, end)
            self.poller.register(fd, select.POLLIN)
        if piped:
            os.close(in_read)
            os.set_blocking(in_write, False)
            self.outlets[in_write] = Outlet(in_write)
            self.by_stream[ident] = in_write
        self.send(ident, b"s", str(pid).encode())

    def connect(self, ident, directory):
        """Connect to ``directory/socket``, no link followed (one would lead elsewhere)."""
        fd = -1
        sock = None
        try:
            fd = os.open("/", os.O_PATH | os.O_DIRECTORY)
            for part in (part for part in directory.split("/") if part):
                below = os.open(part, os.O_PATH | os.O_NOFOLLOW | os.O_DIRECTORY, dir_fd=fd)
                os.close(fd)
                fd = below
            target = os.open("socket", os.O_PATH | os.O_NOFOLLOW, dir_fd=fd)
            os.close(fd)
            fd = target
            sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
            sock.connect(f"/proc/self/fd/{fd}")
        except OSError as exc:
            if sock is not None:
                sock.close()
            self.send(ident, b"F", f"{exc.errno or errno.EIO}:{exc.strerror or exc}".encode())
            return
        finally:
            if fd >= 0:
                os.close(fd)
        sock.setblocking(False)
        number = sock.fileno()
        self.sockets[number] = sock
        self.readers[number] = (ident, b"D", b"d")
        self.poller.register(number, select.POLLIN)
        self.outlets[number] = Outlet(number)
        self.by_stream[ident] = number
        self.send(ident, b"s", b"0")

    def feed(self, ident, data):
        fd = self.by_stream.get(ident)
        outlet = self.outlets.get(fd) if fd is not None else None
        if outlet is None:
            return  # gone already: what it was sent is lost with it
        if data is None and fd in self.sockets:  # the host dropped the connection: all of it
            self.readers.pop(fd, None)
            self.drop_socket(fd)
            return
        if data is None:
            outlet.closing = True
        else:
            outlet.pending += data
        self.flush(outlet)

    def flush(self, outlet):
        while outlet.pending:
            try:
                written = os.write(outlet.fd, outlet.pending[:CHUNK])
            except (BlockingIOError, InterruptedError):
                self.poller.register(outlet.fd, self.events(outlet.fd) | select.POLLOUT)
                return
            except OSError:  # the reader went: drop what it would not take
                outlet.pending.clear()
                break
            del outlet.pending[:written]
        if outlet.closing:
            self.close_outlet(outlet.fd)
        elif outlet.fd in self.outlets:
            self.poller.register(outlet.fd, self.events(outlet.fd))

    def events(self, fd):
        return select.POLLIN if fd in self.readers else 0

    def close_outlet(self, fd):
        outlet = self.outlets.pop(fd, None)
        if outlet is None:
            return
        for ident, number in list(self.by_stream.items()):
            if number == fd:
                del self.by_stream[ident]
        if fd in self.sockets:  # a connection: only its writing half ends
            try:
                self.sockets[fd].shutdown(_socket.SHUT_WR)
            except OSError:
                pass
            if fd not in self.readers:
                self.drop_socket(fd)
            else:
                self.poller.register(fd, select.POLLIN)
            return
        try:
            self.poller.unregister(fd)
        except KeyError:
            pass
        os.close(fd)

    def drop_socket(self, fd):
        try:
            self.poller.unregister(fd)
        except KeyError:
            pass
        self.outlets.pop(fd, None)
        for ident, number in list(self.by_stream.items()):
            if number == fd:
                del self.by_stream[ident]
        self.sockets.pop(fd).close()

    def kill(self, ident, tag):
        """SIGKILL the command of ``ident`` (its process group) and every process with ``tag``
        in its environment, in rounds (children forked meanwhile); then say so."""
        pid = self.pids.get(ident)
        if pid is not None:
            try:
                os.killpg(pid, _signal.SIGKILL)
            except OSError:
                pass
        wanted = tag.encode("utf-8", "surrogateescape")
        me = os.getpid()
        for _ in range(KILL_ROUNDS):
            found = False
            for name in os.listdir("/proc"):
                if not name.isdigit() or int(name) == me:
                    continue
                try:
                    with open("/proc/" + name + "/environ", "rb") as file:
                        environ = file.read().split(b"\0")
                except OSError:
                    continue
                if wanted and wanted in environ:
                    try:
                        os.kill(int(name), _signal.SIGKILL)
                        found = True
                    except OSError:
                        pass
            if not found:
                break
        self.send(ident, b"k")

    # -- the children's side ---------------------------------------------------------------

    def readable(self, fd):
        ident, data, end = self.readers[fd]
        try:
            chunk = os.read(fd, CHUNK)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if chunk:
            self.send(ident, data, chunk)
            return
        del self.readers[fd]
        self.send(ident, end)
        if fd in self.sockets:
            if fd in self.outlets:  # still writable: the host may end it later
                self.poller.register(fd, self.events(fd) | (
                    select.POLLOUT if self.outlets[fd].pending else 0))  # fmt: skip
            else:
                self.drop_socket(fd)
            return
        self.poller.unregister(fd)
        os.close(fd)

    def exited(self, pidfd):
        ident, pid = self.pidfds.pop(pidfd)
        self.poller.unregister(pidfd)
        os.close(pidfd)
        _, status = os.waitpid(pid, 0)
        self.pids.pop(ident, None)
        fd = self.by_stream.get(ident)
        if fd is not None and fd not in self.sockets:
            self.close_outlet(fd)
        self.send(ident, b"x", str(exit_code(status)).encode())

    # -- the host's side -------------------------------------------------------------------

    def read_requests(self):
        try:
            chunk = os.read(0, MAX_PAYLOAD)
        except InterruptedError:
            return True
        if not chunk:
            return False
        self.inbox += chunk
        while len(self.inbox) >= HEADER:
            size = int.from_bytes(self.inbox[:4], "big")
            if size > MAX_PAYLOAD:
                sys.exit("a request too large: not the host's")
            if len(self.inbox) < HEADER + size:
                break
            ident = int.from_bytes(self.inbox[4:8], "big")
            kind = bytes(self.inbox[8:9])
            payload = bytes(self.inbox[HEADER : HEADER + size])
            del self.inbox[: HEADER + size]
            self.handle(ident, kind, payload)
        return True

    def serve(self):
        self.poller.register(0, select.POLLIN)
        self.send(0, b"R", str(os.getpid()).encode())
        while True:
            # Hold reading requests while much waits for slow readers: bounded memory.
            want = self.pending() < MAX_PENDING
            if want != self.reading:
                self.reading = want
                if want:
                    self.poller.register(0, select.POLLIN)
                else:
                    self.poller.unregister(0)
            for fd, events in self.poller.poll():
                if fd == 0:
                    if not self.read_requests():
                        return
                elif fd in self.pidfds:
                    self.exited(fd)
                else:
                    if events & select.POLLOUT and fd in self.outlets:
                        self.flush(self.outlets[fd])
                    if fd in self.readers and events & (select.POLLIN | select.POLLHUP
                                                        | select.POLLERR):  # fmt: skip
                        self.readable(fd)
                    elif fd in self.outlets and events & (select.POLLERR | select.POLLHUP):
                        self.outlets[fd].pending.clear()
                        self.close_outlet(fd)


def main():
    libc("prctl", PR_SET_DUMPABLE, 0, 0, 0, 0)
    libc("prctl", PR_SET_NAME, b"sandbox-channel", 0, 0, 0)
    environment = dict(os.environ)
    os.closerange(3, 1 << 16)
    Agent(environment).serve()


if __name__ == "__main__":
    main()
