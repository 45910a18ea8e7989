"""What the sandbox programs share: a server kept in the sandbox behind a Unix socket, and the
length-prefixed messages its clients exchange with it.

``interpreter_program`` (the ``python`` tool's interpreter) and ``mcp_relay_program`` (the
``mcp`` tool's relay) each run as a standalone program inside the sandbox. Neither imports
this module there: ``programs.shipped_source`` puts this file's text in place of the line
that imports it, so each program travels as one text, as before. Any python3 from 3.8,
standard library only; no ``from __future__`` (the text lands in the middle of a program).

The server's directory (made 0700 by its first client) holds ``socket``, where the server
listens once ready (bound under another name, renamed when it may be reached), and ``log``,
its output, read for the reason when it does not start.
"""

# ruff: noqa: SIM105  (try/except/pass: contextlib would cost every call its import)
import _socket
import os
import sys

RUN_TAG = "HERMES_SANDBOX_RUN"
START_TIMEOUT = 20.0  # for a new server to listen
# The bootstrap every program runs with: ``python3 -c BOOT SOURCE_B64 MODE DIRECTORY ...``.
BOOT = "import binascii,sys;exec(binascii.a2b_base64(sys.argv[1]))"


def send_message(sock, data):
    """Send bytes, their length first."""
    sock.sendall(len(data).to_bytes(4, "big") + data)


def receive_message(sock):
    """The bytes of one message, or None at the end of the connection."""
    header = receive_exactly(sock, 4)
    if header is None:
        return None
    return receive_exactly(sock, int.from_bytes(header, "big"))


def receive_exactly(sock, size):
    chunks, remaining = [], size
    while remaining:
        chunk = sock.recv(min(remaining, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        remaining -= len(chunk)
    return b"".join(chunks)


def make_directory(directory):
    try:
        os.mkdir(directory, 0o700)
    except FileExistsError:
        pass


def connect(directory):
    """A connection to the server of ``directory``, or None when none listens."""
    sock = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    try:
        sock.connect(os.path.join(directory, "socket"))
    except OSError:
        sock.close()
        return None
    return sock


def start_server(directory, source, arguments, role):
    """Start ``serve DIRECTORY *arguments`` of the program ``source`` in a session of its own.

    Its run tag ends in ``.ROLE`` instead of the command's number: killing the command of one
    call spares it, ending the sandbox's processes does not. Returns ``(socket, process)``,
    the socket None when it exited or did not listen within ``START_TIMEOUT``.
    """
    import subprocess
    import time

    env = dict(os.environ)
    tag = env.get(RUN_TAG, "")
    env[RUN_TAG] = tag.rsplit(".", 1)[0] + "." + role if "." in tag else role
    with open(os.path.join(directory, "log"), "wb") as log:
        process = subprocess.Popen(
            [sys.executable, "-c", BOOT, source, "serve", directory, *arguments],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, start_new_session=True, env=env,
        )  # fmt: skip
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        sock = connect(directory)
        if sock is not None:
            return sock, process
        if process.poll() is not None:
            break
        time.sleep(0.005)
    return None, process


def read_log(directory, size):
    """The start of the server's log (its errors when it did not start)."""
    try:
        with open(os.path.join(directory, "log"), "rb") as log:
            return log.read(size).decode("utf-8", "replace").strip()
    except OSError:
        return ""


def listen(directory):
    """The server's listening socket, not yet reachable (see ``publish``)."""
    listener = _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM)
    listener.bind(os.path.join(directory, "socket.new"))
    listener.listen(8)
    os.set_inheritable(listener.fileno(), False)
    return listener


def publish(directory):
    """Make the listening socket reachable: clients may come."""
    os.rename(os.path.join(directory, "socket.new"), os.path.join(directory, "socket"))


def serve_forever(listener, handle, ignored=(OSError,)):
    """Accept connections one at a time and ``handle`` each; ``ignored`` ends only that one."""
    while True:
        try:
            fd, _ = listener._accept()
        except ignored:
            continue
        connection = _socket.socket(fileno=fd)
        try:
            handle(connection)
        except ignored:
            pass
        finally:
            connection.close()
