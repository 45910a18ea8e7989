"""The ``mcp`` toolset's program inside a sandbox: it keeps a stdio MCP server and relays to it.

Never imported by the host: ``mcp_tools.py`` sends this file's text (``sandbox_channel``
inlined, see ``programs``) to start the relay, as ``interpreter.py`` does its program, so a
stdio server runs inside the rollout's sandbox (its user, limits, network rules) on every
backend. Standard library, any python3 from 3.8.

- ``client DIR TIMEOUT MESSAGE SPEC``: one JSON-RPC message (base64) to the server that the
  relay at ``DIR/socket`` keeps (starting the relay, which starts the server from SPEC, a
  base64 JSON ``{"argv", "env"}``, when none answers); prints one JSON line: ``{"lines":
  [...]}`` (what the server wrote up to its answer to this message), ``{"dead": code,
  "stderr": tail}`` or ``{"timeout": true, "lines": [...]}``. Past ``INLINE_REPLY`` bytes the
  reply goes to a file of the working directory, and the line names it: ``{"file": path}``.
- ``serve DIR SPEC``: the relay. One connection at a time, as many messages on it as its
  client sends (the env keeps one open where it can reach ``DIR/socket``, a command sends
  one): each a length-prefixed ``TIMEOUT\nMESSAGE``, each answered with one of the JSON
  objects above. The server's stderr is kept, its last ``STDERR_TAIL`` bytes, for the reason
  of a death.
"""

# ruff: noqa: SIM105  (try/except/pass: contextlib would cost every message its import)
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

INLINE_REPLY = 32_000  # bytes of a reply printed; more goes through a file
MAX_LINE = 8 << 20  # a longer line from the server is an error
STDERR_TAIL = 4000


def start_relay(directory, spec, source):
    try:
        os.unlink(os.path.join(directory, "socket"))
    except OSError:
        pass
    sock, _ = start_server(directory, source, [spec], "mcp")
    return sock


def client(directory, timeout, message_b64, spec, source):
    import binascii

    make_directory(directory)
    sock = connect(directory) or start_relay(directory, spec, source)
    if sock is None:
        why = read_log(directory, 2000)
        sys.stdout.write(f'{{"dead": null, "stderr": {json_string(why)}}}\n')
        return
    try:
        send_message(sock, (repr(timeout) + "\n").encode() + binascii.a2b_base64(message_b64))
        sock.settimeout(timeout + 5)
        reply = receive_message(sock)
    except OSError:
        reply = None
    finally:
        sock.close()
    if reply is None:
        reply = b'{"dead": null, "stderr": "the relay stopped answering"}'
    if len(reply) > INLINE_REPLY:
        name = ".hermes-mcp-reply-" + os.path.basename(directory) + ".json"
        with open(name, "wb") as file:
            file.write(reply)
        reply = f'{{"file": {json_string(name)}}}'.encode()
    sys.stdout.write(reply.decode("utf-8", "replace") + "\n")


def json_string(text):
    import json

    return json.dumps(text)


# -- the relay --------------------------------------------------------------------------------


def serve(directory, spec_b64):
    import binascii
    import json
    import select
    import subprocess
    import threading
    import time

    spec = json.loads(binascii.a2b_base64(spec_b64))
    env = dict(os.environ)
    env.update(spec.get("env") or {})
    server = subprocess.Popen(
        spec["argv"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        env=env, bufsize=0,
    )  # fmt: skip
    assert server.stdin and server.stdout and server.stderr  # all three are pipes
    stdin, stderr = server.stdin, server.stderr
    tail = bytearray()

    def keep_stderr():
        while True:
            chunk = stderr.read(4096)
            if not chunk:
                return
            tail.extend(chunk)
            del tail[:-STDERR_TAIL]

    threading.Thread(target=keep_stderr, daemon=True).start()
    out = server.stdout.fileno()
    pending = bytearray()
    listener = listen(directory)
    publish(directory)

    def dead():
        try:
            code = server.wait(timeout=1)
        except subprocess.TimeoutExpired:
            code = None
        return {"dead": code, "stderr": bytes(tail).decode("utf-8", "replace")}

    def relay(request):
        first, _, message = request.partition(b"\n")
        deadline = time.monotonic() + float(first)
        try:
            parsed = json.loads(message)
        except ValueError:
            parsed = {}
        try:
            stdin.write(message.rstrip(b"\n") + b"\n")
        except OSError:
            return dead()
        if not isinstance(parsed, dict) or "id" not in parsed or "method" not in parsed:
            return {"lines": []}  # a notification or a response: nothing comes back for it
        lines = []
        while True:
            while b"\n" in pending:
                line, _, rest = bytes(pending).partition(b"\n")
                pending[:] = rest
                text = line.decode("utf-8", "replace")
                lines.append(text)
                try:
                    answer = json.loads(text)
                except ValueError:
                    continue
                if (
                    isinstance(answer, dict)
                    and answer.get("id") == parsed["id"]
                    and ("result" in answer or "error" in answer)
                ):
                    return {"lines": lines}
            if len(pending) > MAX_LINE:
                return {"dead": None, "stderr": f"the server wrote a line over {MAX_LINE} bytes"}
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return {"timeout": True, "lines": lines}
            ready, _, _ = select.select([out], [], [], remaining)
            if ready:
                chunk = os.read(out, 1 << 16)
                if not chunk:
                    return dead()
                pending.extend(chunk)

    def converse(connection):
        # Requests until the client closes: the env keeps one connection for the rollout,
        # a command (``client``) sends one.
        while (request := receive_message(connection)) is not None:
            send_message(connection, json.dumps(relay(request)).encode())

    serve_forever(listener, converse)


def main():
    source, mode, directory = sys.argv[1], sys.argv[2], sys.argv[3]
    if mode == "serve":
        serve(directory, sys.argv[4])
    else:
        client(directory, float(sys.argv[4]), sys.argv[5], sys.argv[6], source)


if __name__ == "__main__":  # exec'd by BOOT, never imported by the host
    main()
