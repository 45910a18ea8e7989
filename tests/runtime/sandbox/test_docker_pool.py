"""The docker backend on a pool of engines (``sandbox_docker_hosts``).

The engines are real: the one the suite shares, and a second dockerd this module starts with
scripts/docker-engine.sh on a throw-away data root and a private socket (root only; stopped
at the end of the module), with the test image loaded into it. An engine that vanishes
mid-run is the shared engine behind a unix-socket relay this test closes; a dead one is a
socket nobody listens on; a dark one (a host whose packets are dropped) a loopback listener
whose accept queue is full, so that the kernel drops each new connection's SYN.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import pytest
from helpers.sandbox import (
    docker_test_image,
    eventually,
    needs_docker,
    processes_running,
    run_cleanup_command,
    run_once,
)

from hermes_envgen.runtime.loop.tool_context import ToolContext
from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings, SandboxUnavailable
from hermes_envgen.runtime.sandbox.docker import pool as docker_pool
from hermes_envgen.runtime.sandbox.docker.engine import RUN_LABEL, run_label
from hermes_envgen.runtime.sandbox.docker.pool import EnginePool, connect_failure, engine_failure
from hermes_envgen.testing.runner import offline_environment

SCRIPT = Path(__file__).resolve().parents[3] / "scripts" / "docker-engine.sh"
EXAMPLES = Path(__file__).resolve().parents[3] / "examples"
DEAD = "unix:///nonexistent/hermes-envgen-pool.sock"  # nobody listens: refused at once
CAN_START_DOCKERD = os.geteuid() == 0 and shutil.which("dockerd") is not None
NO_SECOND_ENGINE = "a second dockerd needs root and docker.io (scripts/test.sh installs it)"


def shared_engine() -> str:
    return os.environ.get("DOCKER_HOST") or "unix:///var/run/docker.sock"


@pytest.fixture(autouse=True)
def fresh_pools(monkeypatch):
    """Each test's pools start with every engine in (they are per process otherwise)."""
    monkeypatch.setattr(docker_pool, "_POOLS", {})


@pytest.fixture
def dark_engine():
    """``tcp://127.0.0.1:PORT`` that takes no connection and refuses none: its accept queue
    (of one) is full and never read, so a connection's SYN goes unanswered, as across a network
    to a host gone dark."""
    with socket.socket() as listener, socket.socket() as queued:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        queued.connect(listener.getsockname())
        yield f"tcp://127.0.0.1:{listener.getsockname()[1]}"


@pytest.fixture(scope="module")
def second_engine():
    """A dockerd of this module's own (unix socket, throw-away data root), with the test image."""
    if not CAN_START_DOCKERD:
        pytest.skip(NO_SECOND_ENGINE)
    image = docker_test_image()
    if image is None:
        pytest.skip("no docker test image")
    scratch = Path(tempfile.mkdtemp(prefix="hepool-", dir="/tmp"))  # sockets: short paths
    state = scratch / "s"
    environment = {
        **os.environ,
        "DOCKER_HOST": "unix:///nonexistent/docker.sock",  # so `up` starts one of its own
        "HERMES_ENVGEN_SYSTEM_CACHE": str(scratch / "cache"),  # its data root: thrown away
        "HERMES_ENVGEN_DOCKER_STATE": str(state),
    }
    try:
        up = subprocess.run(
            ["bash", str(SCRIPT), "up"], env=environment, capture_output=True, text=True,
            timeout=180, stdin=subprocess.DEVNULL,
        )  # fmt: skip
        assert up.returncode == 0, up.stderr
        host = f"unix://{state}/docker.sock"
        loaded = subprocess.run(
            f"docker save {image} | docker --host {host} load",
            shell=True, capture_output=True, text=True, timeout=300,
        )  # fmt: skip
        assert loaded.returncode == 0, loaded.stderr
        yield host
    finally:
        subprocess.run(
            ["bash", str(SCRIPT), "down"], env=environment, capture_output=True, timeout=120
        )
        shutil.rmtree(scratch, ignore_errors=True)


def labelled(host: str, run_directory: Path) -> list[str]:
    """The containers of a run on one engine."""
    done = subprocess.run(
        ["docker", "--host", host, "ps", "--all", "--quiet",
         "--filter", f"label={RUN_LABEL}={run_label(run_directory)}"],
        capture_output=True, text=True, timeout=60, check=True,
    )  # fmt: skip
    return done.stdout.split()


def pool_manager(root: Path, hosts: list[str], **settings) -> SandboxManager:
    settings.setdefault("command_timeout", 30)
    return SandboxManager(
        SandboxSettings(
            backend="docker", root=str(root), docker_image=docker_test_image(),
            docker_hosts=hosts, **settings,
        )
    )  # fmt: skip


# -- the pool's choices, without an engine ------------------------------------------------------


def test_the_engine_with_fewest_open_sandboxes_is_picked_ties_in_turn(monkeypatch):
    pool = EnginePool(["unix:///a", "unix:///b", "unix:///c"])
    picked = [pool.pick(set()) for _ in range(4)]
    assert picked == ["unix:///a", "unix:///b", "unix:///c", "unix:///a"]
    pool.release("unix:///b")  # b now has none open: it gets the next
    assert pool.pick(set()) == "unix:///b"
    pool.out("unix:///c", "refused")
    pool.release("unix:///c")  # c has the fewest, but it is out
    assert pool.pick(set()) in ("unix:///a", "unix:///b")
    assert pool.pick({"unix:///a"}) == "unix:///b"
    clock = time.monotonic() + docker_pool.OUT_SECONDS + 1
    monkeypatch.setattr(docker_pool.time, "monotonic", lambda: clock)
    assert pool.pick(set()) == "unix:///c"  # back in once its time is up


def test_an_outage_is_logged_once_and_every_engine_out_names_them(caplog):
    pool = EnginePool(["unix:///a", "unix:///b"])
    with caplog.at_level(logging.WARNING, logger=docker_pool.__name__):
        pool.out("unix:///a", "Cannot connect to the Docker daemon at unix:///a")
        pool.out("unix:///a", "again")  # out already: not said again
    assert [r.getMessage() for r in caplog.records] == [
        "docker engine unix:///a is out for 30 s: Cannot connect to the Docker daemon at unix:///a"
    ]
    with pytest.raises(SandboxUnavailable) as caught:
        pool.pick({"unix:///b"})
    assert "unix:///a (Cannot connect" in str(caught.value) and "unix:///b" in str(caught.value)


def test_only_engine_failures_take_an_engine_out():
    assert engine_failure(1, "Cannot connect to the Docker daemon at unix:///x. Is it running?")
    assert engine_failure(1, "error during connect: Get http://x: dial tcp: connection refused")
    assert engine_failure(1, "remote error: tls: bad certificate")
    assert engine_failure(124, "run timed out after 600 s") == "run timed out after 600 s"
    assert engine_failure(125, "Unable to find image 'nope:1' locally") is None
    assert engine_failure(0, "Cannot connect to the Docker daemon") is None


def test_a_network_engine_that_takes_no_connection_is_found_in_seconds(dark_engine):
    started = time.monotonic()
    why = asyncio.run(connect_failure(dark_engine, timeout=1))
    assert why == f"no TCP connection to 127.0.0.1:{dark_engine.rsplit(':', 1)[1]} within 1 s"
    assert time.monotonic() - started < 10
    with socket.socket() as probe:  # refused: said at once, with why
        probe.bind(("127.0.0.1", 0))
        refused = f"tcp://127.0.0.1:{probe.getsockname()[1]}"
    assert "refused" in (asyncio.run(connect_failure(refused)) or "").lower()
    with socket.socket() as listening:
        listening.bind(("127.0.0.1", 0))
        listening.listen()
        assert asyncio.run(connect_failure(f"tcp://127.0.0.1:{listening.getsockname()[1]}")) is None
    # Not probed: a local engine, and ssh (a host may be an alias of the ssh configuration).
    assert asyncio.run(connect_failure(DEAD)) is None
    assert asyncio.run(connect_failure("ssh://agent@engine-alias")) is None


def test_the_setting_takes_a_list_comma_separated_text_or_json():
    from pydantic import ValidationError

    from hermes_envgen.runtime.env.cli import joined_list_flags
    from hermes_envgen.runtime.env.config import HermesAgentEnvConfig

    hosts = ["unix:///a.sock", "tcp://10.0.0.3:2376"]
    for value in (
        hosts,
        "unix:///a.sock, tcp://10.0.0.3:2376",
        '["unix:///a.sock", "tcp://10.0.0.3:2376"]',
    ):
        assert HermesAgentEnvConfig(sandbox_docker_hosts=value).sandbox_docker_hosts == hosts
    assert HermesAgentEnvConfig().sandbox_settings().docker_hosts == []
    with pytest.raises(ValidationError, match="not a Docker host URL"):
        HermesAgentEnvConfig(sandbox_docker_hosts="10.0.0.3:2376")
    # space-separated on the command line: joined, not cut to the first (atroposlib's parser)
    argv = ["evaluate", "--env.sandbox_docker_hosts", "unix:///a", "tcp://b:1", "--env.x", "1"]
    assert joined_list_flags(argv) == [
        "evaluate",
        "--env.sandbox_docker_hosts",
        "unix:///a,tcp://b:1",
        "--env.x",
        "1",
    ]


# -- on real engines ----------------------------------------------------------------------------


@needs_docker
@pytest.mark.timeout(600)
def test_sandboxes_spread_over_both_engines_and_each_keeps_its_own(second_engine, tmp_path):
    hosts = [shared_engine(), second_engine]
    manager = pool_manager(tmp_path, hosts)

    async def main():
        boxes = [manager.get(f"spread-{i}") for i in range(4)]
        ran = await asyncio.gather(*(b.run(f"echo {i} > mine.txt; cat mine.txt") for i, b in
                                     enumerate(boxes)))  # fmt: skip
        placed = [b.host for b in boxes]
        on_engine = {host: labelled(host, manager.root) for host in hosts}
        back = [await b.read_bytes("mine.txt") for b in boxes]
        # the fewest open first: the engine a closed sandbox leaves gets the next one
        await manager.release("spread-1")
        later = manager.get("later")
        await later.run("true")
        await manager.close_all()
        return ran, placed, on_engine, back, later.host, boxes[1].host

    ran, placed, on_engine, back, later_host, freed = asyncio.run(main())
    assert [r.output for r in ran] == [f"{i}\n" for i in range(4)]
    assert sorted(placed) == sorted(hosts * 2), placed
    assert all(len(on_engine[host]) == 2 for host in hosts), on_engine
    assert back == [f"{i}\n".encode() for i in range(4)]
    assert later_host == freed
    assert all(labelled(host, manager.root) == [] for host in hosts)  # each removed from its own


@needs_docker
@pytest.mark.timeout(300)
def test_a_dead_engine_is_out_logged_once_and_the_pool_carries_on(tmp_path, caplog):
    manager = pool_manager(tmp_path, [DEAD, shared_engine()])

    async def main():
        boxes = [manager.get(f"dead-{i}") for i in range(3)]
        ran = [await b.run("echo alive") for b in boxes]
        hosts = {b.host for b in boxes}
        await manager.close_all()
        return ran, hosts

    with caplog.at_level(logging.WARNING, logger=docker_pool.__name__):
        ran, placed = asyncio.run(main())
    assert [r.output for r in ran] == ["alive\n"] * 3
    assert placed == {shared_engine()}
    said = [r.getMessage() for r in caplog.records if DEAD in r.getMessage()]
    assert len(said) == 1 and said[0].startswith(f"docker engine {DEAD} is out for 30 s: "), said
    assert "Cannot connect to the Docker daemon" in said[0]


@needs_docker
@pytest.mark.timeout(120)
def test_a_dark_engine_is_out_within_the_connect_timeout(dark_engine, tmp_path, caplog):
    manager = pool_manager(tmp_path, [dark_engine, shared_engine()])

    async def main():
        box = manager.get("dark")
        ran = await box.run("echo alive")
        await manager.close_all()
        return ran, box.host

    started = time.monotonic()
    with caplog.at_level(logging.WARNING, logger=docker_pool.__name__):
        ran, placed = asyncio.run(main())
    assert (ran.output, placed) == ("alive\n", shared_engine())
    assert time.monotonic() - started < docker_pool.CONNECT_TIMEOUT + 40
    said = [r.getMessage() for r in caplog.records if dark_engine in r.getMessage()]
    assert said == [
        f"docker engine {dark_engine} is out for 30 s: no TCP connection to "
        f"127.0.0.1:{dark_engine.rsplit(':', 1)[1]} within {docker_pool.CONNECT_TIMEOUT:g} s"
    ]


@needs_docker
@pytest.mark.timeout(120)
def test_with_every_engine_out_the_start_fails_naming_them(tmp_path):
    with socket.socket() as probe:  # a loopback port nobody listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dead_tcp = f"tcp://127.0.0.1:{port}"
    manager = pool_manager(tmp_path, [DEAD, dead_tcp])
    started = time.monotonic()
    with pytest.raises(SandboxUnavailable) as caught:
        run_once(manager, "none")
    message = str(caught.value)
    assert time.monotonic() - started < 60
    assert "no engine of sandbox_docker_hosts" in message
    assert DEAD in message and dead_tcp in message, message


class UnixRelay:
    """An engine address that can vanish: a unix socket relaying to the shared engine's."""

    def __init__(self, path: Path, engine_socket: str) -> None:
        self.path = path
        self.engine_socket = engine_socket
        self._listener = socket.socket(socket.AF_UNIX)
        self._listener.bind(str(path))
        self._listener.listen(64)
        self._open: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    @property
    def host(self) -> str:
        return f"unix://{self.path}"

    def vanish(self) -> None:
        """The engine is gone: no new connection, and every open one cut."""
        self._listener.close()
        with contextlib.suppress(FileNotFoundError):
            self.path.unlink()
        for end in list(self._open):
            with contextlib.suppress(OSError):
                end.shutdown(socket.SHUT_RDWR)
            end.close()
        self._thread.join(10)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            engine = socket.socket(socket.AF_UNIX)
            engine.connect(self.engine_socket)
            self._open += [client, engine]
            for source, target in ((client, engine), (engine, client)):
                threading.Thread(target=_pipe, args=(source, target), daemon=True).start()


def _pipe(source: socket.socket, target: socket.socket) -> None:
    try:
        while data := source.recv(65536):
            target.sendall(data)
    except OSError:
        pass
    with contextlib.suppress(OSError):
        target.shutdown(socket.SHUT_WR)


@needs_docker
@pytest.mark.timeout(300)
def test_an_engine_that_vanishes_mid_run_fails_its_sandboxes_and_the_pool_goes_on(tmp_path, caplog):
    engine = shared_engine()
    if not engine.startswith("unix://"):
        pytest.skip(f"the shared engine is at {engine}, not a unix socket to relay")
    scratch = Path(tempfile.mkdtemp(prefix="herelay-", dir="/tmp"))
    relay = UnixRelay(scratch / "engine.sock", engine.removeprefix("unix://"))
    second = f"unix://{scratch}/second.sock"  # the shared engine by another name: a symlink
    os.symlink(engine.removeprefix("unix://"), scratch / "second.sock")
    manager = pool_manager(tmp_path, [relay.host, second])
    try:

        async def main():
            boxes = [manager.get(f"vanish-{i}") for i in range(4)]
            await asyncio.gather(*(b.run("true") for b in boxes))
            lost = [b for b in boxes if b.host == relay.host]
            kept = [b for b in boxes if b.host == second]
            relay.vanish()
            errors = []
            for box in lost:  # each fails as itself, at once: no hang
                with pytest.raises(SandboxUnavailable) as caught:
                    await asyncio.wait_for(box.run("echo lost"), 60)
                errors.append(str(caught.value))
                with pytest.raises(SandboxUnavailable):
                    await asyncio.wait_for(box.read_bytes("anything"), 60)
            outputs = [(await b.run("echo kept")).output for b in kept]
            fresh = manager.get("after")
            await fresh.run("true")
            await asyncio.wait_for(manager.close_all(), 120)
            return len(lost), len(kept), errors, outputs, fresh.host

        with caplog.at_level(logging.WARNING, logger=docker_pool.__name__):
            lost, kept, errors, outputs, fresh_host = asyncio.run(main())
        assert (lost, kept) == (2, 2)
        assert all(relay.host in error for error in errors), errors
        assert outputs == ["kept\n", "kept\n"]
        assert fresh_host == second  # the vanished engine is out
        said = [r.getMessage() for r in caplog.records if relay.host in r.getMessage()]
        assert len(said) == 1 and "is out for" in said[0], said
    finally:
        # the lost sandboxes' containers are on the shared engine still (their engine's
        # address went, not the engine): remove them there
        with contextlib.suppress(subprocess.SubprocessError):
            leftover = labelled(engine, manager.root)
            if leftover:
                subprocess.run(["docker", "rm", "--force", *leftover], timeout=120)
        shutil.rmtree(scratch, ignore_errors=True)


RUN = """
import asyncio, sys
from hermes_envgen.runtime.sandbox import SandboxManager, SandboxSettings
root, image, *hosts = sys.argv[1:]
manager = SandboxManager(SandboxSettings(
    backend="docker", root=root, docker_image=image, docker_hosts=hosts))
async def main():
    boxes = [manager.get(f"t{i}") for i in range(4)]
    await asyncio.gather(*(box.run("true") for box in boxes))
    print(manager.root, *(box.host for box in boxes), flush=True)
    await asyncio.sleep(600)
asyncio.run(main())
"""


@needs_docker
@pytest.mark.timeout(600)
@pytest.mark.parametrize("reaper", ["cleanup", "next run"])
def test_a_killed_runs_containers_are_reaped_on_every_engine(second_engine, reaper, tmp_path):
    hosts = [shared_engine(), second_engine]
    root = tmp_path / "sandboxes"
    run = subprocess.Popen(
        [sys.executable, "-c", RUN, str(root), str(docker_test_image()), *hosts],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    run_directory = None
    try:
        line = run.stdout.readline().split()
        assert line, run.stderr.read()[-3000:]
        run_directory, placed = Path(line[0]), line[1:]
        assert sorted(placed) == sorted(hosts * 2)
        assert all(len(labelled(host, run_directory)) == 2 for host in hosts)
        run.send_signal(signal.SIGKILL)
        run.wait(timeout=60)
        assert all(len(labelled(host, run_directory)) == 2 for host in hosts)  # left behind
        if reaper == "cleanup":
            run_cleanup_command(root)
        else:
            SandboxManager(SandboxSettings(backend="docker", root=str(root)))  # no pool: the note's
        assert all(labelled(host, run_directory) == [] for host in hosts)
        assert not run_directory.exists()
    finally:
        if run.poll() is None:
            run.kill()
            run.wait()
        for stream in (run.stdout, run.stderr):
            stream.close()
        if run_directory is not None:
            for host in hosts:
                leftover = labelled(host, run_directory)
                if leftover:
                    subprocess.run(["docker", "--host", host, "rm", "-f", *leftover], timeout=120)


@needs_docker
@pytest.mark.timeout(300)
def test_file_tools_and_tool_context_work_on_the_second_engine(second_engine, tmp_path):
    manager = pool_manager(tmp_path, [second_engine])
    blob = bytes(range(256)) * 64 + os.urandom(4096)
    source = tmp_path / "in"
    (source / "nested").mkdir(parents=True)
    (source / "blob.bin").write_bytes(blob)
    (source / "nested" / "text.txt").write_text("héllo\n")

    async def main():
        ctx = ToolContext("second", manager)
        await ctx.write_file("a.txt", "alpha\nbeta\n")
        ran = await ctx.terminal("cat a.txt && hostname")
        written = await ctx.upload_dir(source, "tree")
        digest = await ctx.terminal("sha256sum tree/blob.bin | cut -c1-64")
        via_tools = [
            await ctx.call_tool("read_file", {"path": "a.txt"}),
            await ctx.call_tool("write_file", {"path": "b.txt", "content": "gamma\n"}),
            await ctx.call_tool("patch", {"path": "a.txt", "old_text": "beta", "new_text": "BETA"}),
            await ctx.call_tool("search_files", {"pattern": "BETA"}),
        ]
        patched = await ctx.read_file("a.txt")
        downloaded = await ctx.download_dir("tree", tmp_path / "out")
        host = ctx.sandbox.host
        on = {h: labelled(h, manager.root) for h in (second_engine, shared_engine())}
        await ctx.cleanup()
        await manager.close_all()
        return ran, written, digest, via_tools, patched, downloaded, host, on

    ran, written, digest, via_tools, patched, downloaded, host, on = asyncio.run(main())
    import hashlib

    assert host == second_engine
    assert len(on[second_engine]) == 1 and on[shared_engine()] == []  # on its engine alone
    assert ran["exit_code"] == 0 and ran["output"] == "alpha\nbeta\nsandbox\n"
    assert written == ["tree/blob.bin", "tree/nested/text.txt"]
    assert digest["output"].strip() == hashlib.sha256(blob).hexdigest()
    assert "alpha" in via_tools[0] and "BETA" in via_tools[3], via_tools
    assert patched == "alpha\nBETA\n"
    assert (tmp_path / "out" / "blob.bin").read_bytes() == blob and len(downloaded) == 2
    assert labelled(second_engine, manager.root) == []


@needs_docker
@pytest.mark.timeout(300)
@pytest.mark.parametrize("given", ["flag", "yaml"])
def test_an_unreachable_engine_at_start_up_stops_the_env_in_one_line(
    given, offline_tokenizer, tmp_path
):
    if given == "flag":  # space-separated: joined (comma-separated works as it is)
        pool = ["--env.sandbox_docker_hosts", shared_engine(), DEAD]
    else:  # the form docs/how-to/sandboxes.md gives (a --config YAML list)
        config = tmp_path / "pool.yaml"
        config.write_text(f'env:\n  sandbox_docker_hosts: ["{shared_engine()}", "{DEAD}"]\n')
        pool = ["--config", str(config)]
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "terminal_env.py"), "evaluate",
         "--openai.base_url", "http://127.0.0.1:9/v1",
         "--env.tokenizer_name", str(offline_tokenizer),
         "--env.sandbox_root", str(tmp_path / "sandboxes"),
         "--env.data_dir_to_save_evals", str(tmp_path / "evals"),
         "--env.sandbox_backend", "docker", "--env.sandbox_image", str(docker_test_image()),
         *pool],
        env=offline_environment(), capture_output=True, text=True, timeout=240,
        stdin=subprocess.DEVNULL,
    )  # fmt: skip
    elapsed = time.monotonic() - started
    assert done.returncode == 2, done.stderr[-3000:]
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and DEAD in errors[0], done.stderr[-3000:]
    assert shared_engine() not in errors[0].split("reached from")[1]  # only the dead one named
    assert "Traceback" not in done.stderr
    assert elapsed < 120, elapsed  # the interpreter and tokenizer's start; the check: seconds


@needs_docker
@pytest.mark.timeout(120)
def test_reach_only_tries_every_engine_of_the_pool():
    done = subprocess.run(
        [sys.executable, "-m", "hermes_envgen", "check", "--reach-only",
         "--docker-host", f"{shared_engine()},{DEAD}"],
        capture_output=True, text=True, timeout=100, stdin=subprocess.DEVNULL,
    )  # fmt: skip
    assert done.returncode == 2, done.stdout + done.stderr
    rows = [line for line in done.stdout.splitlines() if "docker " in line]
    assert len(rows) == 2, done.stdout
    assert any(shared_engine() in row and "PASS" in row for row in rows), done.stdout
    assert any(DEAD in row and "FAIL" in row for row in rows), done.stdout


@needs_docker
@pytest.mark.timeout(400)
def test_rollouts_on_an_engine_that_vanishes_fail_as_rollouts_and_the_run_goes_on(
    stub_server, offline_tokenizer, tmp_path
):
    engine = shared_engine()
    if not engine.startswith("unix://"):
        pytest.skip(f"the shared engine is at {engine}, not a unix socket to relay")
    mark = f"6.{random.randrange(10**6):06d}"  # seconds the command sleeps; unique
    needle = f"sleep\0{mark}\0".encode()
    # whichever task: the command solves it, once its sleep is over
    solve = (
        f"sleep {mark}; echo hello > greeting.txt; echo 6 > count.txt;"
        " printf 'alice\\nbob\\ncarol\\n' > sorted.txt"
    )
    turn = {"tool_calls": [{"name": "terminal", "arguments": {"command": solve}}]}
    server = stub_server({"conversations": [{"turns": [turn, {"content": "done"}]}]})
    scratch = Path(tempfile.mkdtemp(prefix="herelay-", dir="/tmp"))
    relay = UnixRelay(scratch / "engine.sock", engine.removeprefix("unix://"))
    second = f"unix://{scratch}/second.sock"
    os.symlink(engine.removeprefix("unix://"), scratch / "second.sock")
    evals = tmp_path / "evals"
    root = tmp_path / "sandboxes"
    run = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "terminal_env.py"), "evaluate",
         "--openai.base_url", server.base_url, "--env.tokenizer_name", str(offline_tokenizer),
         "--env.sandbox_root", str(root), "--env.data_dir_to_save_evals", str(evals),
         "--env.eval_samples_per_item", "4", "--env.max_eval_workers", "4",
         "--env.sandbox_backend", "docker", "--env.sandbox_image", str(docker_test_image()),
         "--env.sandbox_command_timeout", "60", "--env.sandbox_docker_hosts",
         f"{relay.host},{second}"],
        env=offline_environment(), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    run_directory = None
    try:
        # the four rollouts' commands are under way, two on each engine
        assert eventually(lambda: len(processes_running(needle)) >= 4, seconds=180), (
            run.stderr.read()[-3000:] if run.poll() is not None else "no commands"
        )
        [run_directory] = (p for p in (root / "hermes-envgen").iterdir() if p.is_dir())
        relay.vanish()
        _, err = run.communicate(timeout=240)  # nothing hangs
        assert run.returncode == 0, err[-3000:]
        samples = [json.loads(line) for line in (evals / "samples.jsonl").read_text().splitlines()]
        failures = [
            json.loads(line) for line in (evals / "failures.jsonl").read_text().splitlines()
        ]
        # the two rollouts under way on the engine that went failed; every other one, on the
        # engine left (the rollouts after the cut too), is scored
        assert len(failures) == 2, failures
        assert len(samples) >= 2 and all(s["reward"] == 1.0 for s in samples), samples
        assert all(relay.host in f["failure"] and "sandbox lost" in f["failure"] for f in failures)
        assert f"docker engine {relay.host} is out for 30 s" in err
        assert "Traceback" not in err
    finally:
        if run.poll() is None:
            run.kill()
            run.communicate()
        if run_directory is not None:  # the lost rollouts' containers: on the shared engine
            leftover = labelled(engine, run_directory)
            if leftover:
                subprocess.run(["docker", "rm", "--force", *leftover], timeout=120)
        shutil.rmtree(scratch, ignore_errors=True)
