"""What a user sees at 10x and 100x the work: throughput, memory and per-turn cost at scale.

Three parts, each against the stub server in its own process:

1. ``process``: rollouts/s and peak RSS of process mode's group loop (collect a group of 3-turn
   terminal tasks on bwrap, tokenize it, serialise it as process writes it) at concurrency 1,
   8, 64 and 256 (the group size: a group's rollouts run at once; ``--levels`` for others, up
   to 1024). Each level runs in a fresh process, so its peak RSS is its own; beside it, the
   peak memory (PSS) of all its sandboxes' processes together, sampled twice a second, and how
   busy the machine's CPUs were (/proc/stat). As root, each level's process runs in a cpuacct
   cgroup of its own, which gives the CPU seconds per rollout: the env process's own (the
   worker: the loop, tokenizing, starting sandboxes) and the rest (the sandboxes' processes,
   bwrap's). With ``--baseline REV`` each level runs that revision's code too (a ``git
   archive`` of its ``src`` first on PYTHONPATH; ``--new REV`` likewise for the new side,
   else this checkout), old and new alternating (``--repeat`` times), and prints new / old.
   ``--pool N`` adds a third side, ``pooled``: the new code with ``sandbox_pool`` set to N (at
   most the level), not filled before the count starts: the run's first rollouts start their
   own sandboxes while the pool fills, and its refills are counted like every other start.
   Per level, the CPU a rollout costs in all (worker and sandboxes) and what it means for
   sizing: rollouts/s per fully used core. At 1024 a level needs some 8 descriptors per
   rollout in flight: the soft RLIMIT_NOFILE is raised to the hard one, and a level the hard
   limit cannot hold is reported as skipped, not run; ``--level-timeout`` bounds each level.
   Target: throughput grows until the CPUs are full, RSS under 1 GB at 256, no error.
   ``--backend docker --image IMAGE`` runs the same loop on docker (needs root and an engine
   of ``scripts/docker-engine.sh``, HERMES_ENVGEN_DOCKER_STATE set): old is this code with a
   ``docker exec`` per command (``kept_channel = False``), new the kept channel per container
   (or ``--baseline REV``'s code as old). The CPU per rollout is counted in four parts: the
   worker (the env process), its docker clients (the rest of its cgroup), the engine
   (dockerd and containerd moved into a cpuacct cgroup of their own for the run, so the shims
   and runc they start count there too) and the containers (a ``--cgroup-parent`` per level,
   which also gives their peak memory). Every container carries a label of its level's and is
   removed when the level ends, fails or times out.
2. ``evaluate``: 2,000 items x 4 samples through ``run_eval``; RSS is sampled as the run goes.
   Target: flat (no growth with the rollouts done).
3. long rollouts: 50 turns with 20 KB tool outputs. Per turn: the loop's time outside the HTTP
   request (which grows with the conversation, as it must: the whole conversation is sent).
   Then tokenizing the finished conversation for training, against encoding its rendered text
   once (the tokenizer's own cost). Target: the loop's own time per turn does not grow.

The same tasks on two workers with a Docker engine each, across hosts of the network-namespace
rig, against one worker and one engine: bench_multihost.py (it needs root and starts engines).

    .venv/bin/python benchmarks/bench_scale.py [--parts process,evaluate,long] [--items 2000]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

from _common import (
    CPUACCT,
    baseline_checkout,
    cpu_usage_seconds,
    cpuacct_cgroup,
    join_cgroup,
    stub_server_process,
)

HERE = Path(__file__).resolve().parent
LEVELS = (1, 8, 64, 256)
ROLLOUTS_PER_LEVEL = 512  # at least two groups per level (--rollouts)
FDS_PER_ROLLOUT = 8  # the env's descriptors per rollout in flight: its sandbox's (control
# socket, pidfd, workspace), a command's pipe and reply socket, the model request's socket
LEVEL_TIMEOUT = 1800.0  # seconds a level's process may take (--level-timeout)
PROGRESS = "groups done:"  # a level's line on stderr after each group


def terminal_turn(command: str) -> dict:
    return {"tool_calls": [{"name": "terminal", "arguments": {"command": command}}]}


# 3 turns: two terminal calls, then the answer; every prompt gets it.
PROCESS_SCRIPT = {
    "conversations": [],
    "default": {
        "turns": [
            terminal_turn("echo hello > greeting.txt"),
            terminal_turn("cat greeting.txt"),
            {"content": "done"},
        ]
    },
}


def rss_mb() -> float:
    """This process's resident memory now, in MB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


def peak_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def cpu_ticks() -> tuple[int, int]:
    """The machine's busy and total CPU time so far, in clock ticks (/proc/stat).

    The whole machine's, not this process tree's: a sandbox's processes are reaped by its
    own init, and the kernel's work for namespaces and mounts is nobody's. On a shared
    machine other jobs count too: compare with the load average printed beside it.
    """
    with open("/proc/stat") as stat:
        user, nice, system, idle, iowait, *rest = map(int, stat.readline().split()[1:9])
    busy = user + nice + system + sum(rest)
    return busy, busy + idle + iowait


def descendants_pss_mb() -> float:
    """The proportional memory (PSS) of every process below this one, in MB: the sandboxes.

    PSS, not RSS: each bwrap sandbox's anchor is a Python interpreter whose code pages all of
    them share, and RSS would count those once per sandbox.
    """
    children: dict[int, list[int]] = {}
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as file:
                parent = int(file.read().rsplit(b")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(parent, []).append(int(name))
    total_kb, pending = 0, list(children.get(os.getpid(), []))
    while pending:
        pid = pending.pop()
        pending.extend(children.get(pid, []))
        try:
            with open(f"/proc/{pid}/smaps_rollup") as file:
                total_kb += sum(int(line.split()[1]) for line in file if line.startswith("Pss:"))
        except (OSError, ValueError):
            continue
    return total_kb / 1024


# -- 1. process -------------------------------------------------------------------------------


async def process_level(
    base_url: str, tokenizer: str, workdir: str, concurrency: int, cgroup: str | None = None
) -> dict:
    """Run process mode's loop (collect, tokenize, serialise) for one concurrency level."""
    if cgroup:
        join_cgroup(cgroup)
    # the example of the side's own revision: it imports that revision's runtime
    side = os.environ.get("PYTHONPATH")
    examples = Path(side).parent / "examples" if side else HERE.parent / "examples"
    sys.path.insert(0, str(examples))
    from terminal_env import TerminalTaskEnv

    from hermes_envgen.testing.envs import build_env

    pool = min(int(os.environ.get("BENCH_SCALE_POOL", "0")), concurrency)
    image = os.environ.get("BENCH_SCALE_DOCKER_IMAGE")
    if image:
        docker_side(os.environ["BENCH_SCALE_DOCKER_TOKEN"], os.environ["BENCH_SCALE_KEPT"] == "1")
    env = build_env(
        TerminalTaskEnv,
        base_url,
        tokenizer,
        workdir,
        group_size=concurrency,
        sandbox_backend="docker" if image else "bwrap",
        max_agent_turns=4,
        **({"sandbox_image": image} if image else {}),
        **({"sandbox_pool": pool} if pool else {}),  # the old code has no such setting
    )
    await env.setup()
    groups = max(1, int(os.environ.get("BENCH_SCALE_ROLLOUTS", ROLLOUTS_PER_LEVEL)) // concurrency)
    errors = 0
    sandbox_mb = 0.0

    async def sample_sandboxes() -> None:
        nonlocal sandbox_mb
        while True:
            sandbox_mb = max(sandbox_mb, await asyncio.to_thread(descendants_pss_mb))
            await asyncio.sleep(0.5)

    sampler = asyncio.create_task(sample_sandboxes())
    busy_before, total_before = cpu_ticks()
    cpu_before, own_before = cpu_usage_seconds(cgroup), own_cpu_seconds()
    with open(os.path.join(workdir, "groups.jsonl"), "w") as out:
        start = time.perf_counter()
        for number in range(groups):
            group, _ = await env.collect_trajectories(await env.get_next_item())
            if group is None:
                errors += 1
            else:
                out.write(json.dumps(group) + "\n")
            # read by run_level if the level runs out of time: the groups done by then
            elapsed = time.perf_counter() - start
            print(f"{PROGRESS} {number + 1} {groups} {elapsed:.1f}", file=sys.stderr, flush=True)
        seconds = time.perf_counter() - start
    busy_after, total_after = cpu_ticks()
    busy = (busy_after - busy_before) / max(1, total_after - total_before)
    rollouts = groups * concurrency
    worker = (own_cpu_seconds() - own_before) / rollouts
    total = (cpu_usage_seconds(cgroup) - cpu_before) / rollouts
    sampler.cancel()
    await env.sandboxes.close_all()
    return {
        "concurrency": concurrency,
        "rollouts_per_s": rollouts / seconds,
        "worker_cpu_ms": worker * 1000,
        "sandbox_cpu_ms": (total - worker) * 1000 if cgroup else None,
        "peak_rss_mb": peak_rss_mb(),
        "sandbox_mb": sandbox_mb,
        "cpu_busy": busy,
        "errors": errors,
        "rollouts": rollouts,
    }


# -- docker: its containers and its engine, counted apart ---------------------------------------

DOCKER_LABEL = "hermes-bench-scale"  # every container of a level: hermes-bench-scale=<token>


def docker_side(token: str, kept: bool) -> None:
    """In a level's process: its containers carry the level's label and live below a cgroup
    parent of the level's (counted there after they are removed: cgroup v1 charges a child's
    CPU to its parent as it runs); ``kept`` False is the code before the kept channel (a
    ``docker exec`` per command, as ``bench_docker_channel.py``'s old side)."""
    from hermes_envgen.runtime.sandbox.docker.backend import DockerSandbox

    run_argv, init = DockerSandbox.run_argv, DockerSandbox.__init__

    def labelled_run_argv(self: DockerSandbox) -> list[str]:
        argv = run_argv(self)
        at = argv.index("run") + 1
        extra = [
            "--label",
            f"{DOCKER_LABEL}={token}",
            "--cgroup-parent",
            f"/{DOCKER_LABEL}-{token}",
        ]
        return [*argv[:at], *extra, *argv[at:]]

    def side_init(self: DockerSandbox, *args: object, **kwargs: object) -> None:
        init(self, *args, **kwargs)  # type: ignore[arg-type]
        self.kept_channel = kept

    DockerSandbox.run_argv = labelled_run_argv  # type: ignore[method-assign]
    DockerSandbox.__init__ = side_init  # type: ignore[method-assign]


def remove_level_containers(token: str) -> int:
    """Remove every container of a level (a level killed on its timeout leaves them); how many."""
    listed = subprocess.run(
        ["docker", "ps", "--all", "--quiet", "--filter", f"label={DOCKER_LABEL}={token}"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    ids = listed.stdout.split()
    for start in range(0, len(ids), 100):
        subprocess.run(
            ["docker", "rm", "--force", "--volumes", *ids[start : start + 100]],
            capture_output=True, timeout=300, check=False,
        )  # fmt: skip
    return len(ids)


def containers_usage(token: str) -> tuple[float | None, float | None]:
    """CPU seconds and peak memory (MB) of a level's containers together, from their cgroup
    parent (memory: what the kernel charged them, page cache of their tmpfs included); then
    the parent's directories, which docker leaves, are removed."""
    name = f"{DOCKER_LABEL}-{token}"
    root = Path("/sys/fs/cgroup")
    seconds = megabytes = None
    with contextlib.suppress(OSError, ValueError):
        seconds = int((root / "cpuacct" / name / "cpuacct.usage").read_text()) / 1e9
    with contextlib.suppress(OSError, ValueError):
        peak = (root / "memory" / name / "memory.max_usage_in_bytes").read_text()
        megabytes = int(peak) / 2**20
    for hierarchy in root.iterdir():  # docker made it in every hierarchy
        with contextlib.suppress(OSError):
            (hierarchy / name).rmdir()
    return seconds, megabytes


@contextlib.contextmanager
def engine_cgroup() -> Iterator[Path | None]:
    """The engine scripts/docker-engine.sh started (HERMES_ENVGEN_DOCKER_STATE), dockerd and
    containerd, moved into a cpuacct cgroup of its own for the run: the containers' shims (and
    the runc they run) that containerd starts from then on are counted there too. Moved back
    after. None where the engine is not one started here, or without root."""
    state = os.environ.get("HERMES_ENVGEN_DOCKER_STATE")
    try:
        dockerd = int(Path(state or "/nonexistent", "dockerd.pid").read_text())
    except (OSError, ValueError):
        yield None
        return
    pids = [dockerd, *children_of(dockerd)]
    origin = {pid: cgroup_of(pid, "cpuacct") for pid in pids}
    with cpuacct_cgroup(f"hermes-bench-scale-engine-{os.getpid()}") as cgroup:
        if cgroup is None:
            yield None
            return
        try:
            for pid in pids:
                (cgroup / "cgroup.procs").write_text(str(pid))
            yield cgroup
        finally:
            for pid in (int(p) for p in (cgroup / "cgroup.procs").read_text().split()):
                with contextlib.suppress(OSError):
                    back = CPUACCT / origin.get(pid, origin[dockerd]).lstrip("/")
                    (back / "cgroup.procs").write_text(str(pid))


def children_of(parent: int) -> list[int]:
    found = []
    for name in filter(str.isdigit, os.listdir("/proc")):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = Path(f"/proc/{name}/stat").read_bytes().rsplit(b")", 1)[1].split()
            if int(fields[1]) == parent:
                found.append(int(name))
    return found


def cgroup_of(pid: int, hierarchy: str) -> str:
    for line in Path(f"/proc/{pid}/cgroup").read_text().splitlines():
        _, controllers, path = line.split(":", 2)
        if hierarchy in controllers.split(","):
            return path
    return "/"


def cgroup_pss_mb(cgroup: Path) -> float:
    """The proportional memory (PSS) of a cgroup's processes, in MB."""
    total_kb = 0
    with contextlib.suppress(OSError):
        for pid in (cgroup / "cgroup.procs").read_text().split():
            with contextlib.suppress(OSError, ValueError):
                text = Path(f"/proc/{pid}/smaps_rollup").read_text()
                total_kb += sum(
                    int(line.split()[1]) for line in text.splitlines() if line.startswith("Pss:")
                )
    return total_kb / 1024


def own_cpu_seconds() -> float:
    """This process's CPU time so far (its threads included, not its children)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


class Docker:
    """A docker level's setting: the image, the kept channel or not, the engine's cgroup."""

    def __init__(self, image: str, kept: bool, engine: Path | None) -> None:
        self.image, self.kept, self.engine = image, kept, engine


def run_level(
    level: int,
    base_url: str,
    tokenizer: str,
    pythonpath: str | None,
    pool: int,
    timeout: float,
    docker: Docker | None = None,
) -> dict | str:
    """One level in a fresh process (in a cpuacct cgroup of its own where one can be made);
    its row, or why it failed. On docker, the level's containers are removed on every way
    out, and the engine's and the containers' CPU and memory join the row."""
    needed = level * FDS_PER_ROLLOUT + 256
    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    if limit != resource.RLIM_INFINITY and limit < needed:
        return f"skipped: {needed} descriptors needed, RLIMIT_NOFILE is {limit} (raise it)"
    if docker is None:
        return run_level_process(level, base_url, tokenizer, pythonpath, pool, timeout, {})
    token = f"{os.getpid()}-{time.monotonic_ns()}"
    env = {
        "BENCH_SCALE_DOCKER_IMAGE": docker.image,
        "BENCH_SCALE_DOCKER_TOKEN": token,
        "BENCH_SCALE_KEPT": "1" if docker.kept else "0",
    }
    engine_before = cpu_usage_seconds(docker.engine)
    engine_mb = 0.0
    sampling = threading.Event()

    def sample_engine() -> None:
        nonlocal engine_mb
        while docker.engine is not None and not sampling.wait(0.5):
            engine_mb = max(engine_mb, cgroup_pss_mb(docker.engine))

    sampler = threading.Thread(target=sample_engine, daemon=True)
    sampler.start()
    try:
        row = run_level_process(level, base_url, tokenizer, pythonpath, pool, timeout, env)
    finally:
        sampling.set()
        sampler.join()
        left = remove_level_containers(token)
        engine_seconds = cpu_usage_seconds(docker.engine) - engine_before
        container_seconds, container_mb = containers_usage(token)
    if isinstance(row, str):
        return row + (f" ({left} containers left, removed)" if left else "")
    rollouts = row["rollouts"]
    row["engine_cpu_ms"] = engine_seconds / rollouts * 1000 if docker.engine else None
    row["engine_mb"] = engine_mb if docker.engine else None
    row["containers_cpu_ms"] = (
        None if container_seconds is None else container_seconds / rollouts * 1000
    )
    row["containers_mb"] = container_mb
    return row


def run_level_process(
    level: int,
    base_url: str,
    tokenizer: str,
    pythonpath: str | None,
    pool: int,
    timeout: float,
    extra_env: dict[str, str],
) -> dict | str:
    env = dict(os.environ, BENCH_SCALE_POOL=str(pool), **extra_env)
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    with (
        tempfile.TemporaryDirectory(prefix="bench-scale.") as workdir,
        cpuacct_cgroup(f"hermes-bench-scale-{os.getpid()}-{time.monotonic_ns()}") as cgroup,
    ):
        argv = [sys.executable, __file__, "--one-level", str(level), base_url, tokenizer, workdir]
        try:
            completed = subprocess.run(
                [*argv, str(cgroup or "")],
                capture_output=True, text=True, timeout=timeout, check=False, env=env,
            )  # fmt: skip
        except subprocess.TimeoutExpired as exc:  # killed: its sandboxes die with it (bwrap's)
            return f"timed out after {timeout:g} s; " + progress(exc.stderr, level)
    if completed.returncode != 0:
        return str(completed.stderr.strip().splitlines()[-1:])
    return json.loads(completed.stdout.strip().splitlines()[-1])


def progress(stderr: bytes | str | None, level: int) -> str:
    """What a level that ran out of time had done: its groups, and their rate."""
    text = stderr.decode(errors="replace") if isinstance(stderr, bytes) else stderr or ""
    lines = [line.split() for line in text.splitlines() if line.startswith(PROGRESS)]
    if not lines:
        return "no group done"
    done, groups, seconds = int(lines[-1][-3]), int(lines[-1][-2]), float(lines[-1][-1])
    return f"{done} of {groups} groups in {seconds:.0f} s: {done * level / seconds:.1f} rollouts/s"


def format_row(label: str, row: dict | str) -> str:
    if isinstance(row, str):
        return f"{label:>12}  failed: {row}"
    sandbox = row["sandbox_cpu_ms"]
    if "engine_cpu_ms" in row:
        return format_docker_row(label, row)
    # sizing: a fully used core's rollouts/s, from the CPU a rollout costs in all
    per_core = "-" if sandbox is None else f"{1000 / (row['worker_cpu_ms'] + sandbox):.1f}"
    return (
        f"{label:>12} {row['rollouts_per_s']:>11.1f} {row['cpu_busy']:>10.0%} "
        f"{row['worker_cpu_ms']:>10.1f} {'-' if sandbox is None else f'{sandbox:.1f}':>11} "
        f"{per_core:>9} {row['peak_rss_mb']:>12.0f} {row['sandbox_mb']:>13.0f} "
        f"{row['errors']:>7}"
    )


DOCKER_HEADER = (
    f"{'concurrency':>12} {'rollouts/s':>11} {'CPUs busy':>10} {'worker ms':>10} "
    f"{'clients ms':>11} {'engine ms':>10} {'contnrs ms':>11} {'per core':>9} "
    f"{'peak RSS MB':>12} {'clients MB':>11} {'engine MB':>10} {'contnrs MB':>11} {'errors':>7}"
)


def format_docker_row(label: str, row: dict) -> str:
    """worker: the env process; clients: the docker clients it runs (the level's cgroup less
    the worker); engine: dockerd, containerd, the shims and runc; containers: their cgroups."""
    costs = [row[key] for key in ("worker_cpu_ms", "sandbox_cpu_ms", "engine_cpu_ms")]
    costs.append(row["containers_cpu_ms"])
    per_core = "-" if None in costs else f"{1000 / sum(costs):.1f}"

    def number(value: float | None, width: int, digits: int = 1) -> str:
        return f"{'-' if value is None else f'{value:.{digits}f}':>{width}}"

    return (
        f"{label:>12} {row['rollouts_per_s']:>11.1f} {row['cpu_busy']:>10.0%} "
        f"{number(costs[0], 10)} {number(costs[1], 11)} {number(costs[2], 10)} "
        f"{number(costs[3], 11)} {per_core:>9} {row['peak_rss_mb']:>12.0f} "
        f"{row['sandbox_mb']:>11.0f} {number(row['engine_mb'], 10, 0)} "
        f"{number(row['containers_mb'], 11, 0)} {row['errors']:>7}"
    )


RATIO_COLUMNS = {
    "worker CPU": "worker_cpu_ms",
    "sandbox CPU": "sandbox_cpu_ms",  # on docker: the docker clients'
    "engine CPU": "engine_cpu_ms",
    "containers CPU": "containers_cpu_ms",
}


def run_process_part(
    base_url: str,
    tokenizer: str,
    levels: list[int],
    sides: dict[str, tuple[str | None, int, bool]],
    repeat: int,
    timeout: float,
    docker_image: str | None = None,
    engine: Path | None = None,
) -> None:
    """Each level on each side (its PYTHONPATH, its pool size, on docker whether it keeps a
    channel per container), alternating."""
    load = Path("/proc/loadavg").read_text().split()[0]
    backend = f"docker ({docker_image})" if docker_image else "bwrap"
    print(f"process: 3-turn terminal tasks on {backend} against the stub (load average {load})")
    if docker_image:
        print(DOCKER_HEADER)
    else:
        print(f"{'concurrency':>12} {'rollouts/s':>11} {'CPUs busy':>10} {'worker ms':>10} "
              f"{'sandbox ms':>11} {'per core':>9} {'peak RSS MB':>12} {'sandboxes MB':>13} "
              f"{'errors':>7}")  # fmt: skip
    for level in levels:
        rows: dict[str, list[dict | str]] = {side: [] for side in sides}
        for _ in range(repeat):
            for side, (pythonpath, pool, kept) in sides.items():
                docker = Docker(docker_image, kept, engine) if docker_image else None
                row = run_level(level, base_url, tokenizer, pythonpath, pool, timeout, docker)
                rows[side].append(row)
                label = f"{level} {side}" if len(sides) > 1 else str(level)
                print(format_row(label, row), flush=True)
        if "old" not in sides:
            continue
        for side in (s for s in sides if s != "old"):
            pairs = [
                (new, old)
                for new, old in zip(rows[side], rows["old"])
                if isinstance(new, dict) and isinstance(old, dict)
            ]
            if pairs:
                speed = statistics.median(
                    n["rollouts_per_s"] / o["rollouts_per_s"] for n, o in pairs
                )
                line = f"{level:>12} {side}/old: rollouts/s {speed:.2f}"
                for name, key in RATIO_COLUMNS.items():
                    if all(n.get(key) and o.get(key) for n, o in pairs):
                        ratio = statistics.median(n[key] / o[key] for n, o in pairs)
                        line += f", {name} {ratio:.2f}"
                print(line, flush=True)


# -- 2. evaluate ------------------------------------------------------------------------------


async def run_evaluate_part(base_url: str, tokenizer: str, items: int, samples: int) -> None:
    from hermes_envgen.runtime import AgentResult, HermesAgentBaseEnv, Reward, ToolContext
    from hermes_envgen.testing.envs import build_env

    class AnswerEnv(HermesAgentBaseEnv):
        """One-turn answers with no tools: the run's bookkeeping is what is measured."""

        name = "bench_scale_eval"

        @classmethod
        def config_init(cls):
            from atroposlib.envs.server_handling.server_baseline import APIServerConfig

            from hermes_envgen.runtime import HermesAgentEnvConfig

            config = HermesAgentEnvConfig(enabled_toolsets=[], use_wandb=False)
            return config, [APIServerConfig(base_url="http://x/v1", model_name="stub-model")]

        async def setup(self) -> None: ...

        async def get_next_item(self):
            return {}

        def format_prompt(self, item) -> str:
            return item["prompt"]

        async def compute_reward(self, item, result: AgentResult, ctx: ToolContext) -> Reward:
            return Reward(float(item["n"] % 3 == 0))

        async def evaluate(self, *args, **kwargs) -> None: ...

    dataset = [{"prompt": f"Question {n}: " + "words " * 50, "n": n} for n in range(items)]
    with tempfile.TemporaryDirectory(prefix="bench-scale-eval.") as workdir:
        env = build_env(
            AnswerEnv,
            base_url,
            tokenizer,
            workdir,
            eval_samples_per_item=samples,
            max_eval_workers=64,
            max_agent_turns=1,
        )
        total = items * samples
        samples_path = Path(workdir) / "eval" / "samples.jsonl"
        readings: list[tuple[int, float]] = []

        async def sample_rss() -> None:
            while True:
                done = _count_lines(samples_path)
                readings.append((done, rss_mb()))
                await asyncio.sleep(1.0)

        sampler = asyncio.create_task(sample_rss())
        start = time.perf_counter()
        metrics = await env.run_eval(dataset)
        seconds = time.perf_counter() - start
        sampler.cancel()
    print(f"evaluate: {items} items x {samples} samples = {total} rollouts in {seconds:.0f} s")
    for fraction in (0.1, 0.25, 0.5, 0.75, 1.0):
        done, mb = min(readings, key=lambda r: abs(r[0] - fraction * total))
        print(f"  {done:>6} rollouts saved: RSS {mb:6.0f} MB")
    print(f"  peak RSS {peak_rss_mb():.0f} MB; eval/rollouts = {metrics['eval/rollouts']:.0f}")


def _count_lines(path: Path) -> int:
    try:
        with open(path, "rb") as file:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: file.read(1 << 20), b""))
    except FileNotFoundError:
        return 0


# -- 3. long rollouts -------------------------------------------------------------------------

LONG_TURNS = 50
OUTPUT_CHARS = 20_000


async def run_long_part(base_url: str, tokenizer_dir: str) -> None:
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig
    from atroposlib.envs.server_handling.server_manager import ServerManager
    from transformers import AutoTokenizer

    from hermes_envgen.runtime.chat.template_render import (
        render,
        renders_raw_arguments,
        with_arguments,
    )
    from hermes_envgen.runtime.chat.trajectory import tokenize_conversation
    from hermes_envgen.runtime.loop.agent_loop import HermesAgentLoop
    from hermes_envgen.runtime.loop.tool_context import ToolContext
    from hermes_envgen.runtime.tools import ToolRegistry, tool

    registry = ToolRegistry()

    @tool(registry=registry)
    async def dump(part: int) -> str:
        """Return 20 KB of text."""
        return (f"line {part} " + "x" * 70 + "\n") * (OUTPUT_CHARS // 80)

    server = ServerManager(
        [
            APIServerConfig(
                base_url=base_url, model_name="stub-model", api_key="EMPTY", health_check=False
            )
        ]
    )

    class TimedServer:
        """Passes requests on and keeps how long each took."""

        def __init__(self) -> None:
            self.seconds: list[float] = []

        async def chat_completion(self, **kwargs):
            start = time.perf_counter()
            try:
                return await server.chat_completion(**kwargs)
            finally:
                self.seconds.append(time.perf_counter() - start)

    timed = TimedServer()
    turn_ends: list[float] = []

    class TimedContext(ToolContext):
        async def call_tool(self, name, arguments=None):
            output = await super().call_tool(name, arguments)
            turn_ends.append(time.perf_counter())
            return output

    schemas = [t.schema for t in registry.resolve()]
    ctx = TimedContext("long", registry=registry)
    loop = HermesAgentLoop(
        timed, schemas, {"dump"}, max_turns=LONG_TURNS + 1, tool_context=ctx, request_retries=0
    )
    start = time.perf_counter()
    result = await loop.run([{"role": "user", "content": "long task"}])
    await ctx.cleanup()
    assert result.turns_used == LONG_TURNS + 1, result.error
    starts = [start, *turn_ends[:-1]]
    turn = [end - begin for begin, end in zip(starts, turn_ends)]
    own = [t - r for t, r in zip(turn, timed.seconds)]

    def window(values: list[float], first: int) -> float:
        return statistics.median(values[first - 1 : first + 4]) * 1000

    print(f"long rollout: {LONG_TURNS} turns, {OUTPUT_CHARS // 1000} KB tool output each")
    print(f"{'turns':>8} {'request ms':>11} {'loop own ms':>12}")
    for first in (1, 11, 21, 31, 46):
        request, loop_own = window(timed.seconds, first), window(own, first)
        print(f"{first:>3}-{first + 4:<4} {request:>11.1f} {loop_own:>12.2f}")

    tokenizer = AutoTokenizer.from_pretrained(tokenizer_dir)
    start = time.perf_counter()
    tokenize_conversation(tokenizer, result.messages, schemas)
    tokenize_seconds = time.perf_counter() - start
    shaped = with_arguments(result.messages, renders_raw_arguments(tokenizer))
    text = render(tokenizer, shaped, schemas, gen=False)
    start = time.perf_counter()
    tokenizer.encode(text, add_special_tokens=False)
    encode_seconds = time.perf_counter() - start
    print(
        f"tokenize_conversation {tokenize_seconds * 1000:.0f} ms; encoding the rendered "
        f"{len(text) / 1e6:.1f} MB once {encode_seconds * 1000:.0f} ms "
        f"(ratio {tokenize_seconds / encode_seconds:.1f})"
    )


def long_script() -> dict:
    turns = [
        {"tool_calls": [{"name": "dump", "arguments": {"part": n}}]} for n in range(LONG_TURNS)
    ]
    return {"conversations": [{"match": "long task", "turns": [*turns, {"content": "done"}]}]}


def raise_descriptor_limit() -> None:
    """The soft RLIMIT_NOFILE up to the hard one, for the levels' processes (inherited)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
        print(f"RLIMIT_NOFILE raised from {soft} to {hard}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="process,evaluate,long")
    parser.add_argument("--items", type=int, default=2000)
    parser.add_argument("--samples", type=int, default=4)
    parser.add_argument("--levels", default=",".join(map(str, LEVELS)))
    parser.add_argument("--baseline", help="a revision whose code runs beside this one")
    parser.add_argument("--new", help="a revision for the new side (default: this checkout)")
    parser.add_argument("--repeat", type=int, default=1, help="runs of each level and side")
    parser.add_argument("--rollouts", type=int, default=ROLLOUTS_PER_LEVEL, help="per level")
    parser.add_argument("--pool", type=int, default=0, help="add a side with sandbox_pool N")
    parser.add_argument("--level-timeout", type=float, default=LEVEL_TIMEOUT)
    parser.add_argument("--backend", choices=("bwrap", "docker"), default="bwrap")
    parser.add_argument(
        "--image",
        default=os.environ.get("HERMES_ENVGEN_TEST_DOCKER_IMAGE"),
        help="on docker, the image (with bash and python3) the sandboxes run",
    )
    parser.add_argument("--one-level", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    image = args.image if args.backend == "docker" else None
    if args.backend == "docker" and not image:
        parser.error("--backend docker needs --image (or HERMES_ENVGEN_TEST_DOCKER_IMAGE)")
    if args.one_level:
        level, url, tokenizer, workdir, cgroup = args.one_level
        row = asyncio.run(process_level(url, tokenizer, workdir, int(level), cgroup or None))
        print(json.dumps(row))
        return

    # for the levels' processes (which are started without --rollouts)
    os.environ["BENCH_SCALE_ROLLOUTS"] = str(args.rollouts)
    # a TERM (timeout's) unwinds like Ctrl-C: the level's containers are removed, the engine's
    # processes moved back to their cgroup
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
    from hermes_envgen.testing.tokenizer import build_offline_tokenizer

    parts = args.parts.split(",")
    with tempfile.TemporaryDirectory(prefix="bench-scale-tok.") as tok:
        tokenizer = str(build_offline_tokenizer(Path(tok)))
        if "process" in parts:
            levels = [int(level) for level in args.levels.split(",")]
            raise_descriptor_limit()
            with contextlib.ExitStack() as stack:
                new = str(stack.enter_context(baseline_checkout(args.new))) if args.new else None
                sides: dict[str, tuple[str | None, int, bool]] = {}
                if args.baseline:
                    old = str(stack.enter_context(baseline_checkout(args.baseline)))
                    sides["old"] = (old, 0, True)
                elif args.backend == "docker":  # this code, a docker exec per command
                    sides["old"] = (new, 0, False)
                sides["new"] = (new, 0, True)
                if args.pool:
                    sides["pooled"] = (new, args.pool, True)
                url = stack.enter_context(stub_server_process(PROCESS_SCRIPT))
                engine = stack.enter_context(engine_cgroup()) if args.backend == "docker" else None
                run_process_part(
                    url, tokenizer, levels, sides, args.repeat, args.level_timeout, image, engine
                )
        if "evaluate" in parts:
            script = {"conversations": [], "default": {"turns": [{"content": "an answer"}]}}
            with stub_server_process(script) as url:
                asyncio.run(run_evaluate_part(url, tokenizer, args.items, args.samples))
        if "long" in parts:
            with stub_server_process(long_script()) as url:
                asyncio.run(run_long_part(url, tokenizer))


if __name__ == "__main__":
    main()
