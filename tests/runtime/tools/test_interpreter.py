"""The ``python`` toolset: a persistent interpreter in the rollout's sandbox, on every backend.

Real sandboxes (local, bwrap, docker when available), real interpreters; the hostile cases of
issue #28 (a loop that ignores interrupts, 1 GB of output, forks, memory, the host's secrets)
each bounded.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import textwrap
import time

import pytest
from helpers.sandbox import BWRAP, DOCKER, LOCAL, eventually, make_manager

from hermes_envgen.runtime.errors import ToolExecutionError
from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.sandbox import SandboxSettings
from hermes_envgen.runtime.sandbox.reaping import tagged_processes
from hermes_envgen.runtime.tools import REGISTRY, interpreter_program
from hermes_envgen.runtime.tools.interpreter import MAX_CODE_BYTES, PythonSettings

pytestmark = pytest.mark.timeout(240)

ALL = [LOCAL, BWRAP, DOCKER]
ISOLATED = [BWRAP, DOCKER]


def run(coroutine):
    return asyncio.run(coroutine)


async def call(ctx: ToolContext, code: str) -> dict:
    output = await ctx.call_tool("python", {"code": code})
    return {} if output == "(no output)" else json.loads(output)


def cell(text: str) -> str:
    """Code written as an indented block in a test."""
    return textwrap.dedent(text).strip("\n")


def context(tmp_path, backend, settings: PythonSettings | None = None, **sandbox) -> ToolContext:
    manager = make_manager(tmp_path, backend, **sandbox)
    services = {"python": settings} if settings is not None else None
    return ToolContext("python-task", manager, services=services)


async def finish(ctx: ToolContext) -> None:
    await ctx.cleanup()
    await ctx.sandboxes.close_all()


def test_the_python_tool_is_registered_with_a_schema_without_injected_parameters():
    tool = REGISTRY.get("python")
    assert tool.toolset == "python"
    assert tool.parameters["required"] == ["code"]
    assert set(tool.parameters["properties"]) == {"code"}
    assert tool.injected == {"sandbox", "context"}


@pytest.mark.parametrize("backend", ALL)
def test_state_output_results_and_errors_across_calls(tmp_path, backend):
    async def scenario():
        ctx = context(tmp_path, backend)
        try:
            assert await call(ctx, "import math\nx = 41") == {}
            assert await call(ctx, "x + 1") == {"result": "42"}
            both = await call(ctx, "import sys, os\nprint('out')\nprint('err', file=sys.stderr)")
            assert both == {"stdout": "out\n", "stderr": "err\n"}
            # What a subprocess prints reaches the reply too (descriptors, not sys.stdout).
            sub = await call(ctx, "os.system('echo from-a-child')")
            assert sub["stdout"] == "from-a-child\n" and sub["result"] == "0"
            error = await call(ctx, "def f():\n    return 1 / 0\nf()")
            assert "ZeroDivisionError" in error["error"] and "line 2, in f" in error["error"]
            assert "interpreter_program" not in error["error"]  # only the agent's frames
            assert "SystemExit" in (await call(ctx, "raise SystemExit(3)"))["error"]
            assert await call(ctx, "math.floor(x / 2)") == {"result": "20"}  # all still there
            # The interpreter works in the workspace: the reward reads what it wrote.
            await call(ctx, "open('answer.txt', 'w').write(str(x))")
            assert await ctx.read_file("answer.txt") == "41"
            assert (
                (await call(ctx, "input()"))["error"]
                .rstrip()
                .endswith("EOFError: EOF when reading a line")
            )
        finally:
            await finish(ctx)

    run(scenario())


@pytest.mark.parametrize("backend", ALL)
def test_a_timeout_interrupts_the_code_and_keeps_the_state(tmp_path, backend):
    async def scenario():
        ctx = context(tmp_path, backend, PythonSettings(timeout=1.5))
        try:
            await call(ctx, "kept = 'yes'")
            started = time.monotonic()
            reply = await call(ctx, "import time\nwhile True:\n    time.sleep(0.01)")
            assert time.monotonic() - started < 20
            assert "KeyboardInterrupt" in reply["error"]
            assert "interrupted after 1.5 s" in reply["notice"]
            assert await call(ctx, "kept") == {"result": "'yes'"}
        finally:
            await finish(ctx)

    run(scenario())


@pytest.mark.slow
@pytest.mark.parametrize("backend", ALL)
def test_code_that_ignores_the_interrupt_is_killed_and_the_restart_is_reported(tmp_path, backend):
    stubborn = cell("""
        import time
        while True:
            try:
                time.sleep(0.01)
            except BaseException:
                pass
    """)

    async def scenario():
        ctx = context(tmp_path, backend, PythonSettings(timeout=1.0))
        try:
            await call(ctx, "lost = 1")
            started = time.monotonic()
            reply = await call(ctx, stubborn)
            assert time.monotonic() - started < 25
            assert "did not stop 1 s in: the interpreter was killed" in reply["notice"]
            after = await call(ctx, "'lost' in globals()")
            assert after["result"] == "False"
            assert "this call ran in a new one" in after["notice"]
            assert "notice" not in await call(ctx, "1")  # said once
        finally:
            await finish(ctx)

    run(scenario())


@pytest.mark.parametrize("backend", ALL)
def test_an_interpreter_that_dies_is_reported_and_replaced(tmp_path, backend):
    async def scenario():
        ctx = context(tmp_path, backend)
        try:
            await call(ctx, "gone = 1")
            reply = await call(ctx, "import os\nos._exit(7)")
            assert "the code died: the interpreter was killed" in reply["notice"]
            after = await call(ctx, "'gone' in globals()")
            assert after["result"] == "False" and "new one" in after["notice"]
        finally:
            await finish(ctx)

    run(scenario())


@pytest.mark.parametrize("backend", ALL)
def test_a_gigabyte_of_output_is_cut_and_bounded(tmp_path, backend):
    async def scenario():
        ctx = context(tmp_path, backend, PythonSettings(timeout=120, max_output_bytes=5000))
        try:
            code = cell("""
                import os
                chunk = b'x' * (1 << 20)
                for _ in range(1024):
                    os.write(1, chunk)
                print('tail', flush=True)
                'done'
            """)
            reply = await call(ctx, code)
            assert reply["result"] == "'done'"
            assert reply["stdout"].startswith("x" * 5000)
            assert (
                f"[output truncated: {(1 << 30) + 5 - 5000} more bytes not shown]"
                in reply["stdout"]
            )
            assert len(reply["stdout"]) < 5200
        finally:
            await finish(ctx)

    run(scenario())


@pytest.mark.slow
@pytest.mark.parametrize("backend", ALL)
def test_output_that_escapes_past_the_commands_cap_is_cut_with_a_notice(tmp_path, backend):
    # The reply travels as JSON, where é takes 6 bytes (\u00e9) for 2 and a control byte 6
    # for 1: it is cut to fit the sandbox command's 64,000-byte output cap, visibly, and a
    # small field is kept whole while the large ones share the rest.
    async def scenario():
        ctx = context(tmp_path, backend)
        try:
            reply = await call(ctx, 'print("é" * 20000)')
            kept, notice = reply["stdout"].split("\n[output truncated: ")
            assert set(kept) == {"é"} and len(kept) > 9000
            assert notice == f"{40001 - 2 * len(kept)} more bytes not shown]"
            code = cell("""
                import sys
                sys.stdout.write("\\x01" * 40000)
                sys.stderr.write("\\x02" * 40000)
                "é" * 100
            """)
            reply = await call(ctx, code)
            assert reply["result"] == repr("é" * 100)
            for name, byte in (("stdout", "\x01"), ("stderr", "\x02")):
                kept, notice = reply[name].split("\n[output truncated: ")
                assert set(kept) == {byte} and len(kept) > 4000
                assert notice == f"{40000 - len(kept)} more bytes not shown]"
            assert len(json.dumps(reply)) <= 60_000
        finally:
            await finish(ctx)

    run(scenario())


def test_every_reply_fits_its_budget_and_counts_what_it_cut():
    # The program's cut alone, on the worst escapes: its budget leaves room, within the
    # sandbox command's cap, for the client's line around the reply.
    assert SandboxSettings().max_output_bytes >= interpreter_program.REPLY_BUDGET + 200
    texts = ["\x01" * 50_000, "é" * 30_000, "€😀" * 9_000 + "\\", "x" * 10, "\udc80" * 3000]
    for budget in (400, 5_000, 60_000):
        for stdout, stderr, result in itertools.permutations(texts, 3):
            data = {name: text.encode("utf-8", "replace") for name, text in
                    (("stdout", stdout), ("stderr", stderr), ("result", result))}  # fmt: skip
            fields = {name: (raw, 7) for name, raw in data.items()}
            reply = interpreter_program.fit_reply(fields, budget, json)
            assert len(json.dumps(reply)) <= budget
            for name, text in reply.items():
                kept, _, notice = text.partition("\n[output truncated: ")
                assert data[name].startswith(kept.encode())
                assert notice == f"{len(data[name]) - len(kept.encode()) + 7} more bytes not shown]"


@pytest.mark.parametrize("backend", ALL)
def test_no_host_secret_reaches_the_interpreter(tmp_path, backend, monkeypatch):
    secrets = {"OPENAI_API_KEY": "sk-host-key-0123", "HERMES_TEST_SECRET": "host-token-4567"}
    for name, value in secrets.items():
        monkeypatch.setenv(name, value)
    # Names and values, not the word "secret": the workspace's path (in HOME and PWD) holds
    # this test's name, "test_no_host_secret_reaches_th0".
    leaked = [*secrets, *secrets.values()]

    async def scenario():
        ctx = context(tmp_path, backend)
        try:
            reply = await call(ctx, "import os\nprint(sorted(os.environ.items()))")
            assert "'HOME'" in reply["stdout"]  # the environment was printed
            assert not [text for text in leaked if text in reply["stdout"]]
            shown = await call(ctx, "open('/proc/self/environ', 'rb').read()")
            assert "HOME=" in shown["result"]  # and what the interpreter was started with
            assert not [text for text in leaked if text in shown["result"]]
        finally:
            await finish(ctx)

    run(scenario())


@pytest.mark.parametrize("backend", ALL)
def test_forked_children_end_with_the_rollout(tmp_path, backend):
    async def scenario():
        ctx = context(tmp_path, backend)
        try:
            reply = await call(
                ctx,
                cell("""
                import os, time
                pids = []
                for _ in range(3):
                    pid = os.fork()
                    if pid == 0:
                        time.sleep(300)
                        os._exit(0)
                    pids.append(pid)
                len(pids)
            """),
            )
            assert reply["result"] == "3"
            if backend == "local":
                prefix = ctx.sandbox._tag_prefix
                assert len(tagged_processes(prefix)) >= 4  # the interpreter and its children
        finally:
            await finish(ctx)
        if backend == "local":
            # Each got SIGKILL; on a busy host a killed process takes up to ~0.1 s to be
            # scheduled and exit, longer than close's rescans of /proc last: wait for that,
            # not for their 300 s of sleep.
            assert eventually(lambda: tagged_processes(prefix) == [], seconds=10)

    run(scenario())


@pytest.mark.parametrize("backend", ISOLATED)
def test_a_fork_bomb_meets_the_sandboxs_process_limit(tmp_path, backend):
    # The bomb ends its children once refused: on docker each call is a `docker exec`, which
    # the full process limit would refuse too while they live (that is the limit working).
    bomb = cell("""
        import os, signal, time
        children = []
        try:
            while True:
                pid = os.fork()
                if pid == 0:
                    time.sleep(60)
                    os._exit(0)
                children.append(pid)
        except OSError as exc:
            print('refused after', len(children), type(exc).__name__)
        for pid in children:
            os.kill(pid, signal.SIGKILL)
            os.waitpid(pid, 0)
    """)

    async def scenario():
        ctx = context(tmp_path, backend, PythonSettings(timeout=30), max_processes=16)
        try:
            reply = await call(ctx, bomb)
            assert reply["stdout"].startswith("refused after"), reply
            assert int(reply["stdout"].split()[2]) < 16
            assert await call(ctx, "1 + 1") == {"result": "2"}  # the interpreter lives on
        finally:
            await finish(ctx)

    run(scenario())


@pytest.mark.parametrize("backend", ISOLATED)
def test_exhausting_memory_is_a_bounded_error(tmp_path, backend):
    async def scenario():
        ctx = context(tmp_path, backend, PythonSettings(timeout=60), memory_mb=256)
        try:
            reply = await call(ctx, "hog = bytearray(2 << 30)")
            assert "MemoryError" in reply.get("error", "") or "killed" in reply.get("notice", ""), (
                reply
            )
            assert (await call(ctx, "21 * 2"))["result"] == "42"
        finally:
            await finish(ctx)

    run(scenario())


def test_concurrent_calls_of_one_rollout_run_one_after_the_other(tmp_path):
    async def scenario():
        ctx = context(tmp_path, "local")
        try:
            await call(ctx, "seen = []")
            calls = [call(ctx, f"seen.append({i})\nlen(seen)") for i in range(4)]
            results = sorted(int(r["result"]) for r in await asyncio.gather(*calls))
            assert results == [1, 2, 3, 4]
        finally:
            await finish(ctx)

    run(scenario())


def test_code_too_long_and_a_missing_python_are_tool_errors(tmp_path):
    async def scenario():
        ctx = context(tmp_path, "local", PythonSettings(command="no-such-python3"))
        try:
            with pytest.raises(ToolExecutionError, match="could not be reached \\(exit 127\\)"):
                await call(ctx, "1")
            with pytest.raises(ToolExecutionError, match=f"longer than {MAX_CODE_BYTES} bytes"):
                await call(ctx, "#" * (MAX_CODE_BYTES + 1))
        finally:
            await finish(ctx)

    run(scenario())


def test_the_local_backends_socket_directory_is_removed_with_the_rollout(tmp_path):
    async def scenario():
        ctx = context(tmp_path, "local")
        await call(ctx, "1")
        from hermes_envgen.runtime.tools.interpreter import _interpreters

        directory = _interpreters[ctx.sandbox].directory
        assert os.path.isdir(directory)
        await finish(ctx)
        assert not os.path.exists(directory)

    run(scenario())


# Code of the agent's that finds the interpreter's sockets and writes to (or closes) them: the
# host's kept connection gets what it sends instead of a reply.
ON_THE_CHANNEL = cell(
    """
    import os, socket, stat
    for fd in [int(n) for n in os.listdir("/proc/self/fd") if int(n) > 2]:
        try:
            if stat.S_ISSOCK(os.fstat(fd).st_mode):
                s = socket.socket(fileno=os.dup(fd))
                {action}
        except OSError:
            pass
    """
)
CHANNEL_ATTACKS = {
    "a reply too large": "s.sendall(b'\\xff' * 4 + b'x' * 100000)",
    "garbage": "s.sendall((8).to_bytes(4, 'big') + b'not json')",
    "closed": "os.close(fd)",
}


@pytest.mark.slow
@pytest.mark.parametrize("backend", [LOCAL, BWRAP, DOCKER])
def test_an_agent_that_floods_or_closes_the_channel_gets_a_fresh_interpreter(tmp_path, backend):
    # Calls after the first go over the host's kept connection to the interpreter.
    own_fds = len(os.listdir("/proc/self/fd"))

    async def scenario():
        ctx = context(tmp_path, backend)
        outcomes = {}
        try:
            for attack, action in CHANNEL_ATTACKS.items():
                await call(ctx, "kept = 1")
                assert (await call(ctx, "kept"))["result"] == "1"  # on the kept connection
                try:
                    hit = await call(ctx, ON_THE_CHANNEL.format(action=action))
                except ToolExecutionError as exc:
                    hit = {"error": str(exc)}
                after = await call(ctx, "'kept' in globals()")
                terminal = await ctx.terminal("echo other tools work")
                outcomes[attack] = hit, after, terminal["output"]
        finally:
            await finish(ctx)
        return outcomes

    for attack, (hit, after, terminal) in run(scenario()).items():
        assert "the interpreter was killed" in hit.get("notice", ""), (attack, hit)
        assert after["result"] == "False" and "new one" in after["notice"], (attack, after)
        assert terminal == "other tools work\n", attack
    assert len(os.listdir("/proc/self/fd")) == own_fds  # no connection left open on the host


@pytest.mark.slow
@pytest.mark.parametrize("backend", [LOCAL, BWRAP, DOCKER])
def test_an_interpreter_killed_by_the_agent_between_calls_is_replaced(tmp_path, backend):
    async def scenario():
        ctx = context(tmp_path, backend)
        try:
            await call(ctx, "kept = 1")
            await call(ctx, "kept")
            from hermes_envgen.runtime.tools.interpreter import _interpreters

            directory = _interpreters[ctx.sandbox].directory
            # killed, and dead when the next call comes: gone, or a zombie whose other
            # threads (its output readers) have exited too. A zombie leader alone is not
            # enough: the threads share its descriptors, and the socket stays open until the
            # last of them has exited (a call sent then is one the interpreter died under).
            killed = await ctx.terminal(
                f"pid=$(cat {directory}/pid); kill -9 $pid; while [ -e /proc/$pid ] && ! {{"
                " grep -q ') Z' /proc/$pid/stat && [ $(ls /proc/$pid/task | wc -l) -eq 1 ];"
                " } 2>/dev/null; do sleep 0.01; done"
            )
            return killed, await call(ctx, "'kept' in globals()")
        finally:
            await finish(ctx)

    killed, after = run(scenario())
    assert killed["exit_code"] == 0, killed
    assert after.get("result") == "False" and "new one" in after["notice"], after
