"""The ``mcp`` toolset through the official SDK: the kit's notes server over stdio in each
rollout's sandbox (local, bwrap, docker) and over streamable HTTP from the host, and the
hostile servers of issue #28 (fails to start, dies, answers late, answers garbage, answers
malformed results, lists 10,000 tools, never answers), each bounded."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import subprocess
import sys
import time

import pytest
from helpers.sandbox import BWRAP, DOCKER, LOCAL, docker_test_image, needs_bwrap

from hermes_envgen.runtime.errors import EnvConfigError, ToolExecutionError
from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings
from hermes_envgen.runtime.tools import REGISTRY, mcp_tools
from hermes_envgen.runtime.tools.mcp_tools import MAX_TOOLS, McpServerSettings, mcp_registry
from hermes_envgen.testing import mcp_notes
from hermes_envgen.testing.mcp_notes import notes_server

pytestmark = pytest.mark.timeout(300)


def settings(tmp_path, backend: str) -> SandboxSettings:
    image = {"docker_image": docker_test_image()} if backend == "docker" else {}
    return SandboxSettings(backend=backend, root=str(tmp_path / backend), **image)


def server(*flags: str, **options) -> McpServerSettings:
    entry = notes_server("notes", *flags)
    return McpServerSettings(**(entry | {"timeout": 10, "startup_timeout": 60} | options))


def run(coroutine):
    return asyncio.run(coroutine)


@pytest.mark.parametrize("backend", [LOCAL, BWRAP, DOCKER])
def test_a_stdio_server_runs_in_each_rollouts_sandbox_with_its_own_state(tmp_path, backend):
    sandbox_settings = settings(tmp_path, backend)
    registry = mcp_registry(REGISTRY, [server()], sandbox_settings)
    names = [n for n in registry.names() if n.startswith("notes_")]
    assert names == ["notes_add_note", "notes_delete_note", "notes_list_notes", "notes_read_note"]
    tool = registry.get("notes_add_note")
    assert tool.toolset == "mcp" and tool.parameters["required"] == ["title", "body"]
    assert "python" in registry.names() and "python" in REGISTRY.names()  # base tools kept
    assert "notes_add_note" not in REGISTRY.names()  # the env's own registry, not the global

    async def scenario():
        manager = SandboxManager(sandbox_settings)
        first, second = (ToolContext(f"r{i}", manager, registry) for i in (1, 2))
        try:
            assert "saved" in await first.call_tool("notes_add_note", {"title": "a", "body": "x"})
            assert await first.call_tool("notes_read_note", {"title": "a"}) == "x"
            assert await second.call_tool("notes_list_notes") == "[]"  # a server per rollout
            with pytest.raises(ToolExecutionError, match="no note titled 'b'"):
                await first.call_tool("notes_read_note", {"title": "b"})
            # The reward sees the server's side effects in the rollout's workspace...
            assert '"a": "x"' in await first.read_file("notes.json")
            # ... and, after the agent's processes are gone, through a call.
            await manager.stop_agent_processes("r1")
            assert await first.call_tool("notes_list_notes") == '["a"]'
        finally:
            await first.cleanup()
            await second.cleanup()
            await manager.close_all()

    run(scenario())


@needs_bwrap
def test_auto_is_resolved_as_the_env_does_before_a_server_is_listed(tmp_path):
    registry = mcp_registry(REGISTRY, [server()], settings(tmp_path, "auto"))
    assert {"notes_add_note", "notes_read_note"} <= set(registry.names())
    assert (tmp_path / "auto" / "hermes-envgen").is_dir()  # a sandbox was made, not refused


def test_allowed_tools_are_the_only_ones_offered(tmp_path):
    registry = mcp_registry(REGISTRY, [server(tools=["read_note"])], settings(tmp_path, "local"))
    assert [n for n in registry.names() if n.startswith("notes_")] == ["notes_read_note"]
    with pytest.raises(EnvConfigError, match=r"tools names tools the server does not have: nope"):
        mcp_registry(REGISTRY, [server(tools=["nope"])], settings(tmp_path, "local"))


def test_a_server_that_fails_to_start_is_a_start_up_error_naming_it(tmp_path):
    started = time.monotonic()
    with pytest.raises(EnvConfigError) as failed:
        mcp_registry(REGISTRY, [server("--fail-start")], settings(tmp_path, "local"))
    message = str(failed.value)
    assert message.startswith("mcp_servers[notes]: cannot list its tools: the server exited")
    assert "refusing to start (--fail-start)" in message
    assert time.monotonic() - started < 60
    with pytest.raises(EnvConfigError, match=r"is not running|exited with 127"):
        mcp_registry(
            REGISTRY,
            [McpServerSettings(name="ghost", command="no-such-mcp-server")],
            settings(tmp_path, "local"),
        )


def test_a_server_that_never_answers_is_a_bounded_start_up_error(tmp_path):
    started = time.monotonic()
    with pytest.raises(EnvConfigError, match="mcp_servers\\[notes\\]: cannot list its tools"):
        mcp_registry(
            REGISTRY,
            [server("--silent", timeout=1, startup_timeout=5)],
            settings(tmp_path, "local"),
        )
    assert time.monotonic() - started < 60


def test_ten_thousand_tools_are_refused_unless_the_allowed_ones_are_named(tmp_path):
    with pytest.raises(EnvConfigError, match=f"lists 10004 tools, more than {MAX_TOOLS}"):
        mcp_registry(REGISTRY, [server("--tools", "10000")], settings(tmp_path, "local"))
    picked = mcp_registry(
        REGISTRY, [server("--tools", "10000", tools=["extra_9999"])], settings(tmp_path, "local")
    )
    assert "notes_extra_9999" in picked.names()


@pytest.mark.slow
@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (("--die-after", "2"), "the server exited with 3"),
        (("--slow", "30"), "did not answer within 2 s"),
        (("--garbage",), "did not answer within 2 s"),
        (("--malformed",), "the MCP server failed"),
    ],
    ids=["dies", "slow", "garbage", "malformed"],
)
def test_a_failing_server_is_a_bounded_tool_error_in_the_rollout(tmp_path, flags, message):
    sandbox_settings = settings(tmp_path, "local")
    registry = mcp_registry(REGISTRY, [server(*flags, timeout=2)], sandbox_settings)

    async def scenario():
        manager = SandboxManager(sandbox_settings)
        ctx = ToolContext("hostile", manager, registry)
        try:
            if flags[0] == "--die-after":
                await ctx.call_tool("notes_add_note", {"title": "t", "body": "b"})
            started = time.monotonic()
            with pytest.raises(ToolExecutionError, match=message):
                await ctx.call_tool("notes_read_note", {"title": "t"})
            assert time.monotonic() - started < 40
            if flags[0] == "--die-after":  # and every call after it, at once
                with pytest.raises(ToolExecutionError, match="the server"):
                    await ctx.call_tool("notes_list_notes")
        finally:
            await ctx.cleanup()
            await manager.close_all()

    run(scenario())


@contextlib.contextmanager
def http_notes_server(workdir, *flags: str):
    """The kit's notes server over streamable HTTP on 127.0.0.1; its URL."""
    workdir.mkdir(exist_ok=True)
    process = subprocess.Popen(
        [sys.executable, mcp_notes.__file__, "--http", "0", *flags],
        cwd=workdir,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        port = int(process.stdout.readline().split()[-1])
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.kill()
        process.wait(timeout=10)


@pytest.mark.slow
def test_two_rollouts_sharing_an_http_server_each_have_their_own_session(tmp_path):
    # One channel for every rollout: a rollout listed, read and overwrote another's notes, so
    # siblings of a group could hand each other answers.
    with http_notes_server(tmp_path / "http-server") as url:
        shared = McpServerSettings(name="shared", url=url, timeout=10, state="per_session")
        registry = mcp_registry(REGISTRY, [shared], settings(tmp_path, "local"))
        assert registry.get("shared_add_note").injected == {"context"}  # no sandbox for it

        async def rollout(ctx: ToolContext, answer: str, started: asyncio.Barrier):
            await started.wait()  # both sessions open at once
            await ctx.call_tool("shared_add_note", {"title": "answer", "body": answer})
            await started.wait()  # both wrote before either reads
            listed = await ctx.call_tool("shared_list_notes")
            return listed, await ctx.call_tool("shared_read_note", {"title": "answer"})

        async def scenario():
            manager = SandboxManager(settings(tmp_path, "local"))
            one, two = ToolContext("h1", manager, registry), ToolContext("h2", manager, registry)
            both = asyncio.Barrier(2)
            try:
                seen = await asyncio.gather(rollout(one, "42", both), rollout(two, "7", both))
                with pytest.raises(ToolExecutionError, match="no note titled 'secret'"):
                    await two.call_tool("shared_read_note", {"title": "secret"})
                assert len(manager) == 0
                return seen
            finally:
                await one.cleanup()
                await two.cleanup()
                await manager.close_all()

        seen = run(scenario())
    assert seen == [('["answer"]', "42"), ('["answer"]', "7")], seen
    stores = sorted(p.name for p in (tmp_path / "http-server").glob("notes-*.json"))
    assert len(stores) == 2, stores  # the server kept two sessions apart


def test_an_http_server_whose_state_every_rollout_shares_is_refused_with_why(tmp_path, caplog):
    with http_notes_server(tmp_path / "one-store", "--one-store") as url:
        undeclared = McpServerSettings(name="shared", url=url, timeout=10)
        with pytest.raises(EnvConfigError) as refused:
            mcp_registry(REGISTRY, [undeclared], settings(tmp_path, "local"))
        assert "one rollout could read or overwrite for another" in str(refused.value)
        assert '"state": "per_session"' in str(refused.value)
        claimed = undeclared.model_copy(update={"state": "per_session"})
        with pytest.raises(EnvConfigError, match="gave no MCP session id"):
            mcp_registry(REGISTRY, [claimed], settings(tmp_path, "local"))
        stateless = undeclared.model_copy(update={"state": "none"})
        with caplog.at_level(logging.WARNING):
            registry = mcp_registry(REGISTRY, [stateless], settings(tmp_path, "local"))
    assert "shared_list_notes" in registry.names()
    assert "is shared by every rollout, declared to keep no state" in caplog.text


def test_a_server_setting_needs_exactly_one_transport():
    with pytest.raises(ValueError, match="give a command \\(stdio\\) or a url"):
        McpServerSettings(name="x")
    with pytest.raises(ValueError, match="give a command"):
        McpServerSettings(name="x", command="a", url="http://b")
    assert os.path.exists(mcp_notes.__file__)


def test_an_env_with_mcp_servers_offers_their_tools_and_stops_when_one_cannot_start(
    offline_tokenizer, tmp_path
):
    from helpers.envs import make_env

    env = make_env(
        "http://127.0.0.1:9/v1",
        offline_tokenizer,
        tmp_path,
        enabled_toolsets=["terminal", "mcp"],
        mcp_servers=[notes_server()],
    )
    _, names = env._resolve_tools()
    assert {"terminal", "notes_add_note", "notes_read_note"} <= names
    assert "read_file" not in names
    with pytest.raises(EnvConfigError, match="mcp_servers\\[notes\\]: cannot list its tools"):
        make_env(
            "http://127.0.0.1:9/v1",
            offline_tokenizer,
            tmp_path,
            enabled_toolsets=["mcp"],
            mcp_servers=[notes_server("notes", "--fail-start")],
        )


@pytest.mark.parametrize("backend", [LOCAL, BWRAP, DOCKER])
def test_a_stdio_server_sees_none_of_the_hosts_secrets(tmp_path, backend, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret")
    monkeypatch.setenv("TAVILY_API_KEY", "tvly-host-secret")
    sandbox_settings = settings(tmp_path, backend)
    registry = mcp_registry(
        REGISTRY, [server("--environment", env={"NOTES_MODE": "test"})], sandbox_settings
    )

    async def scenario():
        manager = SandboxManager(sandbox_settings)
        ctx = ToolContext("secrets", manager, registry)
        try:
            return await ctx.call_tool("notes_environment")
        finally:
            await ctx.cleanup()
            await manager.close_all()

    names = run(scenario())
    assert "NOTES_MODE" in names  # the server's own env setting reaches it
    assert "OPENAI_API_KEY" not in names and "TAVILY_API_KEY" not in names


def _relay_directory(ctx: ToolContext) -> str:
    return mcp_tools._relays[ctx.sandbox]["notes"].directory


def kill_relay(ctx: ToolContext) -> str:
    """The command that kills the rollout's relay (and the server it keeps) by their run tag,
    as an agent could: this sandbox's alone (a local sandbox's command sees every process of
    the host, other tests' and other work's relays too)."""
    tag = f"HERMES_SANDBOX_RUN={ctx.sandbox._tag_prefix}mcp"  # the prefix holds a uuid
    return (
        f"for p in /proc/[0-9]*; do grep -qaF '{tag}' $p/environ 2>/dev/null"
        " && kill -9 ${p#/proc/}; done; sleep 0.2; true"
    )


@pytest.mark.parametrize("backend", [LOCAL, BWRAP, DOCKER])
def test_calls_go_over_the_kept_relay_and_a_killed_relay_is_restarted(tmp_path, backend):
    sandbox_settings = settings(tmp_path, backend)
    registry = mcp_registry(REGISTRY, [server()], sandbox_settings)

    async def scenario():
        manager = SandboxManager(sandbox_settings)
        ctx = ToolContext("kept", manager, registry)
        commands = []
        sandbox = ctx.sandbox
        real_run = sandbox.run

        async def counted(command, timeout=None):  # the real run, counted
            commands.append(command)
            return await real_run(command, timeout)

        sandbox.run = counted
        try:
            await ctx.call_tool("notes_add_note", {"title": "a", "body": "x"})
            started = len(commands)  # the relay's start (and the session's first messages)
            for _ in range(10):
                assert await ctx.call_tool("notes_list_notes") == '["a"]'
            over_socket = len(commands) - started
            await ctx.terminal(kill_relay(ctx))
            after_kill = await ctx.call_tool("notes_list_notes")  # the notes live in the file
            restarted = len(commands) - started - over_socket - 1
            assert await ctx.call_tool("notes_read_note", {"title": "a"}) == "x"
            kept = mcp_tools._relays[sandbox]["notes"].stream
            assert kept is not None
        finally:
            await ctx.cleanup()
            await manager.close_all()
        # The rollout's end closed the host's connection; the sandbox's, the relay.
        assert mcp_tools._relays[sandbox]["notes"].stream is None and kept[1].is_closing()
        return over_socket, after_kill, restarted, mcp_tools._relays[sandbox]["notes"].directory

    over_socket, after_kill, restarted, directory = run(scenario())
    if backend == "local":  # the host's /tmp keeps nothing of it
        assert not os.path.exists(directory)
    assert over_socket == 0, "a call over the kept relay ran a sandbox command"
    assert after_kill == '["a"]'
    assert restarted == 1  # one command started a fresh relay


@needs_bwrap
def test_the_host_follows_no_link_the_agent_puts_where_the_relay_was(tmp_path):
    import contextlib
    import socket
    import threading

    sandbox_settings = settings(tmp_path, "bwrap")
    registry = mcp_registry(REGISTRY, [server()], sandbox_settings)
    # A socket of the host's, that a link in the sandbox could lead the host to.
    bait_directory = tmp_path / "bait"
    bait_directory.mkdir()
    bait = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    bait.bind(str(bait_directory / "socket"))
    bait.listen(4)
    bait.settimeout(0.2)
    reached = []
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            with contextlib.suppress(OSError):
                reached.append(bait.accept()[0])

    watcher = threading.Thread(target=watch)
    watcher.start()

    async def scenario():
        manager = SandboxManager(sandbox_settings)
        ctx = ToolContext("linked", manager, registry)
        try:
            await ctx.call_tool("notes_list_notes")
            directory = _relay_directory(ctx)
            await ctx.terminal(kill_relay(ctx))
            replaced = await ctx.terminal(
                f"rm -rf {directory} && ln -s {bait_directory} {directory}"
            )
            assert replaced["exit_code"] == 0, replaced
            with pytest.raises(ToolExecutionError):
                await ctx.call_tool("notes_list_notes")
        finally:
            await ctx.cleanup()
            await manager.close_all()

    try:
        run(scenario())
    finally:
        stop.set()
        watcher.join(5)
        bait.close()
    # The command inside follows the link to nothing; the host must not follow it at all.
    assert reached == [], "the host connected to a socket a link led it to"


# What an agent runs to answer in the relay's place: a listener on the relay's socket that
# speaks its framing and answers every request with a forged result (it outlives the rollout
# where the backend cannot stop it, and ends by itself after a minute).
FAKE_RELAY = r"""
import json, os, socket, sys, threading, time
directory = sys.argv[1]
with open("fake-relay.pid", "w") as f:
    f.write(str(os.getpid()))
threading.Timer(60, lambda: os._exit(0)).start()
try:
    os.unlink(os.path.join(directory, "socket"))
except OSError:
    pass
listener = socket.socket(socket.AF_UNIX)
listener.bind(os.path.join(directory, "socket"))
listener.listen(8)

def exactly(conn, n):
    data = b""
    while len(data) < n:
        chunk = conn.recv(n - len(data))
        if not chunk:
            return None
        data += chunk
    return data

while True:
    conn, _ = listener.accept()
    while (header := exactly(conn, 4)) is not None:
        request = exactly(conn, int.from_bytes(header, "big"))
        message = json.loads(request.partition(b"\n")[2] or b"{}")
        lines = []
        if "id" in message:
            result = {"content": [{"type": "text", "text": "FORGED"}], "isError": False}
            lines.append(json.dumps({"jsonrpc": "2.0", "id": message["id"], "result": result}))
        reply = json.dumps({"lines": lines}).encode()
        conn.sendall(len(reply).to_bytes(4, "big") + reply)
    conn.close()
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", [LOCAL, BWRAP, DOCKER])
def test_a_reward_reads_the_servers_own_answers_whatever_the_agent_left(tmp_path, backend):
    # The agent kills the relay and the server and answers on the relay's socket itself.
    # During the rollout that is the agent's word (a hook must not take it for a verdict);
    # after it, a reward's call must reach the real server.
    sandbox_settings = settings(tmp_path, backend)
    registry = mcp_registry(REGISTRY, [server()], sandbox_settings)

    async def scenario():
        manager = SandboxManager(sandbox_settings)
        ctx = ToolContext("forged", manager, registry)
        pid = None
        try:
            await ctx.call_tool("notes_add_note", {"title": "a", "body": "x"})
            directory = _relay_directory(ctx)
            await ctx.write_file("fake_relay.py", FAKE_RELAY)
            forge = (
                f"{kill_relay(ctx)}; (setsid env -i python3 fake_relay.py {directory} "
                "> /dev/null 2>&1 &); "
                f"for i in $(seq 100); do [ -S {directory}/socket ] && "
                "[ -f fake-relay.pid ] && break; sleep 0.05; done"
            )
            assert (await ctx.terminal(forge))["exit_code"] == 0
            pid = int(await ctx.read_file("fake-relay.pid"))
            during = await ctx.call_tool("notes_list_notes")
            await manager.stop_agent_processes("forged")  # the rollout is over
            after = await ctx.call_tool("notes_list_notes")
            read = await ctx.call_tool("notes_read_note", {"title": "a"})
        finally:
            await ctx.cleanup()
            await manager.close_all()
            if pid is not None and backend == LOCAL:  # the daemon local cannot stop
                with contextlib.suppress(OSError):
                    os.kill(pid, 9)
        return during, after, read

    during, after, read = run(scenario())
    assert during == "FORGED"  # what a turn hook would hear: the agent's word
    assert (after, read) == ('["a"]', "x")  # what a reward hears: the server's
