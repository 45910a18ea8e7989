"""ToolContext and every tool behave the same on each backend as on ``local``."""

from __future__ import annotations

import asyncio
import errno
import hashlib
import json
import os

import pytest
from helpers.sandbox import BWRAP, DOCKER, LOCAL, make_manager

from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.sandbox import SandboxError
from hermes_envgen.runtime.sandbox.workspace_files import file_errors
from hermes_envgen.runtime.tools import ToolExecutionError

OTHERS = [BWRAP, DOCKER]

COMMANDS = [
    "echo hello",
    "printf 'b\\na\\nc\\n' | sort -r",
    "echo to stderr >&2; echo to stdout",
    "exit 7",
    "nosuchcommand --flag",
    "if then",
    "cat missing.txt",
    "kill -9 $$",
    "exit 300",
    "umask",
    'echo $0 $SHLVL; [ "$PWD" = "$HOME" ] && echo in-home',
    "printf 'caf\\xc3\\xa9 \\xff\\n'",
    "python3 -c 'import sys; print(sum(range(10)), sys.stdout.encoding)'",
    "mkdir -p a/b && echo x > a/b/c.txt && find a | sort",
    "seq 1 100000 | tail -1",
    "tty; echo $?",
    "yes | head -n 2",  # SIGPIPE at its default: no "Broken pipe" from yes
    "trap -p",  # no signal the host ignores is ignored here
]


def run_everywhere(backend: str, tmp_path, script) -> tuple:
    """Run ``script(ctx)`` on local and on ``backend``; both results."""

    async def one(name: str):
        manager = make_manager(tmp_path, name, max_output_bytes=5000)
        ctx = ToolContext("parity", manager)
        try:
            return await script(ctx)
        finally:
            await ctx.cleanup()

    return asyncio.run(one("local")), asyncio.run(one(backend))


@pytest.mark.parametrize("backend", OTHERS)
def test_commands_give_the_same_results(backend, tmp_path):
    async def script(ctx):
        results = [await ctx.terminal(command) for command in COMMANDS]
        results.append(await ctx.terminal("sleep 5", timeout=0.5))
        results.append(await ctx.terminal("head -c 20000 /dev/zero | tr '\\0' y"))
        results.append(json.loads(await ctx.call_tool("terminal", {"command": "echo via tool"})))
        return results

    local, other = run_everywhere(backend, tmp_path, script)
    for command, expected, got in zip([*COMMANDS, "timeout", "flood", "tool"], local, other):
        assert got == expected, command


@pytest.mark.parametrize("backend", [LOCAL, *OTHERS])
def test_no_descriptor_of_the_host_reaches_a_command(backend, tmp_path):
    secret = tmp_path / "host-secret"
    secret.write_text("the host's")
    fd = os.open(secret, os.O_RDONLY)
    os.set_inheritable(fd, True)  # as a library of the host's might leave it

    async def main():
        sandbox = make_manager(tmp_path, backend).get("fds")
        try:
            return (await sandbox.run(f"cat /proc/self/fd/{fd} || echo not open")).output
        finally:
            await sandbox.close()

    try:
        output = asyncio.run(main())
        assert "the host's" not in output and output.endswith("not open\n"), output
    finally:
        os.close(fd)


@pytest.mark.parametrize("backend", [LOCAL, *OTHERS])
def test_commands_see_one_utf8_locale_whatever_the_host_has(backend, tmp_path, monkeypatch):
    # A host locale the sandbox lacks made bash warn in every output; any host locale made
    # sort order and messages, and so rewards read from them, differ from host to host.
    monkeypatch.setenv("LC_ALL", "xx_XX.UTF-8")
    monkeypatch.setenv("LANG", "de_DE.UTF-8")

    async def main():
        sandbox = make_manager(tmp_path, backend).get("locale")
        try:
            return await sandbox.run(
                'echo "[$LANG][$LC_ALL][$LC_CTYPE]"; x=é; echo ${#x}; printf "b\\nB\\na\\n" | sort'
                " | tr '\\n' ' '; python3 -c 'import locale; print(locale.getpreferredencoding())'"
            )
        finally:
            await sandbox.close()

    result = asyncio.run(main())
    assert result.output == "[][][C.UTF-8]\n1\nB a b UTF-8\n", result.output


@pytest.mark.parametrize("backend", [LOCAL, *OTHERS])
def test_a_command_killed_by_a_signal_exits_128_plus_its_number(backend, tmp_path):
    async def main():
        sandbox = make_manager(tmp_path, backend).get("signals")
        try:
            return [
                (await sandbox.run(command)).exit_code
                for command in ("kill -9 $$", "kill -TERM $$", "kill -SEGV $$")
            ]
        finally:
            await sandbox.close()

    assert asyncio.run(main()) == [137, 143, 139]


@pytest.mark.parametrize("backend", OTHERS)
def test_background_processes_persist_between_commands_until_cleanup(backend, tmp_path):
    async def script(ctx):
        started = await ctx.terminal("sleep 30 >/dev/null 2>&1 & echo $! > bg.pid; echo started")
        running = await ctx.terminal("kill -0 $(cat bg.pid) && echo running")
        # (a killed orphan may stay a zombie a moment, its reaper being busy: not "running")
        stopped = await ctx.terminal(
            "kill $(cat bg.pid); sleep 0.2; ps -o stat= -p $(cat bg.pid) | grep -qv Z || echo gone"
        )
        return started, running, stopped

    local, other = run_everywhere(backend, tmp_path, script)
    assert local == other
    assert local[1]["output"] == "running\n" and local[2]["output"] == "gone\n"


@pytest.mark.parametrize("backend", OTHERS)
def test_file_tools_give_the_same_results(backend, tmp_path):
    async def script(ctx):
        out = [
            await ctx.call_tool("write_file", {"path": "src/app.py", "content": "x = 1\ny = 2\n"}),
            await ctx.call_tool("read_file", {"path": "src/app.py", "start_line": 2}),
            await ctx.call_tool(
                "patch", {"path": "src/app.py", "old_text": "y = 2", "new_text": "y = 3"}
            ),
            await ctx.call_tool("write_file", {"path": "notes/todo.md", "content": "y = later\n"}),
            await ctx.call_tool("search_files", {"pattern": r"y = \w+"}),
            await ctx.call_tool("search_files", {"pattern": "y", "file_glob": "*.md"}),
            await ctx.call_tool("search_files", {"pattern": "x", "path": "src"}),
            await ctx.terminal("cat src/app.py; ln -s src/app.py alias.py; mkfifo pipe"),
            await ctx.call_tool("read_file", {"path": "alias.py"}),
            sorted(await ctx.sandbox.list_files(".")),
            await ctx.sandbox.list_files("src"),
            await ctx.sandbox.list_files("src/app.py"),
            await ctx.sandbox.list_files("nowhere"),
        ]
        for name, arguments in [
            ("read_file", {"path": "missing.txt"}),
            ("read_file", {"path": "src"}),
            ("patch", {"path": "src/app.py", "old_text": "absent", "new_text": "z"}),
            ("write_file", {"path": "../x", "content": ""}),
            ("write_file", {"path": "pipe", "content": "blocks no one"}),
        ]:
            with pytest.raises(ToolExecutionError) as caught:
                await ctx.call_tool(name, arguments)
            out.append(str(caught.value).replace(ctx.sandbox.workdir, "<workdir>"))
        # a file the host wrote can be changed by the agent's commands, and the other way round
        out.append(await ctx.terminal("echo appended >> src/app.py && sed -i 's/x/w/' src/app.py"))
        out.append(await ctx.read_file("src/app.py"))
        await ctx.write_file("src/app.py", "rewritten\n")
        out.append(await ctx.terminal("cat src/app.py"))
        # a listing goes as deep on every backend
        await ctx.terminal("p=deep; for i in $(seq 70); do mkdir $p; touch $p/f; p=$p/d; done")
        out.append(sorted(await ctx.sandbox.list_files("deep")))
        return out

    local, other = run_everywhere(backend, tmp_path, script)
    for number, (expected, got) in enumerate(zip(local, other)):
        assert got == expected, number


def permission_error(path: str) -> str:
    """What local and bwrap say of a file operation the OS refused with EACCES."""

    def refused():
        raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), path)

    with pytest.raises(SandboxError) as caught:
        file_errors(path, refused)
    return str(caught.value)


@pytest.mark.parametrize("backend", [LOCAL, *OTHERS])
def test_a_place_the_agent_may_not_write_gives_the_same_error(backend, tmp_path):
    if backend != "docker" and os.geteuid() == 0:
        pytest.skip("as root the host writes and reads the workspace's files whatever their mode")

    async def main():
        ctx = ToolContext("denied", make_manager(tmp_path, backend))
        await ctx.terminal("mkdir ro && echo s > secret && chmod 000 secret && chmod 555 ro")
        errors = []
        for name, arguments in [
            ("write_file", {"path": "ro/f", "content": "x"}),
            ("write_file", {"path": "ro/sub/f", "content": "x"}),
            ("write_file", {"path": "secret", "content": "x"}),
            ("read_file", {"path": "secret"}),
        ]:
            with pytest.raises(ToolExecutionError) as caught:
                await ctx.call_tool(name, arguments)
            errors.append(str(caught.value))
        await ctx.cleanup()
        return errors

    assert asyncio.run(main()) == [
        permission_error(path) for path in ("ro/f", "ro/sub/f", "secret", "secret")
    ]


@pytest.mark.parametrize("backend", OTHERS)
def test_upload_and_download_are_binary_safe(backend, tmp_path):
    blob = bytes(range(256)) * 257 + os.urandom(65536) + b"\r\n\x00tail"
    source = tmp_path / "in"
    (source / "nested" / "deeper").mkdir(parents=True)
    (source / "blob.bin").write_bytes(blob)
    (source / "nested" / "text.txt").write_text("héllo\r\nwörld")
    (source / "nested" / "deeper" / "empty").write_bytes(b"")
    expected_sha = hashlib.sha256(blob).hexdigest()

    def script_for(out_dir):
        async def script(ctx):
            written = await ctx.upload_dir(source, "tree")
            await ctx.upload_file(source / "blob.bin", f"{ctx.sandbox.workdir}/single.bin")
            inside = await ctx.terminal("sha256sum single.bin tree/blob.bin | cut -c1-64 | uniq")
            await ctx.terminal("printf '\\x00\\x01\\xfe\\xff' > made-inside.bin")
            downloaded = await ctx.download_dir("tree", out_dir / "tree")
            await ctx.download_file("made-inside.bin", out_dir / "made-inside.bin")
            await ctx.download_file("single.bin", out_dir / "single.bin")
            return written, inside, [p.relative_to(out_dir).as_posix() for p in downloaded]

        return script

    async def both():
        results = []
        for name in ("local", backend):
            manager = make_manager(tmp_path, name)
            ctx = ToolContext("transfer", manager)
            try:
                results.append(await script_for(tmp_path / f"out-{name}")(ctx))
            finally:
                await ctx.cleanup()
        return results

    local, other = asyncio.run(both())
    assert local == other
    assert local[1]["output"].strip() == expected_sha
    for name in ("local", backend):
        out = tmp_path / f"out-{name}"
        assert (out / "single.bin").read_bytes() == blob
        assert (out / "tree" / "blob.bin").read_bytes() == blob
        assert (out / "tree" / "nested" / "text.txt").read_bytes() == "héllo\r\nwörld".encode()
        assert (out / "tree" / "nested" / "deeper" / "empty").read_bytes() == b""
        assert (out / "made-inside.bin").read_bytes() == b"\x00\x01\xfe\xff"
