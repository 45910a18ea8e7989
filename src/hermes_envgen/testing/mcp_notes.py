"""The offline kit's MCP server: a notes store with state, for tests and generated projects.

Standard library only (any python3 from 3.8), so it runs inside a bwrap sandbox or a container
that has no packages of ours: ``notes_server()`` gives the ``mcp_servers`` entry that runs this
file's text with the sandbox's ``python3 -c``. Over stdio it speaks MCP's newline-delimited
JSON-RPC; with ``--http PORT`` it serves the streamable-HTTP transport (JSON responses) on
127.0.0.1, as a shared server reached from the host: each MCP session (an ``Mcp-Session-Id``
given at ``initialize``) keeps its notes apart, in ``notes-SESSION.json``, so that rollouts
sharing it never see each other's (``mcp_servers`` entry ``"state": "per_session"``). With
``--one-store`` it keeps one ``notes.json`` for every client and gives no session id, as a
server that cannot keep rollouts apart.

Tools: ``add_note(title, body)``, ``list_notes()``, ``read_note(title)``, ``delete_note(title)``.
The notes live in ``notes.json`` in the working directory (the rollout's workspace), so they
outlive the server's process and a reward can read them, or call the server to.

Faults for tests, by flag: ``--slow SECONDS`` (``read_note`` sleeps), ``--garbage`` (tools/call
answers a line that is not JSON), ``--malformed`` (a result that is not a CallToolResult),
``--die-after N`` (exit during the Nth tools/call), ``--tools N`` (list N extra tools),
``--fail-start`` (exit before answering anything), ``--silent`` (never answer); and
``--environment`` adds a tool ``environment`` that lists the names of the server's variables.
"""

import json
import os
import sys
import time

STORE = "notes.json"
VERSIONS = ("2025-11-25", "2025-06-18", "2025-03-26", "2024-11-05")

TOOLS = [
    {
        "name": "add_note",
        "description": "Save a note under a title (replacing a note of that title).",
        "inputSchema": {
            "type": "object",
            "properties": {"title": {"type": "string"}, "body": {"type": "string"}},
            "required": ["title", "body"],
        },
    },
    {
        "name": "list_notes",
        "description": "The titles of all saved notes.",
        "inputSchema": {"type": "object", "properties": {}},
    },
    {
        "name": "read_note",
        "description": "The body of the note with this title.",
        "inputSchema": {
            "type": "object",
            "properties": {"title": {"type": "string"}},
            "required": ["title"],
        },
    },
    {
        "name": "delete_note",
        "description": "Delete the note with this title.",
        "inputSchema": {
            "type": "object",
            "properties": {"title": {"type": "string"}},
            "required": ["title"],
        },
    },
]


def load(store=STORE):
    try:
        with open(store) as file:
            return json.load(file)
    except (OSError, ValueError):
        return {}


def save(notes, store=STORE):
    with open(store + ".new", "w") as file:
        json.dump(notes, file, indent=1, sort_keys=True)
    os.replace(store + ".new", store)


def run_tool(name, arguments, options, store=STORE):
    """The text of a tool's answer and whether it is an error."""
    notes = load(store)
    if name == "add_note":
        notes[str(arguments["title"])] = str(arguments["body"])
        save(notes, store)
        return f"saved {arguments['title']!r} ({len(notes)} notes)", False
    if name == "list_notes":
        return json.dumps(sorted(notes)), False
    if name == "read_note":
        if options.get("slow"):
            time.sleep(options["slow"])
        title = str(arguments.get("title"))
        if title not in notes:
            return f"no note titled {title!r}", True
        return notes[title], False
    if name == "delete_note":
        if notes.pop(str(arguments.get("title")), None) is None:
            return "no such note", True
        save(notes, store)
        return "deleted", False
    if name.startswith("extra_"):
        return name, False
    if name == "environment" and options.get("environment"):
        return json.dumps(sorted(os.environ)), False
    return f"unknown tool {name}", True


class Server:
    def __init__(self, options):
        self.options = options
        self.calls = 0
        self.tools = TOOLS + [
            {"name": f"extra_{i}", "description": "filler", "inputSchema": {"type": "object"}}
            for i in range(options.get("tools", 0))
        ]
        if options.get("environment"):
            self.tools.append({"name": "environment", "description": "Variable names.",
                               "inputSchema": {"type": "object"}})  # fmt: skip

    def answer(self, message, store=STORE):
        """The JSON-RPC reply to one message (None for a notification), or a raw line."""
        method = message.get("method")
        if "id" not in message:
            return None
        ident = message["id"]
        params = message.get("params") or {}
        if method == "initialize":
            asked = params.get("protocolVersion")
            result: dict = {
                "protocolVersion": asked if asked in VERSIONS else VERSIONS[0],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "hermes-envgen-notes", "version": "1.0"},
            }
        elif method == "ping":
            result = {}
        elif method == "tools/list":
            result = {"tools": self.tools}
        elif method == "tools/call":
            self.calls += 1
            if self.calls == self.options.get("die_after"):
                os._exit(3)
            if self.options.get("garbage"):
                return "this is not JSON-RPC {"
            if self.options.get("malformed"):
                result = {"content": "not a list of blocks", "isError": "perhaps"}
            else:
                text, error = run_tool(params.get("name", ""), params.get("arguments") or {},
                                       self.options, store)  # fmt: skip
                result = {"content": [{"type": "text", "text": text}], "isError": error}
        else:
            return {"jsonrpc": "2.0", "id": ident,
                    "error": {"code": -32601, "message": f"no method {method}"}}  # fmt: skip
        return {"jsonrpc": "2.0", "id": ident, "result": result}


def serve_stdio(server):
    for line in sys.stdin:
        if not line.strip():
            continue
        try:
            reply = server.answer(json.loads(line))
        except ValueError:
            continue
        if reply is None or server.options.get("silent"):
            continue
        sys.stdout.write((reply if isinstance(reply, str) else json.dumps(reply)) + "\n")
        sys.stdout.flush()


def serve_http(server, port):
    import threading
    import uuid
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    sessions = set()  # the live MCP sessions' ids (per-session stores)
    lock = threading.Lock()
    one_store = server.options.get("one_store")

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            message = json.loads(body)
            session = self.headers.get("Mcp-Session-Id")
            if one_store:
                store, session = STORE, None
            elif isinstance(message, dict) and message.get("method") == "initialize":
                session = uuid.uuid4().hex
                with lock:
                    sessions.add(session)
                store = f"notes-{session}.json"
            elif session in sessions:
                store = f"notes-{session}.json"
            else:  # the transport's rule: a request outside a live session is not served
                self.send_response(404 if session else 400)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            reply = server.answer(message, store)
            if reply is None:
                self.send_response(202)
                self.send_header("Content-Length", "0")
                self.end_headers()
                return
            data = (reply if isinstance(reply, str) else json.dumps(reply)).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if session:
                self.send_header("Mcp-Session-Id", session)
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # no server-initiated stream
            self.send_response(405)
            self.end_headers()

        def do_DELETE(self):  # the session ends; its notes stay in its file
            with lock:
                sessions.discard(self.headers.get("Mcp-Session-Id"))
            self.send_response(200)
            self.end_headers()

        def log_message(self, *args):
            pass

    httpd = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print(f"listening on {httpd.server_address[1]}", flush=True)
    httpd.serve_forever()


def main(argv):
    options = {}
    port = None
    i = 0
    while i < len(argv):
        flag = argv[i]
        if flag in ("--slow", "--die-after", "--tools", "--http"):
            value = argv[i + 1]
            i += 1
            if flag == "--http":
                port = int(value)
            else:
                options[flag[2:].replace("-", "_")] = (
                    float(value) if flag == "--slow" else int(value)
                )
        elif flag in ("--garbage", "--malformed", "--silent", "--environment", "--one-store"):
            options[flag[2:].replace("-", "_")] = True
        elif flag == "--fail-start":
            sys.stderr.write("notes server: refusing to start (--fail-start)\n")
            sys.exit(2)
        i += 1
    server = Server(options)
    if port is not None:
        serve_http(server, port)
    else:
        serve_stdio(server)


def notes_server(name="notes", *flags, tools=None):
    """The ``mcp_servers`` entry that runs this server over stdio in the rollout's sandbox."""
    with open(__file__) as file:
        source = file.read()
    entry = {"name": name, "command": "python3", "args": ["-c", source, *flags]}
    if tools is not None:
        entry["tools"] = list(tools)
    return entry


if __name__ == "__main__":
    main(sys.argv[1:])
