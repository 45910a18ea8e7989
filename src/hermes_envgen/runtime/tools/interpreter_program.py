"""The ``python`` toolset's program inside a sandbox: a persistent interpreter and its client.

Never imported by the host: ``interpreter.py`` sends this file's text (``sandbox_channel``
inlined, see ``programs``), base64-encoded, as part of each ``python`` call's sandbox
command, so it runs wherever commands run (the local host, a bwrap sandbox, a container)
with the sandbox's own ``python3``. Written for any python3 from 3.8, standard library only.

- ``client DIR TIMEOUT MAX_OUTPUT CODE``: one call. Connects to the interpreter listening
  at ``DIR/socket`` (starting one if none answers), sends the code, prints the reply as one
  JSON line. At ``TIMEOUT`` seconds it interrupts the code (SIGINT: a ``KeyboardInterrupt``
  that keeps the interpreter's state); if the interpreter does not answer within
  ``INTERRUPT_GRACE`` seconds more, it kills the interpreter's process group.
- ``serve DIR MAX_OUTPUT``: the interpreter. One connection at a time, as many calls on it
  as its client sends (the host keeps one open where it can reach ``DIR/socket``, and then
  interrupts and kills through the two modes below; a ``client`` sends one); the agent's
  code runs in its main thread in one namespace kept across calls; the file descriptors 1
  and 2 (so also what subprocesses print) go to pipes whose readers keep at most
  ``MAX_OUTPUT`` bytes each; the reply is cut further, with a notice, to fit the command's
  output cap once escaped.
- ``interrupt DIR``: SIGINT the interpreter's running code; ``kill DIR``: kill the interpreter.

The interpreter starts in its own session with a run tag of its own (``HERMES_SANDBOX_RUN``
ending in ``python``): killing the command of one call leaves it alive, closing the sandbox
(or ending the agent's processes) kills it.
"""

# ruff: noqa: SIM105  (try/except/pass: contextlib would cost every call its import)
# The client's imports only (each call pays them, a few ms of the call's time); the
# interpreter imports the rest in serve().
import _socket
import os
import sys

from hermes_envgen.runtime.tools.sandbox_channel import (
    connect,
    listen,
    make_directory,
    publish,
    read_log,
    receive_message,
    send_message,
    serve_forever,
    start_server,
)

# serve() imports these into the module's globals once it runs (not at start-up, which every
# command waits for); type checkers treat this name as true, Python never runs the block.
TYPE_CHECKING = False
if TYPE_CHECKING:
    import fcntl
    import select
    import threading

INTERRUPT_GRACE = 2.0  # after SIGINT, for the interpreter to answer before it is killed
MAX_REPR = 4000  # characters of the last expression's repr
# Bytes of a reply's JSON: the client's line that carries it must fit the sandbox command's
# output cap (SandboxSettings.max_output_bytes, 64,000), where escapes (\u00e9 for é) may
# make it six times the size of the output itself.
REPLY_BUDGET = 60_000
NOTICE_ROOM = 64  # bytes kept for the notice of a cut
FIONREAD = 0x541B  # ioctl: bytes waiting in a pipe (Linux)


SIGINT, SIGKILL = 2, 9


# -- the client: one call -------------------------------------------------------------------


def read_pid(directory):
    try:
        with open(os.path.join(directory, "pid")) as file:
            return int(file.read().strip())
    except (OSError, ValueError):
        return None


def kill_interpreter(directory):
    pid = read_pid(directory)
    if pid is not None:
        try:
            os.killpg(pid, SIGKILL)
        except OSError:
            pass
    for name in ("socket", "pid"):
        try:
            os.unlink(os.path.join(directory, name))
        except OSError:
            pass


def start_interpreter(directory, max_output, source):
    """Start a fresh interpreter; its socket, or an error message."""
    kill_interpreter(directory)  # a stale one (it stopped answering, or its socket is left)
    sock, process = start_server(directory, source, [str(max_output)], "python")
    if sock is not None:
        return sock, None
    message = read_log(directory, 4000)
    kill_interpreter(directory)
    code = process.poll()
    why = f"exited with {code}" if code is not None else "did not start in time"
    return None, "the Python interpreter {}: {}".format(why, message or "no message")


def client(directory, timeout, max_output, code_b64, source):
    """One call: print the interpreter's reply, with what happened to it, as one JSON line."""
    import binascii

    make_directory(directory)
    code = binascii.a2b_base64(code_b64)
    new = "false"
    sock = connect(directory)
    if sock is None:
        sock, error = start_interpreter(directory, max_output, source)
        if sock is None:
            import json

            print(json.dumps({"failed": error}))
            return
        new = "true"
    timed_out = "false"
    try:
        send_message(sock, code)
        sock.settimeout(timeout)
        answer = receive_message(sock)
    except _socket.timeout:
        answer = interrupt(sock, directory)
        timed_out = "true"
    except OSError:
        answer = None
    finally:
        sock.close()
    if answer is None:  # it died under the call, or had to be killed
        kill_interpreter(directory)
    reply = answer.decode("ascii") if answer is not None else "null"
    line = f'{{"new_interpreter": {new}, "timed_out": {timed_out}, "reply": {reply}}}\n'
    sys.stdout.write(line)


def interrupt(sock, directory):
    """SIGINT the running code; its answer, or None once the interpreter had to be killed."""
    pid = read_pid(directory)
    if pid is not None:
        try:
            os.kill(pid, SIGINT)
        except OSError:
            return None
    sock.settimeout(INTERRUPT_GRACE)
    try:
        return receive_message(sock)
    except OSError:
        return None


# -- the interpreter ------------------------------------------------------------------------


class CappedPipe:
    """A pipe over descriptor ``fd`` of which at most ``limit`` bytes per call are kept.

    A thread reads it between calls; at a call's end ``collect`` drains what is left in
    the pipe itself (FIONREAD), so all the code wrote before it returned is in the reply.
    """

    def __init__(self, fd, limit):
        read_end, write_end = os.pipe()
        os.dup2(write_end, fd)
        os.close(write_end)
        os.set_blocking(read_end, False)
        self.read_end = read_end
        self.limit = limit
        self.kept = bytearray()
        self.dropped = 0
        self.lock = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self):
        while True:
            select.select([self.read_end], [], [])
            with self.lock:
                if not self._read_once():
                    return

    def _read_once(self):
        """Read one chunk (under the lock); False at the end of the pipe."""
        try:
            chunk = os.read(self.read_end, 65536)
        except BlockingIOError:
            return True
        if not chunk:
            return False
        room = self.limit - len(self.kept)
        if room > 0:
            self.kept += chunk[:room]
        self.dropped += max(0, len(chunk) - max(room, 0))
        return True

    def _waiting(self):
        size = fcntl.ioctl(self.read_end, FIONREAD, bytes(4))
        return int.from_bytes(size, sys.byteorder)

    def collect(self):
        """What was written since the last collect, and how many bytes of it were dropped."""
        with self.lock:
            while self._waiting() > 0 and self._read_once():
                pass
            kept, dropped = bytes(self.kept), self.dropped
            self.kept = bytearray()
            self.dropped = 0
        return kept, dropped


def run_code(code, namespace):
    """Run ``code`` as a cell: the repr of a last expression statement is its result."""
    import ast
    import traceback

    result = None
    try:
        tree = ast.parse(code, "<python>", "exec")
        last = tree.body[-1] if tree.body and isinstance(tree.body[-1], ast.Expr) else None
        if last is not None:
            tree.body.pop()
        exec(compile(tree, "<python>", "exec"), namespace)
        if last is not None:
            value = eval(compile(ast.Expression(last.value), "<python>", "eval"), namespace)
            if value is not None:
                result = repr(value)
                if len(result) > MAX_REPR:
                    result = result[:MAX_REPR] + f"... [{len(result)} characters]"
    except SystemExit as exc:
        return result, f"SystemExit: {exc.code} (the interpreter keeps running)"
    except BaseException:
        kind, value, trace = sys.exc_info()
        while trace is not None and trace.tb_frame.f_code.co_filename != "<python>":
            trace = trace.tb_next  # the agent's frames only, not the interpreter's
        lines = traceback.format_exception(kind, value, trace)
        error = "".join(lines)
        if len(error) > MAX_REPR:
            error = error[: MAX_REPR // 2] + "\n...\n" + error[-MAX_REPR // 2 :]
        return result, error
    return result, None


def serve(directory, max_output):
    global fcntl, select, threading
    import fcntl
    import json
    import select
    import signal
    import threading

    os.chdir(os.environ.get("PWD") or ".")
    listener = listen(directory)
    stdout, stderr = CappedPipe(1, max_output), CappedPipe(2, max_output)
    sys.stdout = os.fdopen(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    sys.stderr = os.fdopen(2, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    with open(os.path.join(directory, "pid"), "w") as file:
        file.write(str(os.getpid()))
    publish(directory)  # listening, and its pid known: clients may come
    namespace = {"__name__": "__main__", "__builtins__": __builtins__}
    sys.argv = [""]
    # A late interrupt (after the code's end) lands in the loop, not in the code.
    serve_forever(
        listener,
        lambda connection: converse(connection, namespace, stdout, stderr, json),
        (OSError, KeyboardInterrupt),
    )


def converse(connection, namespace, stdout, stderr, json):
    """Run each call a client sends until it closes the connection."""
    while True:
        request = receive_message(connection)
        if request is None:
            return
        answer(connection, request, namespace, stdout, stderr, json)


def answer(connection, request, namespace, stdout, stderr, json):
    """Run the code of one call and send the client the reply."""
    try:
        result, error = run_code(request.decode("utf-8", "surrogateescape"), namespace)
    except KeyboardInterrupt:  # arrived between the code's end and here
        result, error = None, "KeyboardInterrupt"
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    fields = {"stdout": stdout.collect(), "stderr": stderr.collect()}
    for name, text in (("result", result), ("error", error)):
        if text is not None:
            fields[name] = (text.encode("utf-8", "replace"), 0)
    reply = fit_reply(fields, REPLY_BUDGET, json)
    send_message(connection, json.dumps(reply).encode("ascii"))  # the client passes it on


def fit_reply(fields, budget, json):
    """The reply's texts from ``fields`` (name: UTF-8 bytes kept, bytes already dropped), cut so
    that its JSON takes at most ``budget`` bytes, each cut with a notice.

    The budget is shared: a field smaller than its share keeps all of it and leaves the rest
    to the others, the larger ones get equal shares.
    """
    sizes = {}
    for name, (data, dropped) in fields.items():
        text = json.dumps(data.decode("utf-8", "replace"))
        sizes[name] = len(text) + (NOTICE_ROOM if dropped else 0)
    room = budget - 20 * len(fields) - 2  # the keys and punctuation around the texts
    reply = {}
    for index, name in enumerate(sorted(fields, key=lambda name: sizes[name])):
        data, dropped = fields[name]
        share = room // (len(fields) - index)
        kept = len(data) if sizes[name] <= share else json_head(data, share - NOTICE_ROOM, json)
        room -= min(sizes[name], share)
        dropped += len(data) - kept
        text = data[:kept].decode("utf-8", "replace")
        if dropped:
            text += f"\n[output truncated: {dropped} more bytes not shown]"
        reply[name] = text
    return {name: reply[name] for name in fields}


def json_head(data, limit, json):
    """How many bytes of UTF-8 ``data``, cut between characters, make a JSON string of at
    most ``limit`` bytes."""
    low, high = 0, len(data)
    while low < high:
        middle = (low + high + 1) // 2
        if len(json.dumps(data[:middle].decode("utf-8", "replace"))) <= limit:
            low = middle
        else:
            high = middle - 1
    while 0 < low < len(data) and data[low] & 0xC0 == 0x80:  # not inside a character
        low -= 1
    return low


def main():
    source, mode, directory = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "serve":
        serve(directory, int(sys.argv[4]))
    elif mode == "interrupt":
        pid = read_pid(directory)
        if pid is not None:
            os.kill(pid, SIGINT)
    elif mode == "kill":
        kill_interpreter(directory)
    else:
        client(directory, float(sys.argv[4]), int(sys.argv[5]), sys.argv[6], source)


if __name__ == "__main__":  # exec'd by BOOT, never imported by the host
    main()
