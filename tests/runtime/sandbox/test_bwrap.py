"""The bwrap backend: its view of the system, paths as the sandbox sees them, limits, lifecycle."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest
from helpers.sandbox import (
    NO_BWRAP,
    alive,
    eventually,
    has_bwrap,
    make_manager,
    namespace_members,
)

from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.sandbox import PathOutsideWorkspace, SandboxError
from hermes_envgen.runtime.sandbox.bwrap import anchor as anchor_module
from hermes_envgen.runtime.sandbox.bwrap import backend as bwrap_module
from hermes_envgen.runtime.sandbox.bwrap.backend import SANDBOX_UID

pytestmark = pytest.mark.skipif(not has_bwrap(), reason=NO_BWRAP)
REPO = Path(__file__).resolve().parents[3]
AS_ROOT = os.geteuid() == 0


@pytest.fixture
def manager(tmp_path):
    return make_manager(tmp_path, "bwrap")


def test_commands_see_a_fixed_workspace_and_a_read_only_system(manager):
    async def main():
        sandbox = manager.get("view")
        other = manager.get("other")
        out = {
            "where": await sandbox.run('pwd; echo "$HOME"; hostname'),
            "who": await sandbox.run("id -u"),
            "tools": await sandbox.run(
                "for t in bash python3 cat grep sed sort wc awk find xargs ps; do"
                " command -v $t >/dev/null || echo missing $t; done;"
                " echo 6 7 | awk '{print $1 * $2}'; python3 -c 'print(6 * 7)'"
            ),
            "read_only": await sandbox.run(
                "for d in / /usr /etc /bin /dev; do touch $d/x 2>/dev/null && echo $d writable;"
                " done; echo checked"
            ),
            "tmp": await sandbox.run("echo private > /tmp/mine && cat /tmp/mine"),
            "other_tmp": await other.run("cat /tmp/mine"),
            "processes": await sandbox.run("ps -e --no-headers | wc -l"),
            "root": await sandbox.run("ls /"),
        }
        await manager.close_all()
        return out

    out = asyncio.run(main())
    assert out["where"].output == "/workspace\n/workspace\nsandbox\n"
    if AS_ROOT:
        assert out["who"].output == f"{SANDBOX_UID}\n"
    assert out["tools"].output == "42\n42\n"
    assert out["read_only"].output == "checked\n"
    assert out["tmp"].output == "private\n" and out["other_tmp"].exit_code != 0
    assert int(out["processes"].output) < 10  # its own PID namespace: the host is not there
    assert set(out["root"].output.split()) <= {
        "bin", "dev", "etc", "lib", "lib32", "lib64", "libx32", "proc", "sbin", "tmp", "usr",
        "var", "workspace",
    }  # fmt: skip


def test_paths_and_links_resolve_as_inside_the_sandbox(manager):
    async def main():
        ctx = ToolContext("links", manager)
        await ctx.terminal(
            "mkdir real && echo data > real/f && ln -s /workspace/real/f abs_link"
            " && ln -s real rel_dir && ln -s /workspace/real abs_dir && ln -s /workspace ws"
            " && ln -s loop loop && ln -s /workspace/./real/../real/f dotted"
        )
        out = {
            "abs_link": await ctx.read_file("abs_link"),
            "abs_path": await ctx.read_file("/workspace/abs_dir/f"),
            "rel_dir": await ctx.read_file("rel_dir/f"),
            "via_root": await ctx.read_file("ws/ws/real/f"),
            "dotted": await ctx.read_file("dotted"),
            "listed": await ctx.sandbox.list_files("abs_dir"),
        }
        await ctx.write_file("/workspace/new/deep/x.txt", "written from the host\n")
        out["listed_root"] = await ctx.sandbox.list_files("/workspace")
        out["seen_inside"] = await ctx.terminal("cat /workspace/new/deep/x.txt")
        out["host_path"] = ctx.sandbox.host_path("/workspace/abs_dir/f")
        with pytest.raises(SandboxError, match="too many levels"):
            await ctx.read_file("loop")
        with pytest.raises(PathOutsideWorkspace):
            ctx.sandbox.host_path("/workspacex/f")
        workspace = ctx.sandbox.workspace
        await ctx.cleanup()
        return out, workspace

    out, workspace = asyncio.run(main())
    for key in ("abs_link", "abs_path", "rel_dir", "via_root", "dotted"):
        assert out[key] == "data\n", key
    assert out["listed"] == ["real/f"]
    assert out["listed_root"] == ["new/deep/x.txt", "real/f"]
    assert out["seen_inside"]["output"] == "written from the host\n"
    assert out["host_path"] == workspace / "real" / "f"


def test_fifos_and_swapped_links_do_not_trap_the_host(manager, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("host secret")

    async def main():
        sandbox = manager.get("traps")
        await sandbox.run("mkfifo fifo && mkdir d && echo inside > d/secret")
        start = time.monotonic()
        with pytest.raises(SandboxError, match="not a regular file"):
            await sandbox.read_bytes("fifo")
        with pytest.raises(SandboxError, match="not a regular file"):
            await sandbox.write_bytes("fifo", b"x")
        elapsed = time.monotonic() - start
        # A command swaps d for a link to the host between resolution and opening: emulate
        # the race by resolving first, then swapping, then opening with the stale answer.
        stale = sandbox.files.resolve("d/secret")
        (sandbox.workspace / "d" / "secret").unlink()
        (sandbox.workspace / "d").rmdir()
        (sandbox.workspace / "d").symlink_to(outside)
        sandbox.files.resolve = lambda path: stale
        with pytest.raises(PathOutsideWorkspace, match="changed into a link"):
            await sandbox.read_bytes("d/secret")
        with pytest.raises(PathOutsideWorkspace, match="changed into a link"):
            await sandbox.write_bytes("d/secret", b"pwned")
        await manager.close_all()
        return elapsed

    assert asyncio.run(main()) < 20  # a FIFO opened would block forever
    assert (outside / "secret").read_text() == "host secret"


@pytest.mark.slow
def test_limits_default_and_configured(tmp_path):
    default = make_manager(tmp_path, "bwrap")
    tight = make_manager(
        tmp_path / "tight", "bwrap", max_processes=40, memory_mb=256, max_file_mb=1, cpu_seconds=1
    )
    show = "ulimit -u; ulimit -v; ulimit -f; ulimit -t"

    async def main():
        out = {"default": await default.get("d").run(show)}
        sandbox = tight.get("t")
        out["tight"] = await sandbox.run(show)
        out["big_file"] = await sandbox.run("head -c 2M /dev/zero > big; echo $?; stat -c %s big")
        out["memory"] = await sandbox.run(
            "python3 -c 'x = bytearray(512 * 1024 * 1024)' 2>&1 | tail -1"
        )
        out["cpu"] = await sandbox.run("while :; do :; done", timeout=20)
        out["processes"] = await sandbox.run(
            "for i in $(seq 60); do sleep 5 >/dev/null 2>&1 & done 2>&1 | sort -u;"
            " ps -e --no-headers | wc -l",
            timeout=20,
        )
        out["raise"] = await sandbox.run("ulimit -u 1000 || echo cannot raise")
        await default.close_all()
        await tight.close_all()
        return out

    out = asyncio.run(main())
    assert out["default"].output.split() == ["256", "2097152", "1048576", "unlimited"]
    assert out["tight"].output.split() == ["40", "262144", "1024", "1"]
    assert out["big_file"].output.split()[-1] == str(1024 * 1024)  # cut at the limit
    assert "MemoryError" in out["memory"].output
    assert not out["cpu"].timed_out and out["cpu"].exit_code != 0  # SIGXCPU, long before 20 s
    assert "Resource temporarily unavailable" in out["processes"].output
    assert int(out["processes"].output.split()[-1]) <= 40
    assert "cannot raise" in out["raise"].output


def test_the_process_limit_counts_each_sandbox_alone(tmp_path):
    # RLIMIT_NPROC counts per (user namespace, uid): two sandboxes of the same uid each get
    # their full 256, together more than the limit; it would fail if counted per host uid.
    manager = make_manager(tmp_path, "bwrap", command_timeout=30)
    spawn = "for i in $(seq 200); do sleep 20 >/dev/null 2>&1 & done; ps -e --no-headers | wc -l"

    async def main():
        first, second = manager.get("first"), manager.get("second")
        results = await asyncio.gather(first.run(spawn), second.run(spawn))
        await manager.close_all()
        return results

    for result in asyncio.run(main()):
        assert result.exit_code == 0 and int(result.output) > 200, result


def test_the_sandbox_restarts_when_its_processes_are_all_killed(manager):
    async def main():
        sandbox = manager.get("restart")
        await sandbox.run("echo kept > file")
        first_anchor = sandbox._anchor.target
        killed = await sandbox.run("kill -9 -1; sleep 5")  # every process it can, anchor too
        after = await sandbox.run("cat file")
        second_anchor = sandbox._anchor.target
        await manager.close_all()
        return killed, after, first_anchor, second_anchor

    killed, after, first, second = asyncio.run(main())
    assert killed.exit_code != 0  # its shell died with the sandbox's PID namespace
    assert after.output == "kept\n"
    assert first != second and not alive(first)


def test_close_kills_every_process_of_the_sandbox_and_removes_it(manager):
    async def main():
        sandbox = manager.get("close")
        await sandbox.run(
            "mkdir -p a/b && touch a/b/f && chmod 000 a/b && chmod 500 a;"
            " (setsid sleep 600 >/dev/null 2>&1 &); nohup sleep 601 >/dev/null 2>&1 &"
        )
        namespace = os.readlink(f"/proc/{sandbox._anchor.target}/ns/pid")
        members = namespace_members(namespace)
        bwrap_pid = sandbox._anchor.bwrap_pid
        await manager.release("close")
        return sandbox, namespace, members, bwrap_pid

    sandbox, namespace, members, bwrap_pid = asyncio.run(main())
    assert len(members) >= 4  # init, anchor, two sleeps
    assert eventually(lambda: not namespace_members(namespace))
    assert not Path(f"/proc/{bwrap_pid}").exists()  # reaped, not a zombie
    assert not sandbox.workspace.exists()
    with pytest.raises(SandboxError, match="closed"):
        asyncio.run(sandbox.run("true"))


@pytest.mark.skipif(not AS_ROOT, reason="ownership only changes when the host process is root")
def test_files_the_host_writes_belong_to_the_sandbox_user(manager):
    async def main():
        ctx = ToolContext("owner", manager)
        await ctx.write_file("made/by/host.txt", "host\n")
        edited = await ctx.terminal(
            "echo agent >> made/by/host.txt && touch made/by/new && mv made/by/host.txt made/moved"
            " && cat made/moved"
        )
        owners = {
            path.name: path.stat().st_uid
            for path in [ctx.sandbox.workspace, *ctx.sandbox.workspace.rglob("*")]
        }
        await ctx.cleanup()
        return edited, owners

    edited, owners = asyncio.run(main())
    assert edited["output"] == "host\nagent\n"
    assert set(owners.values()) == {SANDBOX_UID}


def test_a_missing_bwrap_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(bwrap_module.shutil, "which", lambda *args, **kwargs: None)
    manager = make_manager(tmp_path, "bwrap")
    with pytest.raises(SandboxError, match=r"install-system-deps\.sh"):
        manager.get("x")
    assert not any((tmp_path / "bwrap").rglob("x"))


def test_a_missing_python_for_the_anchor_is_a_clear_error(tmp_path, monkeypatch):
    monkeypatch.setattr(anchor_module, "PYTHON_DIRECTORIES", (str(tmp_path / "nowhere"),))
    anchor_module.sandbox_python.cache_clear()
    try:
        with pytest.raises(SandboxError, match=r"python3 under /usr.*install-system-deps\.sh"):
            make_manager(tmp_path, "bwrap").get("x")
    finally:
        anchor_module.sandbox_python.cache_clear()


def test_the_install_script_is_idempotent():
    result = subprocess.run(
        ["sh", str(REPO / "scripts" / "install-system-deps.sh")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "all present" in result.stdout


UNPRIVILEGED_SCRIPT = textwrap.dedent(
    """
    import asyncio, json, os, sys
    from pathlib import Path
    from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings
    from hermes_envgen.runtime.sandbox.procfs import is_alive

    def members(namespace):
        found = 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                found += os.readlink(f"/proc/{pid}/ns/pid") == namespace and is_alive(int(pid))
            except OSError:
                pass
        return found

    async def main():
        manager = SandboxManager(SandboxSettings(backend="bwrap", root=sys.argv[1]))
        sandbox, neighbour = manager.get("bomb"), manager.get("neighbour")
        out = {"id": (await sandbox.run("id -u; ulimit -u")).output.split()}
        out["pty"] = (await sandbox.run("python3 -c 'import os; os.openpty(); print(1)'")).output
        namespace = os.readlink(f"/proc/{sandbox._anchor.target}/ns/pid")
        peak = 0

        async def watch():
            nonlocal peak
            while True:
                peak = max(peak, members(namespace))
                await asyncio.sleep(0.05)

        watcher = asyncio.ensure_future(watch())
        bomb = await sandbox.run("bomb() { bomb | bomb & }; bomb; sleep 60", timeout=3)
        watcher.cancel()
        spawn = "for i in $(seq 200); do sleep 20 >/dev/null 2>&1 & done; ps -e | wc -l"
        both = await asyncio.gather(sandbox.run(spawn), neighbour.run(spawn))
        await manager.close_all()
        for _ in range(100):  # the kernel tears the namespace down asynchronously
            if not members(namespace):
                break
            await asyncio.sleep(0.05)
        out.update(
            uid=os.getuid(), peak=peak, timed_out=bomb.timed_out,
            counts=[r.output.strip() for r in both], left=members(namespace),
        )
        print(json.dumps(out))

    asyncio.run(main())
    """
)


@pytest.mark.slow
@pytest.mark.skipif(not AS_ROOT, reason="needs root to start the test as an unprivileged user")
def test_unprivileged_mode_contains_a_fork_bomb_too():
    # The other mode: the host process is not root, bwrap makes the user namespace itself.
    root = Path(tempfile.mkdtemp(prefix="hermes-unprivileged-", dir="/tmp"))
    os.chown(root, SANDBOX_UID, SANDBOX_UID)
    try:
        result = subprocess.run(
            [
                "setpriv",
                "--reuid",
                str(SANDBOX_UID),
                "--regid",
                str(SANDBOX_UID),
                "--clear-groups",
                sys.executable,
                "-c",
                UNPRIVILEGED_SCRIPT,
                str(root),
            ],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
            cwd="/",
            env={"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO / "src")},
        )
    finally:
        subprocess.run(["rm", "-rf", str(root)], check=False)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["uid"] == SANDBOX_UID and out["id"] == [str(SANDBOX_UID), "256"]
    assert out["pty"] == "1\n"  # a private devpts here too
    assert out["timed_out"] and 50 < out["peak"] <= 256 + 2
    assert all(int(count) > 200 for count in out["counts"]), out  # per namespace, not per uid
    assert out["left"] == 0


def test_commands_side_by_side_keep_their_own_output_and_exit_code(manager):
    # Every command of a sandbox is started by its one anchor: each must still get its own
    # pipe, pid and exit status; what cannot start fails as it does on the host.
    async def main():
        sandbox = manager.get("side")
        results = await asyncio.gather(
            *(sandbox.run(f"sleep 0.$((RANDOM % 3)); echo out {i}; echo err {i} >&2; exit {i}")
              for i in range(16))
        )  # fmt: skip
        errors = []
        for command in ("echo a\0b", "echo " + "x" * 200_000):
            with pytest.raises((ValueError, OSError)) as caught:
                await sandbox.run(command)
            errors.append(str(caught.value))
        after = await sandbox.run("echo still here")
        await manager.close_all()
        return results, errors, after

    results, errors, after = asyncio.run(main())
    for i, result in enumerate(results):
        assert (result.exit_code, result.output) == (i, f"out {i}\nerr {i}\n"), result
    assert "null byte" in errors[0] and "Argument list too long" in errors[1], errors
    assert after.output == "still here\n"


def test_commands_get_no_descriptor_of_the_host(manager, tmp_path):
    secret = tmp_path / "secret"
    secret.write_text("host secret\n")
    fd = os.open(secret, os.O_RDONLY)
    os.set_inheritable(fd, True)  # as a careless host library might leave one

    async def main():
        result = await manager.get("fds").run(
            "ls /proc/self/fd; cat /proc/self/fd/* 2>/dev/null; true"
        )
        await manager.close_all()
        return result

    try:
        result = asyncio.run(main())
    finally:
        os.close(fd)
    assert result.output.split() == ["0", "1", "2", "3"], result.output  # 3: ls's own


@pytest.mark.slow
def test_a_stopped_anchor_is_replaced(manager):
    # The agent can stop the anchor (its processes run as the same user): the command that
    # did so times out, and the next one runs in a fresh sandbox instead of hanging.
    async def main():
        sandbox = manager.get("stopped")
        await sandbox.run("echo kept > file")
        first = sandbox._anchor
        start = time.monotonic()
        stopped = await sandbox.run(
            'for p in /proc/[0-9]*; do [ "$(cat $p/comm)" = sandbox-anchor ]'
            " && kill -STOP ${p#/proc/}; done",
            timeout=2,
        )
        elapsed = time.monotonic() - start
        after = await sandbox.run("cat file")
        replaced = sandbox._anchor is not first and not alive(first.target)
        await manager.close_all()
        return stopped, elapsed, after, replaced

    stopped, elapsed, after, replaced = asyncio.run(main())
    assert stopped.timed_out and elapsed < 40, (stopped, elapsed)  # a stopped anchor: forever
    assert after.output == "kept\n" and replaced


@pytest.mark.slow
@pytest.mark.skipif(not AS_ROOT, reason="per-sandbox caps need root (cgroups, a tmpfs mount)")
def test_memory_disk_files_and_cpu_are_capped_per_sandbox(tmp_path):
    manager = make_manager(tmp_path, "bwrap", memory_mb=300, workspace_mb=64, cpus=0.2)
    # four processes of 150 MB each: every one under the per-process limit, 600 MB together
    hogs = (
        "for i in 1 2 3 4; do python3 -c 'import time; b = bytearray(150 << 20);"
        ' b[::4096] = b"x" * len(b[::4096]); time.sleep(3); print("held")\' & done; wait'
    )
    spin = "for i in 1 2 3; do (while :; do :; done) & done; sleep 2; cat /proc/[0-9]*/stat"

    async def main():
        sandbox = manager.get("caps")
        memory = await sandbox.run(hogs, timeout=30)
        disk = await sandbox.run("dd if=/dev/zero of=big bs=1M count=100 2>&1; rm -f big")
        files = await sandbox.run(
            'python3 -c \'import os\nfor i in range(10000): open(f"f{i}", "w")\' 2>&1'
            "| tail -1; ls | wc -l; rm -f f*"
        )
        cpu = await sandbox.run(spin, timeout=20)
        await manager.close_all()
        return memory, disk, files, cpu

    memory, disk, files, cpu = asyncio.run(main())
    assert memory.output.splitlines().count("held") < 4, memory.output
    assert "No space left on device" in disk.output, disk.output
    assert "No space left on device" in files.output, files.output
    spun = cpu_seconds_of(cpu.output, "(bash)")
    assert spun < 1.0, f"{spun:.2f} CPU seconds in 2 s at 0.2 CPUs"


def cpu_seconds_of(stat_lines: str, name: str) -> float:
    """The CPU time (user and system) of the processes called ``name`` in /proc/*/stat lines."""
    ticks = 0
    for line in stat_lines.splitlines():
        if name in line:
            fields = line.rsplit(")", 1)[-1].split()
            ticks += int(fields[11]) + int(fields[12])
    return ticks / os.sysconf("SC_CLK_TCK")


@pytest.mark.skipif(not AS_ROOT, reason="size-limited workspaces need root (a tmpfs)")
def test_open_workspaces_stay_out_of_the_hosts_mount_table_and_last_the_sandbox(tmp_path):
    # Every mount of the host's namespace is copied into each new sandbox: with a workspace
    # mounted on the host per open sandbox, 256 of them made each sandbox start 2.6x slower.
    manager = make_manager(tmp_path, "bwrap", workspace_mb=8)
    assert host_mounts_under(tmp_path) == []

    async def main():
        sandboxes = [manager.get(f"w{n}") for n in range(12)]
        for n, sandbox in enumerate(sandboxes):
            await sandbox.run(f"echo {n} > mine")
        open_mounts = host_mounts_under(tmp_path)
        await sandboxes[0].stop_agent_processes()  # verification: the sandbox restarts
        kept = (await sandboxes[0].run("cat mine; ls")).output
        host_view = sandboxes[1].files.read("mine")
        await manager.close_all()
        return open_mounts, kept, host_view

    open_mounts, kept, host_view = asyncio.run(main())
    assert open_mounts == []  # no workspace of the 12 is mounted in the host's namespace
    assert kept == "0\nmine\n" and host_view == b"1\n"
    assert not manager.root.exists()
    assert host_mounts_under(tmp_path) == []


def host_mounts_under(root: Path) -> list[str]:
    """The mount points of the host's namespace under ``root`` (only this test's: engines and
    other tests mount and unmount elsewhere on the host meanwhile)."""
    with open("/proc/self/mountinfo") as mountinfo:
        points = [line.split()[4] for line in mountinfo]
    return [point for point in points if point == str(root) or point.startswith(f"{root}/")]


def test_the_agent_can_neither_ptrace_the_anchor_nor_reach_its_descriptors(manager):
    # The anchor runs as the agent's user and holds the socket to the host: it makes itself
    # non-dumpable (prctl), without which the agent could take it over or use its socket.
    attach = (
        "import ctypes, sys; libc = ctypes.CDLL(None, use_errno=True);"
        " print('attached' if libc.ptrace(16, int(sys.argv[1]), None, None) == 0"
        " else f'refused {ctypes.get_errno()}')"
    )
    script = (
        'for p in /proc/[0-9]*; do [ "$(cat $p/comm)" = sandbox-anchor ] && a=${p#/proc/}; done;'
        " ls /proc/$a/fd >/dev/null 2>&1 && echo fds-open || echo fds-closed;"
        f' python3 -c "{attach}" $a'
    )

    async def main():
        sandbox = manager.get("anchor")
        try:
            return (await sandbox.run(script)).output
        finally:
            await manager.close_all()

    output = asyncio.run(main())
    assert output.startswith("fds-closed\nrefused "), output


def test_etc_is_one_copy_of_what_every_user_may_read_remade_when_it_changes(tmp_path, monkeypatch):
    # Bound entry by entry, each of two dozen binds made bwrap reread its mount table.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    root = tmp_path / "root"
    (root / "usr/share").mkdir(parents=True)
    (root / "usr/share/zone").write_text("UTC\n")
    (root / "run").mkdir()
    (root / "run/resolv.conf").write_text("nameserver 10.0.0.1\n")
    etc = root / "etc"
    (etc / "ssl/private").mkdir(parents=True)
    (etc / "ssl/private/key.pem").write_text("secret")
    (etc / "ssl/private").chmod(0o700)
    (etc / "ssl/cert.pem").write_text("cert")
    (etc / "passwd").write_text("root:x:0:0::/root:/bin/sh\n")
    (etc / "shadow").write_text("root:*:1::::::\n")  # not an entry sandboxes see
    (etc / "group").write_text("root:x:0:\n")
    (etc / "group").chmod(0o600)  # no user but the owner may read it
    (etc / "localtime").symlink_to("../usr/share/zone")
    (etc / "resolv.conf").symlink_to(root / "run/resolv.conf")

    bwrap_module.etc_snapshot.cache_clear()
    first = bwrap_module.etc_snapshot(str(root))
    copied = sorted(str(p.relative_to(first)) for p in first.rglob("*"))
    assert copied == ["localtime", "mtab", "passwd", "resolv.conf", "ssl", "ssl/cert.pem"]
    assert os.readlink(first / "localtime") == "../usr/share/zone"  # resolves inside
    assert (first / "resolv.conf").read_text() == "nameserver 10.0.0.1\n"
    assert os.readlink(first / "mtab") == "../proc/self/mounts"

    bwrap_module.etc_snapshot.cache_clear()
    assert bwrap_module.etc_snapshot(str(root)) == first  # made once, shared by later runs
    (etc / "passwd").write_text("root:x:0:0::/root:/bin/bash\n")
    bwrap_module.etc_snapshot.cache_clear()
    second = bwrap_module.etc_snapshot(str(root))
    bwrap_module.etc_snapshot.cache_clear()
    assert second != first and (second / "passwd").read_text().endswith("/bin/bash\n")


def test_commands_see_the_copied_etc_read_only(manager):
    async def main():
        sandbox = manager.get("etc")
        try:
            return (
                await sandbox.run(
                    "for f in /etc/shadow /etc/ssl/private; do test -e $f && echo $f; done;"
                    " touch /etc/x 2>/dev/null || echo read-only; getent passwd root | cut -d: -f1;"
                    " readlink /etc/mtab; test -s /etc/ld.so.cache && echo linker-cache"
                )
            ).output
        finally:
            await manager.close_all()

    assert asyncio.run(main()) == "read-only\nroot\n../proc/self/mounts\nlinker-cache\n"
