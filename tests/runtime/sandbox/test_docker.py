"""The docker backend: the container it asks for and its path rules (always), and the real
thing where a Docker engine answers (skipped otherwise: "no Docker engine reachable")."""

from __future__ import annotations

import asyncio
import hashlib
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import REQUIRE_DOCKER_VARIABLE
from helpers.sandbox import (
    NO_DOCKER,
    alive,
    docker_containers,
    docker_test_image,
    eventually,
    make_manager,
    namespace_members,
    needs_docker,
    run_cleanup_command,
)

from hermes_envgen.runtime.sandbox import (
    BACKENDS,
    DEFAULT_DOCKER_IMAGE,
    PathOutsideWorkspace,
    SandboxError,
    SandboxManager,
    SandboxSettings,
    check_backend,
)
from hermes_envgen.runtime.sandbox.base import RUN_TAG_VARIABLE, CommandResult
from hermes_envgen.runtime.sandbox.docker.backend import (
    DockerSandbox,
    container_path,
    escaped_path,
    explain_start_failure,
)
from hermes_envgen.runtime.sandbox.docker.engine import RUN_LABEL
from hermes_envgen.runtime.sandbox.docker.engine import docker_cli as _docker
from hermes_envgen.runtime.sandbox.docker.engine import docker_exec as _exec
from hermes_envgen.runtime.sandbox.docker.shell import (
    KILL_ALL_SCRIPT,
    KILL_SCRIPT,
    LIST_SCRIPT,
    READ_SCRIPT,
    WRITE_SCRIPT,
)

# -- without an engine: the argv, the path rules, the scripts ----------------------------------


def sandbox_with(tmp_path: Path, **settings) -> DockerSandbox:
    return DockerSandbox("task/1", SandboxSettings(backend="docker", **settings), tmp_path / "w")


def option_values(argv: list[str], option: str) -> list[str]:
    return [argv[i + 1] for i, arg in enumerate(argv) if arg == option]


def test_the_container_is_locked_down_by_default(tmp_path, monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", "sk-host-secret")
    argv = sandbox_with(tmp_path).run_argv()
    assert argv[1:3] == ["run", "--detach"]
    assert option_values(argv, "--network") == ["none"]
    assert "--read-only" in argv and "--init" in argv
    assert option_values(argv, "--cap-drop") == ["ALL"]
    assert option_values(argv, "--security-opt") == ["no-new-privileges"]
    # init and the anchor run as root without capabilities; every exec as nobody
    assert option_values(argv, "--user") == ["0:0"]
    assert option_values(sandbox_with(tmp_path).exec_argv("true"), "--user") == ["65534:65534"]
    assert option_values(argv, "--pids-limit") == ["256"]
    assert option_values(argv, "--memory") == ["2048m"]
    assert option_values(argv, "--memory-swap") == ["2048m"]
    assert option_values(argv, "--ulimit") == [f"fsize={1024 * 1024 * 1024}"]
    assert option_values(argv, "--cpus") == ["1"]
    tmpfs = option_values(argv, "--tmpfs")
    assert [mount.split(":")[0] for mount in tmpfs] == ["/workspace", "/tmp"]
    assert all("nosuid" in mount and "size=" in mount for mount in tmpfs)
    assert "size=1024m,nr_inodes=65536" in tmpfs[0]
    # --workdir on docker run would mount the workspace tmpfs root-owned 0755 (docker 20.10):
    # the agent (uid 65534) could not write its own workspace. Each exec enters it instead.
    assert "--workdir" not in argv
    environment = option_values(argv, "--env")
    assert "HOME=/workspace" in environment
    assert not any("sk-host-secret" in value or value.startswith("PATH=") for value in environment)
    assert argv[-2:] == [DEFAULT_DOCKER_IMAGE, "infinity"]
    assert option_values(argv, "--entrypoint") == ["sleep"]


def test_settings_choose_the_image_network_and_limits(tmp_path):
    argv = sandbox_with(
        tmp_path,
        docker_image="ubuntu:24.04",
        network=True,
        max_processes=64,
        memory_mb=512,
        max_file_mb=10,
        cpu_seconds=30,
        cpus=0.5,
        workspace_mb=100,
    ).run_argv()
    assert argv[-2] == "ubuntu:24.04"
    assert option_values(argv, "--network") == ["bridge"]
    assert option_values(argv, "--pids-limit") == ["64"]
    assert option_values(argv, "--memory") == ["512m"]
    assert option_values(argv, "--ulimit") == [f"fsize={10 * 1024 * 1024}", "cpu=30"]
    assert option_values(argv, "--cpus") == ["0.5"]
    assert "size=100m,nr_inodes=6400" in option_values(argv, "--tmpfs")[0]


def test_exec_argv_tags_the_command_and_names_the_container(tmp_path):
    sandbox = sandbox_with(tmp_path)
    argv = sandbox.exec_argv("bash", "-c", "true", tag="abc.1")
    assert argv[1:4] == ["exec", "--workdir", "/workspace"]
    assert option_values(argv, "--env") == [f"{RUN_TAG_VARIABLE}=abc.1"]
    assert argv[-4:] == [sandbox.container, "bash", "-c", "true"]
    assert sandbox.container.startswith("hermes-task_1-")
    assert "--interactive" in sandbox.exec_argv("cat", stdin=True)


@pytest.mark.parametrize(
    ("path", "expected"),
    [
        ("a/b.txt", "/workspace/a/b.txt"),
        (".", "/workspace"),
        ("", "/workspace"),
        ("/workspace", "/workspace"),
        ("/workspace/./a//b/../c", "/workspace/a/c"),
        ("a/../b", "/workspace/b"),
    ],
)
def test_container_paths_inside_the_workspace(path, expected):
    assert container_path(path) == expected


@pytest.mark.parametrize(
    "path",
    ["../x", "a/../../x", "/etc/passwd", "/", "/workspacex/a", "/workspace/../etc", "a\x00b"],
)
def test_container_paths_outside_the_workspace_are_refused(path):
    with pytest.raises(PathOutsideWorkspace):
        container_path(path)


def run_script(script: str, workspace: Path, path: str, data: bytes | None = None):
    """Run a file script on the host, with a host directory standing for /workspace."""
    target = escaped_path(container_path(path, workdir=str(workspace)))
    return subprocess.run(
        ["sh", "-c", script, "sh", str(workspace), target],
        input=data,
        capture_output=True,
        timeout=10,
        check=False,
    )


def test_the_file_scripts_confine_symlinks_as_the_container_resolves_them(tmp_path):
    workspace = tmp_path / "workspace"
    (workspace / "real").mkdir(parents=True)
    outside = tmp_path / "outside.txt"
    outside.write_text("outside")
    (workspace / "real" / "f").write_bytes(b"\x00\xffdata")
    (workspace / "to_passwd").symlink_to("/etc/passwd")
    (workspace / "to_outside").symlink_to(outside)
    (workspace / "up").symlink_to("..")
    (workspace / "inside").symlink_to(workspace / "real")
    (workspace / "planted").symlink_to(tmp_path / "planted.txt")

    for path in ("to_passwd", "to_outside", "up/outside.txt", "planted"):
        assert run_script(READ_SCRIPT, workspace, path).returncode == 3, path
        assert run_script(WRITE_SCRIPT, workspace, path, b"x").returncode == 3, path
        assert run_script(LIST_SCRIPT, workspace, path).returncode == 3, path
    assert outside.read_text() == "outside" and not (tmp_path / "planted.txt").exists()

    assert run_script(READ_SCRIPT, workspace, "inside/f").stdout == b"\x00\xffdata"
    assert run_script(READ_SCRIPT, workspace, "missing").returncode == 4
    assert run_script(READ_SCRIPT, workspace, "real").returncode == 5
    blob = bytes(range(256)) * 100
    assert run_script(WRITE_SCRIPT, workspace, "new/deep/blob.bin", blob).returncode == 0
    assert run_script(READ_SCRIPT, workspace, "new/deep/blob.bin").stdout == blob
    assert run_script(WRITE_SCRIPT, workspace, "real", b"x").returncode == 5
    listed = run_script(LIST_SCRIPT, workspace, ".").stdout.split(b"\0")
    names = sorted(os.path.relpath(n.decode(), workspace) for n in listed if n)
    assert names == ["new/deep/blob.bin", "real/f"]  # symlinks are not files of the listing


def test_the_file_scripts_take_any_name_the_agent_can_make(tmp_path):
    # docker exec would turn the \xff into U+FFFD; trailing newlines are lost to $(...)
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    names = ["bad\udcffname.txt", "back\\slash", "new\nline\n", "é 'quoted' $x"]
    for number, name in enumerate(names):
        (workspace / name).write_bytes(b"file %d" % number)
        assert escaped_path(name).isascii()
    for number, name in enumerate(names):
        assert run_script(READ_SCRIPT, workspace, name).stdout == b"file %d" % number, name
        assert run_script(WRITE_SCRIPT, workspace, name, b"new").returncode == 0, name
        assert (workspace / name).read_bytes() == b"new"
    assert sorted(os.listdir(workspace)) == sorted(names)


def test_a_file_operation_that_blocks_times_out():
    # as a docker exec whose script blocks opening a FIFO would; the client is killed
    started = time.monotonic()
    code, out, err = asyncio.run(_exec(["sleep", "30"], b"data", timeout=0.5))
    assert time.monotonic() - started < 20  # cut off at 0.5 s, not after the 30 s sleep
    assert (code, out) == (124, b"") and err == "the file operation timed out after 0.5 s"
    with pytest.raises(SandboxError, match=r"^a\.txt: the file operation timed out after 0\.5 s$"):
        DockerSandbox._raise_for(code, "a.txt", err)


def test_a_command_runc_could_not_start_is_said_in_the_sandboxs_words():
    # what docker exec printed in a container a background fork bomb had filled
    runc = (
        "OCI runtime exec failed: exec failed: unable to start container process:"
        " read init-p: connection reset by peer: unknown\r\n"
    )
    result = explain_start_failure(CommandResult(126, runc))
    assert result.exit_code == 126
    assert result.output.startswith("the command could not start: the sandbox is out of")
    assert "read init-p" in result.output and result.output.count("\n") == 1
    # a command's own exit code 126 (not executable) is left alone
    own = CommandResult(126, "bash: ./x: Permission denied\n")
    assert explain_start_failure(own) is own


def test_the_kill_script_kills_exactly_the_tagged_processes():
    def start(tag: str) -> subprocess.Popen:
        # setsid: out of our process group, as a daemonised command would be
        return subprocess.Popen(
            ["sleep", "300"], env={**os.environ, RUN_TAG_VARIABLE: tag}, start_new_session=True
        )

    doomed, spared = start("kill-test.1"), start("kill-test.10")
    try:
        subprocess.run(
            ["bash", "-c", KILL_SCRIPT, "bash", f"{RUN_TAG_VARIABLE}=kill-test.1"],
            timeout=30,
            check=True,
        )
        assert doomed.wait(5) == -signal.SIGKILL
        assert alive(spared.pid)
    finally:
        for process in (doomed, spared):
            process.kill()
            process.wait()


def test_the_backend_is_registered_and_an_unreachable_engine_is_a_clear_error(
    tmp_path, monkeypatch
):
    assert "docker" in BACKENDS and "bwrap" in BACKENDS
    check_backend("docker")
    with pytest.raises(ValueError, match="valid backends: local, bwrap, docker"):
        check_backend("vm")
    # an engine nobody runs, whatever socket this machine has
    monkeypatch.setenv("DOCKER_HOST", "unix:///nonexistent/docker.sock")
    manager = make_manager(tmp_path, "docker")

    async def main():
        sandbox = manager.get("x")
        with pytest.raises(SandboxError, match="no Docker engine answers at unix:///nonexistent"):
            await sandbox.run("true")
        with pytest.raises(SandboxError, match="no Docker engine answers"):
            await sandbox.read_bytes("a.txt")
        await manager.close_all()

    asyncio.run(main())


@pytest.mark.parametrize("required", ["1", ""])
def test_a_docker_test_that_cannot_run_fails_when_docker_is_required(required, tmp_path):
    # scripts/test.sh requires docker once it has an engine and the image: a skip would hide
    # a backend that went untested.
    test = f"{Path(__file__)}::test_commands_run_locked_down_in_the_container"
    environment = {
        **os.environ,
        "DOCKER_HOST": "unix:///nonexistent/docker.sock",
        REQUIRE_DOCKER_VARIABLE: required,
    }
    done = subprocess.run(
        [sys.executable, "-m", "pytest", test, "-p", "no:cacheprovider", "-rfs"],
        env=environment,
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if required:
        assert done.returncode == 1, done.stdout
        assert f"{REQUIRE_DOCKER_VARIABLE}=1 but {NO_DOCKER}" in done.stdout
    else:
        assert done.returncode == 0, done.stdout
        assert "1 skipped" in done.stdout and NO_DOCKER in done.stdout


# -- with an engine ------------------------------------------------------------------------------


@pytest.fixture
def docker_manager(tmp_path):
    return make_manager(tmp_path, "docker", command_timeout=30)


@needs_docker
def test_commands_run_locked_down_in_the_container(docker_manager):
    async def main():
        sandbox = docker_manager.get("run")
        out = {
            "basics": await sandbox.run('pwd; echo "$HOME"; hostname; id -u; exit 3'),
            "caps": await sandbox.run("grep CapEff /proc/self/status"),
            "read_only": await sandbox.run("touch /usr/x /x 2>&1; echo done"),
            "workspace": await sandbox.run("echo data > f && cat f && echo tmp > /tmp/t"),
            "network": await sandbox.run(
                "python3 -c \"import socket; socket.create_connection(('1.1.1.1', 53), timeout=3)\""
            ),
        }
        name = sandbox.container
        await docker_manager.close_all()
        return out, name

    out, name = asyncio.run(main())
    assert out["basics"].exit_code == 3
    assert out["basics"].output == "/workspace\n/workspace\nsandbox\n65534\n"
    assert out["caps"].output.split()[-1] == "0000000000000000"
    assert "Read-only file system" in out["read_only"].output
    assert out["workspace"].output == "data\n"
    assert out["network"].exit_code != 0
    listed = subprocess.run(
        ["docker", "ps", "-a", "-q", "--filter", f"name={name}"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert listed.stdout.strip() == ""  # close removed the container


# Each limit as the container sees it, under cgroup v1 or v2.
CGROUP_LIMITS = """cat /sys/fs/cgroup/pids/pids.max 2>/dev/null || cat /sys/fs/cgroup/pids.max
cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us /sys/fs/cgroup/cpu/cpu.cfs_period_us 2>/dev/null ||
  cat /sys/fs/cgroup/cpu.max
cat /sys/fs/cgroup/memory/memory.limit_in_bytes 2>/dev/null || cat /sys/fs/cgroup/memory.max"""


@needs_docker
def test_the_limits_hold_in_the_container(tmp_path):
    manager = make_manager(
        tmp_path,
        "docker",
        command_timeout=60,
        memory_mb=64,
        max_processes=64,
        max_file_mb=5,
        cpus=0.5,
        workspace_mb=100,
    )

    async def main():
        sandbox = manager.get("limits")
        out = {
            "cgroups": await sandbox.run(CGROUP_LIMITS),
            "fsize": await sandbox.run("grep 'Max file size' /proc/self/limits"),
            "big_file": await sandbox.run("head -c 6M /dev/zero > big; ls -l big | cut -d' ' -f5"),
            "hog": await sandbox.run("python3 -c 'x = bytearray(256 * 2**20)'; echo $?"),
            "workspace": await sandbox.run("df -k --output=size,itotal /workspace | tail -n 1"),
        }
        await manager.close_all()
        return out

    out = asyncio.run(main())
    pids, *cpu, memory = out["cgroups"].output.split()
    assert pids == "64" and cpu == ["50000", "100000"], out["cgroups"].output
    assert int(memory) == 64 * 2**20, out["cgroups"].output
    assert out["fsize"].output.split()[3:5] == [str(5 * 2**20)] * 2, out["fsize"].output
    assert out["big_file"].output.splitlines()[-1] == str(5 * 2**20), out["big_file"].output
    assert out["hog"].output.splitlines()[-1] == "137", out["hog"].output  # the OOM killer's
    assert out["workspace"].output.split() == ["102400", "6400"]


@needs_docker
def test_a_timeout_kills_the_command_inside_the_container(docker_manager):
    find = (
        "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' < $f 2>/dev/null; echo; done"
        " | grep -c '^sleep 60[01] ' || true"
    )

    async def main():
        sandbox = docker_manager.get("timeout")
        start = time.monotonic()
        result = await sandbox.run(
            "setsid sleep 600 >/dev/null 2>&1 & (nohup sleep 601 >/dev/null 2>&1 &); sleep 30",
            timeout=2,
        )
        elapsed = time.monotonic() - start
        left = await sandbox.run(find)
        flood = await sandbox.run("yes", timeout=2)
        await docker_manager.close_all()
        return result, elapsed, left, flood

    result, elapsed, left, flood = asyncio.run(main())
    assert result.exit_code == 124 and result.timed_out
    assert elapsed < 25, elapsed  # cut off at 2 s, not after the 30 s sleep
    assert left.output.strip() == "0"
    assert flood.timed_out and len(flood.output) < 64_000 + 200


@needs_docker
def test_files_are_binary_safe_and_confined_in_the_container(docker_manager):
    blob = bytes(range(256)) * 64 + os.urandom(1024)

    async def main():
        sandbox = docker_manager.get("files")
        await sandbox.write_bytes("dir/blob.bin", blob)
        await sandbox.run(
            "ln -s /etc/passwd passwd_link && ln -s /workspace/dir inside && ln -s / root"
        )
        out = {
            "blob": await sandbox.read_bytes("/workspace/inside/blob.bin"),
            "sha": await sandbox.run("sha256sum dir/blob.bin | cut -c1-64"),
            "listed": await sandbox.list_files("."),
        }
        for path in ("passwd_link", "root/etc/passwd", "../x", "/etc/passwd"):
            with pytest.raises(PathOutsideWorkspace):
                await sandbox.read_bytes(path)
            with pytest.raises(PathOutsideWorkspace):
                await sandbox.write_bytes(path, b"pwned")
        with pytest.raises(SandboxError, match="no such file"):
            await sandbox.read_bytes("missing")
        await docker_manager.close_all()
        return out

    out = asyncio.run(main())
    assert out["blob"] == blob
    assert out["sha"].output.strip() == hashlib.sha256(blob).hexdigest()
    assert out["listed"] == ["dir/blob.bin"]


@needs_docker
def test_close_removes_the_container_even_after_a_crash(docker_manager):
    names = []

    async def rollout():
        sandbox = docker_manager.get("crash")
        names.append(sandbox.container)
        try:
            await sandbox.run("sleep 300 >/dev/null 2>&1 &")
            raise RuntimeError("rollout crashed")
        finally:
            await docker_manager.release("crash")

    with pytest.raises(RuntimeError, match="crashed"):
        asyncio.run(rollout())
    assert eventually(
        lambda: (
            not subprocess.run(
                ["docker", "ps", "-a", "-q", "--filter", f"name={names[0]}"],
                capture_output=True,
                text=True,
                check=False,
            ).stdout.strip()
        )
    )


@needs_docker
@pytest.mark.parametrize("reaper", ["cleanup command", "next run"])
def test_a_killed_runs_containers_are_removed_after_it(reaper, tmp_path):
    root = tmp_path / "sandboxes"
    # a run that starts two containers, then dies as kill -9 would leave it
    dies = f"""
import asyncio, os
from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings

async def main():
    image, root = {docker_test_image()!r}, {str(root)!r}
    manager = SandboxManager(SandboxSettings(backend="docker", root=root, docker_image=image))
    for task in ("a", "b"):
        await manager.get(task).run("true")
    print(manager.root.name, flush=True)
    os._exit(9)

asyncio.run(main())
"""
    died = subprocess.run([sys.executable, "-c", dies], capture_output=True, text=True, timeout=300)
    run_name = died.stdout.strip()
    assert run_name, died.stderr
    label = f"label={RUN_LABEL}={socket.gethostname()}/{run_name}"
    assert len(docker_containers(label)) == 2
    if reaper == "cleanup command":
        run_cleanup_command(root)
    else:
        make_manager(tmp_path, "docker")  # under tmp_path/"docker": another root, reaps nothing
        assert len(docker_containers(label)) == 2
        SandboxManager(SandboxSettings(backend="local", root=str(root)))
    assert docker_containers(label) == []
    assert list((root / "hermes-envgen").iterdir()) == []


@needs_docker
def test_the_test_image_is_cached_by_its_recipe():
    """A second build finds the image scripts/test.sh built, under the same content tag."""
    script = Path(__file__).resolve().parents[3] / "scripts" / "docker-test-image.sh"
    result = subprocess.run(
        ["bash", str(script)], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == docker_test_image()
    assert "is in the engine already" in result.stderr  # no debootstrap, no import


@needs_docker
def test_stop_agent_processes_leaves_only_init_and_anchor_even_after_a_fork_bomb(tmp_path):
    manager = make_manager(tmp_path, "docker", command_timeout=30, max_processes=64)

    async def main():
        sandbox = manager.get("stop")
        # A detached fork bomb holds every process slot; a daemon clears its tag and session.
        await sandbox.run(
            "(setsid env -i /bin/sh -c 'exec sleep 7301' >/dev/null 2>&1 &);"
            " (bomb() { bomb | bomb & }; bomb) >/dev/null 2>&1 & sleep 2"
        )
        namespace = container_pid_namespace(sandbox.container)
        crowded = len(namespace_members(namespace))
        start = time.monotonic()
        await sandbox.stop_agent_processes()
        elapsed = time.monotonic() - start
        await sandbox.stop_agent_processes()  # a reward may stop the agent again: no error
        left = namespace_members(namespace)
        after = await sandbox.run('echo "$HOME"; ls -ld "$HOME" | cut -c1-10; echo ok')
        await manager.close_all()
        return crowded, elapsed, left, after

    crowded, elapsed, left, after = asyncio.run(main())
    assert crowded > 50  # the bomb did fill the container
    assert len(left) == 2, left  # docker's init and the sleep that keeps the container up
    assert elapsed < 30
    home, mode, ok = after.output.split()
    assert home.startswith("/tmp/.home-") and mode == "drwx------" and ok == "ok", after.output


def container_pid_namespace(name: str) -> str:
    """A container's PID namespace, as ``readlink /proc/<pid>/ns/pid`` on the host shows it."""
    inspected = subprocess.run(
        ["docker", "inspect", "--format", "{{.State.Pid}}", name],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return os.readlink(f"/proc/{int(inspected.stdout)}/ns/pid")


@needs_docker
def test_the_agent_can_neither_ptrace_nor_signal_init_or_the_anchor(docker_manager):
    # Taken over with ptrace, the anchor (which outlives every agent process) would run the
    # agent's code into verification.
    attack = """
import ctypes, os
libc = ctypes.CDLL(None, use_errno=True)
anchor = open("/proc/1/task/1/children").read().split()[0]
for pid in (1, int(anchor)):
    attached = libc.ptrace(16, pid, None, None)  # PTRACE_ATTACH
    error = os.strerror(ctypes.get_errno())
    try:
        os.kill(pid, 0)
        signalled = "yes"
    except PermissionError:
        signalled = "no"
    print(pid == 1 and "init" or "anchor", attached, error, signalled)
"""

    async def main():
        sandbox = docker_manager.get("ptrace")
        await sandbox.write_bytes("attack.py", attack.encode())
        result = await sandbox.run("python3 attack.py")
        await docker_manager.close_all()
        return result

    result = asyncio.run(main())
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        "init -1 Operation not permitted no",
        "anchor -1 Operation not permitted no",
    ]


@needs_docker
def test_the_kill_all_script_alone_keeps_only_init_and_anchor(docker_manager):
    # The path for an engine on another machine, where the host cannot signal the container.
    async def main():
        sandbox = docker_manager.get("kill-all")
        await sandbox.run(
            "(setsid env -i /bin/sh -c 'exec sleep 7302' >/dev/null 2>&1 &);"
            " (nohup sleep 7303 >/dev/null 2>&1 &); sleep 7304 >/dev/null 2>&1 &"
        )
        namespace = container_pid_namespace(sandbox.container)
        # init, the anchor, the kept channel's agent and the three sleeps (the command's own
        # bash may still be exiting)
        eventually(lambda: len(namespace_members(namespace)) == 6)
        before = len(namespace_members(namespace))
        code, out = await _docker(sandbox.exec_argv("bash", "-c", KILL_ALL_SCRIPT), 30)
        # a SIGKILL is delivered, not yet acted on, when kill returns: on a busy machine the
        # killed processes leave (and init reaps them) a moment after the script ends
        eventually(lambda: len(namespace_members(namespace)) <= 2, seconds=10)
        left = namespace_members(namespace)
        # The script killed the kept channel's agent too: once the host saw its channel end,
        # the next command goes through a new one.
        for _ in range(1000):
            if not sandbox._channel.alive():
                break
            await asyncio.sleep(0.01)
        still_up = await sandbox.run("echo up")
        await docker_manager.close_all()
        return before, code, out, left, still_up

    before, code, out, left, still_up = asyncio.run(main())
    assert before == 6 and code == 0, (before, out)
    assert len(left) == 2, left
    assert still_up.output == "up\n"  # through a new channel: the script killed the agent
