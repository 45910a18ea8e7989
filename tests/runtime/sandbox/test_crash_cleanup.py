"""A run killed mid-rollout (SIGKILL, SIGTERM, SIGINT) leaves no sandbox behind for long.

SIGTERM and SIGINT: the run removes its sandboxes as it exits. SIGKILL: bwrap sandboxes die
with the run (``--die-with-parent``); what else is left (workspaces, a local command's
daemons) goes when the next run starts under the same root.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers.sandbox import (
    BWRAP,
    DOCKER,
    LOCAL,
    alive,
    descendants,
    docker_containers,
    docker_test_image,
    eventually,
    has_bwrap,
    processes_running,
    run_cleanup_command,
)

from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings
from hermes_envgen.runtime.sandbox import runs as runs_module
from hermes_envgen.runtime.sandbox.docker.engine import RUN_LABEL, run_label
from hermes_envgen.runtime.sandbox.host_limits import (
    cgroup_parents,
    mount_workspace,
    mounts_below,
    remove_run_cgroups,
)
from hermes_envgen.runtime.sandbox.local import LocalSandbox
from hermes_envgen.runtime.sandbox.manager import BACKENDS, register_backend
from hermes_envgen.runtime.sandbox.procfs import own_pid_namespace
from hermes_envgen.runtime.sandbox.runs import runs_directory
from hermes_envgen.testing.runner import offline_environment

EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
ENV_FILE = EXAMPLES / "terminal_env.py"


def script(mark: str) -> dict:
    """Every task: a daemon, a marker file, then a long command the run is killed in."""
    command = (
        f"(setsid nohup sleep {mark} > /dev/null 2>&1 &); sleep {mark} > /dev/null 2>&1 &"
        " touch started; sleep 120"
    )
    turn = {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]}
    return {
        "conversations": [
            {"match": name, "turns": [turn, {"content": "done"}]}
            for name in ("greeting.txt", "count.txt", "sorted.txt")
        ]
    }


@pytest.mark.slow
@pytest.mark.parametrize("backend", [LOCAL, BWRAP, DOCKER])
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM, signal.SIGINT])
def test_a_killed_run_leaves_no_sandbox_behind(
    backend, signum, stub_server, offline_tokenizer, tmp_path
):
    kill_a_run(backend, signum, stub_server, offline_tokenizer, tmp_path)


@pytest.mark.slow
@pytest.mark.parametrize("backend", [BWRAP])
@pytest.mark.parametrize("signum", [signal.SIGKILL, signal.SIGTERM])
def test_a_killed_run_leaves_no_pooled_sandbox_behind(
    backend, signum, stub_server, offline_tokenizer, tmp_path
):
    # Sandboxes started ahead of demand, waiting in the pool as the run is killed.
    kill_a_run(backend, signum, stub_server, offline_tokenizer, tmp_path, pool=4)


def kill_a_run(backend, signum, stub_server, offline_tokenizer, tmp_path, pool: int = 0) -> None:
    """Kill an ``evaluate`` run with ``signum`` while its tasks' commands run; check that what
    it left goes (``pool``: with that many sandboxes started ahead of demand)."""
    mark = f"{random.randrange(7000, 8000)}.{random.randrange(10**6)}"
    needle = f"sleep\0{mark}\0".encode()
    server = stub_server(script(mark))
    root = tmp_path / "sandboxes"
    image = ["--env.sandbox_image", str(docker_test_image())] if backend == "docker" else []
    run = subprocess.Popen(
        [sys.executable, str(ENV_FILE), "evaluate", "--openai.base_url", server.base_url,
         "--env.tokenizer_name", str(offline_tokenizer), "--env.sandbox_root", str(root),
         "--env.data_dir_to_save_evals", str(tmp_path / "evals"),
         "--env.sandbox_backend", backend, "--env.sandbox_command_timeout", "300", *image,
         "--env.sandbox_allow_unsafe_local", str(backend == "local").lower(),
         *(["--env.sandbox_pool", str(pool)] if pool else [])],
        env=offline_environment(),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )  # fmt: skip
    containers = []  # filters of the run's containers (docker: in no workspace of the host)
    try:
        # two tasks' commands are under way: two sleeps each (their workspaces' "started")
        started = eventually(lambda: len(processes_running(needle)) >= 4, seconds=120)
        assert started, run.stderr.read().decode()[-3000:] if run.poll() is not None else ""
        [run_directory] = (p for p in (root / "hermes-envgen").iterdir() if p.is_dir())
        if backend == "docker":
            containers.append(f"label={RUN_LABEL}={run_label(run_directory)}")
            assert len(docker_containers(*containers)) >= 2
        else:
            assert eventually(lambda: len(started_markers(run.pid, root)) >= 2)
        anchors = set()
        if pool:  # the tasks' (2 or 3) and at least 2 pooled ones, all started
            assert eventually(lambda: len(anchors_of(run.pid)) >= 5, seconds=60)
            anchors = anchors_of(run.pid)
        run.send_signal(signum)
        run.wait(timeout=60)
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        run.stderr.close()
    if signum != signal.SIGKILL or backend == "bwrap":
        # the run itself ended its sandboxes (on SIGKILL: the kernel, for bwrap's)
        assert eventually(lambda: not processes_running(needle), seconds=10)
        assert eventually(lambda: not any(alive(pid) for pid in anchors), seconds=10)
    if signum != signal.SIGKILL:
        assert eventually(lambda: not list(root.rglob("started")), seconds=5)
        assert mounts_below(root) == [], "the run left size-limited workspaces mounted"
        if containers:
            assert docker_containers(*containers) == [], "the run left containers"
    # the next run under the same root removes whatever is left
    SandboxManager(SandboxSettings(backend=backend, root=str(root)))
    if containers:
        assert docker_containers(*containers) == []
    assert not processes_running(needle)
    assert not list(root.rglob("started"))
    assert [path.name for path in (root / "hermes-envgen").iterdir()] == []
    assert mounts_below(root) == [], "size-limited workspaces left mounted"
    assert not run_cgroups(run_directory.name), "the run's cgroups were not removed"


def anchors_of(pid: int) -> set[int]:
    """The bwrap sandboxes' anchors among the descendants of ``pid``."""
    found = set()
    for child in descendants(pid):
        with contextlib.suppress(OSError):
            if Path(f"/proc/{child}/comm").read_text().strip() == "sandbox-anchor":
                found.add(child)
    return found


def started_markers(pid: int, root: Path) -> list[Path]:
    """The "started" files of the workspaces of run ``pid``: below ``root``, or in the
    size-limited workspaces that only the run's descriptors reach (bwrap as root)."""
    found = list(root.rglob("started"))
    with contextlib.suppress(OSError):
        for fd in os.listdir(f"/proc/{pid}/fd"):
            with contextlib.suppress(OSError):
                marker = Path(f"/proc/{pid}/fd/{fd}/started")
                if marker.exists():
                    found.append(marker)
    return found


def run_cgroups(run: str) -> list[Path]:
    """The cgroup directories (bwrap as root) of run ``run``."""
    return [parent / run for parent in cgroup_parents() if (parent / run).exists()]


def test_a_new_run_removes_what_a_dead_run_left_on_the_host_under_another_root(tmp_path):
    # A run killed under a root no run uses again (a temporary directory) left its cgroups and
    # a mounted workspace: both are the host's, and the next run anywhere removes them. Those
    # of a run named as before runs locked their cgroups stay: nothing tells they are stale.
    if os.geteuid() != 0 or not cgroup_parents():
        pytest.skip("needs root and cgroup v1 controllers (as in CI)")
    gone = subprocess.Popen(["true"])
    gone.wait()
    legacy = f"{gone.pid}-{int(time.time() * 1000)}"
    name = f"{legacy}-{own_pid_namespace()}"
    for parent in cgroup_parents():
        (parent / name / "sandbox").mkdir(parents=True)
        (parent / legacy / "sandbox").mkdir(parents=True)
    old_root = tmp_path / "old-root"
    workspace = runs_directory(old_root) / name / "task"
    workspace.mkdir(parents=True)
    assert mount_workspace(workspace, 1, None)
    try:
        SandboxManager(SandboxSettings(root=str(tmp_path / "new-root")))
        assert run_cgroups(name) == []
        assert len(run_cgroups(legacy)) == len(cgroup_parents())
        assert mounts_below(old_root) == [] and not (runs_directory(old_root) / name).exists()
    finally:
        remove_run_cgroups(legacy)


def test_the_cleanup_command_removes_what_a_killed_run_left(tmp_path):
    mark = f"{random.randrange(7000, 8000)}.{random.randrange(10**6)}"
    needle = f"sleep\0{mark}\0".encode()
    root = tmp_path / "sandboxes"
    # a run that starts a daemon in a local sandbox, then dies without any cleanup
    dies = f"""
import asyncio, os
from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings

async def main():
    manager = SandboxManager(SandboxSettings(backend="local", root={str(root)!r}))
    await manager.get("task").run("(setsid sleep {mark} > /dev/null 2>&1 &); sleep 0.2")
    os._exit(9)

asyncio.run(main())
"""
    subprocess.run([sys.executable, "-c", dies], timeout=60, check=False)
    assert processes_running(needle) and list((root / "hermes-envgen").iterdir())
    done = run_cleanup_command(root)
    assert "removed 1 stale run(s)" in done.stdout
    assert not processes_running(needle)
    assert list((root / "hermes-envgen").iterdir()) == []


class CutShortSandbox(LocalSandbox):
    """A sandbox whose close is cancelled before it removed anything (as on Ctrl-C)."""

    async def close(self) -> None:
        if self.task_id == "cut-short":
            raise asyncio.CancelledError
        await super().close()


def test_a_close_cut_short_keeps_the_run_to_be_reaped_at_exit(tmp_path):
    # The last close must not release the run (and its lock) while a cancelled sandbox's
    # workspace is still on disk: nothing would remove it then.
    register_backend("cut-short", CutShortSandbox)
    root = tmp_path / "sandboxes"
    manager = SandboxManager(SandboxSettings(backend="cut-short", root=str(root)))

    async def main():
        for task in ("cut-short", "closed"):
            await manager.get(task).run("touch started")
        with contextlib.suppress(asyncio.CancelledError):
            await manager.release("cut-short")
        await manager.release("closed")

    try:
        asyncio.run(main())
    finally:
        BACKENDS.pop("cut-short")
    assert len(list(root.rglob("started"))) == 1  # the cut-short sandbox's
    assert runs_module._run_is_live(root / "hermes-envgen", manager.root.name)
    runs_module._remove_live_runs()  # what interpreter exit runs
    assert not list(root.rglob("started"))
    assert list((root / "hermes-envgen").iterdir()) == []


def test_runs_made_in_one_millisecond_have_names_of_their_own(tmp_path):
    # A shared name would make the second run wait forever for the first one's lock.
    runs = [runs_module.RunDirectory(tmp_path) for _ in range(20)]
    assert len({run.name for run in runs}) == len(runs)
    for run in runs:
        run.claim()
    for run in runs:
        run.release()
    assert list(tmp_path.iterdir()) == []


# Runs of bwrap sandboxes, one after another for SECONDS (each a new run, whose start reaps what
# dead runs left), printing each run's name and each sandbox that failed; with SECONDS 0, one
# run that starts a sandbox and kills itself (SIGKILL) meanwhile.
RUNS = """
import asyncio, os, signal, sys, time
from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings

async def main(root, seconds):
    deadline = time.monotonic() + seconds
    while True:
        manager = SandboxManager(SandboxSettings(backend="bwrap", root=root, command_timeout=30))
        print("run", manager.root.name, flush=True)
        try:
            sandbox = manager.get("task")
            await asyncio.sleep(0.1)  # the model's turn: the sandbox's cgroups wait, empty
            result = await sandbox.run("echo ok")
            if result.output != "ok\\n":
                print("failed", result, flush=True)
        except Exception as exc:
            print("failed", repr(exc), flush=True)
        if seconds == 0:
            os.kill(os.getpid(), signal.SIGKILL)
        await manager.close_all()
        if time.monotonic() > deadline:
            return

asyncio.run(main(sys.argv[1], float(sys.argv[2])))
"""
# In a pid namespace of its own (the run is not its init: ``timeout`` is, and bounds it).
OWN_PID_NAMESPACE = ["unshare", "--pid", "--fork", "--mount-proc", "timeout", "-s", "KILL", "60"]
needs_cgroups_and_namespaces = pytest.mark.skipif(
    os.geteuid() != 0 or not cgroup_parents() or not has_bwrap() or not shutil.which("unshare"),
    reason="needs root, cgroup v1 controllers, bwrap and unshare (as in CI)",
)


def start_runs(root: Path, seconds: float, namespace: list[str]) -> subprocess.Popen:
    return subprocess.Popen(
        [*namespace, sys.executable, "-c", RUNS, str(root), str(seconds)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def finish_runs(runs: subprocess.Popen) -> tuple[list[str], list[str]]:
    """The names of the runs, and the lines of the sandboxes that failed."""
    try:
        output, _ = runs.communicate(timeout=90)
    finally:
        runs.kill()
    lines = output.splitlines()
    names = [line.split()[1] for line in lines if line.startswith("run ")]
    return names, [line for line in lines if not line.startswith("run ")]


@pytest.mark.slow
@needs_cgroups_and_namespaces
def test_runs_in_different_pid_namespaces_reap_only_what_is_theirs(tmp_path):
    # Env workers in containers share the host's cgroups but not its pids: none of them may
    # take another's live run for dead (whose cgroups it would remove under its sandboxes).
    root = tmp_path / "sandboxes"
    both = [start_runs(root, 3, []), start_runs(root, 3, OWN_PID_NAMESPACE)]
    (host_runs, host_failed), (own_runs, own_failed) = (finish_runs(runs) for runs in both)
    assert host_failed == [] and own_failed == []
    assert len(host_runs) >= 2 and len(own_runs) >= 2
    # named apart by their pid namespace (a pid is unique in its namespace only)
    assert {name.split("-")[2] for name in host_runs} != {name.split("-")[2] for name in own_runs}
    for name in host_runs + own_runs:
        assert run_cgroups(name) == [], f"run {name} left its cgroups"
    assert list((root / "hermes-envgen").iterdir()) == []
    assert mounts_below(root) == []


@pytest.mark.slow
@needs_cgroups_and_namespaces
def test_a_run_killed_in_either_pid_namespace_is_reaped_by_the_next_run(tmp_path):
    # Each next run is in the other namespace and under another root: only the cgroups, in the
    # tree that both share, tell it about the killed run.
    for killed_in, next_in in ([], OWN_PID_NAMESPACE), (OWN_PID_NAMESPACE, []):
        [name], failed = finish_runs(start_runs(tmp_path / "killed", 0, killed_in))
        assert failed == []
        cgroups = run_cgroups(name)
        assert cgroups, "the killed run made no cgroups"
        # its sandbox died with it (``--die-with-parent``), leaving the cgroups empty
        assert eventually(lambda cgroups=cgroups: cgroup_processes(cgroups) == "")
        [_], failed = finish_runs(start_runs(tmp_path / "next", 0.01, next_in))
        assert failed == []
        where = "its own pid namespace" if killed_in else "the host's"
        assert run_cgroups(name) == [], f"a run killed in {where} left its cgroups"


def cgroup_processes(directories: list[Path]) -> str:
    """The pids in the cgroups below ``directories`` (the sandboxes' of a run).

    A cgroup that is gone counts as empty: any other run on this machine (another test worker's)
    may reap a killed run's cgroups first, and only empty ones are ever removed.
    """
    pids = []
    for directory in directories:
        try:
            sandboxes = [sandbox for sandbox in directory.iterdir() if sandbox.is_dir()]
        except FileNotFoundError:
            continue
        for sandbox in sandboxes:
            try:
                pids.append((sandbox / "cgroup.procs").read_text())
            except FileNotFoundError:
                continue
    return "".join(pids)
