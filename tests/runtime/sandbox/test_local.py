"""The local sandbox backend: workspaces, timeouts, output caps, secrets, reaping, cleanup."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest

from hermes_envgen.runtime.errors import EnvConfigError
from hermes_envgen.runtime.sandbox import (
    TIMEOUT_EXIT_CODE,
    PathOutsideWorkspace,
    SandboxManager,
    SandboxSettings,
    check_backend,
)
from hermes_envgen.runtime.sandbox.procfs import is_alive as pid_alive  # a zombie is dead


async def until(check: Callable[[], bool], seconds: float = 10.0) -> bool:
    """Poll ``check`` in the event loop until it holds or ``seconds`` pass; whether it held."""
    deadline = time.monotonic() + seconds
    while not check():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


async def until_dead(pid: int) -> bool:
    """Whether a killed process is gone within 10 s (far less than any test's sleep in it)."""
    return await until(lambda: not pid_alive(pid))


def test_commands_run_in_a_private_workspace(sandboxes):
    async def main():
        a, b = sandboxes.get("a"), sandboxes.get("b")
        await a.run("echo one > f.txt")
        result = await b.run("cat f.txt")
        here = await a.run("pwd")
        await sandboxes.close_all()
        return result, here, a

    result, here, a = asyncio.run(main())
    assert result.exit_code != 0
    assert here.output.strip() == str(a.workspace)


def test_task_ids_that_read_alike_once_made_safe_get_workspaces_of_their_own(sandboxes):
    # "a b" and "a_b" once shared a directory name (the second sandbox failed to start), and
    # "." or ".." named the run's directory or its parent.
    task_ids = ["a b", "a_b", "a/b", ".", "..", "x" * 300, "x" * 301, "1-a_b"]

    async def main():
        made = [sandboxes.get(task_id) for task_id in task_ids]
        for number, sandbox in enumerate(made):
            await sandbox.run(f"echo {number} > mine")
        seen = [(await sandbox.run("cat mine")).output for sandbox in made]
        await sandboxes.close_all()
        return made, seen

    made, seen = asyncio.run(main())
    assert seen == [f"{number}\n" for number in range(len(task_ids))]
    assert len({sandbox.workspace for sandbox in made}) == len(task_ids)
    assert all(sandbox.workspace.parent == sandboxes.root for sandbox in made)


def test_a_timeout_kills_the_command_and_everything_it_started(sandboxes):
    async def main():
        sandbox = sandboxes.get("t")
        start = time.monotonic()
        result = await sandbox.run("sleep 30 & echo $! > child.pid; sleep 30", timeout=0.5)
        elapsed = time.monotonic() - start
        child = int((await sandbox.read_bytes("child.pid")).decode())
        # SIGKILLed: gone within moments (a busy host may take a while to schedule its exit),
        # long before its own 30 s
        gone = await until_dead(child)
        await sandboxes.close_all()
        return result, elapsed, gone

    result, elapsed, gone = asyncio.run(main())
    assert result.exit_code == TIMEOUT_EXIT_CODE and result.timed_out
    assert "timed out after 0.5 s" in result.output
    assert elapsed < 20, elapsed  # cut off at 0.5 s, not after the 30 s sleep
    assert gone


def test_output_is_capped(tmp_path):
    manager = SandboxManager(SandboxSettings(root=str(tmp_path), max_output_bytes=1000))

    async def main():
        result = await manager.get("o").run("head -c 100000 /dev/zero | tr '\\0' x")
        await manager.close_all()
        return result

    result = asyncio.run(main())
    assert result.output.startswith("x" * 1000)
    assert "[output truncated: 99000 more bytes not shown]" in result.output
    assert result.truncated_bytes == 99000


def test_host_secrets_do_not_reach_commands(sandboxes, monkeypatch):
    monkeypatch.setenv("OPENROUTER_API_KEY", "sk-secret")
    monkeypatch.setenv("HF_TOKEN", "hf-secret")

    async def main():
        result = await sandboxes.get("s").run("env")
        await sandboxes.close_all()
        return result.output

    output = asyncio.run(main())
    assert "sk-secret" not in output and "hf-secret" not in output
    assert "PATH=" in output


def test_cleanup_kills_background_processes_and_removes_the_workspace(sandboxes):
    async def main():
        sandbox = sandboxes.get("c")
        await sandbox.run("nohup sleep 60 > /dev/null 2>&1 & echo $! > bg.pid")
        pid = int((await sandbox.read_bytes("bg.pid")).decode())
        assert pid_alive(pid)
        await sandboxes.release("c")
        return await until_dead(pid), sandbox.workspace

    gone, workspace = asyncio.run(main())
    assert gone  # within moments, not after its 60 s
    assert not workspace.exists()
    assert len(sandboxes) == 0


def test_idle_sandboxes_are_reaped_and_used_ones_kept(tmp_path):
    manager = SandboxManager(SandboxSettings(root=str(tmp_path)), lifetime=60)

    async def main():
        idle, busy = manager.get("idle"), manager.get("busy")
        idle.last_used -= 61  # idle for longer than the lifetime; "busy" was just used
        reaped = await manager.reap_idle()
        kept = "busy" in manager and busy.workspace.exists()
        await manager.close_all()
        return reaped, idle.workspace.exists(), kept

    assert asyncio.run(main()) == (["idle"], False, True)


def test_the_reaper_runs_on_its_own(tmp_path):
    manager = SandboxManager(SandboxSettings(root=str(tmp_path)), lifetime=0.05)

    async def main():
        sandbox = manager.get("idle")  # starts the reaper, which checks every 50 ms
        # handed out no more, then closed (its workspace goes last)
        reaped = await until(lambda: "idle" not in manager and not sandbox.workspace.exists())
        await manager.close_all()
        return reaped

    assert asyncio.run(main())


def test_paths_outside_the_workspace_are_refused(sandboxes, tmp_path):
    outside = tmp_path / "secret.txt"
    outside.write_text("secret")

    async def main():
        sandbox = sandboxes.get("p")
        (sandbox.workspace / "link").symlink_to(outside)
        errors = []
        for path in ["../secret.txt", str(outside), "link", "sub/../../secret.txt"]:
            with pytest.raises(PathOutsideWorkspace):
                await sandbox.read_bytes(path)
            errors.append(path)
        with pytest.raises(PathOutsideWorkspace):
            await sandbox.write_bytes("../evil.txt", b"x")
        inside_absolute = await sandbox.write_bytes(str(sandbox.workspace / "ok.txt"), b"ok")
        await sandboxes.close_all()
        return errors, inside_absolute

    errors, _ = asyncio.run(main())
    assert len(errors) == 4
    assert not (tmp_path / "evil.txt").exists()


def test_an_unknown_backend_names_the_valid_ones():
    with pytest.raises(ValueError, match="valid backends: local"):
        SandboxManager(SandboxSettings(backend="vm"))


def test_a_sandbox_running_a_long_command_is_not_reaped(tmp_path):
    manager = SandboxManager(SandboxSettings(root=str(tmp_path)), lifetime=60)

    async def main():
        sandbox = manager.get("long")
        command = asyncio.ensure_future(
            sandbox.run("touch started; while [ ! -e go ]; do sleep 0.01; done; echo finished")
        )
        assert await until(lambda: (sandbox.workspace / "started").exists())
        sandbox.last_used -= 61  # its command started longer ago than the lifetime
        reaped_while_running = await manager.reap_idle()
        (sandbox.workspace / "go").touch()
        result = await command
        sandbox.last_used -= 61  # and now idle as long, with nothing running
        reaped_after = await manager.reap_idle()
        await manager.close_all()
        return reaped_while_running, result.output, reaped_after

    assert asyncio.run(main()) == ([], "finished\n", ["long"])


def test_sandboxes_closed_together_share_one_scan_and_lose_every_escaped_process(
    sandboxes, monkeypatch
):
    from hermes_envgen.runtime.sandbox import reaping

    sweeps = []
    real_sweep = reaping.kill_processes

    def counted(pgid, tag):
        if pgid is None:  # a sweep for what left the process groups
            sweeps.append(tag)
        return real_sweep(pgid, tag)

    monkeypatch.setattr(reaping, "kill_processes", counted)

    async def main():
        pids = []
        for name in "abcdef":
            sandbox = sandboxes.get(name)
            await sandbox.run("setsid sleep 60 > /dev/null 2>&1 & echo $! > bg.pid")
            pids.append(int((await sandbox.read_bytes("bg.pid")).decode()))
        assert all(pid_alive(pid) for pid in pids)
        await asyncio.gather(*(sandboxes.release(name) for name in "abcdef"))
        return pids

    pids = asyncio.run(main())
    assert not any(pid_alive(pid) for pid in pids)
    # one sweep of /proc for the six sandboxes closed at once (not one each)
    assert len(sweeps) == 1, sweeps


def test_a_sandbox_that_ran_nothing_closes_without_a_scan(sandboxes, monkeypatch):
    from hermes_envgen.runtime.sandbox import reaping

    def no_scan(tag):
        raise AssertionError("scanned /proc for a sandbox that never ran a command")

    monkeypatch.setattr(reaping, "tagged_processes", no_scan)

    async def main():
        sandbox = sandboxes.get("files-only")
        await sandbox.write_bytes("a.txt", b"x")
        await sandboxes.release("files-only")
        return sandbox.workspace

    assert not asyncio.run(main()).exists()


def test_scans_of_proc_keep_their_distance_on_a_host_where_they_are_slow(sandboxes, monkeypatch):
    # A scan that took 50 ms of CPU (a host with thousands of processes) is followed by the
    # next only SWEEP_SPACING times that later; what closes meanwhile waits and shares it.
    from hermes_envgen.runtime.sandbox import reaping

    starts = []
    real_kill = reaping._timed_kill

    def slow_scan(prefixes):
        starts.append(time.monotonic())
        real_kill(prefixes)
        return 0.05

    monkeypatch.setattr(reaping, "_timed_kill", slow_scan)

    async def main():
        for names in ("a", "bcd"):
            for name in names:
                await sandboxes.get(name).run("true")
            await asyncio.gather(*(sandboxes.release(name) for name in names))

    asyncio.run(main())
    assert len(starts) == 2, starts
    assert starts[1] - starts[0] >= reaping.SWEEP_SPACING * 0.05


def test_the_run_keeps_its_directory_between_rollouts_and_gives_it_up_at_close_all(tmp_path):
    manager = SandboxManager(SandboxSettings(root=str(tmp_path)))

    async def main():
        for name in ("first", "second"):
            await manager.get(name).run("true")
            await manager.release(name)
            assert manager.root.is_dir() and not any(manager.root.iterdir())
        await manager.close_all()

    asyncio.run(main())
    assert not manager.root.exists()
    assert not list(manager.root.parent.iterdir())  # neither the directory nor its lock


def test_an_unknown_backend_is_a_config_error_naming_the_choices():
    with pytest.raises(EnvConfigError, match="'vm'; valid backends: local, bwrap, docker"):
        check_backend("vm")
