"""The ``mcp`` toolset: the tools of MCP servers as agent tools, through the official SDK.

Servers come from ``mcp_servers`` (``McpServerSettings``): a stdio server (``command`` and
``args``) runs inside each rollout's sandbox, started at the rollout's first call to it, so its
side effects are the rollout's and a reward sees them through ``ToolContext``; a
streamable-HTTP server (``url``) is reached from the host, by every rollout, each in an MCP
session of its own. Its ``state`` says what it keeps: ``per_session`` (each session's state
apart, checked at start-up: it must give a session id) or ``none`` (nothing between calls:
shared, said at start-up); a server that declares neither is refused, since rollouts sharing
its state could read and overwrite each other's work (siblings of a group handing each other
answers). Each server's tools are
listed once at start-up (in a sandbox of their own for stdio servers) and registered as
``<server>_<tool>`` with the server's JSON schemas, in the ``mcp`` toolset.

The SDK's ``ClientSession`` speaks to a stdio server in a sandbox over a transport of ours: a
small relay (``mcp_relay_program``) that keeps the server's pipes, started by a sandbox
command, so the sandbox's user, limits and network rules apply to the server on every
backend. The host keeps a connection to the relay's socket for the rollout (local, bwrap:
below ``Sandbox.host_root``; docker: through the container's kept channel,
``Sandbox.connect_socket``), and a message costs one round trip; to start or restart the
relay, a message is one sandbox command.

What a reward and a hook may trust. A stdio server runs in the agent's sandbox, beside the
agent: during the rollout the agent can kill it and its relay and answer in their place, so
what a turn hook asks it is the agent's word, to use as a claim, never as a verdict. Once the
rollout is over and the agent's processes are stopped (before ``compute_reward``), a call goes
to a relay started then, in a directory made then, with an MCP session initialized afresh:
the server's own answers, which nothing the agent left can take over. What the server keeps in
the workspace (a file), the agent could have written like any file there: a reward reads it as
the agent's work. A URL server runs outside the sandbox: its answers are its own throughout.

Bounded everywhere: a server that fails to start, dies, answers late or answers
garbage is an ``EnvConfigError`` naming the setting at start-up and a tool error in a rollout;
a listing is cut at ``MAX_PAGES`` pages and refused past ``MAX_TOOLS`` tools.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import contextlib
import json
import logging
import os
import re
import shlex
import shutil
import tempfile
import uuid
import weakref
from collections.abc import AsyncIterator
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from pydantic import BaseModel, Field, model_validator

from hermes_envgen.runtime.errors import EnvConfigError, ToolExecutionError
from hermes_envgen.runtime.sandbox import Sandbox, SandboxError, SandboxManager, SandboxSettings
from hermes_envgen.runtime.sandbox.choice import AUTO, choose_backend
from hermes_envgen.runtime.tools.kept_channel import connect_below
from hermes_envgen.runtime.tools.programs import boot_argv
from hermes_envgen.runtime.tools.registry import Tool, ToolRegistry

logger = logging.getLogger(__name__)

SERVICE = "mcp"
MAX_TOOLS = 512  # per server, after its allowed tools are picked
MAX_PAGES = 50  # of a tools/list
MAX_DESCRIPTION = 1024
RELAY_SLACK = 15.0  # a relay command's timeout above the message's
MAX_REPLY = 64 << 20  # bytes of one relay reply


class McpServerSettings(BaseModel):
    """One entry of ``mcp_servers``."""

    name: str = Field(pattern=r"^[A-Za-z0-9_-]{1,32}$", description="Prefix of its tools' names.")
    command: str | None = Field(default=None, description="A stdio server's executable.")
    args: list[str] = Field(default_factory=list, description="Its arguments.")
    url: str | None = Field(default=None, description="A streamable-HTTP server's URL.")
    env: dict[str, str] = Field(default_factory=dict, description="Variables the server gets.")
    tools: list[str] | None = Field(default=None, description="The tools to offer (None: all).")
    timeout: float = Field(default=30.0, gt=0, description="Seconds per call.")
    startup_timeout: float = Field(default=60.0, gt=0, description="Seconds to list its tools.")
    state: Literal["per_session", "none"] | None = Field(
        default=None,
        description="A URL server's: 'per_session' (it keeps each MCP session's state apart; "
        "each rollout gets a session of its own) or 'none' (it keeps nothing between calls). "
        "Unset: refused, as rollouts would share its state.",
    )

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSettings:
        if (self.command is None) == (self.url is None):
            raise ValueError(f"MCP server {self.name!r}: give a command (stdio) or a url, not both")
        return self


def shared_state_problem(server: McpServerSettings) -> str | None:
    """Why a URL server may not serve rollouts as configured (its ``state`` undeclared)."""
    if server.url is None or server.state is not None:
        return None
    return (
        f"mcp_servers[{server.name}] is one server at {server.url} for every rollout: what it "
        "keeps, one rollout could read or overwrite for another (siblings of a group handing "
        'each other answers). Declare its "state": "per_session" if it keeps each MCP '
        'session\'s state apart (each rollout gets its own session), "none" if it keeps '
        "nothing between calls; or run it in each rollout's sandbox (command and args)"
    )


# -- the transport to a stdio server in a sandbox ------------------------------------------------


@dataclass
class _Relay:
    """The host's memory of one server's relay in one sandbox."""

    directory: str
    on_host: bool  # the local backend's: in the host's /tmp, removed at the rollout's end
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    stream: tuple[asyncio.StreamReader, asyncio.StreamWriter] | None = None  # kept open
    reached: tuple[str | None, bool] = (None, False)  # the sandbox as it was when connected

    def drop(self) -> None:
        """Forget the connection (the relay ended it, or it cannot be trusted any more)."""
        if self.stream is not None:
            self.stream[1].close()
            self.stream = None


_relays: weakref.WeakKeyDictionary[Sandbox, dict[str, _Relay]] = weakref.WeakKeyDictionary()
VERIFY = "/verify"  # the key of a server's relay and session after the rollout


def _verifying(sandbox: Any, name: str) -> str:
    """``name``, or its verification key once the sandbox verifies (the agent is gone)."""
    return f"{name}{VERIFY}" if getattr(sandbox, "verifying", False) else name


def _relay(sandbox: Sandbox, name: str) -> _Relay:
    relays = _relays.setdefault(sandbox, {})
    # Once the agent's processes are stopped, a relay of its own in a directory made then:
    # whatever the agent left at the rollout's socket (a listener of its own) answers no reward.
    name = _verifying(sandbox, name)
    if name not in relays:
        local = sandbox.workdir != "/workspace"  # the local backend: the host's /tmp
        base = os.path.realpath(tempfile.gettempdir()) if local else "/tmp"
        relays[name] = _Relay(f"{base}/.hermes-mcp-{uuid.uuid4().hex}", local)
    return relays[name]


def _close_relay(sandbox: Sandbox, name: str) -> None:
    """Close the host's connection to a relay, and remove its directory from the host's /tmp
    (the relay itself ends with the sandbox's processes)."""
    for key in (name, f"{name}{VERIFY}"):
        relay = _relays.get(sandbox, {}).get(key)
        if relay is not None:
            relay.drop()
            if relay.on_host:
                shutil.rmtree(relay.directory, ignore_errors=True)  # a link there: left alone


class ServerGone(ToolExecutionError):
    """The relay said the server is dead, or did not answer in time."""


async def relay_message(
    sandbox: Sandbox, server: McpServerSettings, message: str, timeout: float
) -> list[str]:
    """Send one JSON-RPC message to the server in ``sandbox``; the lines it wrote back.

    Over the relay's socket, kept open, where the host can reach it (one round trip); else,
    and when no relay runs yet or it was killed, as one sandbox command that starts it.
    """
    relay = _relay(sandbox, server.name)
    async with relay.lock:
        reply = await _over_socket(sandbox, relay, message, timeout)
        if reply is None:
            reply = await _by_command(sandbox, server, relay, message, timeout)
    if "dead" in reply:
        code = reply["dead"]
        stderr = " ".join(str(reply.get("stderr") or "").split())[-600:]
        how = f"exited with {code}" if code is not None else "is not running"
        raise ServerGone(f"the server {how}{': ' + stderr if stderr else ''}")
    if reply.get("timeout"):
        raise ServerGone(f"the server did not answer within {timeout:g} s")
    return [str(line) for line in reply.get("lines", [])]


async def _by_command(
    sandbox: Sandbox, server: McpServerSettings, relay: _Relay, message: str, timeout: float
) -> dict:
    """The relay's reply to ``message`` sent by a command in the sandbox (which starts the
    relay, and the server, when none answers)."""
    spec = json.dumps({"argv": [server.command, *server.args], "env": server.env})
    argv = boot_argv("python3", "mcp_relay_program", "client", relay.directory, f"{timeout:g}",
                     base64.b64encode(message.encode()).decode(),
                     base64.b64encode(spec.encode()).decode())  # fmt: skip
    try:
        result = await sandbox.run(shlex.join(argv), timeout=timeout + RELAY_SLACK)
    except SandboxError as exc:
        raise ServerGone(f"the sandbox failed: {exc}") from None
    lines = result.output.strip().splitlines()
    try:
        reply = json.loads(lines[-1])
        if "file" in reply:
            reply = json.loads(await sandbox.read_head(reply["file"], MAX_REPLY))
        if not isinstance(reply, dict):
            raise TypeError
    except (ValueError, IndexError, TypeError, SandboxError):
        detail = result.output.strip()[-500:] or "no output"
        raise ServerGone(f"the relay failed (exit {result.exit_code}): {detail}") from None
    return reply


async def _over_socket(sandbox: Sandbox, relay: _Relay, message: str, timeout: float):
    """The relay's reply over the host's connection to it, opened at need and kept; None when
    there is none to be had (no relay runs, or the host cannot reach it): nothing was sent."""
    now = (sandbox.host_root(), sandbox.verifying)
    if relay.stream is not None and (
        relay.stream[0].at_eof() or relay.stream[1].is_closing() or relay.reached != now
    ):
        relay.drop()  # the relay ended, or the sandbox restarted or ended the agent's processes
    if relay.stream is None:
        relay.stream = await connect_below(sandbox, relay.directory, MAX_REPLY)
        if relay.stream is None:
            return None
        relay.reached = now
    reader, writer = relay.stream
    request = f"{timeout!r}\n".encode() + message.encode()
    try:
        writer.write(len(request).to_bytes(4, "big") + request)
        await writer.drain()
    except OSError:  # a Unix socket refuses the write at once when the relay has gone
        relay.drop()
        return None
    try:
        try:
            header = await asyncio.wait_for(reader.readexactly(4), timeout + RELAY_SLACK)
        except asyncio.IncompleteReadError:
            # The relay went as the message came (killed in the sandbox, dying while the
            # host wrote): as before this connection, a command sends it and restarts it.
            relay.drop()
            return None
        size = int.from_bytes(header, "big")
        if size > MAX_REPLY:
            raise ValueError(f"a reply of {size} bytes")
        reply = json.loads(await asyncio.wait_for(reader.readexactly(size), RELAY_SLACK))
        if not isinstance(reply, dict):
            raise ValueError("not an object")
    except asyncio.TimeoutError:
        relay.drop()
        raise ServerGone(f"the server did not answer within {timeout:g} s") from None
    except (asyncio.IncompleteReadError, OSError):
        relay.drop()
        return {"dead": None, "stderr": "the relay stopped answering"}
    except ValueError as exc:
        relay.drop()
        raise ServerGone(f"the relay answered garbage: {exc}") from None
    except asyncio.CancelledError:  # its reply would come to the next message: not this way
        relay.drop()
        raise
    return reply


@contextlib.asynccontextmanager
async def sandbox_transport(
    sandbox: Sandbox, server: McpServerSettings
) -> AsyncIterator[tuple[Any, Any]]:
    """The SDK's read and write streams to a stdio server in ``sandbox``, through the relay."""
    import anyio
    import mcp_types
    from mcp.shared.message import SessionMessage

    read_send, read_receive = anyio.create_memory_object_stream[SessionMessage | Exception](64)
    write_send, write_receive = anyio.create_memory_object_stream[SessionMessage](64)

    async def deliver(line: str) -> None:
        try:
            message = mcp_types.jsonrpc_message_adapter.validate_json(line, by_name=False)
        except ValueError as exc:
            await read_send.send(exc)
            return
        await read_send.send(SessionMessage(message))

    async def pump() -> None:
        async for outgoing in write_receive:
            message = outgoing.message
            data = message.model_dump_json(by_alias=True, exclude_unset=True)
            ident = getattr(message, "id", None) if hasattr(message, "method") else None
            try:
                for line in await relay_message(sandbox, server, data, server.timeout):
                    await deliver(line)
            except ServerGone as exc:
                if ident is not None:  # the waiting request gets the reason as its error
                    error = mcp_types.JSONRPCError(
                        jsonrpc="2.0",
                        id=ident,
                        error=mcp_types.ErrorData(code=-32000, message=str(exc)),
                    )
                    await read_send.send(SessionMessage(error))

    async with anyio.create_task_group() as group:
        group.start_soon(pump)
        try:
            yield read_receive, write_send
        finally:
            group.cancel_scope.cancel()
            _close_relay(sandbox, server.name)


# -- sessions ------------------------------------------------------------------------------------


class McpSession:
    """An initialized ``ClientSession``, owned by a task of its own (anyio's scopes must be left
    by the task that entered them); calls come from any task."""

    def __init__(self, server: McpServerSettings, sandbox: Sandbox | None) -> None:
        self.server = server
        self.sandbox = sandbox
        self.session: Any = None
        self.session_id: str | None = None  # a URL server's MCP session, once it gave one
        self._ready: asyncio.Future | None = None
        self._stop = asyncio.Event()
        self._task: asyncio.Task | None = None

    def _transport(self) -> Any:
        if self.server.url is not None:
            return self._http_transport(self.server.url)
        assert self.sandbox is not None
        return sandbox_transport(self.sandbox, self.server)

    @contextlib.asynccontextmanager
    async def _http_transport(self, url: str) -> AsyncIterator[tuple[Any, Any]]:
        """The SDK's streamable-HTTP streams, noting the MCP session id the server gives."""
        from mcp.client.streamable_http import create_mcp_http_client, streamable_http_client

        async def note_session(response: Any) -> None:
            given = response.headers.get("mcp-session-id")
            if given and self.session_id is None:
                self.session_id = given

        async with create_mcp_http_client() as client:
            client.event_hooks["response"].append(note_session)
            async with streamable_http_client(url, http_client=client) as streams:
                yield streams

    async def start(self) -> None:
        """Connect and initialize; a ``ToolExecutionError``-ready reason when it cannot."""
        loop = asyncio.get_running_loop()
        self._ready = loop.create_future()
        self._task = loop.create_task(self._own())
        try:
            await asyncio.wait_for(asyncio.shield(self._ready), self.server.startup_timeout)
        except asyncio.TimeoutError:
            await self.close()
            raise ServerGone(
                f"the server did not initialize within {self.server.startup_timeout:g} s"
            ) from None
        except BaseException:
            await self.close()
            raise

    async def _own(self) -> None:
        from mcp import ClientSession

        ready = self._ready
        assert ready is not None
        try:
            async with self._transport() as streams:
                read, write = streams[0], streams[1]
                # Starting and listing get startup_timeout (a server's start is slow on a busy
                # machine); each tool call its own, shorter timeout (in ``call``).
                async with ClientSession(
                    read, write, read_timeout_seconds=self.server.startup_timeout
                ) as s:
                    await s.initialize()
                    self.session = s
                    ready.set_result(None)
                    await self._stop.wait()
        except BaseException as exc:  # told to the caller, whatever it is
            if not ready.done():
                ready.set_exception(ServerGone(_reason(exc)))
            if isinstance(exc, asyncio.CancelledError):
                raise

    async def list_tools(self) -> list[Any]:
        from mcp_types import PaginatedRequestParams

        tools: list[Any] = []
        cursor = None
        for _ in range(MAX_PAGES):
            params = PaginatedRequestParams(cursor=cursor) if cursor else None
            page = await self.session.list_tools(params=params)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def close(self) -> None:
        self._stop.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 10)
            except (asyncio.TimeoutError, Exception):
                self._task.cancel()
                with contextlib.suppress(BaseException):
                    await self._task


def _check_sessions(server: McpServerSettings, session: McpSession) -> None:
    """At start-up: a URL server keeps rollouts apart as declared, or the run stops."""
    if server.url is None:
        return
    if server.state == "per_session" and session.session_id is None:
        raise EnvConfigError(
            f'mcp_servers[{server.name}] declares "state": "per_session", but the server at '
            f"{server.url} gave no MCP session id (Mcp-Session-Id): it cannot keep rollouts "
            'apart. Make it keep sessions, declare "state": "none" if it keeps nothing '
            "between calls, or run it in each rollout's sandbox"
        )
    if server.state == "none":
        logger.warning(
            "mcp_servers[%s] at %s is shared by every rollout, declared to keep no state "
            '("state": "none"): what it does keep, rollouts can read from each other',
            server.name,
            server.url,
        )


def _reason(exc: BaseException) -> str:
    """The innermost message of an exception (anyio wraps them in groups)."""
    while inner := getattr(exc, "exceptions", None):  # an exception group (3.11+, and anyio's)
        exc = inner[0]
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0][:600] if text else type(exc).__name__


# -- the toolset ----------------------------------------------------------------------------------


def tool_name(server: str, name: str) -> str:
    """``<server>_<tool>`` as OpenAI function names allow: [A-Za-z0-9_-], at most 64."""
    return re.sub(r"[^A-Za-z0-9_-]", "_", f"{server}_{name}")[:64]


@dataclass
class McpToolset:
    """The env's MCP servers, their tools as listed at start-up, and per-rollout sessions."""

    servers: list[McpServerSettings]
    sandbox_settings: SandboxSettings = field(default_factory=SandboxSettings)
    listed: dict[str, list[Any]] = field(default_factory=dict)  # server name -> its MCP tools

    def start(self) -> None:
        """List every server's tools now (a thread with its own event loop: __init__ is sync)."""
        with concurrent.futures.ThreadPoolExecutor(1) as pool:
            pool.submit(asyncio.run, self._list_all()).result()

    async def _list_all(self) -> None:
        for server in self.servers:
            manager = None
            sandbox = None
            if server.command is not None:
                manager = SandboxManager(self.sandbox_settings, lifetime=3600)
                sandbox = manager.get(f"mcp-startup-{server.name}")
            if (problem := shared_state_problem(server)) is not None:
                raise EnvConfigError(problem)
            session = McpSession(server, sandbox)
            try:
                try:
                    if sandbox is not None:
                        await sandbox.start()
                    await session.start()
                    tools = await asyncio.wait_for(session.list_tools(), server.startup_timeout)
                    _check_sessions(server, session)
                except EnvConfigError:
                    raise
                except (ServerGone, SandboxError, asyncio.TimeoutError, Exception) as exc:
                    reason = str(exc) if isinstance(exc, ServerGone) else _reason(exc)
                    raise EnvConfigError(
                        f"mcp_servers[{server.name}]: cannot list its tools: {reason}"
                    ) from None
            finally:
                await session.close()
                if manager is not None:
                    await manager.close_all()
            self.listed[server.name] = self._pick(server, tools)

    @staticmethod
    def _pick(server: McpServerSettings, tools: list[Any]) -> list[Any]:
        names = {tool.name for tool in tools}
        if server.tools is not None:
            missing = sorted(set(server.tools) - names)
            if missing:
                raise EnvConfigError(
                    f"mcp_servers[{server.name}].tools names tools the server does not have: "
                    f"{', '.join(missing[:10])}"
                )
            tools = [tool for tool in tools if tool.name in set(server.tools)]
        if len(tools) > MAX_TOOLS:
            raise EnvConfigError(
                f"mcp_servers[{server.name}] lists {len(tools)} tools, more than {MAX_TOOLS}: "
                "name the ones the agent may use in its 'tools'"
            )
        return tools

    def register(self, base: ToolRegistry) -> ToolRegistry:
        """A registry with ``base``'s tools and the servers' (refusing a name twice)."""
        registry = ToolRegistry()
        for name in base.names():
            registry.add(base.get(name))
        for server in self.servers:
            for mcp_tool in self.listed.get(server.name, []):
                name = tool_name(server.name, mcp_tool.name)
                if name in registry.names():
                    raise EnvConfigError(
                        f"mcp_servers[{server.name}]: its tool {mcp_tool.name!r} would be "
                        f"named {name}, which another tool has"
                    )
                registry.add(self._tool(server, mcp_tool, name))
        return registry

    def _tool(self, server: McpServerSettings, mcp_tool: Any, name: str) -> Tool:
        schema = dict(mcp_tool.input_schema or {})
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        remote = mcp_tool.name

        async def run(sandbox: Any = None, context: Any = None, **arguments: Any) -> str:
            return await self.call(context, sandbox, server, remote, arguments)

        description = (mcp_tool.description or remote).strip()[:MAX_DESCRIPTION]
        injected = {"context"} if server.url is not None else {"context", "sandbox"}
        return Tool(name, description, schema, run, "mcp", frozenset(injected))

    async def session(self, context: Any, sandbox: Any, server: McpServerSettings) -> McpSession:
        """The rollout's session with ``server``: started at its first call, ended at cleanup;
        a stdio server's anew once the agent's processes are stopped (what a reward asks)."""
        sessions = context.state.setdefault(SERVICE, {})
        # After the rollout, a stdio server gets a session of its own, initialized afresh, over
        # a relay started then: the rollout's may have been the agent's forgery.
        key = server.name if server.url is not None else _verifying(sandbox, server.name)
        found = sessions.get(key)
        if found is None:
            found = sessions[key] = asyncio.ensure_future(self._open(server, sandbox))
            context.add_cleanup(lambda: _close(found))
        return await asyncio.shield(found)

    async def _open(self, server: McpServerSettings, sandbox: Any) -> McpSession:
        session = McpSession(server, sandbox)
        await session.start()
        return session

    async def call(
        self, context: Any, sandbox: Any, server: McpServerSettings, name: str, arguments: dict
    ) -> str:
        label = tool_name(server.name, name)
        if context is None:
            raise ToolExecutionError(f"{label}: MCP tools run within a rollout's ToolContext")
        try:
            session = await self.session(context, sandbox, server)
            result = await asyncio.wait_for(
                session.session.call_tool(name, arguments, read_timeout_seconds=server.timeout),
                server.timeout + RELAY_SLACK,
            )
        except asyncio.TimeoutError:
            raise ToolExecutionError(
                f"{label}: the MCP server did not answer within {server.timeout:g} s"
            ) from None
        except ServerGone as exc:
            raise ToolExecutionError(f"{label}: {exc}") from None
        except Exception as exc:
            reason = _reason(exc)
            if "timed out" in reason:  # the SDK's read timeout: said as ours is
                reason = f"the server did not answer within {server.timeout:g} s"
            raise ToolExecutionError(f"{label}: the MCP server failed: {reason}") from None
        return result_text(label, result)


async def _close(found: asyncio.Future) -> None:
    if not found.done():
        found.cancel()
    with contextlib.suppress(BaseException):
        session = await found
        await session.close()


def result_text(label: str, result: Any) -> str:
    """A CallToolResult as the model reads it; an error result is a tool error."""
    parts = []
    for block in result.content or []:
        kind = getattr(block, "type", "?")
        if kind == "text":
            parts.append(block.text)
        else:
            mime = getattr(block, "mime_type", None) or getattr(block, "uri", "") or ""
            parts.append(f"[{kind} content{' ' + str(mime) if mime else ''}]")
    if not parts and getattr(result, "structured_content", None) is not None:
        parts.append(json.dumps(result.structured_content, ensure_ascii=False))
    text = "\n".join(parts)
    if result.is_error:
        raise ToolExecutionError(f"{label}: {text or 'the server reported an error'}")
    return text or "(no content)"


def mcp_registry(
    base: ToolRegistry, servers: list[McpServerSettings], sandbox_settings: SandboxSettings
) -> ToolRegistry:
    """``base`` plus the tools of ``servers``, listed now (EnvConfigError when one cannot be).

    The env passes its resolved backend; ``auto`` from another caller is resolved the same way.
    """
    if sandbox_settings.backend == AUTO:
        sandbox_settings = replace(sandbox_settings, backend=choose_backend(AUTO))
    toolset = McpToolset(servers, sandbox_settings)
    toolset.start()
    return toolset.register(base)
