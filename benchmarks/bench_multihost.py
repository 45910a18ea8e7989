"""Two env workers with a Docker engine each against one of each, across the multi-host rig.

The hosts are network namespaces on a private bridge (tests/helpers/netns_rig.py, the rig of
tests/runtime/env/test_multihost.py): two env workers (w0, w1), two Docker engines (e0, e1) and two
stub model servers (m0, m1), each on its own. Each engine is a throw-away dockerd started here in
its host, on a data root of its own, listening on its rig address with TLS and client
certificates (``--tlsverify``; certificates made with openssl as in
tests/runtime/sandbox/test_docker_tls.py) and on a unix socket; the test image is imported into it
from the cached root filesystem (scripts/docker-test-image.sh). Worker i runs the example
terminal env's rollouts (the 3-turn tasks of bench_scale.py's process part, a group of
``--concurrency`` at once, each rollout in its own container) against model mi, with
``DOCKER_HOST=tcp://ei:2376``: every sandbox over TCP+TLS across the rig.

1. Rollouts/s of w0 alone (1 worker, 1 engine) against w0 and w1 at once (2 workers, 2
   engines), in windows of ``--seconds``, in the order 1, 2, 2, 1 (``--rounds`` 2), so a change
   of the machine's load hits both alike. With each window: the CPU seconds per rollout of
   the workers (the env and its docker clients) and of the engines (dockerd, containerd, the
   containers), from a cgroup per host (v1 cpuacct; the containers below their engine's by
   ``--cgroup-parent``), which other jobs on the machine change far less than rollouts/s; the
   cores this benchmark's processes got; the machine's CPU use and load. Both runs share this
   machine's cores: the ratio says what a second worker and engine add here, not on two
   machines; 1 / CPU seconds per rollout is the rollouts/s a core gives.
2. A remote engine's cost per sandbox start and per command: from w0, engine e0 over TCP+TLS
   (across the rig's veth link, dockerd's own TLS) against the same engine at its unix socket,
   measured as bench_remote_engine.py does (its ``measure``).

Needs root (namespaces, dockerd), dockerd, openssl, nsenter, and the test image's cached root
filesystem or debootstrap. Everything started here (namespaces, engines, their containers,
data roots and cgroups, processes) is stopped and removed at the end, on Ctrl-C and SIGTERM
too; after a SIGKILL the next run removes what is left.

    .venv/bin/python benchmarks/bench_multihost.py [--seconds 30] [--rounds 2] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))  # netns_rig

from bench_remote_engine import measure, report
from bench_scale import PROCESS_SCRIPT, cpu_ticks
from helpers import netns_rig
from test_docker_tls import make_certificates

from hermes_envgen.testing.runner import offline_environment

ROOT = Path(__file__).resolve().parent.parent
ENGINE_PORT = 2376
MODEL_PORT = 9001
HOSTS = ["w0", "w1", "e0", "e1", "m0", "m1"]
SCRATCH = Path("/tmp")
CPUACCT = Path("/sys/fs/cgroup/cpuacct")
# An engine's directory /tmp/bmh-<pid>-<host> (short: its socket's path must be), and cgroups.
ENGINE_PREFIX = "bmh-"
READY_TIMEOUT = 300  # seconds for an engine, a model server, a worker's set-up


def start_in(
    rig: netns_rig.Rig, host: str, command: list[str], log: Path, lifetime: int, **kwargs
) -> subprocess.Popen:
    """``command`` in ``host``'s network namespace alone (nsenter), killed with the rig.

    Not ``Rig.start``'s ``ip netns exec``: its mount namespace has a fresh /sys, without the
    cgroup mounts dockerd and the CPU accounting need. Killed after ``lifetime`` seconds in any
    case; ``timeout`` passes a SIGTERM on to the command.
    """
    wrapped = ["nsenter", f"--net={netns_rig.NETNS_DIR / rig.namespace(host)}",
               "timeout", "-s", "KILL", str(lifetime), *command]  # fmt: skip
    with open(log, "w") as output:
        process = subprocess.Popen(wrapped, stdout=output, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True,
                                   **kwargs)  # fmt: skip
    rig.processes.append(process)
    return process


def load_average() -> str:
    return Path("/proc/loadavg").read_text().split()[0]


class CpuAccount:
    """A cgroup (v1 cpuacct) that counts the CPU time of what runs in it and below it.

    A host's processes are started in their own (``wrap``), the engine's containers below its
    engine's (dockerd's ``--cgroup-parent``): CPU seconds per rollout of the worker and of the
    engine, which the machine's other jobs change far less than rollouts/s. Not used on a
    machine without cgroup v1's cpuacct (``unavailable``): the figures are then n/a.
    """

    def __init__(self, name: str) -> None:
        self.name = name
        self.path = CPUACCT / name
        self.path.mkdir(exist_ok=True)

    @staticmethod
    def unavailable() -> bool:
        return not (CPUACCT / "cpuacct.usage").exists()

    def wrap(self, command: list[str]) -> list[str]:
        """``command`` in this cgroup, and so whatever it starts."""
        return ["sh", "-c", 'echo $$ > "$0" && exec "$@"', str(self.path / "cgroup.procs"),
                *command]  # fmt: skip

    def seconds(self) -> float:
        return int((self.path / "cpuacct.usage").read_text()) / 1e9


def remove_cgroups(prefix: str) -> None:
    """The (empty) cgroups named ``prefix``..., in every v1 hierarchy, children first."""
    root = Path("/sys/fs/cgroup")
    for top in [p for h in root.iterdir() if h.is_dir() for p in h.glob(f"{prefix}*")]:
        for directory in sorted((d for d in top.rglob("*") if d.is_dir()), reverse=True):
            with contextlib.suppress(OSError):
                directory.rmdir()
        with contextlib.suppress(OSError):
            top.rmdir()


def wait_for(what: str, done, process: subprocess.Popen, log: Path, timeout: float) -> None:
    """Until ``done()``; a clear error if ``process`` exits first or ``timeout`` passes."""
    deadline = time.monotonic() + timeout
    while not done():
        if process.poll() is not None:
            tail = log.read_text(errors="replace").strip().splitlines()[-5:]
            raise RuntimeError(f"{what} exited ({process.returncode}): {' | '.join(tail)}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"{what} not ready within {timeout:.0f} s (log: {log})")
        time.sleep(0.2)


# -- engines ----------------------------------------------------------------------------------


def storage_driver(directory: Path) -> str:
    """overlay2 if an overlayfs mounts in ``directory``, else vfs (scripts/docker-engine.sh's)."""
    probe = Path(tempfile.mkdtemp(prefix="overlay-probe.", dir=directory))
    for name in ("lower", "upper", "work", "merged"):
        (probe / name).mkdir()
    options = f"lowerdir={probe}/lower,upperdir={probe}/upper,workdir={probe}/work"
    mounted = subprocess.run(
        ["mount", "-t", "overlay", "overlay", "-o", options, str(probe / "merged")],
        capture_output=True,
    )
    if mounted.returncode == 0:
        subprocess.run(["umount", str(probe / "merged")], check=True)
    shutil.rmtree(probe)
    return "overlay2" if mounted.returncode == 0 else "vfs"


class Engine:
    """A throw-away dockerd in a host of the rig: TCP+TLS on its address, and a unix socket."""

    def __init__(
        self,
        rig: netns_rig.Rig,
        host: str,
        certificates: Path,
        lifetime: int,
        account: CpuAccount | None,
    ) -> None:
        self.rig, self.host, self.account = rig, host, account
        self.directory = SCRATCH / f"{ENGINE_PREFIX}{os.getpid()}-{host}"
        self.socket = self.directory / "docker.sock"
        self.url = f"tcp://{rig.addresses[host]}:{ENGINE_PORT}"
        self.certificates = certificates
        self.lifetime = lifetime
        self.process: subprocess.Popen | None = None
        self.driver = ""

    @property
    def local(self) -> dict[str, str]:
        return {"DOCKER_HOST": f"unix://{self.socket}"}

    @property
    def remote(self) -> dict[str, str]:
        return {"DOCKER_HOST": self.url, "DOCKER_TLS_VERIFY": "1",
                "DOCKER_CERT_PATH": str(self.certificates / "client")}  # fmt: skip

    def docker(self, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
        return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout,
                              env={**os.environ, **self.local})  # fmt: skip

    def start(self) -> None:
        self.directory.mkdir()
        (self.directory / "data-root").mkdir()
        self.driver = storage_driver(self.directory)
        c = self.certificates
        command = ["dockerd", "--host", f"unix://{self.socket}", "--host", self.url,
                   "--tlsverify", "--tlscacert", str(c / "ca.pem"),
                   "--tlscert", str(c / "server-cert.pem"), "--tlskey", str(c / "server-key.pem"),
                   "--data-root", str(self.directory / "data-root"),
                   "--exec-root", str(self.directory / "exec"),
                   "--pidfile", str(self.directory / "dockerd.pid"),
                   "--storage-driver", self.driver,
                   "--iptables=false", "--ip-masq=false", "--bridge", "none",
                   "--log-level", "warn"]  # fmt: skip
        if self.account is not None:  # dockerd, containerd, the shims, and the containers
            command = self.account.wrap([*command, "--cgroup-parent", f"/{self.account.name}"])
        log = self.directory / "dockerd.log"
        self.process = start_in(self.rig, self.host, command, log, self.lifetime)

        def answers() -> bool:
            return self.socket.exists() and self.docker("info", timeout=20).returncode == 0

        wait_for(f"dockerd on {self.host}", answers, self.process, log, READY_TIMEOUT)

    def load_image(self) -> str:
        """The test image in this engine, from the cached root filesystem; its name."""
        done = subprocess.run(["bash", str(ROOT / "scripts" / "docker-test-image.sh")],
                              capture_output=True, text=True, timeout=READY_TIMEOUT,
                              env={**os.environ, **self.local})  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(f"the test image on {self.host}: {done.stderr.strip()[-500:]}")
        return done.stdout.strip()

    def stop(self) -> None:
        """Its containers removed, dockerd asked to stop (killed after 30 s), its data gone."""
        if self.process is not None and self.process.poll() is None:
            with contextlib.suppress(subprocess.TimeoutExpired, OSError):
                listed = self.docker("ps", "--all", "--quiet", timeout=30).stdout.split()
                if listed:
                    self.docker("rm", "--force", *listed, timeout=120)
            self.process.terminate()  # timeout(1) passes it on to dockerd
            try:
                self.process.wait(30)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(10)
        unmount_below(self.directory)
        shutil.rmtree(self.directory, ignore_errors=True)


def unmount_below(directory: Path) -> None:
    """What a dockerd left mounted below ``directory`` (killed, it leaves its data root's)."""
    mounts = [line.split()[1] for line in Path("/proc/self/mounts").read_text().splitlines()]
    inside = [m for m in mounts if m == str(directory) or m.startswith(f"{directory}/")]
    for mount in sorted(inside, reverse=True):
        subprocess.run(["umount", "--lazy", mount], capture_output=True)


def reap_stale_engines() -> None:
    """The engines of a benchmark that is gone (SIGKILL): containers, dockerd, data root.

    Before netns_rig.reap_stale, which kills what is left in the namespaces: a container's
    processes are in namespaces of their own, so they are removed through the engine while it
    still answers, and any left (the engine was killed) are found by their cgroup, named after
    a container of the engine's data root.
    """
    for path in SCRATCH.glob(f"{ENGINE_PREFIX}*-*"):
        pid = path.name[len(ENGINE_PREFIX) :].split("-", 1)[0]
        if not pid.isdigit() or Path(f"/proc/{pid}").exists():
            continue
        local = {**os.environ, "DOCKER_HOST": f"unix://{path / 'docker.sock'}"}
        with contextlib.suppress(subprocess.SubprocessError, OSError):
            listed = subprocess.run(["docker", "ps", "--all", "--quiet"], capture_output=True,
                                    text=True, timeout=20, env=local).stdout.split()  # fmt: skip
            if listed:
                subprocess.run(["docker", "rm", "--force", *listed], capture_output=True,
                               timeout=120, env=local)  # fmt: skip
        with contextlib.suppress(OSError, ValueError):
            dockerd = int((path / "dockerd.pid").read_text())
            if str(path) in Path(f"/proc/{dockerd}/cmdline").read_text(errors="replace"):
                os.kill(dockerd, signal.SIGTERM)
                for _ in range(60):
                    if not Path(f"/proc/{dockerd}").exists():
                        break
                    time.sleep(0.5)
        containers = path / "data-root" / "containers"
        ids = {entry.name for entry in containers.iterdir()} if containers.is_dir() else set()
        for process in Path("/proc").iterdir():
            with contextlib.suppress(OSError, ValueError):
                cgroups = (process / "cgroup").read_text()
                if process.name.isdigit() and any(i in cgroups for i in ids):
                    os.kill(int(process.name), signal.SIGKILL)
        time.sleep(1)  # the killed processes leave their cgroups, which can then go
        hierarchies = [Path("/sys/fs/cgroup"), *Path("/sys/fs/cgroup").iterdir()]  # v2, v1
        for cgroup in (h / "docker" / i for h in hierarchies for i in ids):
            with contextlib.suppress(OSError):
                cgroup.rmdir()
        unmount_below(path)
        shutil.rmtree(path, ignore_errors=True)
    for path in CPUACCT.glob(f"{ENGINE_PREFIX}*-*"):
        pid = path.name[len(ENGINE_PREFIX) :].split("-", 1)[0]
        if pid.isdigit() and not Path(f"/proc/{pid}").exists():
            remove_cgroups(f"{ENGINE_PREFIX}{pid}-")


# -- workers ----------------------------------------------------------------------------------


async def worker(directory: Path) -> None:
    """One env worker: set up, then a window of rollouts each time the benchmark says go."""
    spec = json.loads((directory / "spec.json").read_text())
    sys.path.insert(0, str(ROOT / "examples"))
    from terminal_env import TerminalTaskEnv

    from hermes_envgen.testing.envs import build_env

    env = build_env(
        TerminalTaskEnv,
        spec["model_url"],
        spec["tokenizer"],
        directory,
        group_size=spec["concurrency"],
        sandbox_backend="docker",
        sandbox_image=spec["image"],
        max_agent_turns=4,
    )
    await env.setup()
    (directory / "ready").touch()
    for window in range(spec["windows"]):
        go, skip = directory / f"go-{window}", directory / f"skip-{window}"
        while not go.exists():
            if (directory / "stop").exists():
                await env.sandboxes.close_all()
                return
            if skip.exists():
                break
            await asyncio.sleep(0.05)
        if not go.exists():
            continue  # a window of the other worker alone
        rollouts = errors = 0
        start = time.time()  # wall clock: the benchmark compares two workers' windows
        while time.time() - start < spec["seconds"]:
            group, _ = await env.collect_trajectories(await env.get_next_item())
            if group is None:
                errors += 1
            else:
                rollouts += len(group["scores"])
        result = {"start": start, "end": time.time(), "rollouts": rollouts, "errors": errors}
        (directory / f"result-{window}.tmp").write_text(json.dumps(result))
        (directory / f"result-{window}.tmp").rename(directory / f"result-{window}.json")
    await env.sandboxes.close_all()


def engine_cost(directory: Path) -> None:
    """bench_remote_engine's measurement, from this process's host, of the ways in spec.json."""
    spec = json.loads((directory / "spec.json").read_text())
    medians = measure(spec["settings"], spec["image"], directory, spec["rounds"], spec["commands"])
    (directory / "medians.json").write_text(json.dumps(medians))


class Run:
    """The rig, its engines, model servers and workers; ``close`` stops every one of them."""

    def __init__(self, args: argparse.Namespace, work: Path, tokenizer: str) -> None:
        self.args, self.work, self.tokenizer = args, work, tokenizer
        self.windows = 2 * args.rounds
        # Long enough for every window, short enough that a lost process is not forever.
        self.lifetime = 3 * READY_TIMEOUT + self.windows * (args.seconds + 120) + 600
        self.stack = contextlib.ExitStack()
        self.rig = self.stack.enter_context(netns_rig.Rig(HOSTS))
        self.engines: dict[str, Engine] = {}
        self.workers: dict[str, subprocess.Popen] = {}
        self.image = ""
        self.accounts: dict[str, CpuAccount] = {}
        if not CpuAccount.unavailable():
            self.accounts = {h: CpuAccount(f"{ENGINE_PREFIX}{os.getpid()}-{h}") for h in HOSTS}

    def start(self, host: str, command: list[str], log: Path, env: dict) -> subprocess.Popen:
        """``command`` on ``host``, in its CPU account, in this machine's mounts (as dockerd)."""
        if self.accounts:
            command = self.accounts[host].wrap(command)
        return start_in(self.rig, host, command, log, self.lifetime, env=env)

    def close(self) -> None:
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # a second Ctrl-C must not cut this short
        for host in self.workers:
            (self.work / host / "stop").touch()
        for process in self.workers.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                process.wait(30)
        for engine in self.engines.values():
            engine.stop()
        self.stack.close()  # the rig: every process left in it killed, the namespaces removed
        remove_cgroups(f"{ENGINE_PREFIX}{os.getpid()}-")

    def start_engines(self) -> None:
        addresses = tuple(self.rig.addresses[h] for h in ("e0", "e1"))
        certificates = make_certificates(self.work / "certs", "bench-multihost", addresses)
        for host in ("e0", "e1"):
            engine = Engine(self.rig, host, certificates, self.lifetime, self.accounts.get(host))
            self.engines[host] = engine
            engine.start()
        images = {engine.load_image() for engine in self.engines.values()}
        assert len(images) == 1, images
        self.image = images.pop()

    def start_model(self, host: str) -> str:
        address = self.rig.addresses[host]
        script = self.work / "script.json"
        script.write_text(json.dumps(PROCESS_SCRIPT))
        log = self.work / f"{host}.log"
        command = [sys.executable, "-m", "hermes_envgen", "stub-server", "--script", str(script),
                   "--host", address, "--port", str(MODEL_PORT)]  # fmt: skip
        process = self.start(host, command, log, offline_environment())
        wait_for(f"the stub model on {host}", lambda: "listening on" in log.read_text(),
                 process, log, READY_TIMEOUT)  # fmt: skip
        return f"http://{address}:{MODEL_PORT}/v1"

    def start_workers(self) -> None:
        for number in (0, 1):
            host, directory = f"w{number}", self.work / f"w{number}"
            directory.mkdir()
            spec = {"model_url": self.start_model(f"m{number}"), "tokenizer": self.tokenizer,
                    "concurrency": self.args.concurrency, "image": self.image,
                    "seconds": self.args.seconds, "windows": self.windows}  # fmt: skip
            (directory / "spec.json").write_text(json.dumps(spec))
            command = [sys.executable, __file__, "--worker", str(directory)]
            environment = offline_environment(self.engines[f"e{number}"].remote)
            self.workers[host] = self.start(host, command, self.work / f"{host}.log", environment)
        for host, process in self.workers.items():
            ready = self.work / host / "ready"
            wait_for(f"worker {host}", ready.exists, process, self.work / f"{host}.log",
                     READY_TIMEOUT)  # fmt: skip

    def window(self, number: int, hosts: list[str]) -> dict:
        """Rollouts of ``hosts``' workers in window ``number``; the others' window is empty."""
        load = load_average()
        used_before = {h: a.seconds() for h, a in self.accounts.items()}
        busy_before, total_before = cpu_ticks()
        for host in self.workers:  # a worker left out of this window is told so
            if host not in hosts:
                (self.work / host / f"skip-{number}").touch()
        for host in hosts:
            (self.work / host / f"go-{number}").touch()
        results = {}
        for host in hosts:
            path = self.work / host / f"result-{number}.json"
            wait_for(f"worker {host}'s window", path.exists, self.workers[host],
                     self.work / f"{host}.log", self.args.seconds + READY_TIMEOUT)  # fmt: skip
            results[host] = json.loads(path.read_text())
        busy_after, total_after = cpu_ticks()
        used = {h: a.seconds() - used_before[h] for h, a in self.accounts.items()}
        start = min(r["start"] for r in results.values())
        end = max(r["end"] for r in results.values())
        rollouts = sum(r["rollouts"] for r in results.values())
        return {
            "workers": len(hosts),
            "rollouts_per_s": rollouts / (end - start),
            "each": {h: r["rollouts"] / (r["end"] - r["start"]) for h, r in results.items()},
            "errors": sum(r["errors"] for r in results.values()),
            "rollouts": rollouts,
            # CPU seconds of the workers (the env and its docker clients) and of the engines
            "worker_cpu": sum(v for h, v in used.items() if h.startswith("w")) if used else None,
            "engine_cpu": sum(v for h, v in used.items() if h.startswith("e")) if used else None,
            "model_cpu": sum(v for h, v in used.items() if h.startswith("m")) if used else None,
            # the share of the machine this benchmark's processes got, in cores
            "cores": sum(used.values()) / (end - start) if used else None,
            "cpu_busy": (busy_after - busy_before) / max(1, total_after - total_before),
            "load": f"{load}-{load_average()}",
        }

    def engine_cost(self) -> dict[str, tuple[float, float]]:
        directory = self.work / "engine-cost"
        directory.mkdir()
        e0 = self.engines["e0"]
        spec = {"settings": {"socket": e0.local, "tcp+tls": e0.remote}, "image": self.image,
                "rounds": self.args.engine_rounds, "commands": self.args.commands}  # fmt: skip
        (directory / "spec.json").write_text(json.dumps(spec))
        log = self.work / "engine-cost.log"
        command = [sys.executable, __file__, "--engine-cost", str(directory)]
        process = self.start("w0", command, log, offline_environment())
        if process.wait(self.lifetime) != 0:
            raise RuntimeError(f"the engine cost run failed: {log.read_text()[-1000:]}")
        return {
            k: tuple(v) for k, v in json.loads((directory / "medians.json").read_text()).items()
        }


def per_rollout(row: dict, *keys: str) -> str:
    """CPU seconds per rollout of ``keys`` summed, or n/a without the accounting."""
    if row[keys[0]] is None or not row["rollouts"]:
        return "n/a"
    return f"{sum(row[k] for k in keys) / row['rollouts']:.3f}"


def unavailable() -> str | None:
    why = netns_rig.unavailable()
    if why:
        return why
    for tool in ("dockerd", "docker", "openssl", "mount", "nsenter"):
        if shutil.which(tool) is None:
            return f"no `{tool}` here"
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="length of a window")
    parser.add_argument("--rounds", type=int, default=2, help="windows of each, as 1,2,2,1,...")
    parser.add_argument("--concurrency", type=int, default=8, help="rollouts at once per worker")
    parser.add_argument("--engine-rounds", type=int, default=5)
    parser.add_argument("--commands", type=int, default=20)
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--engine-cost", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        asyncio.run(worker(args.worker))
        return
    if args.engine_cost:
        engine_cost(args.engine_cost)
        return
    if args.seconds <= 0 or args.rounds < 1 or args.concurrency < 1:
        print("error: --seconds, --rounds and --concurrency must be positive", file=sys.stderr)
        sys.exit(2)
    why = unavailable()
    if why:
        print(f"error: {why}", file=sys.stderr)
        sys.exit(2)

    def stop(signum: int, frame: object) -> None:
        raise KeyboardInterrupt  # unwinds through the clean-up below

    signal.signal(signal.SIGINT, signal.default_int_handler)  # even if started with it ignored
    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGHUP, stop)
    reap_stale_engines()
    netns_rig.reap_stale()

    from hermes_envgen.testing.tokenizer import build_offline_tokenizer

    began = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="bench-multihost.") as tmp:
        work = Path(tmp)
        tokenizer = str(build_offline_tokenizer(work / "tokenizer"))
        run = Run(args, work, tokenizer)  # the rig; it removes what it made if this fails
        try:
            print(f"rig: hosts {', '.join(HOSTS)} at {netns_rig.SUBNET}.x (load {load_average()})")
            run.start_engines()
            drivers = ", ".join(f"{h} {e.driver}" for h, e in run.engines.items())
            print(f"engines: dockerd with TLS on e0, e1 ({drivers}); image {run.image}")
            run.start_workers()
            print(f"workers ready after {time.monotonic() - began:.0f} s; windows of "
                  f"{args.seconds:.0f} s, {args.concurrency} rollouts at once each")  # fmt: skip
            order = [1, 2, 2, 1] * args.rounds
            order = order[: 2 * args.rounds]
            rows = []
            print(f"{'workers+engines':>16} {'rollouts/s':>11} {'per worker':>11} "
                  f"{'CPU-s/rollout':>14} {'cores used':>11} {'CPUs busy':>10} {'load':>11} "
                  f"{'errors':>7}")  # fmt: skip
            for number, count in enumerate(order):
                row = run.window(number, ["w0", "w1"][:count])
                rows.append(row)
                each = " ".join(f"{v:.1f}" for v in row["each"].values())
                cost = per_rollout(row, "worker_cpu", "engine_cpu")
                cores = "n/a" if row["cores"] is None else f"{row['cores']:.2f}"
                print(f"{count:>16} {row['rollouts_per_s']:>11.2f} {each:>11} {cost:>14} "
                      f"{cores:>11} {row['cpu_busy']:>10.0%} {row['load']:>11} "
                      f"{row['errors']:>7}")  # fmt: skip
            one = statistics.median(r["rollouts_per_s"] for r in rows if r["workers"] == 1)
            two = statistics.median(r["rollouts_per_s"] for r in rows if r["workers"] == 2)
            print(f"2 workers + 2 engines / 1 + 1: {two / one:.2f} ({two:.2f} / {one:.2f} "
                  f"rollouts/s, medians)")  # fmt: skip
            if run.accounts:
                total = {k: sum(r[k] for r in rows) for k in
                         ("rollouts", "worker_cpu", "engine_cpu", "model_cpu")}  # fmt: skip
                print(f"CPU seconds per rollout, all windows: worker "
                      f"{per_rollout(total, 'worker_cpu')} (the env and its docker clients), "
                      f"engine {per_rollout(total, 'engine_cpu')} (dockerd, containerd, the "
                      f"containers), stub model {per_rollout(total, 'model_cpu')}")  # fmt: skip
            for host in run.workers:
                (work / host / "stop").touch()
            print(f"engine e0 from w0, {args.engine_rounds} rounds of a sandbox start and "
                  f"{args.commands} commands (load {load_average()}):")  # fmt: skip
            report(run.engine_cost())
        except KeyboardInterrupt:
            print("interrupted: stopping everything", file=sys.stderr)
            sys.exit(130)
        except (RuntimeError, subprocess.SubprocessError) as error:
            print(f"error: {error}", file=sys.stderr)
            sys.exit(1)
        finally:
            run.close()
    print(f"done in {time.monotonic() - began:.0f} s (load {load_average()})")


if __name__ == "__main__":
    main()
